"""WhatsApp (Cloud API): webhook notifications into InboundMessages.

Handshake: when the webhook is configured, Meta sends GET ?hub.mode=subscribe&hub.verify_token=
...&hub.challenge=...; the token is compared in constant time with the stored verify token and the
challenge is echoed as plain text. Verification of POSTs: X-Hub-Signature-256 is "sha256=" + hex
HMAC-SHA256 of the raw body under the Meta app secret. It carries no timestamp, and Meta retries
a failed delivery for days, so there is no freshness window: a repeat is caught by the message id
(the lane's dedup id, then the session's recent event ids).

One notification may batch several messages (and delivery statuses): each user message becomes
one InboundMessage; the rest are tabled in docs/channels.md. Media are referenced by their media
id; downloading one takes the access token and is the agent's business.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal

from pydantic import Field

from shared.channels import commands
from shared.channels.inbound import (
    Accepted,
    Handshake,
    Ignored,
    IngressOutcome,
    Label,
    Payload,
    PlatformId,
    Text,
    WebhookRequest,
    configured,
    message,
    parse_json,
    same,
    secret_for,
    validate,
)
from shared.errors import BadRequest, Unauthorized
from shared.models import Attachment, ChannelRoute, InboundMessage, Sender
from shared.ports import SecretStore

APP_SECRET: Final = "whatsapp/app-secret"  # noqa: S105 -- the secret's name, not its value
VERIFY_TOKEN: Final = "whatsapp/verify-token"  # noqa: S105 -- the secret's name, not its value
SIGNATURE_HEADER: Final = "x-hub-signature-256"
MAX_CHALLENGE_CHARS: Final = 1024  # Meta's challenge is a short number

# Ignored reasons (docs/channels.md tables each with its why).
NOT_WHATSAPP: Final = "not a WhatsApp Business notification"
ACCOUNT_CHANGE: Final = "account change"
STATUS: Final = "delivery status"
REACTION: Final = "reaction"
BUTTON_REPLY: Final = "button reply"
UNSUPPORTED: Final = "unsupported message type"
NOTHING: Final = "no messages"

MEDIA_KINDS: Final = ("image", "document", "audio", "video", "sticker")
MESSAGE_REASONS: Final = {"reaction": REACTION, "interactive": BUTTON_REPLY, "button": BUTTON_REPLY}


class WaText(Payload):
    body: Text


class WaMedia(Payload):
    id: PlatformId | None = None
    mime_type: Label | None = None
    caption: Text | None = None
    filename: Label | None = None


class WaContext(Payload):
    id: PlatformId | None = None


class WaMessage(Payload):
    sender: PlatformId = Field(alias="from")
    id: PlatformId
    type: PlatformId
    text: WaText | None = None
    image: WaMedia | None = None
    document: WaMedia | None = None
    audio: WaMedia | None = None
    video: WaMedia | None = None
    sticker: WaMedia | None = None
    context: WaContext | None = None


class WaProfile(Payload):
    name: Label | None = None


class WaContact(Payload):
    wa_id: PlatformId | None = None
    profile: WaProfile | None = None


class WaMetadata(Payload):
    phone_number_id: PlatformId | None = None


class WaValue(Payload):
    metadata: WaMetadata | None = None
    contacts: list[WaContact] = Field(default_factory=list, max_length=100)
    # Validated one by one, by type: a reaction's shape is not a text's.
    messages: list[dict[str, Any]] = Field(default_factory=list, max_length=1000)
    statuses: list[dict[str, Any]] = Field(default_factory=list, max_length=1000)


class WaChange(Payload):
    field: PlatformId
    value: dict[str, Any] | None = None


class WaEntry(Payload):
    changes: list[WaChange] = Field(default_factory=list, max_length=1000)


class WaNotification(Payload):
    object: PlatformId
    entry: list[WaEntry] = Field(default_factory=list, max_length=1000)


@dataclass(frozen=True)
class WhatsAppChannel:
    workspace_id: str
    route: ChannelRoute | None = None
    name: ClassVar[Literal["whatsapp"]] = "whatsapp"

    def handshake(self, request: WebhookRequest, secrets: SecretStore) -> Handshake | None:
        if request.method != "GET":
            return None
        mode = request.query.get("hub.mode")
        token = request.query.get("hub.verify_token")
        challenge = request.query.get("hub.challenge")
        if not mode or not token or not challenge:
            raise BadRequest("hub.mode, hub.verify_token and hub.challenge are required")
        if mode != "subscribe":
            raise BadRequest("hub.mode must be 'subscribe'")
        expected = secrets.get(secret_for(self.route, VERIFY_TOKEN))
        if not expected or not same(token, expected):
            raise Unauthorized("verify token mismatch")
        if len(challenge) > MAX_CHALLENGE_CHARS:
            raise BadRequest(f"hub.challenge longer than {MAX_CHALLENGE_CHARS} characters")
        return Handshake(200, challenge, "text/plain")

    def verify(self, request: WebhookRequest, secrets: SecretStore, *, now: float, window_s: int) -> None:
        signature = request.headers.get(SIGNATURE_HEADER)
        if not signature:
            raise Unauthorized("missing X-Hub-Signature-256 header")
        secret = configured(secrets, secret_for(self.route, APP_SECRET))
        expected = "sha256=" + hmac.new(secret.encode(), request.body, hashlib.sha256).hexdigest()
        if not same(signature.strip(), expected):
            raise Unauthorized("signature mismatch")

    def parse(self, request: WebhookRequest) -> IngressOutcome:
        note = parse_json(WaNotification, request.body, "WhatsApp notification")
        if note.object != "whatsapp_business_account":
            return Ignored(NOT_WHATSAPP)
        accepted: list[InboundMessage] = []
        reasons: list[str] = []
        for entry in note.entry:
            for change in entry.changes:
                if change.field != "messages" or change.value is None:
                    reasons.append(ACCOUNT_CHANGE)
                    continue
                value = validate(WaValue, change.value, "WhatsApp change")
                if value.statuses:
                    # sent / delivered / read / failed receipts of Sigil's own replies
                    reasons.append(STATUS)
                for raw in value.messages:
                    outcome = self._from_message(raw, value)
                    if isinstance(outcome, str):
                        reasons.append(outcome)
                    else:
                        accepted.append(outcome)
        if accepted:
            return Accepted(accepted)
        return Ignored(reasons[0] if reasons else NOTHING)

    def _from_message(self, raw: dict[str, Any], value: WaValue) -> InboundMessage | str:
        kind = raw.get("type")
        if kind != "text" and kind not in MEDIA_KINDS:
            # Reactions, replies to buttons Sigil never sends, locations, contacts, orders,
            # system notices and "unsupported" (types Cloud API can't deliver) start no turn.
            return MESSAGE_REASONS.get(kind, UNSUPPORTED) if isinstance(kind, str) else UNSUPPORTED
        msg = validate(WaMessage, raw, "WhatsApp message")
        attachments: list[Attachment] = []
        if msg.type == "text":
            if msg.text is None:
                raise BadRequest("text message without text")
            text = msg.text.body
        else:
            media: WaMedia | None = getattr(msg, msg.type)
            if media is None:
                raise BadRequest("media message without its media object")
            attachments.append(
                Attachment(kind=msg.type, id=media.id, name=media.filename, mime_type=media.mime_type)
            )
            text = media.caption or ""
        names = {c.wa_id: c.profile.name for c in value.contacts if c.wa_id and c.profile}
        context = {}
        if value.metadata and value.metadata.phone_number_id:
            # The business number the reply must be sent from (POST /{phone_number_id}/messages).
            context["phone_number_id"] = value.metadata.phone_number_id
        inbound = message(
            channel="whatsapp",
            workspace_id=self.workspace_id,
            event_id=msg.id,
            chat_id=msg.sender,
            chat_type="dm",
            sender=Sender(id=msg.sender, name=names.get(msg.sender)),
            text=text,
            reply_to=msg.context.id if msg.context else None,
            attachments=attachments,
            reply_context=context,
        )
        # WhatsApp has no command mechanism: a text message that opens with /name is one (a
        # caption is not).
        command = commands.from_text(text) if msg.type == "text" else None
        return inbound if command is None else inbound.model_copy(update={"command": command})

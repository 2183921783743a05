"""Slack: the Events API (JSON) and slash commands (form posts) into InboundMessages.

Verification is slack_sdk's SignatureVerifier (v0 HMAC-SHA256 over "v0:{timestamp}:{body}",
constant-time compare, 5-minute window) under the gateway's clock. It is imported on the first
Slack request: slack_sdk's package import brings its Web API client (~0.2 s), which no other
route needs.

Which events start a turn is decided in `_from_event` and tabled in docs/channels.md. Retries
(X-Slack-Retry-Num) carry the original event_id, which is the lane's dedup id, so a retry is
acknowledged 200 and runs no second turn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal
from urllib.parse import parse_qs

from pydantic import Field

from shared.channels import commands
from shared.channels.inbound import (
    Accepted,
    ChatType,
    Handshake,
    Ignored,
    IngressOutcome,
    Label,
    Payload,
    PlatformId,
    Size,
    Text,
    Url,
    WebhookRequest,
    configured,
    fresh_timestamp,
    message,
    parse_json,
    secret_for,
    validate,
)
from shared.errors import BadRequest, Unauthorized
from shared.models import Attachment, ChannelRoute, InboundMessage, Sender
from shared.ports import SecretStore

if TYPE_CHECKING:
    from slack_sdk.signature import SignatureVerifier

SECRET: Final = "slack/signing-secret"  # noqa: S105 -- the secret's name, not its value
TIMESTAMP_HEADER: Final = "x-slack-request-timestamp"
SIGNATURE_HEADER: Final = "x-slack-signature"
WINDOW_S: Final = 300  # slack_sdk's own, fixed: Slack documents five minutes

# Ignored reasons (docs/channels.md tables each with its why).
BOT: Final = "bot message"
OWN: Final = "own message"
EDIT: Final = "edit"
DELETION: Final = "deletion"
THREAD_UPDATE: Final = "thread metadata update"
SYSTEM: Final = "system message"
MENTION_TWICE: Final = "mention, delivered again as app_mention"
EMPTY: Final = "empty message"
OTHER_EVENT: Final = "not a message event"
RATE_LIMITED: Final = "app rate limited notice"
OTHER_ENVELOPE: Final = "unsupported envelope type"
INTERACTIVE: Final = "interactive payload"
SSL_CHECK: Final = "ssl check"

# A person's direct conversation with the app: its DM, which the app's Messages tab also shows.
DIRECT: Final = frozenset({"im", "app_home"})
# Message subtypes that are a person writing: everything else is Slack's own bookkeeping.
USER_SUBTYPES: Final = frozenset({"thread_broadcast", "file_share", "me_message"})
SUBTYPE_REASONS: Final = {
    "bot_message": BOT,
    "message_changed": EDIT,
    "message_deleted": DELETION,
    "message_replied": THREAD_UPDATE,
}


class SlackFile(Payload):
    id: PlatformId | None = None
    name: Label | None = None
    mimetype: Label | None = None
    size: Size | None = None
    url_private: Url | None = None
    # The same file served as a download (Content-Disposition: attachment): what the turn
    # fetches with the bot token (shared.media.platforms.slack).
    url_private_download: Url | None = None


class SlackProfile(Payload):
    display_name: Label | None = None
    real_name: Label | None = None


class SlackMessage(Payload):
    """A `message` or `app_mention` event written by a person (routing has been done)."""

    type: Literal["message", "app_mention"]
    user: PlatformId
    channel: PlatformId
    ts: PlatformId
    text: Text | None = None
    thread_ts: PlatformId | None = None
    channel_type: PlatformId | None = None
    team: PlatformId | None = None
    files: list[SlackFile] = Field(default_factory=list, max_length=100)
    user_profile: SlackProfile | None = None


class SlackAuthorization(Payload):
    user_id: PlatformId | None = None
    is_bot: bool = False


class SlackEnvelope(Payload):
    type: PlatformId
    challenge: Label | None = None
    event_id: PlatformId | None = None
    team_id: PlatformId | None = None
    # Not validated as a whole: event shapes vary by type (a channel_created "channel" is an
    # object), and an event Sigil doesn't handle must be acknowledged, not refused.
    event: dict[str, Any] | None = None
    authorizations: list[SlackAuthorization] = Field(default_factory=list, max_length=100)
    authed_users: list[PlatformId] = Field(default_factory=list, max_length=100)


class SlackCommand(Payload):
    """A slash command's form post."""

    command: PlatformId
    text: Text = ""
    user_id: PlatformId
    user_name: Label | None = None
    channel_id: PlatformId
    channel_name: Label | None = None
    team_id: PlatformId | None = None
    trigger_id: PlatformId
    response_url: Url | None = None


@dataclass(frozen=True)
class SlackChannel:
    workspace_id: str
    route: ChannelRoute | None = None
    name: ClassVar[Literal["slack"]] = "slack"

    def handshake(self, request: WebhookRequest, secrets: SecretStore) -> Handshake | None:
        # url_verification is signed, so `parse` answers it once `verify` has passed.
        return None

    def verify(self, request: WebhookRequest, secrets: SecretStore, *, now: float, window_s: int) -> None:
        ts = fresh_timestamp(
            request.headers.get(TIMESTAMP_HEADER),
            now=now,
            window_s=min(window_s, WINDOW_S),
            header="X-Slack-Request-Timestamp",
        )
        signature = request.headers.get(SIGNATURE_HEADER)
        if not signature:
            raise Unauthorized("missing X-Slack-Signature header")
        # The SDK compares str digests, which raises on non-ASCII input rather than failing.
        if not signature.isascii():
            raise Unauthorized("signature mismatch")
        try:
            body = request.body.decode("utf-8")
        except UnicodeDecodeError:
            # Slack only sends UTF-8; the SDK would raise decoding anything else.
            raise BadRequest("body is not UTF-8 text") from None
        secret = configured(secrets, secret_for(self.route, SECRET))
        if not _verifier(secret, now).is_valid(body, ts, signature):
            raise Unauthorized("signature mismatch")

    def parse(self, request: WebhookRequest) -> IngressOutcome:
        if request.body.lstrip()[:1] == b"{":
            return self._from_envelope(parse_json(SlackEnvelope, request.body, "Slack event"))
        # verify() has refused anything but UTF-8 already.
        return self._from_form(request.body.decode("utf-8", "replace"))

    # ------------------------------------------------------------ Events API

    def _from_envelope(self, envelope: SlackEnvelope) -> IngressOutcome:
        if envelope.type == "url_verification":
            if envelope.challenge is None:
                raise BadRequest("url_verification without a challenge")
            return Handshake(200, envelope.challenge, "text/plain")
        if envelope.type == "app_rate_limited":
            return Ignored(RATE_LIMITED)
        if envelope.type != "event_callback":
            return Ignored(OTHER_ENVELOPE)
        if envelope.event is None or not envelope.event_id:
            raise BadRequest("event_callback without event or event_id")
        return self._from_event(envelope, envelope.event, envelope.event_id)

    def _from_event(self, envelope: SlackEnvelope, event: dict[str, Any], event_id: str) -> IngressOutcome:
        kind, subtype = event.get("type"), event.get("subtype")
        if kind not in ("message", "app_mention"):
            return Ignored(OTHER_EVENT)
        # A bot's message (ours included) never starts a turn: two bots could answer each other
        # forever. bot_id is set on new-style bot posts, which have no subtype.
        if event.get("bot_id") is not None:
            return Ignored(BOT)
        if subtype is not None and not (isinstance(subtype, str) and subtype in USER_SUBTYPES):
            return Ignored(SUBTYPE_REASONS.get(subtype, SYSTEM) if isinstance(subtype, str) else SYSTEM)
        if event.get("hidden") is True:
            return Ignored(SYSTEM)
        msg = validate(SlackMessage, event, "Slack message event")
        own = {a.user_id for a in envelope.authorizations if a.is_bot and a.user_id}
        if msg.user in own:
            return Ignored(OWN)
        text = msg.text or ""
        channel_type = msg.channel_type or _channel_type_from_id(msg.channel)
        if (
            msg.type == "message"
            and channel_type not in DIRECT
            and any(f"<@{bot}>" in text or f"<@{bot}|" in text for bot in own)
        ):
            # Slack sends a channel message that mentions the app twice, as `message` (to apps
            # subscribed to message.channels) and as `app_mention`: the mention starts the turn.
            return Ignored(MENTION_TWICE)
        if msg.type == "app_mention":
            text = _strip_leading_mention(text, own | set(envelope.authed_users))
        if not text.strip() and not msg.files:
            return Ignored(EMPTY)
        thread = msg.thread_ts if msg.thread_ts and msg.thread_ts != msg.ts else None
        profile = msg.user_profile
        name = (profile.display_name or profile.real_name) if profile else None
        context = {"message_ts": msg.ts}
        team = msg.team or envelope.team_id
        if team:
            context["team_id"] = team
        inbound = message(
            channel="slack",
            workspace_id=self.workspace_id,
            event_id=event_id,
            chat_id=msg.channel,
            chat_type=_chat_type(channel_type),
            sender=Sender(id=msg.user, name=name or None),
            text=text,
            thread_id=thread,
            attachments=[
                Attachment(
                    kind="file",
                    id=f.id,
                    url=f.url_private_download or f.url_private,
                    name=f.name,
                    mime_type=f.mimetype,
                    size=f.size,
                )
                for f in msg.files
            ],
            reply_context=context,
        )
        return Accepted([inbound])

    # ------------------------------------------------------------ form posts

    def _from_form(self, body: str) -> IngressOutcome:
        try:
            fields = parse_qs(body, keep_blank_values=True, max_num_fields=100)
        except ValueError:
            raise BadRequest("form body with too many fields") from None
        form = {k: v[0] for k, v in fields.items()}
        if "ssl_check" in form:
            return Ignored(SSL_CHECK)
        if "payload" in form:
            # Block actions, shortcuts and modal submissions: Sigil posts none of those.
            return Ignored(INTERACTIVE)
        cmd = validate(SlackCommand, form, "Slack slash command")
        text = f"{cmd.command} {cmd.text}".strip()
        chat_type: ChatType = (
            "dm" if cmd.channel_name == "directmessage" else _chat_type(_channel_type_from_id(cmd.channel_id))
        )
        context = {"command": cmd.command}
        if cmd.response_url:
            # Where the command's answer can be posted even in a channel the bot hasn't joined.
            context["response_url"] = cmd.response_url
        if cmd.team_id:
            context["team_id"] = cmd.team_id
        inbound: InboundMessage = message(
            channel="slack",
            workspace_id=self.workspace_id,
            # Slack never retries a slash command; trigger_id is unique to the invocation.
            event_id=cmd.trigger_id,
            chat_id=cmd.channel_id,
            chat_type=chat_type,
            sender=Sender(id=cmd.user_id, name=cmd.user_name),
            text=text,
            reply_context=context,
        )
        command = commands.from_platform(cmd.command, cmd.text)
        if command is not None:
            inbound = inbound.model_copy(update={"command": command})
        return Accepted([inbound])


def _verifier(secret: str, now: float) -> SignatureVerifier:
    from slack_sdk.signature import Clock, SignatureVerifier

    class At(Clock):
        """The gateway's clock (tests pin it) instead of the SDK's time.time."""

        def now(self) -> float:
            return now

    return SignatureVerifier(secret, clock=At())


def _channel_type_from_id(channel: str) -> str:
    # app_mention events and slash commands carry no channel_type: Slack's id prefixes say it.
    return {"D": "im", "G": "mpim", "C": "channel"}.get(channel[:1], "channel")


def _chat_type(channel_type: str) -> ChatType:
    if channel_type in DIRECT:
        return "dm"
    if channel_type == "mpim":
        return "group"
    return "channel"


_LEADING_MENTION = re.compile(r"^\s*<@([A-Z0-9]+)(?:\|[^>]*)?>\s*")


def _strip_leading_mention(text: str, bots: set[str]) -> str:
    """ "<@BOT> hi" → "hi": the mention addresses Sigil; it is not part of the question."""
    match = _LEADING_MENTION.match(text)
    if match and match.group(1) in bots:
        return text[match.end() :]
    return text

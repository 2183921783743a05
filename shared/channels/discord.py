"""Discord: HTTP interactions (slash commands) into InboundMessages.

Verification: Ed25519 over timestamp + raw body (headers X-Signature-Timestamp and
X-Signature-Ed25519), against the application's public key, with cryptography's
Ed25519PublicKey (imported on the first Discord request: no other route needs it). Discord
checks the endpoint by sending bad signatures and expects 401; the PING is answered {"type": 1}
only after its signature holds.

Deadlines: Discord wants the interaction answered within 3 seconds, and a turn takes longer. So an
application command is queued and answered at once with type 5 (DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE,
the user sees "thinking..."); the turn posts the real answer as a follow-up to
/webhooks/{application_id}/{token}, which the queued message carries in reply_context (the token
is valid for 15 minutes).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal

from pydantic import Field

from shared.channels import commands
from shared.channels.inbound import (
    JSON,
    Accepted,
    Handshake,
    Ignored,
    IngressOutcome,
    Label,
    Payload,
    PlatformId,
    Size,
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
from shared.models import Attachment, ChannelRoute, Sender
from shared.ports import SecretStore

log = logging.getLogger("sigil.channels.discord")

SECRET: Final = "discord/public-key"  # noqa: S105 -- the secret's name, not its value
SIGNATURE_HEADER: Final = "x-signature-ed25519"
TIMESTAMP_HEADER: Final = "x-signature-timestamp"

# Interaction types and the response types answering them (Discord's numbering).
PING, APPLICATION_COMMAND, MESSAGE_COMPONENT, AUTOCOMPLETE, MODAL_SUBMIT = 1, 2, 3, 4, 5
PONG: Final = '{"type":1}'
DEFERRED_CHANNEL_MESSAGE: Final = '{"type":5}'
DEFERRED_UPDATE_MESSAGE: Final = '{"type":6}'  # acknowledges a component; no visible change
NO_CHOICES: Final = '{"type":8,"data":{"choices":[]}}'
SUBCOMMAND_TYPES: Final = (1, 2)  # SUB_COMMAND, SUB_COMMAND_GROUP
ATTACHMENT_OPTION: Final = 11
CHAT_INPUT: Final = 1  # a slash command typed in the chat box
MESSAGE_COMMAND: Final = 3  # a context-menu command on a message: data.target_id is that message

# Ignored reasons (docs/channels.md tables each with its why).
BOT: Final = "bot interaction"
COMPONENT: Final = "message component"
AUTOCOMPLETE_REQUEST: Final = "autocomplete request"
MODAL: Final = "modal submit"


class DiscordUser(Payload):
    id: PlatformId
    username: Label | None = None
    global_name: Label | None = None
    bot: bool = False


class DiscordMember(Payload):
    user: DiscordUser | None = None
    nick: Label | None = None


class DiscordChannelRef(Payload):
    id: PlatformId


class DiscordOption(Payload):
    name: Label
    type: int
    value: str | int | float | bool | None = None
    options: list[DiscordOption] = Field(default_factory=list, max_length=25)


class DiscordAttachment(Payload):
    id: PlatformId
    filename: Label | None = None
    content_type: Label | None = None
    size: Size | None = None
    url: Url | None = None


class DiscordResolved(Payload):
    attachments: dict[PlatformId, DiscordAttachment] = Field(default_factory=dict, max_length=25)


class DiscordCommand(Payload):
    name: Label
    type: int = 1
    options: list[DiscordOption] = Field(default_factory=list, max_length=25)
    resolved: DiscordResolved | None = None
    target_id: PlatformId | None = None


class DiscordInteraction(Payload):
    id: PlatformId
    type: int
    application_id: PlatformId | None = None
    token: Url | None = None
    guild_id: PlatformId | None = None
    channel_id: PlatformId | None = None
    channel: DiscordChannelRef | None = None
    member: DiscordMember | None = None
    user: DiscordUser | None = None
    # Validated by type below: a component's data differs from a command's.
    data: dict[str, Any] | None = None


@dataclass(frozen=True)
class DiscordChannel:
    workspace_id: str
    route: ChannelRoute | None = None
    name: ClassVar[Literal["discord"]] = "discord"

    def handshake(self, request: WebhookRequest, secrets: SecretStore) -> Handshake | None:
        return None  # Discord's PING is signed: `parse` answers it once `verify` has passed

    def verify(self, request: WebhookRequest, secrets: SecretStore, *, now: float, window_s: int) -> None:
        ts = fresh_timestamp(
            request.headers.get(TIMESTAMP_HEADER), now=now, window_s=window_s, header="X-Signature-Timestamp"
        )
        signature_hex = request.headers.get(SIGNATURE_HEADER)
        if not signature_hex:
            raise Unauthorized("missing X-Signature-Ed25519 header")
        try:
            signature = bytes.fromhex(signature_hex)
        except ValueError:
            raise Unauthorized("signature mismatch") from None
        public_key = _public_key(configured(secrets, secret_for(self.route, SECRET)))

        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        try:
            Ed25519PublicKey.from_public_bytes(public_key).verify(signature, ts.encode() + request.body)
        except (InvalidSignature, ValueError):
            raise Unauthorized("signature mismatch") from None

    def parse(self, request: WebhookRequest) -> IngressOutcome:
        interaction = parse_json(DiscordInteraction, request.body, "Discord interaction")
        if interaction.type == PING:
            return Handshake(200, PONG, JSON)
        if interaction.type == MESSAGE_COMPONENT:
            # Sigil's replies carry no buttons or menus; one from elsewhere is acknowledged quietly.
            return Ignored(COMPONENT, DEFERRED_UPDATE_MESSAGE, JSON)
        if interaction.type == AUTOCOMPLETE:
            return Ignored(AUTOCOMPLETE_REQUEST, NO_CHOICES, JSON)
        if interaction.type == MODAL_SUBMIT:
            return Ignored(MODAL, DEFERRED_UPDATE_MESSAGE, JSON)
        if interaction.type != APPLICATION_COMMAND:
            raise BadRequest("unsupported interaction type")
        return self._from_command(interaction)

    def _from_command(self, interaction: DiscordInteraction) -> IngressOutcome:
        if not interaction.application_id or not interaction.token:
            # Without both, the follow-up can never be posted: deferring would leave the user
            # looking at "thinking..." for 15 minutes. Discord always sends them.
            raise BadRequest("interaction without application_id or token")
        user = interaction.member.user if interaction.member and interaction.member.user else interaction.user
        if user is None:
            raise BadRequest("interaction without a user")
        channel_id = interaction.channel_id or (interaction.channel.id if interaction.channel else None)
        if channel_id is None:
            raise BadRequest("interaction without a channel")
        if interaction.data is None:
            raise BadRequest("application command without data")
        command = validate(DiscordCommand, interaction.data, "Discord application command")
        if user.bot:
            return Ignored(BOT, DEFERRED_UPDATE_MESSAGE, JSON)
        resolved = command.resolved.attachments if command.resolved else {}
        words, files = _render(command.options, resolved)
        inbound = message(
            channel="discord",
            workspace_id=self.workspace_id,
            event_id=interaction.id,
            chat_id=channel_id,
            chat_type="channel" if interaction.guild_id else "dm",
            sender=Sender(id=user.id, name=user.global_name or user.username),
            text=" ".join([f"/{command.name}", *words]),
            reply_to=command.target_id if command.type == MESSAGE_COMMAND else None,
            attachments=files,
            reply_context={
                "application_id": interaction.application_id,
                "interaction_token": interaction.token,
                "interaction_id": interaction.id,
            },
        )
        if command.type == CHAT_INPUT:
            # Sigil's own commands take their options' values as the arguments (`/model ref:
            # openai/gpt-4.1` is `/model openai/gpt-4.1`); any other command is for the model.
            values = [str(o.value) for o in command.options if o.value is not None]
            found = commands.from_platform(command.name, " ".join(values))
            if found is not None:
                inbound = inbound.model_copy(update={"command": found})
        return Accepted([inbound], DEFERRED_CHANNEL_MESSAGE, JSON)


def _public_key(configured_hex: str) -> bytes:
    try:
        key = bytes.fromhex(configured_hex.strip())
    except ValueError:
        key = b""
    if len(key) != 32:
        # Until the operator stores the real key, the stack's random placeholder is here.
        log.warning("discord/public-key is not a 32-byte hex Ed25519 key")
        raise Unauthorized("signature mismatch")
    return key


def _render(
    options: list[DiscordOption], resolved: dict[str, DiscordAttachment]
) -> tuple[list[str], list[Attachment]]:
    """A command's options as the words a user would type ("ask question: why"), and its files."""
    words: list[str] = []
    files: list[Attachment] = []
    for option in options:
        if option.type in SUBCOMMAND_TYPES:
            nested_words, nested_files = _render(option.options, resolved)
            words += [option.name, *nested_words]
            files += nested_files
        elif option.type == ATTACHMENT_OPTION and isinstance(option.value, str) and option.value in resolved:
            found = resolved[option.value]
            files.append(
                Attachment(
                    kind="file",
                    id=found.id,
                    url=found.url,
                    name=found.filename,
                    mime_type=found.content_type,
                    size=found.size,
                )
            )
            words.append(f"{option.name}: {found.filename or found.id}")
        elif option.value is not None:
            words.append(f"{option.name}: {option.value}")
    return words, files

"""Telegram: Bot API webhook updates into InboundMessages.

Verification: Telegram echoes the `secret_token` given to setWebhook in the
X-Telegram-Bot-Api-Secret-Token header (no body signature, no timestamp), compared in constant
time with the stored secret. Telegram re-delivers an update until it gets a 2xx; the re-delivery
has the same update_id, and f"tg{update_id}" is the lane's dedup id, so it runs one turn.

Which updates start a turn is decided in `parse` / `_from_message` and tabled in docs/channels.md.
Files are referenced by file_id, never downloaded (that takes the bot token and getFile).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final, Literal

from pydantic import ConfigDict, Field

from shared.channels import commands
from shared.channels.inbound import (
    Accepted,
    ChatType,
    Handshake,
    Ignored,
    IngressOutcome,
    Int64,
    Label,
    Payload,
    PlatformId,
    Size,
    Text,
    WebhookRequest,
    configured,
    message,
    parse_json,
    same,
    secret_for,
)
from shared.errors import BadRequest, Unauthorized
from shared.models import Attachment, ChannelRoute, ChatCommand, Sender
from shared.ports import SecretStore

SECRET: Final = "telegram/webhook-secret"  # noqa: S105 -- the secret's name, not its value
HEADER: Final = "x-telegram-bot-api-secret-token"

# Ignored reasons (docs/channels.md tables each with its why).
BOT: Final = "bot message"
EDIT: Final = "edit"
DELETION: Final = "deletion"
CHANNEL_POST: Final = "channel post"
FORWARD: Final = "automatic forward from a linked channel"
NO_CONTENT: Final = "no text, caption or file"
BUTTON: Final = "button press"
INLINE: Final = "inline query"
MEMBERSHIP: Final = "membership change"
REACTION: Final = "reaction"
POLL: Final = "poll update"
PAYMENT: Final = "payment update"
BUSINESS: Final = "business connection update"
OTHER_UPDATE: Final = "unsupported update"

UPDATE_REASONS: Final = {
    "edited_message": EDIT,
    "edited_channel_post": EDIT,
    "edited_business_message": EDIT,
    "deleted_business_messages": DELETION,
    "channel_post": CHANNEL_POST,
    "callback_query": BUTTON,
    "inline_query": INLINE,
    "chosen_inline_result": INLINE,
    "my_chat_member": MEMBERSHIP,
    "chat_member": MEMBERSHIP,
    "chat_join_request": MEMBERSHIP,
    "message_reaction": REACTION,
    "message_reaction_count": REACTION,
    "poll": POLL,
    "poll_answer": POLL,
    "shipping_query": PAYMENT,
    "pre_checkout_query": PAYMENT,
    "purchased_paid_media": PAYMENT,
    "business_connection": BUSINESS,
    "business_message": BUSINESS,
}
# Single-file kinds, referenced by file_id; `photo` (a list of sizes) is handled on its own.
FILE_KINDS: Final = ("document", "audio", "voice", "video", "video_note", "animation", "sticker")


class TelegramUser(Payload):
    id: Int64
    is_bot: bool = False
    first_name: Label = ""
    last_name: Label | None = None
    username: Label | None = None


class TelegramChat(Payload):
    id: Int64
    type: PlatformId
    title: Label | None = None


class TelegramFile(Payload):
    file_id: PlatformId
    file_name: Label | None = None
    mime_type: Label | None = None
    file_size: Size | None = None


class TelegramEntity(Payload):
    type: PlatformId
    offset: int = Field(ge=0, le=2**31)  # in UTF-16 code units
    length: int = Field(ge=0, le=2**31)


class TelegramReply(Payload):
    message_id: Int64


class TelegramMessage(Payload):
    message_id: Int64
    sender: TelegramUser | None = Field(default=None, alias="from")
    sender_chat: TelegramChat | None = None
    chat: TelegramChat
    message_thread_id: Int64 | None = None
    is_topic_message: bool = False
    is_automatic_forward: bool = False
    reply_to_message: TelegramReply | None = None
    text: Text | None = None
    entities: list[TelegramEntity] = Field(default_factory=list, max_length=10_000)
    caption: Text | None = None
    photo: list[TelegramFile] = Field(default_factory=list, max_length=50)
    document: TelegramFile | None = None
    audio: TelegramFile | None = None
    voice: TelegramFile | None = None
    video: TelegramFile | None = None
    video_note: TelegramFile | None = None
    animation: TelegramFile | None = None
    sticker: TelegramFile | None = None


class TelegramUpdate(Payload):
    # The update kinds other than `message` are kept (not validated) to name why they're ignored.
    model_config = ConfigDict(extra="allow", frozen=True)

    update_id: int = Field(ge=0, le=2**53)
    message: TelegramMessage | None = None


@dataclass(frozen=True)
class TelegramChannel:
    workspace_id: str
    route: ChannelRoute | None = None
    name: ClassVar[Literal["telegram"]] = "telegram"

    def handshake(self, request: WebhookRequest, secrets: SecretStore) -> Handshake | None:
        return None  # setWebhook is a call Sigil's operator makes; Telegram never probes the endpoint

    def verify(self, request: WebhookRequest, secrets: SecretStore, *, now: float, window_s: int) -> None:
        token = request.headers.get(HEADER)
        if not token:
            raise Unauthorized("missing X-Telegram-Bot-Api-Secret-Token header")
        if not same(token, configured(secrets, secret_for(self.route, SECRET))):
            raise Unauthorized("signature mismatch")

    def parse(self, request: WebhookRequest) -> IngressOutcome:
        update = parse_json(TelegramUpdate, request.body, "Telegram update")
        if update.message is not None:
            return self._from_message(update.update_id, update.message)
        for kind in update.model_extra or {}:
            if kind in UPDATE_REASONS:
                return Ignored(UPDATE_REASONS[kind])
        return Ignored(OTHER_UPDATE)

    def _from_message(self, update_id: int, msg: TelegramMessage) -> IngressOutcome:
        if msg.is_automatic_forward:
            # A linked channel's post copied into its discussion group: a broadcast, not a question.
            return Ignored(FORWARD)
        if msg.sender_chat is not None:
            # Sent on behalf of a chat (an anonymous group admin): `from` is then Telegram's
            # GroupAnonymousBot, which must not make the message look like a bot's.
            sender = Sender(id=str(msg.sender_chat.id), name=msg.sender_chat.title)
        elif msg.sender is not None:
            if msg.sender.is_bot:
                return Ignored(BOT)
            full = " ".join(p for p in (msg.sender.first_name, msg.sender.last_name) if p)
            sender = Sender(id=str(msg.sender.id), name=full or msg.sender.username)
        else:
            raise BadRequest("message without a sender")
        attachments = _attachments(msg)
        text = msg.text if msg.text is not None else (msg.caption or "")
        if not text and not attachments:
            # Service messages (pinned, new members, forum topic created...) and content Sigil
            # can't read (location, contact, poll, dice).
            return Ignored(NO_CONTENT)
        # message_thread_id names a forum topic only when is_topic_message is set; Telegram also
        # puts it on reply chains in ordinary supergroups, which are not separate conversations.
        thread = str(msg.message_thread_id) if msg.is_topic_message and msg.message_thread_id else None
        reply_to = msg.reply_to_message.message_id if msg.reply_to_message else None
        if reply_to is not None and thread is not None and str(reply_to) == thread:
            reply_to = None  # inside a topic every message "replies" to the topic's first message
        inbound = message(
            channel="telegram",
            workspace_id=self.workspace_id,
            event_id=f"tg{update_id}",
            chat_id=str(msg.chat.id),
            chat_type=_chat_type(msg.chat.type),
            sender=sender,
            text=text,
            thread_id=thread,
            reply_to=None if reply_to is None else str(reply_to),
            attachments=attachments,
            reply_context={"message_id": str(msg.message_id)},
        )
        command = _command(msg)
        if command is not None:
            inbound = inbound.model_copy(update={"command": command})
        return Accepted([inbound])


def _command(msg: TelegramMessage) -> ChatCommand | None:
    """Telegram marks a command with a bot_command entity; one at offset 0 makes the message a
    command (`/status`, `/status@SigilBot`). A command later in the text is prose."""
    if msg.text is None or not any(e.type == "bot_command" and e.offset == 0 for e in msg.entities):
        return None
    return commands.from_text(msg.text)


def _attachments(msg: TelegramMessage) -> list[Attachment]:
    found: list[Attachment] = []
    if msg.photo:
        # Telegram sends every size of one photo, smallest first: the last is the original.
        largest = msg.photo[-1]
        found.append(Attachment(kind="photo", id=largest.file_id, size=largest.file_size))
    for kind in FILE_KINDS:
        file: TelegramFile | None = getattr(msg, kind)
        if file is not None:
            found.append(
                Attachment(
                    kind=kind,
                    id=file.file_id,
                    name=file.file_name,
                    mime_type=file.mime_type,
                    size=file.file_size,
                )
            )
    return found


def _chat_type(kind: str) -> ChatType:
    if kind == "private":
        return "dm"
    if kind == "channel":
        return "channel"
    return "group"  # group, supergroup

"""What the platform channels (Telegram, Slack, Discord, WhatsApp) share on the way in.

A channel is a small object with three steps, called by `shared.ingress.Ingress.accept` in order:

    handshake(request, secrets)      an unsigned endpoint check (WhatsApp's GET), else None
    verify(request, secrets, ...)    raise Unauthorized unless the platform signed the request
    parse(request)                   the verified request → Handshake | Ignored | Accepted

`parse` answers the signed handshakes itself (Slack's url_verification, Discord's PING), so they
are only ever answered after the signature holds. Each outcome carries the HTTP answer the
platform expects, so the Lambda webhook and the local gateway map it the same way.

Platform payloads are read with lenient pydantic models (unknown fields ignored, since platforms
add fields all the time) and only the parts Sigil consumes are validated: a Slack event type we
don't handle is Ignored, not a 400 that the platform would retry.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Final, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.errors import BadRequest, SigilError, Unauthorized
from shared.models import Attachment, ChannelRoute, InboundMessage, Sender
from shared.ports import SecretStore

ChannelName = Literal["telegram", "slack", "discord", "whatsapp"]
ChatType = Literal["dm", "group", "channel"]

# Above every platform's own limit (Slack's 40,000 characters is the largest), so a longer text
# is not a genuine message; it also keeps a lane item well inside SQS's message size.
MAX_TEXT_CHARS: Final = 40_000
MAX_ATTACHMENTS: Final = 50


@dataclass(frozen=True)
class WebhookRequest:
    """The parts of an HTTP request the webhook needs; header names lower-case."""

    method: str
    target: str  # path with query string, exactly as signed by GET clients
    headers: dict[str, str]
    body: bytes
    path_params: dict[str, str] = field(default_factory=dict)
    query: dict[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class Handshake:
    """The platform checking the endpoint: answered in the webhook, nothing queued."""

    status: int
    body: str
    content_type: str = "text/plain"


@dataclass(frozen=True)
class Ignored:
    """A verified event that starts no turn (a bot's message, an edit, a receipt...), acknowledged."""

    reason: str
    body: str = ""  # what the platform expects in the 200 (Discord: an interaction response)
    content_type: str = "text/plain"
    status: ClassVar[int] = 200


@dataclass(frozen=True)
class Accepted:
    """User messages, each queued on its session's lane before the platform gets its 200."""

    messages: list[InboundMessage]
    body: str = ""
    content_type: str = "text/plain"
    status: ClassVar[int] = 200


IngressOutcome = Handshake | Ignored | Accepted

JSON: Final = "application/json"


class InboundChannel(Protocol):
    """One platform's webhook. Implementations raise only SigilError (400/401) for bad input."""

    @property
    def name(self) -> ChannelName: ...

    @property
    def route(self) -> ChannelRoute | None:
        """The named route (/webhooks/{platform}/{name}) this request came to; None: the unnamed one."""
        ...

    def handshake(self, request: WebhookRequest, secrets: SecretStore) -> Handshake | None:
        """Answer an unsigned endpoint check (WhatsApp's GET); None for every other request."""
        ...

    def verify(self, request: WebhookRequest, secrets: SecretStore, *, now: float, window_s: int) -> None:
        """Raise Unauthorized unless the platform signed this request (constant-time compares)."""
        ...

    def parse(self, request: WebhookRequest) -> IngressOutcome:
        """Read a verified request; BadRequest (never echoing the body) when it can't be read."""
        ...


# ---------------------------------------------------------------- payload models


class Payload(BaseModel):
    """Base of the platform payload models: unknown fields are the platform's business."""

    model_config = ConfigDict(extra="ignore", frozen=True)


# Bounds on what a payload may hold: platform ids are short, and a bounded lane item always fits
# in one SQS message.
PlatformId = Annotated[str, Field(min_length=1, max_length=256)]
Label = Annotated[str, Field(max_length=1024)]
Url = Annotated[str, Field(max_length=4096)]
Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
# 64-bit: Telegram chat ids and Discord snowflakes fit; a 5,000-digit number is refused, not str()-ed.
Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
Size = Annotated[int, Field(ge=0, le=2**53)]

P = TypeVar("P", bound=Payload)


def parse_json(model: type[P], body: bytes, what: str) -> P:
    """`body` as `model`, or BadRequest saying which field is wrong (never what it held)."""
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise invalid(exc, what) from None


def validate(model: type[P], data: Any, what: str) -> P:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise invalid(exc, what) from None


def invalid(exc: ValidationError, what: str) -> BadRequest:
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    if any(e["type"] == "json_invalid" for e in errors):
        return BadRequest("body is not valid JSON")
    known = _field_names()
    parts = []
    for err in errors[:3]:
        # A location can hold the body's own dict keys (Discord's resolved attachments); only our
        # field names and list positions are repeated back.
        loc = ".".join(str(p) if isinstance(p, int) or p in known else "*" for p in err["loc"])
        parts.append(f"{loc or 'body'}: {err['msg']}")
    return BadRequest(f"invalid {what}: {'; '.join(parts)}")


def _field_names() -> frozenset[str]:
    names: set[str] = set()
    pending: list[type[Payload]] = [Payload]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        for name, info in cls.model_fields.items():
            names.add(name)
            if info.alias:
                names.add(info.alias)
    return frozenset(names)


# ---------------------------------------------------------------- building messages

_ID_CHARS = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+=\-]{0,127}")
_NOT_ID_CHAR = re.compile(r"[^A-Za-z0-9._@+=\-]")
# Characters SQS refuses in a message body (it allows #x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD
# #x10000-#x10FFFF); a message body holding one fails SendMessage, so they never reach a lane.
# Written as the complement of that set rather than a negated class of its wide ranges, which
# took 3 ms to compile on every cold start.
_NOT_SQS_CHAR = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def identifier(raw: str) -> str:
    """`raw` when it is a models.Identifier already; otherwise a readable prefix and a SHA-256.

    Deterministic, so a platform retry maps to the same session and event id every time, and
    distinct raw values stay distinct (the digest), even when the readable part is cut.
    """
    if _ID_CHARS.fullmatch(raw):
        return raw
    digest = hashlib.sha256(_raw(raw)).hexdigest()[:20]
    readable = _NOT_ID_CHAR.sub("_", raw)[:100]
    if not readable[:1].isalnum():
        readable = "x" + readable[:99]
    return f"{readable}-{digest}"


def session_id(channel: ChannelName, chat_id: str, thread_id: str | None) -> str:
    """f"{channel}.{chat}" (+ f".{thread}"): a DM, a group and each of its threads are distinct."""
    return identifier(f"{channel}.{chat_id}" + (f".{thread_id}" if thread_id else ""))


def conversation_key(channel: str, chat_id: str) -> str:
    """The channel conversation a message came from, without its thread (MemoryScope.conversation):
    a Slack channel, a Telegram group, a Discord channel or a DM. A Slack thread is a session of
    its own, but its memories belong to its channel's conversation."""
    return identifier(f"{channel}.{chat_id}")


def clean(text: str) -> str:
    """`text` with every character SQS refuses in a message body replaced by U+FFFD.

    Every channel's user text and names go through this (the platforms' in `message`, the web
    channel's in shared.channels.web.parse), so no message can fail its lane's SendMessage.
    """
    return _NOT_SQS_CHAR.sub("\ufffd", text)


def _clean_opt(text: str | None) -> str | None:
    return None if text is None else clean(text)


def message(
    *,
    channel: ChannelName,
    workspace_id: str,
    event_id: str,
    chat_id: str,
    chat_type: ChatType,
    sender: Sender,
    text: str,
    thread_id: str | None = None,
    reply_to: str | None = None,
    attachments: list[Attachment] | None = None,
    reply_context: dict[str, str] | None = None,
) -> InboundMessage:
    """An InboundMessage with Identifier-safe ids and only characters a lane can carry."""
    if len(text) > MAX_TEXT_CHARS:
        raise BadRequest(f"message text longer than {MAX_TEXT_CHARS} characters")
    files = attachments or []
    if len(files) > MAX_ATTACHMENTS:
        raise BadRequest(f"more than {MAX_ATTACHMENTS} attachments")
    return InboundMessage(
        event_id=identifier(event_id),
        channel=channel,
        workspace_id=workspace_id,
        session_id=session_id(channel, chat_id, thread_id),
        sender=Sender(id=clean(sender.id), name=_clean_opt(sender.name), is_bot=sender.is_bot),
        chat_id=clean(chat_id),
        chat_type=chat_type,
        thread_id=_clean_opt(thread_id),
        reply_to=_clean_opt(reply_to),
        text=clean(text),
        attachments=[
            a.model_copy(update={k: clean(v) for k, v in a.model_dump().items() if isinstance(v, str)})
            for a in files
        ],
        reply_context={k: clean(v) for k, v in (reply_context or {}).items()},
    )


# ---------------------------------------------------------------- verification helpers


# The largest value of a signed 64-bit column (SQLite's INTEGER, a DynamoDB number read as int64).
MAX_INT63: Final = 2**63 - 1
# Unix seconds up to the year 33658: any genuine timestamp, and small enough for float arithmetic.
MAX_UNIX_SECONDS: Final = 10**12 - 1


def bounded_int(raw: str, *, what: str, hi: int, error: type[SigilError] = BadRequest) -> int:
    """`raw` as a non-negative decimal integer of at most `hi`, else `error` naming `what`.

    The one parser of the numbers a request carries in its headers and query (signing timestamps,
    outbox positions): the length is checked before int() runs, so a 400-digit value can neither
    cost a big-number conversion nor reach float arithmetic (OverflowError) or a 64-bit database
    column. ASCII digits only: int() would also take "+1", " 1", "1_0" and full-width digits.
    The reason never repeats the value.
    """
    if not (raw.isascii() and raw.isdigit() and len(raw) <= len(str(hi))):
        raise error(f"{what} must be an integer from 0 to {hi}")
    value = int(raw)
    if value > hi:
        raise error(f"{what} must be an integer from 0 to {hi}")
    return value


def fresh_timestamp(raw: str | None, *, now: float, window_s: int, header: str) -> str:
    """A signing timestamp of unix seconds within `window_s` of now, so a capture can't be replayed."""
    if raw is None or not raw:
        raise Unauthorized(f"missing {header} header")
    try:
        ts = bounded_int(raw, what=header, hi=MAX_UNIX_SECONDS, error=Unauthorized)
    except Unauthorized:
        raise Unauthorized(f"{header} is not a unix timestamp") from None
    if abs(now - ts) > window_s:
        raise Unauthorized(f"timestamp more than {window_s} seconds from the gateway's clock")
    return raw


def same(given: str, expected: str) -> bool:
    """Constant-time equality of two header or query values (any text, even a lone surrogate)."""
    return hmac.compare_digest(_raw(given), _raw(expected))


def _raw(value: str) -> bytes:
    return value.encode("utf-8", "surrogatepass")


def secret_for(route: ChannelRoute | None, name: str) -> str:
    """The secret `name` ("telegram/webhook-secret") as `route` names it: the same key under the
    route's name ("telegram/family/webhook-secret"); the unnamed route reads `name` itself."""
    if route is None:
        return name
    return route.secret_name(name.split("/", 1)[1])


def configured(secrets: SecretStore, name: str) -> str:
    """The secret's value; a missing or blank one fails like a wrong signature.

    Same answer as a mismatch: a probe must not learn which platforms are configured.
    """
    value = secrets.get(name)
    if value is None or not value.strip():
        raise Unauthorized("signature mismatch")
    return value

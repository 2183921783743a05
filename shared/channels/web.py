"""The web channel: HMAC-SHA256 signed JSON posts in, an outbox (JSON or server-sent events) out;
browsers use browser tokens (shared.channels.web_tokens) and a WebSocket (shared.ingress.browser).

Signing, for a client: with the workspace's web signing secret,

    signature = hex(HMAC_SHA256(secret, f"{timestamp}.".encode() + payload))
    headers:  X-Sigil-Timestamp: <unix seconds>    X-Sigil-Signature: v1=<signature>

where `payload` is the raw request body for a POST, and the request target (path and query,
e.g. b"/sessions/default/s1/outbox?after=0") for a GET, which has no body. The timestamp must be
within 5 minutes of the gateway's clock, so a captured request can't be replayed later.
"""

# Annotations are not postponed here: pydantic makes this module's models at import, and would
# evaluate each field's annotation from its text (shared/models/__init__.py).

import hashlib
import hmac
import logging
import re
import time
from typing import Protocol

from pydantic import Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from shared.channels import commands
from shared.channels.inbound import MAX_UNIX_SECONDS, bounded_int, clean
from shared.errors import BadRequest, Unauthorized
from shared.models import Attachment, Identifier, InboundMessage, Model, OutboundMessage, Sender

log = logging.getLogger("sigil.web")

TIMESTAMP_HEADER = "x-sigil-timestamp"
SIGNATURE_HEADER = "x-sigil-signature"
SIGNATURE_VERSION = "v1"
MAX_TEXT_CHARS = 32_000
# Files on one message, whatever a workspace allows (MediaLimits.max_files_per_message, at most 50).
MAX_ATTACHMENTS = 50
_SIGNATURE = re.compile(rf"{SIGNATURE_VERSION}=[0-9a-f]{{64}}")


def secret_name(workspace_id: str) -> str:
    """Where a workspace's web signing secret lives in the SecretStore."""
    return f"web/{workspace_id}"


def session_id_for(session: str) -> str:
    # The channel prefix keeps a web session from ever sharing a lane with another channel's chat.
    return f"web.{session}"


def sign(secret: str, timestamp: int | str, payload: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + payload, hashlib.sha256)
    return f"{SIGNATURE_VERSION}={mac.hexdigest()}"


def signed_headers(secret: str, payload: bytes, *, now: float | None = None) -> dict[str, str]:
    ts = int(time.time() if now is None else now)
    return {"X-Sigil-Timestamp": str(ts), "X-Sigil-Signature": sign(secret, ts, payload)}


def signed_parts(headers: dict[str, str], *, now: float, window_s: int = 300) -> tuple[int, str]:
    """The request's timestamp and signature, once both are present, fresh and well-formed.

    Checked before the workspace's secret is read, so an unsigned or stale request costs no
    secret read and its answer can't depend on the workspace. `headers` has lower-case names.
    """
    ts_raw = headers.get(TIMESTAMP_HEADER)
    sig = headers.get(SIGNATURE_HEADER)
    if not ts_raw or not sig:
        raise Unauthorized("missing X-Sigil-Timestamp or X-Sigil-Signature header")
    try:
        ts = bounded_int(ts_raw, what="X-Sigil-Timestamp", hi=MAX_UNIX_SECONDS, error=Unauthorized)
    except Unauthorized:
        raise Unauthorized("X-Sigil-Timestamp is not a unix timestamp") from None
    if abs(now - ts) > window_s:
        raise Unauthorized("timestamp outside the 5-minute window")
    sig = sig.strip()
    if not _SIGNATURE.fullmatch(sig):
        raise Unauthorized(f"X-Sigil-Signature is not {SIGNATURE_VERSION}=<64 hex digits>")
    return ts, sig


def check_signature(secret: str | None, ts: int, sig: str, payload: bytes) -> None:
    """Raise Unauthorized unless `sig` (from `signed_parts`) signs `payload` under `secret`."""
    if secret is None:
        # Same answer as a wrong signature: an unknown workspace must not be distinguishable.
        raise Unauthorized("signature mismatch")
    expected = sign(secret, ts, payload)
    if not hmac.compare_digest(expected.encode(), sig.encode()):
        raise Unauthorized("signature mismatch")


def verify(
    secret: str | None,
    headers: dict[str, str],
    payload: bytes,
    *,
    now: float,
    window_s: int = 300,
) -> None:
    """Raise Unauthorized unless the request carries a fresh, correct signature.

    `headers` must have lower-case names. The reason in the error never echoes the body.
    """
    ts, sig = signed_parts(headers, now=now, window_s=window_s)
    check_signature(secret, ts, sig, payload)


class WebAttachment(Model):
    """A file the chat page uploaded first (shared.media.upload): its MediaItem's id."""

    media_id: Identifier


class WebInbound(Model):
    """The body of POST /webhooks/web/{workspace}, and of the browser's `send` frame."""

    event_id: Identifier = Field(description="client-chosen id; a repeat of the same id is one turn")
    session: Identifier
    user: Identifier
    # Empty only with attachments: a photo may come without a caption.
    text: str = Field(default="", max_length=MAX_TEXT_CHARS)
    user_name: str | None = Field(default=None, max_length=200)
    attachments: list[WebAttachment] = Field(default_factory=list, max_length=MAX_ATTACHMENTS)

    @model_validator(mode="after")
    def _something_said(self) -> "WebInbound":
        if not self.text and not self.attachments:
            # A custom error, so the reason reads as ours ("... text is empty ..."), not "Value error, ...".
            raise PydanticCustomError("empty_message", "text is empty and nothing is attached")
        return self


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def parse(workspace_id: str, body: bytes) -> InboundMessage:
    """Validate a verified body and normalise it; BadRequest says what is wrong, never echoes input."""
    try:
        msg = WebInbound.model_validate_json(body)
    except ValidationError as exc:
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            raise BadRequest("body is not valid JSON") from None
        raise BadRequest(f"invalid message: {_describe(exc)}") from None
    return InboundMessage(
        event_id=msg.event_id,
        channel="web",
        workspace_id=workspace_id,
        session_id=session_id_for(msg.session),
        # Cleaned as the platforms' text is (shared.channels.inbound.clean): a character SQS
        # refuses (U+0000, U+FFFE...) would fail the lane's SendMessage.
        sender=Sender(id=msg.user, name=None if msg.user_name is None else clean(msg.user_name)),
        chat_id=msg.session,
        chat_type="dm",
        text=clean(msg.text),
        # The web channel has no command mechanism: text that opens with /name is a command.
        command=commands.from_text(clean(msg.text)),
        # Only the ids so far: the browser's ingress checks each is this sender's, in this
        # session, and fills in what the store knows (shared.channels.web_media.attach).
        attachments=[Attachment(kind="other", media_id=a.media_id) for a in msg.attachments],
    )


class WebDelta(Model):
    """A piece of a web reply as the model streams it, for the page's live view (docs/web-channel.md).

    `text` replaces the part's streamed text from character `offset` on: usually `offset` is the
    length already sent (the text grew), 0 when the stream started over (the loop's next model
    call). The text is already redacted (shared.agent.reply.redacted). `final` marks the part's
    outbox write: no more deltas for it, and readers fetch the reply from the outbox.
    """

    workspace_id: str
    session_id: str  # the lane's id, web.{session}
    session: str  # the web channel's session name
    turn_id: str
    part: int = 0
    in_reply_to: str | None = None  # the message's event id, so the page places the reply under it
    offset: int = 0
    text: str = ""
    final: bool = False


class DeltaSink(Protocol):
    """Where web deltas go: the local gateway's listeners, or (later) the cloud's WebSocket API."""

    def publish(self, delta: WebDelta) -> None: ...


class StreamedDeltas:
    """One reply part's deltas: the text so far, sent as what changed since the last one."""

    def __init__(self, sink: DeltaSink, message: OutboundMessage) -> None:
        self._sink = sink
        self._message = message
        self._sent = ""

    def update(self, text_so_far: str) -> None:
        if text_so_far == self._sent:
            return
        offset = len(self._sent) if text_so_far.startswith(self._sent) else 0
        self._sent = text_so_far
        self._publish(offset, text_so_far[offset:], final=False)

    def finished(self) -> None:
        self._publish(0, "", final=True)

    def _publish(self, offset: int, text: str, *, final: bool) -> None:
        m = self._message
        delta = WebDelta(
            workspace_id=m.workspace_id,
            session_id=m.session_id,
            session=m.chat_id,
            turn_id=m.turn_id,
            part=m.part,
            in_reply_to=m.in_reply_to,
            offset=offset,
            text=text,
            final=final,
        )
        try:
            self._sink.publish(delta)
        except Exception as exc:  # noqa: BLE001 -- a live view failing must never fail the turn
            log.warning("web delta not published", extra={"turn_id": m.turn_id, "error": type(exc).__name__})

"""The browser protocol's frames (docs/web-channel.md, "The browser protocol"): what a page sends
and what it is sent, the same locally (shared.local.web_socket over shared.ingress.browser) and
in the cloud (the WebSocket API: shared.ingress.ws, shared.channels.web_socket).
"""

from __future__ import annotations

import json
from typing import Annotated, Final, Literal

from pydantic import Field, TypeAdapter, ValidationError

from shared.channels import web, web_tokens
from shared.channels.inbound import MAX_INT63
from shared.errors import BadRequest, Forbidden, SigilError
from shared.models import Identifier, InboundMessage, Model, OutboxEntry

# A frame is at most MAX_TEXT_CHARS characters of text, 4 bytes each in UTF-8 at worst, plus the
# envelope; API Gateway's own limit on a frame is 128 KB.
MAX_FRAME_BYTES: Final = 4 * web.MAX_TEXT_CHARS + 4096
# A connection follows at most this many sessions, locally and in the cloud; following one more
# drops the one it began following first (a page shows a handful at a time). A bound on what one
# socket costs: locally each followed session is read once a second, in the cloud it is an item.
MAX_SUBSCRIPTIONS: Final = 50


class SendFrame(Model):
    type: Literal["send"]
    event_id: Identifier
    session: Identifier
    # Empty only with attachments (checked with the rest of the message by web.parse).
    text: str = Field(default="", max_length=web.MAX_TEXT_CHARS)
    user_name: str | None = Field(default=None, max_length=200)
    # Files uploaded first (docs/web-channel.md, "Attachments"): their media ids.
    attachments: list[web.WebAttachment] = Field(default_factory=list, max_length=web.MAX_ATTACHMENTS)


class AuthFrame(Model):
    type: Literal["auth"]
    token: str = Field(min_length=1, max_length=web_tokens.MAX_TOKEN_CHARS)


class ResumeFrame(Model):
    type: Literal["resume"]
    session: Identifier
    after: int = Field(default=0, ge=0, le=MAX_INT63)


ClientFrame = SendFrame | ResumeFrame | AuthFrame
_CLIENT_FRAME: TypeAdapter[ClientFrame] = TypeAdapter(Annotated[ClientFrame, Field(discriminator="type")])


class SessionForbidden(Forbidden):
    """The token does not cover the session the frame names."""

    code = "session_forbidden"


class SenderRefused(Forbidden):
    """The workspace does not admit this user (blocked, or not on its allow list)."""

    code = "sender_refused"


class BudgetExhausted(Forbidden):
    """The user's (or the workspace's) budget has run out; the message says which and until when."""

    code = "budget_exhausted"
    http_status = 429


def parse_frame(raw: str | bytes) -> ClientFrame:
    """A client frame; BadRequest says what is wrong and never echoes the frame."""
    if len(raw) > MAX_FRAME_BYTES:
        raise BadRequest("frame too large")
    try:
        return _CLIENT_FRAME.validate_json(raw)
    except ValidationError as exc:
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            raise BadRequest("frame is not valid JSON") from None
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "frame"
        raise BadRequest(f"invalid frame: {where}: {first['msg']}") from None


def inbound_of(frame: SendFrame, workspace_id: str, user: str) -> InboundMessage:
    """A `send` frame as the web channel's message, from `user` (the token's, never the frame's),
    parsed by the same code as POST /webhooks/web's body."""
    body = {
        "event_id": frame.event_id,
        "session": frame.session,
        "user": user,
        "text": frame.text,
        "user_name": frame.user_name,
        "attachments": [a.model_dump() for a in frame.attachments],
    }
    return web.parse(workspace_id, json.dumps(body).encode())


def accepted_frame(event_id: str, session: str, status: str) -> dict[str, object]:
    return {"type": "accepted", "event_id": event_id, "session": session, "status": status}


def delta_frame(delta: web.WebDelta) -> dict[str, object]:
    return {
        "type": "delta",
        "session": delta.session,
        "turn_id": delta.turn_id,
        "part": delta.part,
        "in_reply_to": delta.in_reply_to,
        "offset": delta.offset,
        "text": delta.text,
    }


def reply_frame(session: str, entry: OutboxEntry) -> dict[str, object]:
    m = entry.message
    return {
        "type": "reply",
        "session": session,
        "seq": entry.seq,
        "turn_id": m.turn_id,
        "part": m.part,
        "text": m.text,
        "final": m.final,
        "in_reply_to": m.in_reply_to,
        "created_at": m.created_at.isoformat(),
    }


def error_frame(exc: SigilError, **extra: object) -> dict[str, object]:
    # `message` is ours (SigilError's reasons never echo input), so a page may show it.
    return {"type": "error", "code": exc.code, "message": exc.message, **extra}


def dumps(frame: dict[str, object]) -> str:
    return json.dumps(frame, ensure_ascii=False, separators=(",", ":"))

"""The browser side of the web channel: a WebSocket protocol authenticated by browser tokens.

Transport-free, so the local gateway (shared.local.web_socket) and a cloud WebSocket API speak the
same frames (docs/web-channel.md, "The browser protocol"). A connection carries one browser
token (shared.channels.web_tokens); the token says who the user is and which sessions they may
use, and no frame can say otherwise. Client frames:

    {"type": "send", "event_id", "session", "text"}     a message, into the same lanes as POST /webhooks/web
    {"type": "resume", "session", "after": seq}          the session's replies after `seq`, then live ones

Server frames: `accepted`, `delta`, `reply`, `error` (the builders below). The outbox is the
source of truth: `reply` frames are outbox entries, and a client that reconnects resumes after
the last seq it has, losing and repeating nothing; deltas are a live preview only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field, TypeAdapter, ValidationError

from shared.backend import Backend
from shared.budgets import PriceTable, TurnBudget
from shared.channels import web, web_tokens
from shared.channels.inbound import MAX_INT63
from shared.channels.web_tokens import BrowserClaims
from shared.clock import utcnow
from shared.errors import BadRequest, Forbidden, SigilError
from shared.identity import resolve_sender
from shared.ingress import Ingress, check_id
from shared.models import Identifier, LaneItem, Model, OutboxEntry, new_workspace
from shared.ports import SubmitResult

# Frames are small: a message is at most MAX_TEXT_CHARS characters, 4 bytes each in UTF-8 at worst.
MAX_FRAME_BYTES = 4 * web.MAX_TEXT_CHARS + 4096


class SendFrame(Model):
    type: Literal["send"]
    event_id: Identifier
    session: Identifier
    text: str = Field(min_length=1, max_length=web.MAX_TEXT_CHARS)
    user_name: str | None = Field(default=None, max_length=200)


class ResumeFrame(Model):
    type: Literal["resume"]
    session: Identifier
    after: int = Field(default=0, ge=0, le=MAX_INT63)


ClientFrame = Annotated[SendFrame | ResumeFrame, Field(discriminator="type")]
_CLIENT_FRAME: TypeAdapter[SendFrame | ResumeFrame] = TypeAdapter(ClientFrame)


class SenderRefused(Forbidden):
    """The workspace does not admit this user (blocked, or not on its allow list)."""

    code = "sender_refused"


class BudgetExhausted(Forbidden):
    """The user's (or the workspace's) budget has run out; the message says until when."""

    code = "budget_exhausted"
    http_status = 429


class SessionForbidden(Forbidden):
    """The token does not cover the session the frame names."""

    code = "session_forbidden"


def parse_frame(raw: str | bytes) -> SendFrame | ResumeFrame:
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


@dataclass
class BrowserIngress:
    """What a browser connection may do, checked against its token, over the web channel's ingress."""

    ingress: Ingress
    backend: Backend
    prices: PriceTable
    clock: Callable[[], float] = time.time
    now: Callable[[], datetime] = utcnow

    def authenticate(self, token: str) -> BrowserClaims:
        """The token's claims, verified with its workspace's secret; a TokenError (401) if not."""
        workspace = web_tokens.unverified_workspace(token)
        check_id(workspace, "workspace")
        # As for a signed request: an unknown workspace answers as a bad signature does.
        secret = self.ingress._web_secret(workspace)
        return web_tokens.verify(secret, token, now=self.clock(), workspace=workspace)

    def check_session(self, claims: BrowserClaims, session: str) -> None:
        if not claims.allows(session):
            raise SessionForbidden("this token does not cover that session")

    def still_valid(self, claims: BrowserClaims) -> None:
        """A connection outlives no token: each frame is refused once the token has expired."""
        if self.clock() >= claims.exp:
            raise web_tokens.TokenExpired("the token has expired")

    def send(self, claims: BrowserClaims, frame: SendFrame) -> SubmitResult:
        """Queue a message from the token's user, as POST /webhooks/web does.

        A refused sender or an exhausted budget is told here, before anything is queued, so the
        page can show it (the turn would refuse the same message, with no reply to a blocked
        sender). The checks are the turn's own (shared.identity, shared.budgets); the turn
        still makes them, so a change between here and the turn is still caught.
        """
        self.still_valid(claims)
        self.check_session(claims, frame.session)
        body = {
            "event_id": frame.event_id,
            "session": frame.session,
            "user": claims.user,  # the token's user, never the frame's
            "text": frame.text,
            "user_name": frame.user_name,
        }
        inbound = web.parse(claims.workspace, json.dumps(body).encode())
        workspace = self.backend.workspaces.get(claims.workspace) or new_workspace(claims.workspace)
        sender = resolve_sender(self.backend.identities, workspace, inbound, now=self.now())
        if sender.admission == "sender_refused":
            raise SenderRefused("this workspace does not accept messages from you")
        if sender.admitted:
            budget = TurnBudget(
                self.backend.budgets,
                claims.workspace,
                sender.user_id,
                workspace.budget,
                self.prices,
                self.now,
            )
            decision = budget.check()
            if decision.exhausted is not None:
                raise BudgetExhausted(decision.exhausted.message(decision.at))
        return self.ingress.lanes.submit(LaneItem(inbound=inbound))

    def replies(self, claims: BrowserClaims, session: str, after: int) -> list[OutboxEntry]:
        self.still_valid(claims)
        self.check_session(claims, session)
        return self.backend.outbox.read(claims.workspace, web.session_id_for(session), after_seq=after)

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

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from shared.backend import Backend
from shared.budgets import PriceTable
from shared.channels import web, web_tokens
from shared.channels.web_frames import (
    SendFrame,
    SessionForbidden,
    inbound_of,
)
from shared.channels.web_tokens import BrowserClaims
from shared.clock import utcnow
from shared.ingress import Ingress, check_id
from shared.ingress.admission import Admission
from shared.ingress.media import attach
from shared.models import OutboxEntry, new_workspace
from shared.ports import SubmitResult


# Frames are small: a message is at most MAX_TEXT_CHARS characters, 4 bytes each in UTF-8 at worst.
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
        inbound = inbound_of(frame, claims.workspace, claims.user)
        Admission(
            self.backend.workspaces, self.backend.identities, self.backend.budgets, self.prices, self.now
        ).check(inbound)
        if inbound.attachments:
            workspace = self.backend.workspaces.get(claims.workspace) or new_workspace(claims.workspace)
            inbound = attach(inbound, self.backend.media, workspace.media, self.backend.identities)
        result, _ = self.ingress.accept_verified(inbound)
        return result

    def replies(self, claims: BrowserClaims, session: str, after: int) -> list[OutboxEntry]:
        self.still_valid(claims)
        self.check_session(claims, session)
        return self.backend.outbox.read(claims.workspace, web.session_id_for(session), after_seq=after)

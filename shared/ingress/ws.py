"""The browser protocol on the cloud's WebSocket API: $connect, $disconnect and the client frames.

API Gateway holds the sockets and hands each event to functions/ws, which calls one method here;
every answer goes back to the browser as a frame posted through the management API (a route
response is not used: the turn's frames take the same path). The protocol is the one the local
gateway speaks (docs/web-channel.md, docs/web-streaming-cloud.md):

- connect with `?token=<browser token>`: the token is verified with its workspace's web secret (as
  a signed request is) and the connection recorded with the token's workspace, user, sessions and
  expiry (ports.Connections). A bad or expired token refuses the connection (401).
- `{"type": "send", "event_id", "session", "text"}`: the token's user (never the frame's) says
  `text` in `session`, which the token must allow; the message is queued through
  `Ingress.accept_verified`, the path POST /webhooks/web takes after its signature check, and the
  connection now listens to the session. Answer: `{"type": "accepted", "event_id", "session", "status"}`.
- `{"type": "resume", "session", "after": seq}`: the connection listens to the session, then gets
  the outbox's replies after `after` as `reply` frames; later ones arrive live (delta, reply).
- anything wrong: `{"type": "error", "code", "message"}` (token_expired, token_invalid,
  session_forbidden, bad_request, ...), the message ours, never an echo of the frame.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from pydantic import TypeAdapter, ValidationError

from shared.channels import web, web_tokens
from shared.channels.web_frames import (
    MAX_FRAME_BYTES,
    AuthFrame,
    ResumeFrame,
    SendFrame,
    SessionForbidden,
    accepted_frame,
    error_frame,
    inbound_of,
    parse_frame,
    reply_frame,
)
from shared.channels.web_socket import SessionSockets
from shared.errors import Forbidden, SigilError
from shared.ingress import Ingress, check_id
from shared.ingress.admission import Admission
from shared.ingress.media import attach
from shared.models import Identifier, InboundMessage, new_workspace
from shared.ports import Connections, MediaStore, WebConnection

log = logging.getLogger("sigil.ws")

# API Gateway closes a WebSocket connection after two hours, whatever happens on it.
MAX_CONNECTION_S: Final = 2 * 3600
# Replies a `resume` replays at most: a page that was away longer reads the rest through
# GET .../outbox, or resumes again from the last seq it got.
MAX_REPLAY: Final = 500


class OriginRefused(Forbidden):
    """A browser page on an origin the stack does not serve (`web_origin`): its handshake fails."""

    code = "origin_refused"


class ConnectionUnknown(web_tokens.TokenError):
    """A frame on a connection with no record: closed, or its record expired with its token."""


def _event_id_of(raw: str | bytes) -> str | None:
    """The event id of a refused frame, if it names a well-formed one: the page marks that message."""
    try:
        value = json.loads(raw).get("event_id") if len(raw) <= MAX_FRAME_BYTES else None
        return _EVENT_ID.validate_python(value)
    except (ValueError, AttributeError, ValidationError):
        return None


_EVENT_ID: TypeAdapter[str] = TypeAdapter(Identifier)


def allows(connection: WebConnection, session: str) -> bool:
    # The token's own rule (exact names and "prefix*" patterns), over the patterns kept at $connect.
    return any(web_tokens.pattern_allows(pattern, session) for pattern in connection.sessions)


@dataclass
class SocketFront:
    """What a browser connection may do, checked against the token it connected with."""

    ingress: Ingress
    connections: Connections
    sockets: SessionSockets
    clock: Callable[[], float] = time.time
    # None: no check before queueing (the turn still checks); the cloud's ws function has one
    # when it is given the memory table (shared.cloud.ws_front).
    admission: Admission | None = None
    # The page's origins (SIGIL_WEB_ORIGINS); empty: any. A browser token, not a cookie, is the
    # credential, so another site's page gains nothing it lacks the token for; the check keeps
    # pages the operator does not serve from using the API with tokens they were given.
    origins: tuple[str, ...] = ()
    # The media bucket's store (SIGIL_MEDIA_BUCKET), where the page's uploads are: a `send` naming
    # files is checked against it. None: a message with files is refused.
    media: MediaStore | None = None

    def connect(
        self, connection_id: str, token: str | None, *, origin: str | None = None
    ) -> WebConnection | None:
        """$connect: the token's claims become the connection's record; a TokenError refuses it.

        Without a token the connection is admitted unauthenticated (None): it may only send an
        `auth` frame, as the page does to keep its token out of URLs and access logs. A browser's
        `Origin` outside `origins` is refused (403) whatever the token.
        """
        if self.origins and origin is not None and origin.rstrip("/") not in self.origins:
            raise OriginRefused("this page's origin may not connect")
        if not token:
            return None
        return self._open(connection_id, token)

    def _open(self, connection_id: str, token: str) -> WebConnection:
        workspace = web_tokens.unverified_workspace(token)
        check_id(workspace, "workspace")
        # An unknown workspace (no secret, or one outside the function's policy) answers as a
        # bad signature does, so a probe can't tell workspaces apart.
        now = self.clock()
        claims = web_tokens.verify(self.ingress._web_secret(workspace), token, now=now, workspace=workspace)
        connection = WebConnection(
            connection_id=connection_id,
            workspace_id=claims.workspace,
            user=claims.user,
            sessions=list(claims.sessions),
            expires_at=claims.exp,
            ttl_at=min(claims.exp, int(now) + MAX_CONNECTION_S),
        )
        self.connections.open(connection)
        log.info(
            "web socket connected", extra={"workspace_id": claims.workspace, "connection_id": connection_id}
        )
        return connection

    def disconnect(self, connection_id: str) -> None:
        self.connections.close(connection_id)

    def message(self, connection_id: str, raw: str | bytes) -> None:
        """$default: one client frame, answered with frames posted to the connection."""
        event_id: str | None = None
        session: str | None = None
        try:
            frame = parse_frame(raw)
            if isinstance(frame, AuthFrame):
                self._auth(connection_id, frame)
                return
            connection = self._connection(connection_id)
            session = frame.session
            if isinstance(frame, SendFrame):
                event_id = frame.event_id
                self._send(connection, frame)
            else:
                self._resume(connection, frame)
        except SigilError as exc:
            event_id = event_id or _event_id_of(raw)
            extra = {k: v for k, v in (("event_id", event_id), ("session", session)) if v is not None}
            self.sockets.post_to(connection_id, error_frame(exc, **extra))
            if isinstance(exc, web_tokens.TokenError):
                # As the local gateway closes with 4401: a token that failed never gets a second
                # chance on this connection. The page reconnects with a new token.
                self.connections.close(connection_id)
                self.sockets.hang_up(connection_id)

    def _auth(self, connection_id: str, frame: AuthFrame) -> None:
        connection = self._open(connection_id, frame.token)
        ready = {
            "type": "ready",
            "workspace": connection.workspace_id,
            "user": connection.user,
            "sessions": connection.sessions,
            "exp": connection.expires_at,
        }
        self.sockets.post_to(connection_id, ready)

    def _connection(self, connection_id: str) -> WebConnection:
        connection = self.connections.get(connection_id)
        if connection is None:
            raise ConnectionUnknown("this connection is not open: reconnect with a token")
        # A connection outlives no token: each frame is refused once the token has expired.
        if self.clock() >= connection.expires_at:
            raise web_tokens.TokenExpired("the token has expired")
        return connection

    def _check_session(self, connection: WebConnection, session: str) -> None:
        if not allows(connection, session):
            raise SessionForbidden("this token does not cover that session")

    def _send(self, connection: WebConnection, frame: SendFrame) -> None:
        self._check_session(connection, frame.session)
        inbound = inbound_of(frame, connection.workspace_id, connection.user)
        if self.admission is not None:
            self.admission.check(inbound)
        if inbound.attachments:
            inbound = self._attach(inbound)
        # Listening before queueing: the turn's first delta can't come before the listener is there.
        self.connections.subscribe(connection, frame.session)
        result, _ = self.ingress.accept_verified(inbound)
        self.sockets.post_to(
            connection.connection_id, accepted_frame(frame.event_id, frame.session, result.status)
        )

    def _attach(self, inbound: InboundMessage) -> InboundMessage:
        # The workspace's limits and the sender's identity need the memory table (the admission's
        # stores); without it the default limits and the web user id itself.
        workspaces = self.admission.workspaces if self.admission is not None else None
        identities = self.admission.identities if self.admission is not None else None
        found = workspaces.get(inbound.workspace_id) if workspaces is not None else None
        limits = (found or new_workspace(inbound.workspace_id)).media
        return attach(inbound, self.media, limits, identities)

    def _resume(self, connection: WebConnection, frame: ResumeFrame) -> None:
        self._check_session(connection, frame.session)
        # Listening first, then reading: a reply stored in between is in the read, or posted
        # live, or both (the page keeps one per seq); never neither.
        self.connections.subscribe(connection, frame.session)
        after, sent = frame.after, 0
        session_id = web.session_id_for(frame.session)
        while sent < MAX_REPLAY:
            entries = self.ingress.outbox.read(
                connection.workspace_id, session_id, after_seq=after, limit=100
            )
            for entry in entries:
                if not self.sockets.post_to(connection.connection_id, reply_frame(frame.session, entry)):
                    return  # gone: the next connection resumes from what it has
                sent += 1
                after = entry.seq
            if len(entries) < 100:
                return

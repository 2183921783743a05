"""The local gateway's browser side: the chat page's WebSocket (/ws), its deltas, and CORS.

The protocol is shared.ingress.browser's (docs/web-channel.md); this module is its local
transport. Turns run in lane worker threads and publish their web deltas to a `DeltaHub`; each
connection's pump task forwards them, and reads the outbox (the source of truth) whenever a part
is final, on `resume`, and once a second in case a nudge was missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from shared.channels.web import WebDelta, session_id_for
from shared.channels.web_frames import (
    MAX_SUBSCRIPTIONS,
    AuthFrame,
    ResumeFrame,
    SendFrame,
    accepted_frame,
    delta_frame,
    dumps,
    error_frame,
    parse_frame,
    reply_frame,
)
from shared.channels.web_tokens import BrowserClaims, TokenError, TokenExpired
from shared.errors import BadRequest, SigilError
from shared.ingress.browser import BrowserIngress

log = logging.getLogger("sigil.gateway.ws")

OUTBOX_POLL_S = 1.0
AUTH_TIMEOUT_S = 10.0
# Parts streaming at once, across every session of this gateway (each holds its text so far).
MAX_INFLIGHT = 1000
# WebSocket close codes (4000-4999 are the application's): the page tells them apart.
CLOSE_TOKEN = 4401
CLOSE_ORIGIN = 4403
Key = tuple[str, str]  # (workspace_id, session_id)


class DeltaSubscriber:
    """One connection's inbox, fed from the turns' threads."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[WebDelta | ResumeFrame] = asyncio.Queue()

    def push(self, item: WebDelta) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: the connection is gone
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)


@dataclass
class DeltaHub:
    """The local DeltaSink: each session's live text, fanned out to the connections watching it."""

    _lock: threading.Lock = field(default_factory=threading.Lock)
    _subscribers: dict[Key, set[DeltaSubscriber]] = field(default_factory=dict)
    # The text streamed so far of each part not yet final, for a connection that joins mid-turn.
    _inflight: dict[tuple[str, str, str, int], WebDelta] = field(default_factory=dict)

    def publish(self, delta: WebDelta) -> None:
        key = (delta.workspace_id, delta.session_id)
        part = (*key, delta.turn_id, delta.part)
        with self._lock:
            if delta.final:
                self._inflight.pop(part, None)
            else:
                if part not in self._inflight and len(self._inflight) >= MAX_INFLIGHT:
                    # A part whose turn died before its final stays here; the oldest goes first.
                    del self._inflight[next(iter(self._inflight))]
                so_far = self._inflight.get(part)
                text = (so_far.text if so_far is not None else "")[: delta.offset] + delta.text
                self._inflight[part] = delta.model_copy(update={"offset": 0, "text": text})
            subscribers = list(self._subscribers.get(key, ()))
        for sub in subscribers:
            sub.push(delta)

    def subscribe(self, key: Key, sub: DeltaSubscriber) -> list[WebDelta]:
        """Watch a session; returns its parts in flight, each as one delta from offset 0."""
        with self._lock:
            self._subscribers.setdefault(key, set()).add(sub)
            return [d for p, d in self._inflight.items() if p[:2] == key]

    def unsubscribe(self, keys: Iterable[Key], sub: DeltaSubscriber) -> None:
        with self._lock:
            for key in keys:
                subs = self._subscribers.get(key)
                if subs is not None:
                    subs.discard(sub)
                    if not subs:
                        del self._subscribers[key]


def origin_allowed(origin: str | None, allowed: list[str]) -> bool:
    """A request without an Origin (curl, a server) is not a browser's: CORS does not apply."""
    return origin is None or origin.rstrip("/") in allowed


def cors_headers(origin: str | None, allowed: list[str]) -> dict[str, str]:
    if origin is None or origin.rstrip("/") not in allowed:
        return {}
    return {"Access-Control-Allow-Origin": origin.rstrip("/"), "Vary": "Origin"}


def preflight(request: Request, allowed: list[str]) -> Response:
    """OPTIONS on a web route: allowed for the page's origin only, never `*`."""
    headers = cors_headers(request.headers.get("origin"), allowed)
    if not headers:
        return Response(status_code=403, headers={"Vary": "Origin"})
    headers.update(
        {
            "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
            "Access-Control-Allow-Headers": (
                "Content-Type, X-Sigil-Timestamp, X-Sigil-Signature, Last-Event-ID"
            ),
            "Access-Control-Max-Age": "600",
        }
    )
    return Response(status_code=204, headers=headers)


@dataclass
class Connection:
    """One browser's WebSocket: authenticated once, then frames until either side closes."""

    ws: WebSocket
    browser: BrowserIngress
    hub: DeltaHub
    claims: BrowserClaims | None = None
    cursors: dict[str, int] = field(default_factory=dict)  # session → last seq sent
    _send_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def send(self, frame: dict[str, object]) -> None:
        async with self._send_lock:
            await self.ws.send_text(dumps(frame))

    async def run(self, allowed_origins: list[str]) -> None:
        if not origin_allowed(self.ws.headers.get("origin"), allowed_origins):
            # Before accept: the browser sees the handshake refused (a 403).
            await self.ws.close(code=CLOSE_ORIGIN)
            return
        await self.ws.accept()
        claims = await self._authenticate()
        if claims is None:
            return
        self.claims = claims
        sub = DeltaSubscriber(asyncio.get_running_loop())
        pump = asyncio.create_task(self._pump(sub))
        try:
            await self._read(claims, sub)
        except WebSocketDisconnect:
            pass
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump
            keys = [(claims.workspace, _session_id(s)) for s in self.cursors]
            self.hub.unsubscribe(keys, sub)

    async def _authenticate(self) -> BrowserClaims | None:
        """The token from ?token=, else from a first frame {"type": "auth", "token"}."""
        token = self.ws.query_params.get("token")
        try:
            if token is None:
                raw = await asyncio.wait_for(self._receive(), AUTH_TIMEOUT_S)
                try:
                    frame = json.loads(raw)
                except ValueError:
                    frame = None
                token = (
                    frame.get("token") if isinstance(frame, dict) and frame.get("type") == "auth" else None
                )
                if not isinstance(token, str):
                    raise BadRequest('the first frame must be {"type": "auth", "token": ...}')
            claims = await run_in_threadpool(self.browser.authenticate, token)
        except (SigilError, TimeoutError) as exc:
            err = exc if isinstance(exc, SigilError) else BadRequest("no token within 10 seconds")
            with contextlib.suppress(Exception):
                await self.send(error_frame(err))
                await self.ws.close(code=CLOSE_TOKEN)
            return None
        except WebSocketDisconnect:
            return None
        await self.send(
            {
                "type": "ready",
                "workspace": claims.workspace,
                "user": claims.user,
                "sessions": claims.sessions,
                "exp": claims.exp,
            }
        )
        return claims

    async def _receive(self) -> str:
        """The next frame's text; a binary frame is read as UTF-8 (and is a bad_request if not)."""
        message = await self.ws.receive()
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", 1000))
        if message.get("text") is not None:
            return str(message["text"])
        return bytes(message.get("bytes") or b"").decode("utf-8", errors="replace")

    async def _read(self, claims: BrowserClaims, sub: DeltaSubscriber) -> None:
        while True:
            raw = await self._receive()
            try:
                frame = parse_frame(raw)
                if isinstance(frame, AuthFrame):
                    # Locally the token is given once, as the connection opens; a page renews it
                    # by reconnecting.
                    raise BadRequest("this connection is already authenticated")
                if isinstance(frame, ResumeFrame):
                    await run_in_threadpool(self.browser.check_session, claims, frame.session)
                    sub.queue.put_nowait(frame)
                else:
                    await self._send_message(claims, frame)
            except TokenError as exc:
                await self.send(error_frame(exc))
                await self.ws.close(code=CLOSE_TOKEN)
                return
            except SigilError as exc:
                await self.send(error_frame(exc, **(_ids(raw) or {})))
            except Exception:  # one bad frame must not end the page's connection
                # Not SigilError: ours to fix, so logged in full; the page gets no internals.
                log.exception("web socket frame failed", extra={"workspace_id": claims.workspace})
                failed = SigilError("the message could not be handled; try again", code="internal_error")
                await self.send(error_frame(failed, **(_ids(raw) or {})))

    async def _send_message(self, claims: BrowserClaims, frame: SendFrame) -> None:
        result = await run_in_threadpool(self.browser.send, claims, frame)
        await self.send(accepted_frame(frame.event_id, frame.session, result.status))

    async def _pump(self, sub: DeltaSubscriber) -> None:
        """Deltas and outbox replies, in order, from this task alone (so no reply goes out twice)."""
        assert self.claims is not None
        claims = self.claims
        while True:
            try:
                item = await asyncio.wait_for(sub.queue.get(), OUTBOX_POLL_S)
            except TimeoutError:
                if self.browser.clock() >= claims.exp:
                    await self.send(error_frame(TokenExpired("the token has expired")))
                    await self.ws.close(code=CLOSE_TOKEN)
                    return
                for session in list(self.cursors):
                    await self._replies(session)
                continue
            if isinstance(item, ResumeFrame):
                self._follow(claims, item.session, sub)
                self.cursors[item.session] = item.after
                inflight = self.hub.subscribe((claims.workspace, _session_id(item.session)), sub)
                await self._replies(item.session)
                for delta in inflight:
                    await self.send(delta_frame(delta))
            elif item.session in self.cursors:
                if item.final:
                    await self._replies(item.session)
                else:
                    await self.send(delta_frame(item))

    def _follow(self, claims: BrowserClaims, session: str, sub: DeltaSubscriber) -> None:
        """Make room for one more followed session: the cloud's cap, with its rule (oldest goes)."""
        if session in self.cursors or len(self.cursors) < MAX_SUBSCRIPTIONS:
            return
        oldest = next(iter(self.cursors))
        del self.cursors[oldest]
        self.hub.unsubscribe([(claims.workspace, _session_id(oldest))], sub)

    async def _replies(self, session: str) -> None:
        assert self.claims is not None
        try:
            entries = await run_in_threadpool(
                self.browser.replies, self.claims, session, self.cursors[session]
            )
        except TokenError:
            return  # the expiry is told once, by the pump's timer
        for entry in entries:
            await self.send(reply_frame(session, entry))
            self.cursors[session] = entry.seq


def _session_id(session: str) -> str:
    return session_id_for(session)


def _ids(raw: str) -> dict[str, object] | None:
    """The event_id and session of a refused frame, when it has them, so the page knows which."""
    try:
        frame = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(frame, dict):
        return None
    return {k: v for k in ("event_id", "session") if isinstance(v := frame.get(k), str) and len(v) <= 128}


class CorsMiddleware:
    """Access-Control-Allow-Origin on the web routes' answers, for the page's origins only.

    Pure ASGI (no response buffering), so the /stream route's events still flow as they come.
    """

    PATHS = ("/webhooks/web/", "/sessions/")

    def __init__(self, app: ASGIApp, origins: Callable[[], list[str]]) -> None:
        self.app = app
        self.origins = origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.PATHS):
            await self.app(scope, receive, send)
            return
        origin = Headers(scope=scope).get("origin")
        extra = cors_headers(origin, self.origins())
        if not extra:
            await self.app(scope, receive, send)
            return

        async def with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in extra.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, with_cors)

"""The web channel's replies over the cloud's WebSocket API: frames posted to the session's sockets.

The outbox stays the source of truth. A reply part is written to the outbox first and only then
posted as a `reply` frame; a post that fails (a browser gone, a throttle, an outage) loses
nothing, since a page that reconnects sends `resume` with the last seq it has and reads the rest
from the outbox. Deltas are a live preview only, posted while the model streams (already
redacted: shared.agent.reply.redacted), never stored.

Deltas are coalesced in time and posted as increments, so the bytes a reply posts grow with its
length, not with its square (API Gateway bills a post per 32 KB): a part posts at most once per
DELTA_INTERVAL_S (the deltas in between ride on the next post; the `reply` frame brings whatever
the last one left out), and each connection gets what it lacks, from the offset it has. A
connection this container has not posted the part to yet (one that joined mid-reply), or whose
last post failed, or a part whose text started over, gets the whole text from offset 0.

The frames are the browser protocol's (docs/web-channel.md, docs/web-streaming-cloud.md):

    {"type": "delta", "session", "turn_id", "part", "in_reply_to", "offset", "text"}
    {"type": "reply", "session", "seq", "turn_id", "part", "text", "final", "in_reply_to", "created_at"}
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cachetools import LRUCache

from shared.channels.senders import OutboxSender
from shared.channels.web import WebDelta
from shared.channels.web_frames import delta_frame, reply_frame
from shared.models import OutboundMessage, OutboxEntry
from shared.ports import ConnectionPoster, Connections, Outbox

log = logging.getLogger("sigil.web_socket")

# API Gateway takes frames of up to 128 KB; a delta above this waits for its reply frame.
MAX_DELTA_BYTES = 96 * 1024
# How long a streaming part reuses the session's listeners before reading them again: one Query
# per couple of seconds of deltas instead of one per delta. A browser that starts listening in
# between gets the deltas after that, and the reply frame (whose listeners are always read) anyway.
LISTENERS_TTL_S = 2.0
# At most one post of a streaming part per this many seconds: a redacted update comes every 64
# characters, a few dozen a second from a fast model, and a page reads a few a second.
DELTA_INTERVAL_S = 0.25


@dataclass
class _Part:
    """A streaming part: its text so far and how much of it each connection has."""

    text: str = ""
    # Bumped when the text starts over: a connection's offset into the old text means nothing.
    generation: int = 0
    posted_at: float | None = None  # monotonic
    # connection id -> (generation, characters) the connection has of the part
    sent: dict[str, tuple[int, int]] = field(default_factory=dict)


def dumps(frame: dict[str, object]) -> bytes:
    return json.dumps(frame, ensure_ascii=False, separators=(",", ":")).encode()


class SessionSockets:
    """Posts frames to every connection listening to a web session; forgets the ones found gone.

    Best effort by design: a failed post is logged and the turn goes on (the outbox has the reply).
    It is also the `DeltaSink` of the web channel's OutboxSender: deltas go out as they come.
    """

    def __init__(
        self,
        connections: Connections,
        poster: ConnectionPoster,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.connections = connections
        self.poster = poster
        self._clock = clock
        # The parts being streamed; a part whose turn died is dropped with the oldest (a container
        # runs one batch at a time, at most ten turns at once, so a handful is plenty).
        self._parts: LRUCache[tuple[str, str, int], _Part] = LRUCache(64)
        # (workspace, session) → (read at, listeners), for deltas only; monotonic, not `clock`.
        self._listeners: LRUCache[tuple[str, str], tuple[float, list[str]]] = LRUCache(64)
        self._monotonic = monotonic  # the delta interval and the listeners' age
        # A batch's sessions stream from parallel threads (shared.agent.batch); the network posts
        # are made outside it.
        self._lock = threading.Lock()

    def publish(self, delta: WebDelta) -> None:
        key = (delta.workspace_id, delta.turn_id, delta.part)
        with self._lock:
            if delta.final:
                self._parts.pop(key, None)
                return  # the part's `reply` frame, posted after the outbox write, ends it
            part = self._parts.get(key) or _Part()
            if delta.offset < len(part.text):
                part.generation += 1  # the text started over (the loop's next model call)
            part.text = part.text[: delta.offset] + delta.text
            self._parts[key] = part
            now = self._monotonic()
            if part.posted_at is not None and now - part.posted_at < DELTA_INTERVAL_S:
                return  # rides on the next post, or on the reply frame
            if len(part.text.encode()) > MAX_DELTA_BYTES:
                return  # past what one frame may carry: the reply frame brings the whole text
            part.posted_at = now
            text, generation = part.text, part.generation
        for connection_id in self._listening(delta.workspace_id, delta.session):
            with self._lock:
                have_generation, have = part.sent.get(connection_id, (-1, 0))
                offset = have if have_generation == generation and have <= len(text) else 0
                if offset == len(text):
                    continue
            frame = delta_frame(delta.model_copy(update={"offset": offset, "text": text[offset:]}))
            posted = self.post_to(connection_id, frame)
            with self._lock:
                if posted:
                    part.sent[connection_id] = (generation, len(text))
                else:
                    part.sent.pop(connection_id, None)  # the next post, if any, is whole

    def post(self, workspace_id: str, session: str, frame: dict[str, object]) -> int:
        """Post `frame` to the session's listeners, read now; returns to how many it went."""
        listeners = self._listening(workspace_id, session, fresh=True)
        return sum(self.post_to(connection_id, frame) for connection_id in listeners)

    def _listening(self, workspace_id: str, session: str, *, fresh: bool = False) -> list[str]:
        """The session's listeners; unless `fresh` (deltas), as read up to LISTENERS_TTL_S ago."""
        key = (workspace_id, session)
        with self._lock:
            cached = self._listeners.get(key)
        if not fresh and cached is not None and self._monotonic() - cached[0] < LISTENERS_TTL_S:
            return list(cached[1])
        try:
            listeners = self.connections.listeners(workspace_id, session, now=int(self._clock()))
        except Exception as exc:  # noqa: BLE001 -- a live view failing must never fail the turn
            error = type(exc).__name__
            log.warning("web listeners unreadable", extra={"workspace_id": workspace_id, "error": error})
            return []
        with self._lock:
            self._listeners[key] = (self._monotonic(), listeners)
        return list(listeners)

    def hang_up(self, connection_id: str) -> None:
        try:
            self.poster.hang_up(connection_id)
        except Exception as exc:  # noqa: BLE001 -- API Gateway closes an idle connection anyway
            log.warning(
                "web connection not closed",
                extra={"connection_id": connection_id, "error": type(exc).__name__},
            )

    def post_to(self, connection_id: str, frame: dict[str, object]) -> bool:
        try:
            if self.poster.post(connection_id, dumps(frame)):
                return True
            log.info("web connection gone", extra={"connection_id": connection_id})
            with self._lock:
                for _, listeners in list(self._listeners.values()):
                    if connection_id in listeners:
                        listeners.remove(connection_id)
            self.connections.close(connection_id)
        except Exception as exc:  # noqa: BLE001 -- the outbox has the reply; the page resumes from it
            log.warning(
                "web frame not posted",
                extra={
                    "connection_id": connection_id,
                    "frame": frame.get("type"),
                    "error": type(exc).__name__,
                },
            )
        return False


class WebSocketSender(OutboxSender):
    """The web channel's sender when the WebSocket API is deployed: the outbox, then the sockets.

    Deltas reach the sockets through OutboxSender's delta sink (SessionSockets.publish); each part
    written to the outbox is then posted as a `reply` frame with the seq it was stored at.
    """

    def __init__(self, outbox: Outbox, sockets: SessionSockets) -> None:
        super().__init__(outbox, sockets)
        self.sockets = sockets

    def _append(self, message: OutboundMessage) -> None:
        entry = self.outbox.append(message)
        if entry is None:
            # Stored by an earlier attempt of this turn, which may have died before posting: post
            # what the outbox holds for this part (a page drops a seq it already has).
            entry = self._stored(message)
            if entry is None:
                return
        self.sockets.post(message.workspace_id, message.chat_id, reply_frame(message.chat_id, entry))

    def _stored(self, message: OutboundMessage) -> OutboxEntry | None:
        # The part is at message.seq or just after it (ports.Outbox.append): a short read finds it.
        for entry in self.outbox.read(
            message.workspace_id, message.session_id, after_seq=message.seq - 1, limit=10
        ):
            if (entry.message.turn_id, entry.message.part) == (message.turn_id, message.part):
                return entry
        return None

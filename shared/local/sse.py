"""The local gateway's server-sent-events stream of one web session (GET .../stream).

Two kinds of event, in the order a reader needs them (docs/web-channel.md, "The event stream"):

- `reply`, with `id: {seq}`: an outbox entry, the source of truth; `Last-Event-ID` resumes after it.
- `delta`, without an id: the reply being written grew. The same redacted deltas the chat page's
  WebSocket gets, from the same hub (shared.local.web_socket.DeltaHub) and with the same fields as
  its `delta` frame (shared.channels.web_frames.delta_frame), so an id only ever names a stored
  reply and a reconnect never resumes "after" a preview.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from shared.channels.web import WebDelta
from shared.channels.web_frames import delta_frame
from shared.local.web_socket import DeltaHub, DeltaSubscriber, Key
from shared.models import OutboxEntry
from shared.serde import to_jsonable

SSE_POLL_S = 0.1
SSE_HEARTBEAT_S = 15.0

ReadOutbox = Callable[[int], list[OutboxEntry]]  # the session's entries after a seq


def reply_event(entry: OutboxEntry) -> bytes:
    data = json.dumps({"seq": entry.seq, **to_jsonable(entry.message)})
    return f"id: {entry.seq}\nevent: reply\ndata: {data}\n\n".encode()


def delta_event(delta: WebDelta) -> bytes:
    # The WebSocket frame's fields; its "type" is this event's name.
    fields = {k: v for k, v in delta_frame(delta).items() if k != "type"}
    return f"event: delta\ndata: {json.dumps(fields)}\n\n".encode()


async def session_events(
    request: Request, *, read: ReadOutbox, hub: DeltaHub, key: Key, after: int, timeout: float
) -> AsyncIterator[bytes]:
    """One session's replies after `after` and its live deltas, until `timeout` or a hang-up.

    The outbox is read every SSE_POLL_S (as before deltas existed) and at once when a part is
    final, so a reply never waits on a delta. A delta of a part whose reply this stream has sent
    is dropped: the reply supersedes it.
    """
    loop = asyncio.get_running_loop()
    sub = DeltaSubscriber(loop)
    # Subscribed before the first read: a part that finishes in between is in that read.
    pending = hub.subscribe(key, sub)  # the parts in flight, each as one delta from offset 0
    committed: set[tuple[str, int]] = set()
    try:
        deadline = loop.time() + timeout
        last_beat = last_read = loop.time()
        read_due = True
        while loop.time() < deadline and not await request.is_disconnected():
            if read_due or loop.time() - last_read >= SSE_POLL_S:
                last_read = loop.time()
                for entry in await run_in_threadpool(read, after):
                    after = entry.seq
                    committed.add((entry.message.turn_id, entry.message.part))
                    yield reply_event(entry)
            for delta in pending:
                if not delta.final and (delta.turn_id, delta.part) not in committed:
                    yield delta_event(delta)
            if loop.time() - last_beat > SSE_HEARTBEAT_S:
                last_beat = loop.time()
                yield b": keep-alive\n\n"
            pending = await _next_deltas(sub, SSE_POLL_S)
            # A final delta marks its reply's outbox write: read it now rather than at the next poll.
            read_due = any(d.final for d in pending)
    finally:
        hub.unsubscribe([key], sub)


async def _next_deltas(sub: DeltaSubscriber, wait_s: float) -> list[WebDelta]:
    """What the hub has pushed: waits up to `wait_s` for the first, then takes all that are queued."""
    try:
        items = [await asyncio.wait_for(sub.queue.get(), wait_s)]
    except TimeoutError:
        return []
    while not sub.queue.empty():
        items.append(sub.queue.get_nowait())
    return [d for d in items if isinstance(d, WebDelta)]

"""Slow and hanging streams for the fake model servers (tests.support.fake_openai, fake_anthropic).

Real slowness on the wire: the server waits between the HTTP chunks it writes, or stops writing
and holds the connection open, and notes what it saw (how many events went out, whether the client
hung up). Three ways to ask for it, so a test, a benchmark or anything that only controls the
request can:

- scripted, for the next request: `fake.pace(1.0)`, `fake.hang(after_events=1)`;
- a request header: `x-fake-pace-ms: 1000`, `x-fake-hang: <events before the hang>`
  (`x-fake-hang: headers` holds back even the response's headers);
- a marker in the last user message: `[fake:pace=1000]`, `[fake:hang]`, `[fake:hang=3]`,
  `[fake:hang=headers]` (what a chaos benchmark can send through the gateway's front door).

Every paced or hanging stream's StreamLog is in `fake.streams`, in arrival order. A hang lasts
until the client closes the connection or the fake is closed.
"""

from __future__ import annotations

import re
import select
import socket
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

_MARKER = re.compile(r"\[fake:(pace|hang)(?:=(\w+))?\]")

# How often a held connection is checked for the client hanging up.
POLL_S = 0.02


@dataclass(frozen=True)
class Pacing:
    """`interval_s` before each event after the first; `hang_after` events, then nothing (None:
    every event); `hang_after=-1` holds back the response's headers too."""

    interval_s: float = 0.0
    hang_after: int | None = None


@dataclass
class StreamLog:
    """What the server saw of one paced or hanging response."""

    pacing: Pacing
    sent: int = 0  # events written and flushed
    finished: bool = False  # the whole stream went out
    client_closed: bool = False  # the client hung up before the end
    done: threading.Event = field(default_factory=threading.Event)  # the server stopped writing


def requested_pacing(headers: Mapping[str, str], last_user_text: str) -> Pacing | None:
    """The pacing a request asks for by header or by marker, if any."""
    pace_ms: str | None = headers.get("x-fake-pace-ms")
    hang: str | None = headers.get("x-fake-hang")
    for kind, value in _MARKER.findall(last_user_text):
        if kind == "pace" and value:
            pace_ms = value
        elif kind == "hang":
            hang = value or "1"
    if pace_ms is None and hang is None:
        return None
    hang_after = None if hang is None else (-1 if hang == "headers" else int(hang))
    return Pacing(interval_s=int(pace_ms or 0) / 1000, hang_after=hang_after)


def send_paced(
    handler: BaseHTTPRequestHandler,
    headers: Mapping[str, str],
    events: Iterator[bytes],
    pacing: Pacing,
    log: StreamLog,
    closing: threading.Event,
) -> None:
    """A 200 chunked stream of `events` at `pacing`'s pace, noting on `log` what happened."""
    handler.close_connection = True  # a held or cut connection is never reused
    try:
        if pacing.hang_after == -1:
            _hold(handler, log, closing)
            return
        handler.send_response(200)
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.flush()
        for index, event in enumerate(events):
            if pacing.hang_after is not None and index >= pacing.hang_after:
                _hold(handler, log, closing)
                return
            if index and pacing.interval_s and closing.wait(pacing.interval_s):
                return
            if _client_gone(handler):
                log.client_closed = True
                return
            handler.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            handler.wfile.flush()
            log.sent += 1
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()
        log.finished = True
    except (BrokenPipeError, ConnectionResetError):
        log.client_closed = True
    finally:
        log.done.set()


def _hold(handler: BaseHTTPRequestHandler, log: StreamLog, closing: threading.Event) -> None:
    while not closing.wait(POLL_S):
        if _client_gone(handler):
            log.client_closed = True
            return


def _client_gone(handler: BaseHTTPRequestHandler) -> bool:
    """The client closed its end: the socket reads as at its end (or reset)."""
    conn: socket.socket = handler.connection
    readable, _, _ = select.select([conn], [], [], 0)
    if not readable:
        return False
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except (ConnectionResetError, OSError):
        return True

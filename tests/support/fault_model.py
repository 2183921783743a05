"""The fake OpenAI server with faults a real provider shows, chosen by a marker in the message.

A user message ending in `fault=<name>` gets that fault on its first deliveries and the ordinary
echo afterwards (so a retried turn can succeed); everything else is echoed as by FakeOpenAI.
The faults are made on the wire, the way a provider makes them, never inside the gateway:

    429      one HTTP 429 (rate limited), which the SDK retries by itself
    500      HTTP 500 on three tries in a row: more than the SDK's two retries, so the turn fails
             once and the queue redelivers it
    poison   HTTP 500 on every try: the turn is dead-lettered, and its user gets the apology
    hang     first try: no answer at all for `hang_s`; second try: the stream's first chunk, then
             silence for `hang_s`. Both outlast the client's timeout (set it well below hang_s):
             the first is retried by the SDK, the second fails the turn
    drip     first try: the stream's first chunk again and again, one every `drip_s` (below the
             client's per-chunk timeout, so only an overall deadline on the call can end it),
             for `hang_s`
    cut      the stream's first chunks, then the connection is closed mid-stream (no terminating
             chunk, no [DONE]): the turn fails and is redelivered
    kill     first try: `on_kill(client_address)` is called while the request is held open (the
             caller kills the process that sent it), then the connection is dropped
    conflict first try: `on_conflict(text)` is called before the answer (the caller makes a
             second writer change the session meanwhile), then the ordinary answer

An outage is switched rather than marked: while `model.down` is True every request gets HTTP 500
(counted as injected["down"]), whatever its message, until the test sets it back to False.

    with FaultModel(hang_s=30, on_kill=..., on_conflict=...) as model:
        ...  # OPENAI_BASE_URL=model.base_url
        model.injected  # {"429": 12, "hang": 10, ...}: how many faults were really made

A subclass rather than more modes in fake_openai.py: its scripting is per request in arrival
order, which concurrent sessions cannot use; these faults follow the message wherever and
whenever it is retried.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.support.consolidation import is_consolidation
from tests.support.fake_openai import (
    FakeOpenAI,
    Json,
    Responder,
    _Failure,
    _Handler,
    _Response,
    echo_last_user,
)

_MARKER = re.compile(r"fault=(\w+)\s*$")
# How many tries of a message get its fault (the rest are answered normally).
_FAULTY_TRIES = {
    "429": 1,
    "500": 3,
    "poison": 1_000_000,
    "hang": 2,
    "drip": 1,
    "cut": 1,
    "kill": 1,
    "conflict": 1,
}


class _Request(threading.local):
    """The request the current handler thread serves (its fault and who sent it)."""

    fault: str | None = None
    attempt: int = 0
    client: tuple[str, int] = ("", 0)


class FaultModel(FakeOpenAI):
    def __init__(
        self,
        responder: Responder = echo_last_user,
        *,
        hang_s: float = 30.0,
        drip_s: float = 1.0,
        on_kill: Callable[[tuple[str, int]], bool] | None = None,
        on_conflict: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(responder)
        self.hang_s = hang_s
        self.drip_s = drip_s
        self.on_kill = on_kill
        self.on_conflict = on_conflict
        self.tries: Counter[str] = Counter()  # per message text, every request that carried it
        self.injected: Counter[str] = Counter()  # per fault, how many were really made
        self.callback_errors: list[str] = []
        # Drips whose client hung up before the drip ended: cut by the call's overall deadline.
        self.drips_cut = 0
        self.down = False  # an outage of the whole model, switched by the test
        self._request = _Request()
        self._closing = threading.Event()
        self._server.RequestHandlerClass = _FaultHandler
        # A client killed mid-request (the point of `kill`) breaks the pipe we answer on; that is
        # expected here, and the server's traceback for it would only bury the bench's output.
        self._server.handle_error = lambda request, client_address: None  # type: ignore[method-assign]

    def close(self) -> None:
        self._closing.set()  # hung handlers stop waiting
        super().close()

    def _next(self, body: Json, headers: dict[str, str]) -> _Response:
        response = super()._next(body, headers)  # records the request
        if self.down:
            with self._lock:
                self.injected["down"] += 1
            self._request.fault = None
            # A pair, as FakeOpenAI._next answers: the response and no pacing.
            failure = _Failure(500, "The server had an error while processing your request.", None, {})
            return (failure, None)  # type: ignore[return-value]
        if is_consolidation(body):
            # Per-turn extraction quotes the turns' words, markers and all, but is not a turn:
            # it is answered plainly and counted nowhere.
            return response
        text, marked = self.marked(body)
        with self._lock:
            self.tries[text] += 1
            attempt = self.tries[text]
        fault = marked if marked and attempt <= _FAULTY_TRIES.get(marked, 0) else None
        self._request.fault, self._request.attempt = fault, attempt
        if fault is None:
            return response
        with self._lock:
            self.injected[fault] += 1
        if fault == "429":
            return _Failure(
                429, "Rate limit reached for requests", "rate_limit_exceeded", {"retry-after-ms": "1"}
            )
        if fault in ("500", "poison"):
            return _Failure(500, "The server had an error while processing your request.", None, {})
        if fault == "hang" and attempt == 1:
            self._hang()  # before any byte of the answer
        elif fault == "kill" and not self._call(self.on_kill, self._request.client):
            # Its sender was already gone (killed with another turn): the next try is killed instead.
            with self._lock:
                self.tries[text] -= 1
                self.injected[fault] -= 1
            self._request.fault = None
        elif fault == "conflict":
            self._call(self.on_conflict, text)
        return response

    def marked(self, body: Json) -> tuple[str, str | None]:
        """What identifies this request across its retries (the text its tries are counted by),
        and the fault it is marked with: here the last user message and its `fault=<name>`; a
        subclass may mark requests another way (bench/chaos_tasks.py marks a task's model calls)."""
        text = echo_last_user(body)
        found = _MARKER.search(text)
        return text, found.group(1) if found else None

    def _call(self, callback: Callable[[Any], bool | None] | None, arg: Any) -> bool:
        if callback is None:
            return False
        try:
            return callback(arg) is not False
        except Exception as exc:  # reported by the caller; the request goes on
            self.callback_errors.append(f"{type(exc).__name__}: {exc}")
            return False

    def _hang(self) -> None:
        self._closing.wait(self.hang_s)


class _FaultHandler(_Handler):
    def do_POST(self) -> None:
        fake = self.server.fake  # type: ignore[attr-defined]
        fake._request.fault = None
        fake._request.client = self.client_address
        super().do_POST()
        if fake._request.fault == "kill":
            self.close_connection = True

    def _stream(self, events: Iterator[bytes]) -> None:
        fake: FaultModel = self.server.fake  # type: ignore[attr-defined]
        fault, attempt = fake._request.fault, fake._request.attempt
        if fault == "kill":
            # Its client was killed while we held the request: nothing to answer.
            self._drop()
            return
        if fault == "drip":
            self.send_response(200)
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            first = next(iter(events))
            ends = time.monotonic() + fake.hang_s
            try:
                while time.monotonic() < ends and not fake._closing.is_set():
                    self.wfile.write(f"{len(first):x}\r\n".encode() + first + b"\r\n")
                    self.wfile.flush()
                    fake._closing.wait(fake.drip_s)
            except OSError:  # the client hung up: what its deadline is for
                with fake._lock:
                    fake.drips_cut += 1
            self._drop()
            return
        if fault == "cut" or (fault == "hang" and attempt == 2):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for event in list(events)[: 2 if fault == "cut" else 1]:
                self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                self.wfile.flush()
            if fault == "hang":
                fake._hang()
            self._drop()
            return
        super()._stream(events)

    def _drop(self) -> None:
        """Close the connection abruptly, as a proxy or a crashed server does mid-answer."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


def client_pid(client: tuple[str, int], candidates: list[int]) -> int | None:
    """The process (among `candidates`) holding the TCP socket whose local end is `client`.

    Linux only: the socket's inode from /proc/net/tcp, then the process with a descriptor on it.
    """
    port = f"{client[1]:04X}"
    inode = None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[1].rsplit(":", 1)[1] == port and fields[9] != "0":
                    inode = fields[9]
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for pid in candidates:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    if fd.readlink().as_posix() == target:
                        return pid
    return None

"""A TCP proxy that holds every response back for a while: any local server, made slow on the wire.

Put it in front of a fake (the embeddings server, the platforms, osmem-server) and point the
client under test at `proxy.origin`: the request goes through at once, and the server's answer
reaches the client `delay_s` later, so the client waits on a real socket as it would on a slow
service. Each connection's Hold notes whether the client hung up before the answer was let
through (`cut`), and `done` is set once the proxy stopped serving it. `hold="request"` holds the
request back instead (a server slow to take it): a client that gives up first never reaches the
server at all. `delay_s` may be changed at any time: each request is held for the value then.

    with FakeOpenAIEmbeddings() as upstream, SlowProxy(upstream.origin, delay_s=6) as slow:
        OpenAIEmbedder(..., base_url=f"{slow.origin}/v1")
"""

from __future__ import annotations

import select
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Literal, Self
from urllib.parse import urlsplit

POLL_S = 0.02  # how often a held connection is checked for the client hanging up
CHUNK = 65536


@dataclass
class Hold:
    """What the proxy saw of one connection."""

    cut: bool = False  # the client hung up while its answer was held back
    forwarded: bool = False  # the answer was let through
    done: threading.Event = field(default_factory=threading.Event)


class SlowProxy:
    def __init__(
        self,
        upstream: str,
        *,
        delay_s: float,
        hold: Literal["answer", "request"] = "answer",
        host: str = "127.0.0.1",
    ) -> None:
        parts = urlsplit(upstream)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"the upstream needs a host and a port: {upstream!r}")
        self.upstream = (parts.hostname, parts.port)
        self.delay_s = delay_s
        self.hold = hold
        self.holds: list[Hold] = []
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._listener = socket.create_server((host, 0))
        self._threads: list[threading.Thread] = []

    @property
    def origin(self) -> str:
        host, port = self._listener.getsockname()[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Self:
        self._spawn(self._accept)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closing.set()
        self._listener.close()
        for thread in list(self._threads):
            thread.join(timeout=5)

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._closing.is_set():
            ready, _, _ = select.select([self._listener], [], [], POLL_S)
            if not ready:
                continue
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            hold = Hold()
            with self._lock:
                self.holds.append(hold)
            self._spawn(self._serve, client, hold)

    def _serve(self, client: socket.socket, hold: Hold) -> None:
        try:
            with client, socket.create_connection(self.upstream) as server:
                self._pump(client, server, hold)
        except OSError:
            pass  # a side hung up mid-transfer: the connection is over either way
        finally:
            hold.done.set()

    def _pump(self, client: socket.socket, server: socket.socket, hold: Hold) -> None:
        """Both ways, one of them (`self.hold`) held back `delay_s` from the start of each request
        (a hang-up meanwhile ends it: `cut`)."""
        release = time.monotonic() + self.delay_s
        held = b""
        holding_answers = self.hold == "answer"
        sources = [client, server]
        while not self._closing.is_set():
            ready, _, _ = select.select(sources, [], [], POLL_S)
            if client in ready:
                data = client.recv(CHUNK)
                if not data:
                    hold.cut = bool(held) or not hold.forwarded
                    return
                if not held:
                    release = time.monotonic() + self.delay_s  # a new request: held from now
                if holding_answers:
                    server.sendall(data)
                else:
                    held += data
            if server in ready:
                data = server.recv(CHUNK)
                if not data:
                    sources.remove(server)  # the server is done: what it sent may still be held
                elif holding_answers:
                    held += data
                else:
                    client.sendall(data)
            if held and time.monotonic() >= release:
                hold.forwarded = True  # before the other side can act on it and a test look
                (client if holding_answers else server).sendall(held)
                held = b""
            if server not in sources and not held:
                return

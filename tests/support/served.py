"""The lifecycle the fake servers share: served on a daemon thread, closed with everything they hold."""

from __future__ import annotations

import sys
import threading
from http.server import ThreadingHTTPServer
from typing import Self


class FakeHTTPServer(ThreadingHTTPServer):
    """The fakes' server: a client hanging up on a kept-alive connection is not an error.

    socketserver prints a traceback to sys.stderr for it, and a command under test whose stderr is
    captured (typer's CliRunner) would then show the fake's noise as its own output. Anything else
    still prints, so a broken fake is not silenced.
    """

    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


class Served:
    """Start, close and `with` for a fake whose `_server` is set by its constructor.

    `_closing`, when a fake has one, is set first on close: it ends every hang and pause the fake
    is holding a connection in, so shutdown does not wait on them.
    """

    _server: ThreadingHTTPServer
    _thread: threading.Thread | None = None
    _closing: threading.Event | None = None

    @property
    def origin(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Self:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        if self._closing is not None:
            self._closing.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

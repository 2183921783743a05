"""API Gateway's WebSocket management API, as `sigil dev --aws` (and the tests) stand it in.

The agent and the ws function post frames with boto3's `apigatewaymanagementapi` client to
`{SIGIL_WS_ENDPOINT}/@connections/{id}`; this server answers those requests as API Gateway does:
200 for an open connection (the frame goes to its `deliver` callback: the local WebSocket front's
socket, or a test's list), 410 GoneException for one that is not open, which is what tells the
caller to forget it. moto's own implementation accepts any id and never answers 410.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

Deliver = Callable[[bytes], None]
HangUp = Callable[[], None]
_PATH = re.compile(r"^(?:/[^/]+)?/@connections/(?P<id>[^/?]+)$")


class ManagementApi:
    """A threaded HTTP server on 127.0.0.1; `endpoint` is what SIGIL_WS_ENDPOINT is set to."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, stage: str = "local") -> None:
        self._open: dict[str, Deliver] = {}
        self._hang_ups: dict[str, HangUp] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None
        self.stage = stage

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/{self.stage}"

    def open(self, connection_id: str, deliver: Deliver, hang_up: HangUp | None = None) -> None:
        """`deliver` takes each frame posted to the connection; `hang_up` closes the socket when
        the server deletes the connection (DELETE @connections/{id})."""
        with self._lock:
            self._open[connection_id] = deliver
            if hang_up is not None:
                self._hang_ups[connection_id] = hang_up

    def close(self, connection_id: str) -> None:
        """The browser left: later posts answer 410."""
        with self._lock:
            self._open.pop(connection_id, None)
            self._hang_ups.pop(connection_id, None)

    def hang_up(self, connection_id: str) -> None:
        """DELETE @connections/{id}: the server closes the connection."""
        with self._lock:
            hang_up = self._hang_ups.get(connection_id)
        self.close(connection_id)
        if hang_up is not None:
            hang_up()

    def deliver(self, connection_id: str, data: bytes) -> bool:
        with self._lock:
            target = self._open.get(connection_id)
        if target is None:
            return False
        target(data)
        return True

    def start(self) -> ManagementApi:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> ManagementApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _handler_for(api: ManagementApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return None

        def _connection(self) -> str | None:
            match = _PATH.match(self.path)
            # boto3 percent-encodes the id in the path ("=" of a base64 id is "%3D").
            return None if match is None else unquote(match.group("id"))

        def _answer(self, status: int, body: dict[str, Any] | None = None, error: str | None = None) -> None:
            data = json.dumps(body or {}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            if error is not None:
                # botocore reads a rest-json error's code from this header.
                self.send_header("x-amzn-ErrorType", error)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            connection_id = self._connection()
            data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if connection_id is None:
                self._answer(404, {"message": "Not Found"}, "NotFoundException")
            elif api.deliver(connection_id, data):
                self._answer(200)
            else:
                self._answer(410, {"message": "Gone"}, "GoneException")

        def do_DELETE(self) -> None:
            connection_id = self._connection()
            if connection_id is None:
                self._answer(404, {"message": "Not Found"}, "NotFoundException")
                return
            api.hang_up(connection_id)
            self._answer(200)

    return Handler

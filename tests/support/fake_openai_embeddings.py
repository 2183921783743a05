"""A local server speaking OpenAI's embeddings wire format (POST /v1/embeddings), for the real SDK.

Responses have the API's shape: {"object": "list", "data": [{"object": "embedding", "index": i,
"embedding": [...]}], "model": ..., "usage": {"prompt_tokens", "total_tokens"}}, with the vector
as a float list or, for `encoding_format: "base64"` (the SDK's default), little-endian float32
bytes in base64. Vectors are deterministic (seeded by the text) and unit length, cut to the
requested `dimensions`. Errors use OpenAI's error body; every request body is recorded.

    with FakeOpenAIEmbeddings() as fake:
        fake.fail(429)                      # the next request gets a 429, then vectors again
        client = openai.OpenAI(api_key="sk-test", base_url=fake.base_url)
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import struct
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler
from typing import Any, Self, cast

from tests.support.served import FakeHTTPServer, Served

Json = dict[str, Any]


def fake_vector(text: str, dimensions: int) -> list[float]:
    """A unit vector determined by the text alone (and so the same at any width prefix, renormalised)."""
    values: list[float] = []
    counter = 0
    while len(values) < dimensions:
        digest = hashlib.sha256(f"{counter}|{text}".encode()).digest()
        values.extend((b - 127.5) / 127.5 for b in digest)
        counter += 1
    values = values[:dimensions]
    norm = math.sqrt(sum(v * v for v in values))
    return [v / norm for v in values]


class FakeOpenAIEmbeddings(Served):
    def __init__(self, *, native_dimensions: int = 1536, host: str = "127.0.0.1", port: int = 0) -> None:
        self.native_dimensions = native_dimensions
        self.requests: list[Json] = []
        self.headers: list[dict[str, str]] = []  # request headers, lower-cased names
        self.scale = 1.0  # multiply every vector: > 1 imitates a server that does not normalise
        self._failures: deque[tuple[int, str, str | None]] = deque()
        self._lock = threading.Lock()
        self._server = _Server((host, port), _Handler)
        self._server.fake = self
        self._thread: threading.Thread | None = None

    def fail(
        self, status: int, *, times: int = 1, message: str = "Rate limit reached.", code: str | None = None
    ) -> Self:
        with self._lock:
            self._failures.extend((status, message, code) for _ in range(times))
        return self

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    def _next(self, body: Json, headers: dict[str, str]) -> tuple[int, str, str | None] | None:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            return self._failures.popleft() if self._failures else None


class _Server(FakeHTTPServer):
    fake: FakeOpenAIEmbeddings


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        if not self.path.rstrip("/").endswith("/embeddings"):
            self._json(404, _error(f"Unknown path {self.path}", "invalid_request_error", None))
            return
        fake = cast(_Server, self.server).fake
        body: Json = json.loads(raw or b"{}")
        failure = fake._next(body, {k.lower(): v for k, v in self.headers.items()})
        if failure is not None:
            status, message, code = failure
            kind = "invalid_request_error" if status < 500 else "server_error"
            if status == 429:
                kind = "requests"
            self._json(status, _error(message, kind, code), {"retry-after-ms": "1"})
            return
        inputs = body.get("input")
        inputs = [inputs] if isinstance(inputs, str) else inputs
        if not isinstance(inputs, list) or not inputs or any(i == "" for i in inputs):
            # The API's answer to an empty input.
            self._json(400, _error("'$.input' is invalid.", "invalid_request_error", None))
            return
        dims = int(body.get("dimensions") or fake.native_dimensions)
        data = []
        for i, text in enumerate(inputs):
            vector = [v * fake.scale for v in fake_vector(str(text), dims)]
            if body.get("encoding_format") == "base64":
                encoded: Any = base64.b64encode(struct.pack(f"<{dims}f", *vector)).decode()
            else:
                encoded = vector
            data.append({"object": "embedding", "index": i, "embedding": encoded})
        tokens = sum(len(str(t).split()) or 1 for t in inputs)
        self._json(
            200,
            {
                "object": "list",
                "data": data,
                "model": body.get("model"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    def _json(self, status: int, payload: Json, extra: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("x-request-id", "req_fake_embeddings")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)


def _error(message: str, error_type: str, code: str | None) -> Json:
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}

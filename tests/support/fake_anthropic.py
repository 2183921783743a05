"""A local server speaking Anthropic's Messages API (POST /v1/messages, SSE), for the real SDK.

The twin of tests.support.fake_openai. It replays captured .sse fixtures byte for byte, or streams
a reply computed from the request in the event format of those captures (message_start, content
blocks with text_delta / input_json_delta, message_delta with the stop reason and usage,
message_stop), or answers with Anthropic's HTTP errors (429, 500, 529 ... with retry-after), or
starts a stream and breaks it with an `event: error`, or is slow on the wire: a paced or hanging
stream (`pace`, `hang`, a request header or a marker in the message: tests.support.slow_streams;
what each such stream saw is in `streams`). Every request body and its headers are recorded.

    with FakeAnthropic() as fake:                   # echoes the last user text by default
        fake.fail(529).replay(FIXTURES / "messages_stream_basic_response.sse")
        client = anthropic.Anthropic(api_key="sk-ant-test", base_url=fake.base_url)

Manual demo: `python -m tests.support.fake_anthropic --port 8789`, then point the gateway at it
with ANTHROPIC_BASE_URL=http://127.0.0.1:8789 SIGIL_MODEL=anthropic/fake-model.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Self, cast

from tests.support.prompt_cache import BreakpointCache, Unit, canonical
from tests.support.served import FakeHTTPServer, Served
from tests.support.slow_streams import Pacing, StreamLog, requested_pacing, send_paced

Json = dict[str, Any]

# Anthropic's error type for each status (https://docs.anthropic.com/en/api/errors).
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


@dataclass
class FakeReply:
    """A computed reply: text, then tool calls (name, input), and the stop reason."""

    text: str = ""
    tool_calls: list[tuple[str, Json | str]] = field(default_factory=list)
    stop_reason: str | None = None  # default: "tool_use" when there are calls, else "end_turn"


Responder = Callable[[Json], str | FakeReply]


def echo_last_user(body: Json) -> str:
    """Reply with the text of the last user turn (its text blocks joined), verbatim."""
    for m in reversed(body.get("messages", [])):
        if m.get("role") != "user":
            continue
        content = m.get("content")
        if isinstance(content, str):
            return content
        texts = [b.get("text", "") for b in content if b.get("type") == "text"]
        if texts:
            return "".join(texts)
    return ""


def _constant(reply: str | FakeReply) -> Responder:
    return lambda _body: reply


@dataclass
class _Replay:
    path: Path


@dataclass
class _Compute:
    fn: Responder


@dataclass
class _Failure:
    status: int
    error_type: str
    message: str
    headers: dict[str, str]


@dataclass
class _StreamError:
    error_type: str
    message: str


@dataclass
class _Paced:
    pacing: Pacing
    reply: _Replay | _Compute | None  # None: the default response


_Response = _Replay | _Compute | _Failure | _StreamError | _Paced


class FakeAnthropic(Served):
    def __init__(self, responder: Responder = echo_last_user, *, host: str = "127.0.0.1", port: int = 0):
        self.requests: list[Json] = []  # request bodies, in arrival order
        # Anthropic's prompt cache (tests.support.prompt_cache): computed replies report what it
        # read and wrote in usage.cache_read_input_tokens and cache_creation_input_tokens.
        self.prompt_cache = BreakpointCache()
        self.headers: list[dict[str, str]] = []  # request headers, lower-cased names
        self.streams: list[StreamLog] = []  # paced and hanging responses (tests.support.slow_streams)
        self._closing = threading.Event()  # ends every hang and pause when the fake closes
        self._default: _Response = _Compute(responder)
        self._queue: deque[_Response] = deque()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server = _Server((host, port), _Handler)
        self._server.fake = self
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ scripting (one response each)

    def replay(self, path: str | Path) -> Self:
        """Answer the next request with this .sse file, byte for byte."""
        with self._lock:
            self._queue.append(_Replay(Path(path)))
        return self

    def respond(self, reply: Responder | str | FakeReply) -> Self:
        """Answer the next request with a reply computed from its body (or this fixed reply)."""
        with self._lock:
            self._queue.append(_Compute(reply if callable(reply) else _constant(reply)))
        return self

    def fail(
        self,
        status: int,
        *,
        times: int = 1,
        error_type: str | None = None,
        message: str = "Overloaded",
        retry_after: str | None = None,
        retry_after_ms: int | None = 1,
        should_retry: bool | None = None,
    ) -> Self:
        """Answer the next `times` requests with an HTTP error in Anthropic's error body.

        `{api_key}` in the message is replaced by the key the client sent, so tests can prove the
        key never leaks further. The short retry-after-ms keeps the SDK's own backoff from
        slowing tests down; `retry_after` sets the standard header (seconds or an HTTP date).
        """
        headers: dict[str, str] = {}
        if retry_after_ms is not None:
            headers["retry-after-ms"] = str(retry_after_ms)
        if retry_after is not None:
            headers["retry-after"] = retry_after
        if should_retry is not None:
            headers["x-should-retry"] = "true" if should_retry else "false"
        kind = error_type or ERROR_TYPES.get(status, "api_error")
        with self._lock:
            self._queue.extend(_Failure(status, kind, message, headers) for _ in range(times))
        return self

    def fail_in_stream(self, error_type: str = "overloaded_error", message: str = "Overloaded") -> Self:
        """Answer the next request with a 200 stream that starts a message, then sends an error
        event, as the API does when it is overloaded after the response began."""
        with self._lock:
            self._queue.append(_StreamError(error_type, message))
        return self

    def pace(self, interval_s: float, reply: Responder | str | FakeReply | Path | None = None) -> Self:
        """Answer the next request with a stream that waits `interval_s` before each event after
        the first (the reply as `respond` or `replay` would send it; None: the default)."""
        return self._paced(Pacing(interval_s=interval_s), reply)

    def hang(self, after_events: int = 1, reply: Responder | str | FakeReply | Path | None = None) -> Self:
        """Answer the next request with `after_events` events of its stream, then nothing, the
        connection held open until the client hangs up or the fake closes (-1: not even the
        response's headers)."""
        return self._paced(Pacing(hang_after=after_events), reply)

    def _paced(self, pacing: Pacing, reply: Responder | str | FakeReply | Path | None) -> Self:
        inner: _Replay | _Compute | None = None
        if isinstance(reply, Path):
            inner = _Replay(reply)
        elif reply is not None:
            inner = _Compute(reply if callable(reply) else _constant(reply))
        with self._lock:
            self._queue.append(_Paced(pacing, inner))
        return self

    def set_default(self, reply: Responder | str | FakeReply | Path) -> None:
        """What every request gets once the scripted responses are used up."""
        with self._lock:
            if isinstance(reply, Path):
                self._default = _Replay(reply)
            else:
                self._default = _Compute(reply if callable(reply) else _constant(reply))

    # ------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        """The SDK's base URL: it appends /v1/messages itself."""
        return self.origin

    # ------------------------------------------------------------ used by the handler

    def _next(self, body: Json, headers: dict[str, str]) -> tuple[_Response, StreamLog | None]:
        """The response to this request, and the log of its pacing when it is paced (scripted,
        or asked for by a header or a marker in the last user message)."""
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            response = self._queue.popleft() if self._queue else self._default
            pacing = requested_pacing(headers, echo_last_user(body))
            if isinstance(response, _Paced):
                pacing, response = response.pacing, response.reply or self._default
                assert not isinstance(response, _Paced)
            if pacing is None or isinstance(response, _Failure | _StreamError):
                return response, None
            log = StreamLog(pacing)
            self.streams.append(log)
            return response, log

    def _message_id(self) -> str:
        return f"msg_fake{next(self._ids):06d}"


class _Server(FakeHTTPServer):
    fake: FakeAnthropic


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked streaming, as the real API does

    def log_message(self, format: str, *args: Any) -> None:
        pass  # tests read the recorded requests; stderr noise would only hide failures

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path.split("?")[0].rstrip("/") != "/v1/messages":
            self._json(404, _error_body("not_found_error", f"Unknown path {self.path}"))
            return
        body: Json = json.loads(raw or b"{}")
        headers = {k.lower(): v for k, v in self.headers.items()}
        fake = cast(_Server, self.server).fake
        response, paced = fake._next(body, headers)
        if paced is not None:
            self._paced(fake, body, response, paced)
            return
        assert not isinstance(response, _Paced)  # _next unwraps it
        if isinstance(response, _Failure):
            # The SDK sends its key as x-api-key or as a bearer token, depending on its version.
            key = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")
            message = response.message.replace("{api_key}", key)
            self._json(response.status, _error_body(response.error_type, message), response.headers)
        elif isinstance(response, _Replay):
            self._stream(_sse_events(response.path.read_bytes()))
        elif isinstance(response, _StreamError):
            start = _event("message_start", {"type": "message_start", "message": _message(fake, body)})
            error = _event("error", _error_body(response.error_type, response.message))
            self._stream(iter([start, error]))
        else:
            reply = response.fn(body)
            reply = FakeReply(text=reply) if isinstance(reply, str) else reply
            if body.get("stream"):
                self._stream(_events(fake, body, reply))
            else:
                self._json(400, _error_body("invalid_request_error", "the fake only streams"))

    def _paced(self, fake: FakeAnthropic, body: Json, response: _Response, log: StreamLog) -> None:
        if isinstance(response, _Replay):
            events = _sse_events(response.path.read_bytes())
        elif isinstance(response, _Compute):
            reply = response.fn(body)
            events = _events(fake, body, FakeReply(text=reply) if isinstance(reply, str) else reply)
        else:
            raise AssertionError(f"{response!r} cannot be paced")
        headers = {
            "content-type": "text/event-stream; charset=utf-8",
            "transfer-encoding": "chunked",
            "request-id": f"req_fake{time.monotonic_ns()}",
        }
        send_paced(self, headers, events, log.pacing, log, fake._closing)

    def _json(self, status: int, payload: Json, extra: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", f"req_fake{time.monotonic_ns()}")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, events: Iterator[bytes]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", f"req_fake{time.monotonic_ns()}")
        self.end_headers()
        for event in events:  # one HTTP chunk per SSE event, flushed, like a live stream
            self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


def _error_body(error_type: str, message: str) -> Json:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def _sse_events(data: bytes) -> Iterator[bytes]:
    """The file split after each blank line; the pieces join back to exactly the file."""
    parts = data.split(b"\n\n")
    for part in parts[:-1]:
        yield part + b"\n\n"
    if parts[-1]:
        yield parts[-1]


# ---------------------------------------------------------------- computed replies


def _pieces(text: str) -> list[str]:
    # Word-sized deltas with their leading space (" there"), as the captures show.
    return re.findall(r"\s*\S+|\s+", text)


def _input_text(value: Json | str) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _event(name: str, data: Json) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def prompt_units(body: Json) -> list[Unit]:
    """The prompt in Anthropic's cache order (tools, system, messages), a token a word, with the
    breakpoints its `cache_control` marks set."""
    units = [Unit(canonical(t), 0, "cache_control" in t) for t in body.get("tools") or []]
    system = body.get("system") or ""
    if isinstance(system, str):
        units.append(Unit(system, len(system.split())))
    else:
        units += [Unit(canonical(b), len(b.get("text", "").split()), "cache_control" in b) for b in system]
    for m in body.get("messages", []):
        content = m.get("content")
        marked = isinstance(content, list) and any("cache_control" in b for b in content)
        units.append(Unit(canonical([m.get("role"), content]), len(json.dumps(content).split()), marked))
    return units


def _usage(fake: FakeAnthropic, body: Json) -> Json:
    units = prompt_units(body)
    read, written = fake.prompt_cache.use(units)
    total = sum(unit.tokens for unit in units)
    return {
        "input_tokens": total - read - written,  # the tokens after the last breakpoint
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
        "output_tokens": 1,
    }


def _message(fake: FakeAnthropic, body: Json) -> Json:
    return {
        "id": fake._message_id(),
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "fake-model"),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _usage(fake, body),
    }


def _block(kind: str, index: int, **fields: Any) -> bytes:
    return _event(kind, {"type": kind, "index": index, **fields})


def _events(fake: FakeAnthropic, body: Json, reply: FakeReply) -> Iterator[bytes]:
    yield _event("message_start", {"type": "message_start", "message": _message(fake, body)})
    index, output = 0, 1
    if reply.text or not reply.tool_calls:
        yield _block("content_block_start", index, content_block={"type": "text", "text": ""})
        for piece in _pieces(reply.text):
            yield _block("content_block_delta", index, delta={"type": "text_delta", "text": piece})
            output += 1
        yield _block("content_block_stop", index)
        index += 1
    for name, arguments in reply.tool_calls:
        tool: Json = {"type": "tool_use", "id": f"toolu_fake{index:02d}", "name": name, "input": {}}
        yield _block("content_block_start", index, content_block=tool)
        for piece in _pieces(_input_text(arguments)):
            yield _block(
                "content_block_delta", index, delta={"type": "input_json_delta", "partial_json": piece}
            )
            output += 1
        yield _block("content_block_stop", index)
        index += 1
    stop: Json = {"stop_reason": reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")}
    stop["stop_sequence"] = None
    yield _event(
        "message_delta", {"type": "message_delta", "delta": stop, "usage": {"output_tokens": output}}
    )
    yield _event("message_stop", {"type": "message_stop"})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A local Anthropic Messages API server for demos.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8789)
    parser.add_argument("--fixture", type=Path, help="replay this .sse file for every request")
    args = parser.parse_args(argv)
    fake = FakeAnthropic(host=args.host, port=args.port)
    if args.fixture:
        fake.set_default(args.fixture)
    print(
        f"fake Anthropic on {fake.base_url} ({'replaying ' + str(args.fixture) if args.fixture else 'echo'})"
    )
    print(f"  try: ANTHROPIC_BASE_URL={fake.base_url} SIGIL_MODEL=anthropic/fake-model sigil dev", flush=True)
    try:
        fake._server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        fake._server.server_close()


if __name__ == "__main__":
    main()

"""A local server speaking OpenAI's chat-completions wire format, for the real `openai` SDK.

It replays captured .sse fixtures byte for byte, or streams a reply computed from the request in
the same chunk format as those captures (chat.completion.chunk objects, a usage chunk when asked,
then `data: [DONE]`), or answers with HTTP errors to exercise the SDK's retries. It can also be
slow on the wire: a stream paced at one event per interval, or one that hangs (`pace`, `hang`, a
request header or a marker in the message: tests.support.slow_streams; what each such stream saw
is in `streams`). Every request body is recorded.

    with FakeOpenAI() as fake:                      # echoes the last user message by default
        fake.fail(500).replay(FIXTURES / "chat_stream_text_with_usage.sse")
        client = openai.OpenAI(api_key="sk-test", base_url=fake.base_url)

Manual demo: `python -m tests.support.fake_openai --port 8788`, then point the gateway at it with
OPENAI_BASE_URL=http://127.0.0.1:8788/v1 SIGIL_MODEL=openai/fake-model.
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

from tests.support.prompt_cache import AutomaticCache, canonical
from tests.support.served import FakeHTTPServer, Served
from tests.support.slow_streams import Pacing, StreamLog, requested_pacing, send_paced

Json = dict[str, Any]


@dataclass
class FakeReply:
    """A computed reply: text, tool calls (name, arguments), or a refusal."""

    text: str = ""
    tool_calls: list[tuple[str, Json | str]] = field(default_factory=list)
    refusal: str | None = None
    finish_reason: str | None = None  # default: "tool_calls" when there are calls, else "stop"


Responder = Callable[[Json], str | FakeReply]


def echo_last_user(body: Json) -> str:
    """Reply with the text of the last user message, verbatim."""
    for m in reversed(body.get("messages", [])):
        if m.get("role") == "user":
            content = m.get("content")
            return content if isinstance(content, str) else json.dumps(content)
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
    message: str
    code: str | None
    headers: dict[str, str]
    when: Callable[[Json], bool] | None = None


@dataclass
class _Paced:
    pacing: Pacing
    reply: _Replay | _Compute | None  # None: the default response


_Response = _Replay | _Compute | _Failure | _Paced


class FakeOpenAI(Served):
    def __init__(self, responder: Responder = echo_last_user, *, host: str = "127.0.0.1", port: int = 0):
        self.requests: list[Json] = []  # request bodies, in arrival order
        self.headers: list[dict[str, str]] = []  # request headers, lower-cased names
        self.streams: list[StreamLog] = []  # paced and hanging responses (tests.support.slow_streams)
        self._closing = threading.Event()  # ends every hang and pause when the fake closes
        self._default: _Response = _Compute(responder)
        self._queue: deque[_Response] = deque()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        # OpenAI's automatic prefix cache (tests.support.prompt_cache): computed replies report
        # the prompt tokens it held in usage.prompt_tokens_details.cached_tokens.
        self.prompt_cache = AutomaticCache()
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
        message: str = "The server had an error while processing your request.",
        code: str | None = None,
        retry_after_ms: int | None = 1,
        when: Callable[[Json], bool] | None = None,
    ) -> Self:
        """Answer the next `times` requests with an HTTP error in OpenAI's error body; with
        `when`, the next `times` requests whose body it accepts (requests made at once, such as
        the agent's sessions of one batch, arrive in no fixed order).

        `{api_key}` in the message is replaced by the key the client sent, the way OpenAI's 401
        quotes it, so tests can prove the key never leaks further. The short retry-after-ms keeps
        the SDK's backoff from slowing tests down.
        """
        headers = {} if retry_after_ms is None else {"retry-after-ms": str(retry_after_ms)}
        with self._lock:
            self._queue.extend(_Failure(status, message, code, headers, when) for _ in range(times))
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
        return f"{self.origin}/v1"

    # ------------------------------------------------------------ used by the handler

    def _next(self, body: Json, headers: dict[str, str]) -> tuple[_Response, StreamLog | None]:
        """The response to this request, and the log of its pacing when it is paced (scripted,
        or asked for by a header or a marker in the last user message)."""
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            response = self._take(body)
            pacing = requested_pacing(headers, echo_last_user(body))
            if isinstance(response, _Paced):
                pacing, response = response.pacing, response.reply or self._default
                assert not isinstance(response, _Paced)
            if pacing is None or isinstance(response, _Failure):
                return response, None
            log = StreamLog(pacing)
            self.streams.append(log)
            return response, log

    def _take(self, body: Json) -> _Response:
        """The first scripted response for this request (a failure `when` refuses waits for
        another), or the default."""
        for index, response in enumerate(self._queue):
            if not isinstance(response, _Failure) or response.when is None or response.when(body):
                del self._queue[index]
                return response
        return self._default

    def _completion_id(self) -> str:
        return f"chatcmpl-fake{next(self._ids):06d}"

    def _cached(self, body: Json) -> int:
        return self.prompt_cache.use(prompt_tokens(body))


def prompt_tokens(body: Json) -> list[str]:
    """The prompt as the fake counts it (a token a word of each message's content), each token
    marked with its message's role, and the first with the tools too: OpenAI's prompt opens with
    the tools, so other tools share no prefix."""
    messages = body.get("messages", [])
    tokens = [f"{m.get('role')}:{word}" for m in messages for word in str(m.get("content") or "").split()]
    if tokens:
        tokens[0] = f"{canonical(body.get('tools') or [])}{tokens[0]}"
    return tokens


class _Server(FakeHTTPServer):
    fake: FakeOpenAI


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked streaming, as the real API does

    def log_message(self, format: str, *args: Any) -> None:
        pass  # tests read the recorded requests; stderr noise would only hide failures

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._json(404, _error_body(f"Unknown path {self.path}", "invalid_request_error", None))
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
            key = headers.get("authorization", "").removeprefix("Bearer ")
            message = response.message.replace("{api_key}", key)
            error_type = "invalid_request_error" if response.status < 500 else "server_error"
            self._json(response.status, _error_body(message, error_type, response.code), response.headers)
        elif isinstance(response, _Replay):
            self._stream(_sse_events(response.path.read_bytes()))
        else:
            reply = response.fn(body)
            reply = FakeReply(text=reply) if isinstance(reply, str) else reply
            if body.get("stream"):
                self._stream(_chunks(fake._completion_id(), body, reply, fake._cached(body)))
            else:
                self._json(200, _completion(fake._completion_id(), body, reply, fake._cached(body)))

    def _paced(self, fake: FakeOpenAI, body: Json, response: _Response, log: StreamLog) -> None:
        if isinstance(response, _Replay):
            events = _sse_events(response.path.read_bytes())
        elif isinstance(response, _Compute):
            answer = response.fn(body)
            reply = FakeReply(text=answer) if isinstance(answer, str) else answer
            events = _chunks(fake._completion_id(), body, reply, fake._cached(body))
        else:
            raise AssertionError(f"{response!r} cannot be paced")
        headers = {
            "content-type": "text/event-stream; charset=utf-8",
            "transfer-encoding": "chunked",
            "x-request-id": f"req_fake{time.monotonic_ns()}",
        }
        send_paced(self, headers, events, log.pacing, log, fake._closing)

    def _json(self, status: int, payload: Json, extra: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("x-request-id", f"req_fake{time.monotonic_ns()}")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, events: Iterator[bytes]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("x-request-id", f"req_fake{time.monotonic_ns()}")
        self.end_headers()
        for event in events:  # one HTTP chunk per SSE event, flushed, like a live stream
            self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


def _error_body(message: str, error_type: str, code: str | None) -> Json:
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


def _sse_events(data: bytes) -> Iterator[bytes]:
    """The file split after each blank line; the pieces join back to exactly the file."""
    parts = data.split(b"\n\n")
    for part in parts[:-1]:
        yield part + b"\n\n"
    if parts[-1]:
        yield parts[-1]


# ---------------------------------------------------------------- computed replies


def _pieces(text: str) -> list[str]:
    # Word-sized deltas with their leading space (" unable"), as the captures show.
    return re.findall(r"\s*\S+|\s+", text)


def _arguments(args: Json | str) -> str:
    return args if isinstance(args, str) else json.dumps(args)


def _usage(body: Json, reply: FakeReply, cached: int) -> Json:
    prompt = sum(len(str(m.get("content") or "").split()) for m in body.get("messages", []))
    completion = len(_pieces(reply.text)) + len(_pieces(reply.refusal or ""))
    completion += sum(len(_pieces(_arguments(a))) + 1 for _, a in reply.tool_calls)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        # Always present on OpenAI's own API, 0 on a miss; part of prompt_tokens.
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def _finish_reason(reply: FakeReply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")


def _chunks(completion_id: str, body: Json, reply: FakeReply, cached: int = 0) -> Iterator[bytes]:
    head = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": body.get("model", "fake-model"),
        "system_fingerprint": "fp_fake",
    }

    def event(choices: list[Json], **extra: Any) -> bytes:
        data = json.dumps({**head, "choices": choices, **extra}, separators=(",", ":"))
        return f"data: {data}\n\n".encode()

    def delta(d: Json, finish: str | None = None) -> bytes:
        return event([{"index": 0, "delta": d, "logprobs": None, "finish_reason": finish}])

    yield delta({"role": "assistant", "content": "", "refusal": None})
    for piece in _pieces(reply.text):
        yield delta({"content": piece})
    for piece in _pieces(reply.refusal or ""):
        yield delta({"refusal": piece})
    for i, (name, args) in enumerate(reply.tool_calls):
        call_id = f"call_fake{i}{completion_id[-6:]}"
        first = {"index": i, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        yield delta({"tool_calls": [first]})
        for piece in _pieces(_arguments(args)):
            yield delta({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    yield delta({}, _finish_reason(reply))
    if (body.get("stream_options") or {}).get("include_usage"):
        yield event([], usage=_usage(body, reply, cached))
    yield b"data: [DONE]\n\n"


def _completion(completion_id: str, body: Json, reply: FakeReply, cached: int = 0) -> Json:
    message: Json = {"role": "assistant", "content": reply.text or None, "refusal": reply.refusal}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call_fake{i}{completion_id[-6:]}",
                "type": "function",
                "function": {"name": name, "arguments": _arguments(args)},
            }
            for i, (name, args) in enumerate(reply.tool_calls)
        ]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "fake-model"),
        "system_fingerprint": "fp_fake",
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": _finish_reason(reply)}
        ],
        "usage": _usage(body, reply, cached),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A local OpenAI chat-completions server for demos.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8788)
    parser.add_argument("--fixture", type=Path, help="replay this .sse file for every request")
    args = parser.parse_args(argv)
    fake = FakeOpenAI(host=args.host, port=args.port)
    if args.fixture:
        fake.set_default(args.fixture)
    print(f"fake OpenAI on {fake.base_url} ({'replaying ' + str(args.fixture) if args.fixture else 'echo'})")
    print(f"  try: OPENAI_BASE_URL={fake.base_url} SIGIL_MODEL=openai/fake-model sigil dev", flush=True)
    try:
        fake._server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        fake._server.server_close()


if __name__ == "__main__":
    main()

"""A local server speaking Bedrock's ConverseStream (POST /model/<id>/converse-stream) for boto3.

Point a real bedrock-runtime client at it (`endpoint_url=fake.base_url`, or the
AWS_ENDPOINT_URL_BEDROCK_RUNTIME variable botocore reads) and it answers with the AWS event-stream
frames botocore parses: messageStart, one contentBlockDelta per word of the reply (the last user
text by default), contentBlockStop, messageStop and metadata. Paced and hanging streams work as in
the OpenAI and Anthropic fakes (tests.support.slow_streams): `fake.pace(1.0)`, `fake.hang()`, the
`x-fake-pace-ms` / `x-fake-hang` headers or a `[fake:...]` marker in the message.

    with FakeBedrock() as fake:
        fake.pace(1.0, "one two three")
        client = boto3.client("bedrock-runtime", endpoint_url=fake.base_url, ...)
"""

from __future__ import annotations

import json
import re
import threading
import time
from binascii import crc32
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any, Self, cast

from tests.support.prompt_cache import BreakpointCache, Unit, canonical
from tests.support.served import FakeHTTPServer, Served
from tests.support.slow_streams import Pacing, StreamLog, requested_pacing, send_paced

Json = dict[str, Any]


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message: prelude (lengths + CRC), string headers, payload, message CRC."""
    encoded = b"".join(
        len(k).to_bytes(1, "big") + k.encode() + b"\x07" + len(v).to_bytes(2, "big") + v.encode()
        for k, v in headers.items()
    )
    total = 12 + len(encoded) + len(payload) + 4
    prelude = total.to_bytes(4, "big") + len(encoded).to_bytes(4, "big")
    message = prelude + crc32(prelude).to_bytes(4, "big") + encoded + payload
    return message + crc32(message).to_bytes(4, "big")


def event(name: str, body: Json) -> bytes:
    headers = {":event-type": name, ":content-type": "application/json", ":message-type": "event"}
    return frame(headers, json.dumps(body).encode())


def text_events(text: str, prompt: Json | None = None) -> Iterator[bytes]:
    """The events of a text reply; `prompt` is the usage of its prompt (inputTokens and the
    cache counts), one token by default."""
    words = re.findall(r"\s*\S+|\s+", text)
    yield event("messageStart", {"role": "assistant"})
    for word in words:
        yield event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": word}})
    yield event("contentBlockStop", {"contentBlockIndex": 0})
    yield event("messageStop", {"stopReason": "end_turn"})
    prompt = prompt or {"inputTokens": 1}
    total = sum(prompt.values()) + len(words)
    usage = {**prompt, "outputTokens": len(words), "totalTokens": total}
    yield event("metadata", {"usage": usage, "metrics": {"latencyMs": 1}})


def prompt_units(body: Json) -> list[Unit]:
    """The prompt in Converse's cache order (tools, system, messages), a token a word, with a
    breakpoint after each unit a `cachePoint` block follows."""
    units: list[Unit] = []

    def add(blocks: list[Json], tokens: Any) -> None:
        for block in blocks:
            if "cachePoint" in block:
                if units:
                    units[-1] = Unit(units[-1].text, units[-1].tokens, True)
            else:
                units.append(Unit(canonical(block), tokens(block)))

    add((body.get("toolConfig") or {}).get("tools") or [], lambda _: 0)
    add(body.get("system") or [], lambda b: len(b.get("text", "").split()))
    for m in body.get("messages", []):
        add(m.get("content") or [], lambda b: len(str(b.get("text") or canonical(b)).split()))
    return units


def prompt_usage(cache: BreakpointCache, body: Json) -> Json:
    """The prompt's usage fields: what the cache read and wrote, and the rest as inputTokens."""
    units = prompt_units(body)
    read, written = cache.use(units)
    total = max(1, sum(unit.tokens for unit in units))
    usage = {"inputTokens": total - read - written}
    if read or written:  # Converse leaves the cache fields out of a request that used none
        usage |= {"cacheReadInputTokens": read, "cacheWriteInputTokens": written}
    return usage


def last_user_text(body: Json) -> str:
    for m in reversed(body.get("messages", [])):
        if m.get("role") == "user":
            return "".join(b.get("text", "") for b in m.get("content", []))
    return ""


class FakeBedrock(Served):
    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.requests: list[Json] = []  # request bodies, in arrival order
        # Bedrock's prompt cache (tests.support.prompt_cache): usage reports what it read and wrote
        # in cacheReadInputTokens and cacheWriteInputTokens.
        self.prompt_cache = BreakpointCache()
        self.streams: list[StreamLog] = []  # every response's log (each one is paced, maybe not at all)
        self._queue: deque[tuple[Pacing, str | None]] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server = _Server((host, port), _Handler)
        self._server.fake = self
        self._thread: threading.Thread | None = None

    def pace(self, interval_s: float, reply: str | None = None) -> Self:
        """The next request's stream waits `interval_s` before each event after the first."""
        with self._lock:
            self._queue.append((Pacing(interval_s=interval_s), reply))
        return self

    def hang(self, after_events: int = 1, reply: str | None = None) -> Self:
        """The next request gets `after_events` events, then nothing (-1: not even headers)."""
        with self._lock:
            self._queue.append((Pacing(hang_after=after_events), reply))
        return self

    @property
    def base_url(self) -> str:
        return self.origin

    def _next(self, body: Json, headers: dict[str, str]) -> tuple[str, StreamLog]:
        text = last_user_text(body)
        with self._lock:
            self.requests.append(body)
            pacing, reply = self._queue.popleft() if self._queue else (None, None)
            log = StreamLog(pacing or requested_pacing(headers, text) or Pacing())
            self.streams.append(log)
        return (text if reply is None else reply), log


class _Server(FakeHTTPServer):
    fake: FakeBedrock


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body: Json = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        fake = cast(_Server, self.server).fake
        reply, log = fake._next(body, {k.lower(): v for k, v in self.headers.items()})
        headers = {
            "content-type": "application/vnd.amazon.eventstream",
            "transfer-encoding": "chunked",
            "x-amzn-requestid": f"req-fake-{time.monotonic_ns()}",
        }
        usage = prompt_usage(fake.prompt_cache, body)
        send_paced(self, headers, text_events(reply, usage), log.pacing, log, fake._closing)

"""Anthropic's Messages API behind the Provider contract, through the official `anthropic` SDK.

The SDK takes well over a second to import, so it is imported when a provider is built, never
when this module is: the webhook path and a gateway configured for another provider never load it.

The raw event stream (`messages.create(stream=True)`) is read rather than the SDK's accumulating
helper, so a tool call's input is assembled here from its `input_json_delta` fragments and checked
before it is passed on: a call cut off mid-argument never reaches a tool.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shared.coldstart import gc_paused
from shared.deadline import bounded, check, cut_by, deadline, within
from shared.errors import DeadlineExceeded, ProviderError
from shared.models import AssistantMessage, Message, ToolCall, UserMessage
from shared.providers.base import (
    ChatRequest,
    Done,
    ImageData,
    ProviderEvent,
    TextDelta,
    ToolCallEvent,
    ToolSpec,
    Usage,
    alternating_turns,
    system_parts,
    user_parts,
)
from shared.providers.probe import connection_cause, probe_endpoint
from shared.providers.resilient import http_error_retry

if TYPE_CHECKING:
    import anthropic
    from anthropic.types import RawMessageStreamEvent

# Anthropic requires max_tokens on every request; this is used when the request leaves it unset.
DEFAULT_MAX_TOKENS = 4096

# A proxy or gateway in front of Anthropic may hold the key itself; the SDK still wants one.
KEYLESS_PLACEHOLDER = "sigil-no-api-key"

# Stream-level error types worth another call (the API's own 429/500/504/529 family): an error
# event arrives inside a 200 response, so its HTTP status says nothing.
RETRYABLE_ERROR_TYPES = frozenset({"rate_limit_error", "api_error", "overloaded_error", "timeout_error"})

FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "refusal",
}

# Said when a refusal comes without the API's explanation (stop_details is optional).
REFUSAL_FALLBACK = "The model declined to answer this request."

_SAFE_CODE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")

Json = dict[str, Any]


class AnthropicProvider:
    name = "anthropic"

    def __init__(
        self,
        api_key: str | None,
        base_url: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        *,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
        deadline_s: float | None = None,
    ) -> None:
        """`timeout_s` bounds each wait on the network (the gap between two events); `deadline_s`
        the whole call, from its start to its last event (shared.deadline)."""
        with gc_paused():  # the SDK's import, most of a cold container's first turn (shared.coldstart)
            import anthropic
            import httpx2

            from shared.providers.http_deadline import deadline_client_options

        self.base_url = base_url
        self.default_max_tokens = default_max_tokens
        self.deadline_s = deadline_s
        self._api_key = api_key or KEYLESS_PLACEHOLDER
        # An explicit key also stops the SDK from reading credentials from the environment or a
        # profile on disk: the gateway's configuration is the only source.
        self._client: anthropic.Anthropic = anthropic.Anthropic(
            api_key=self._api_key,
            base_url=base_url,
            timeout=timeout_s,
            max_retries=max_retries,
            http_client=anthropic.DefaultHttpxClient(**deadline_client_options(anthropic.AnthropicError)),
        )
        self._sdk_error: type[anthropic.AnthropicError] = anthropic.AnthropicError
        self._connection_error: type[anthropic.APIConnectionError] = anthropic.APIConnectionError
        # The SDK's stream lets the transport's own errors through (a read timeout mid-stream).
        self._transport_error: type[httpx2.TransportError] = httpx2.TransportError

    def stream(self, request: ChatRequest) -> Iterator[ProviderEvent]:
        at = within(self.deadline_s)
        try:
            check(at)
            with deadline(at):  # the connect and the wait for the headers
                response = self._client.messages.create(stream=True, **self._params(request))
            # `with` closes the HTTP response even when the caller stops reading early, or the
            # deadline cuts the stream.
            with response as events:
                yield from translate_stream(bounded(at, iter(events)))
        except DeadlineExceeded:
            # The transport's is also the SDK's own error type (so the SDK does not retry it).
            raise DeadlineExceeded() from None
        except (self._sdk_error, self._transport_error) as exc:
            if cut_by(at):
                raise DeadlineExceeded() from None
            raise self._provider_error(exc) from None
        except json.JSONDecodeError:
            # A proxy that breaks the SSE framing: nothing useful to quote from it.
            raise ProviderError("the model server sent a malformed stream") from None

    def _params(self, request: ChatRequest) -> Json:
        params: Json = {
            "model": request.model,
            "max_tokens": request.max_tokens or self.default_max_tokens,
            "messages": to_anthropic_messages(request.messages, request.images),
        }
        if request.system:
            params["system"] = system_blocks(request) if request.cache_prefix else request.system
        if request.tools:
            params["tools"] = [to_anthropic_tool(t) for t in request.tools]
        if request.temperature is not None:
            # The SDK dropped sampling parameters from its signature (the API deprecates them, and
            # newer models refuse them with a 400); the wire field still works where accepted.
            params["extra_body"] = {"temperature": request.temperature}
        return params

    def _provider_error(self, exc: Exception) -> ProviderError:
        if isinstance(exc, self._connection_error | self._transport_error):  # timeouts included
            retryable, after = True, None
        else:
            retryable, after = http_error_retry(exc)
            status = getattr(exc, "status_code", None)
            if isinstance(status, int) and status < 400:  # an error event inside a 200 stream
                retryable = getattr(exc, "type", None) in RETRYABLE_ERROR_TYPES
        return ProviderError(self._safe_message(exc), retryable=retryable, retry_after_s=after)

    def _safe_message(self, exc: Exception) -> str:
        # Only the class, the status and identifiers are repeated: an upstream message can quote
        # the request, or part of the key.
        parts = [f"the model provider failed ({type(exc).__name__}"]
        status = getattr(exc, "status_code", None)
        if isinstance(status, int) and status >= 400:  # stream error events arrive inside a 200
            parts.append(f", HTTP {status}")
        for label, attr in (("type", "type"), ("code", "error_code"), ("request", "request_id")):
            value = getattr(exc, attr, None)
            if isinstance(value, str) and _SAFE_CODE.match(value):
                parts.append(f", {label} {value}")
        cause = None if isinstance(status, int) else connection_cause(exc)
        if cause:
            parts.append(f": {cause}")  # what the socket said (refused, no such host)
        message = "".join(parts) + ")"
        return message.replace(self._api_key, "[redacted]")

    def probe(self, timeout_s: float) -> str | None:
        """What is wrong with the endpoint, in one line, or None (shared.providers.probe)."""
        import anthropic

        where = str(self._client.base_url).rstrip("/")
        return probe_endpoint(anthropic, self._client, where, timeout_s, self._api_key)


# ---------------------------------------------------------------- request translation


# Anthropic caches the prompt up to a block marked with cache_control (tools, then system, then
# messages): one breakpoint at the end of the static prefix caches the tools and the instructions.
CACHE_BREAKPOINT: Json = {"type": "ephemeral"}


def system_blocks(request: ChatRequest) -> list[Json]:
    """The static prefix as one block ending in a cache breakpoint, then what changes per turn."""
    static, context = system_parts(request)
    blocks: list[Json] = []
    if static:
        blocks.append({"type": "text", "text": static, "cache_control": dict(CACHE_BREAKPOINT)})
    if context:
        blocks.append({"type": "text", "text": context})
    return blocks


def to_anthropic_messages(
    messages: Iterable[Message], images: Mapping[str, ImageData] | None = None
) -> list[Json]:
    """Our messages as Anthropic turns: tool results become user `tool_result` blocks, and turns of
    the same role in a row are merged (tool results must share one user turn after the call)."""
    return alternating_turns(messages, lambda m: _turn(m, images or {}))


def _turn(m: Message, images: Mapping[str, ImageData]) -> tuple[str, list[Json]]:
    if isinstance(m, UserMessage):
        return "user", [_user_block(part) for part in user_parts(m, images)]
    if isinstance(m, AssistantMessage):
        return "assistant", _assistant_blocks(m)
    block: Json = {"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content}
    if m.is_error:
        block["is_error"] = True
    return "user", [block]


def _user_block(part: str | ImageData) -> Json:
    if isinstance(part, str):
        return {"type": "text", "text": part}
    # The Messages API's base64 image source (its vision guide): JPEG, PNG, GIF or WebP.
    data = base64.b64encode(part.data).decode()
    return {"type": "image", "source": {"type": "base64", "media_type": part.mime_type, "data": data}}


def _assistant_blocks(m: AssistantMessage) -> list[Json]:
    # The API refuses empty text blocks, which an assistant turn that only called tools has.
    blocks: list[Json] = [{"type": "text", "text": m.content}] if m.content else []
    for call in m.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": tool_input(call)})
    return blocks


def tool_input(call: ToolCall) -> Json:
    """A call's arguments as the JSON object Anthropic and Bedrock want back.

    History written by another provider may hold arguments that are not an object; they are sent
    under one key rather than dropped, so the model still sees what was asked.
    """
    try:
        value = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return {"arguments": call.arguments}
    return value if isinstance(value, dict) else {"arguments": value}


def to_anthropic_tool(spec: ToolSpec) -> Json:
    return {"name": spec.name, "description": spec.description, "input_schema": spec.parameters}


# ---------------------------------------------------------------- stream translation


@dataclass
class _ToolBlock:
    id: str
    name: str
    start_input: Json = field(default_factory=dict)
    fragments: list[str] = field(default_factory=list)


def translate_stream(events: Iterable[RawMessageStreamEvent]) -> Iterator[ProviderEvent]:
    """Text as it arrives; each tool call once its block closes; then usage and Done.

    The end of a message is its `message_delta` with a stop reason: the closing `message_stop`
    carries nothing more (and a capture may end without the blank line that would deliver it).
    """
    tools: dict[int, _ToolBlock] = {}
    usage = Usage()
    stop_reason: str | None = None
    refusal: str | None = None
    for event in events:
        if event.type == "message_start":
            usage = _usage(event.message.usage, usage)
        elif event.type == "content_block_start":
            block = event.content_block
            if block.type == "tool_use":
                tools[event.index] = _ToolBlock(block.id, block.name, dict(block.input or {}))
        elif event.type == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta":
                if delta.text:
                    yield TextDelta(text=delta.text)
            elif delta.type == "input_json_delta" and event.index in tools:
                tools[event.index].fragments.append(delta.partial_json)
        elif event.type == "content_block_stop":
            call = tools.pop(event.index, None)
            if call is not None:
                yield ToolCallEvent(call=_complete(call))
        elif event.type == "message_delta":
            # Newer API versions repeat the cumulative counts here; older ones only the output.
            usage = _usage(event.usage, usage)
            stop_reason = event.delta.stop_reason or stop_reason
            details = event.delta.stop_details
            if details is not None and details.explanation:
                refusal = details.explanation
    if stop_reason is None:
        # A cut connection must not pass for a finished answer (it would be committed as one).
        raise ProviderError("the model stream ended before the model finished", retryable=True)
    # A tool block still open here was cut by max_tokens: its input is incomplete JSON, so it is
    # dropped, and the "length" finish reason says the answer was cut.
    yield usage
    if stop_reason == "refusal":
        yield Done(finish_reason="refusal", refusal=refusal or REFUSAL_FALLBACK)
    else:
        yield Done(finish_reason=FINISH_REASONS.get(stop_reason, stop_reason))


def _usage(counts: Any, before: Usage) -> Usage:
    """Our Usage from a message_start's or message_delta's usage: cached prompt tokens are counted
    apart from `input_tokens`, so the prompt is their sum. A count the event leaves out (None, or
    absent from an older API's message_delta) keeps its earlier value."""

    def count(name: str, earlier: int) -> int:
        value = getattr(counts, name, None)
        return earlier if value is None else int(value)

    fresh = count("input_tokens", before.input_tokens - before.cache_read_tokens - before.cache_write_tokens)
    read = count("cache_read_input_tokens", before.cache_read_tokens)
    write = count("cache_creation_input_tokens", before.cache_write_tokens)
    return Usage(
        input_tokens=fresh + read + write,
        output_tokens=count("output_tokens", before.output_tokens),
        cache_read_tokens=read,
        cache_write_tokens=write,
    )


def _complete(block: _ToolBlock) -> ToolCall:
    arguments = "".join(block.fragments)
    if not arguments:
        # No fragments: the input came whole in the block's start (or the tool takes none).
        arguments = json.dumps(block.start_input)
    try:
        json.loads(arguments)
    except json.JSONDecodeError:
        raise ProviderError(
            f"the model sent tool call {block.name!r} with arguments that are not valid JSON"
        ) from None
    return ToolCall(id=block.id, name=block.name, arguments=arguments)

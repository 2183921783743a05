"""OpenAI chat completions (and every OpenAI-compatible server) behind the Provider contract.

The `openai` SDK is imported when a provider is built, not when this module is imported: the
webhook path must never pay for it (~0.5 s), and a gateway configured for another provider never
loads it at all.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shared.coldstart import gc_paused
from shared.deadline import bounded, check, cut_by, deadline, within
from shared.errors import DeadlineExceeded, ProviderError
from shared.models import AssistantMessage, Message, ToolCall, ToolResultMessage, UserMessage
from shared.providers.base import (
    ChatRequest,
    Done,
    ImageData,
    ProviderEvent,
    TextDelta,
    ToolCallEvent,
    ToolSpec,
    Usage,
    user_parts,
)
from shared.providers.probe import connection_cause, probe_endpoint
from shared.providers.resilient import http_error_retry

if TYPE_CHECKING:
    import openai
    from openai.types.chat import (
        ChatCompletionChunk,
        ChatCompletionFunctionToolParam,
        ChatCompletionMessageParam,
    )

# OpenAI-compatible servers (Ollama, vLLM, llama.cpp) ignore the key, but the SDK refuses to build
# a client without one; this stands in so OPENAI_BASE_URL alone is a working configuration.
KEYLESS_PLACEHOLDER = "sigil-no-api-key"

# Only identifiers from an error body are repeated: upstream messages can quote part of the key.
_SAFE_CODE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


class OpenAIProvider:
    name = "openai"

    def __init__(
        self,
        api_key: str | None,
        base_url: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        *,
        deadline_s: float | None = None,
    ) -> None:
        """`timeout_s` bounds each wait on the network (the gap between two chunks); `deadline_s`
        the whole call, from its start to its last chunk (shared.deadline)."""
        with gc_paused():  # the SDK's import, most of a cold container's first turn (shared.coldstart)
            import httpx2
            import openai

            from shared.providers.http_deadline import deadline_client_options

        self.base_url = base_url
        self.deadline_s = deadline_s
        self._api_key = api_key or KEYLESS_PLACEHOLDER
        self._client: openai.OpenAI = openai.OpenAI(
            api_key=self._api_key,
            base_url=base_url,
            timeout=timeout_s,
            max_retries=max_retries,
            http_client=openai.DefaultHttpxClient(**deadline_client_options(openai.OpenAIError)),
        )
        self._sdk_error: type[openai.OpenAIError] = openai.OpenAIError
        self._connection_error: type[openai.APIConnectionError] = openai.APIConnectionError
        self._transport_error: type[httpx2.TransportError] = httpx2.TransportError

    def stream(self, request: ChatRequest) -> Iterator[ProviderEvent]:
        at = within(self.deadline_s)
        try:
            check(at)
            with deadline(at):  # the connect and the wait for the headers
                response = self._client.chat.completions.create(stream=True, **self._params(request))
            # `with` closes the HTTP response even when the caller stops reading early, or the
            # deadline cuts the stream.
            with response as chunks:
                yield from _translate_stream(bounded(at, iter(chunks)))
        except DeadlineExceeded:
            # The transport's is also the SDK's own error type (so the SDK does not retry it).
            raise DeadlineExceeded() from None
        except (self._sdk_error, self._transport_error) as exc:
            if cut_by(at):
                raise DeadlineExceeded() from None
            # Timeouts are APIConnectionErrors too; both are worth another try.
            connection = isinstance(exc, self._connection_error | self._transport_error)
            retryable, after = (True, None) if connection else http_error_retry(exc)
            raise ProviderError(self._safe_message(exc), retryable=retryable, retry_after_s=after) from None
        except json.JSONDecodeError:
            # A compatible server that breaks the SSE framing: nothing useful to quote from it.
            raise ProviderError("the model server sent a malformed stream") from None

    def _params(self, request: ChatRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": request.model,
            # One system message, the static prefix first: OpenAI caches the longest prefix it has
            # seen (tools, then messages) automatically, so the prefix need only stay byte-stable.
            "messages": to_openai_messages(request.system, request.messages, request.images),
            "stream_options": {"include_usage": True},
        }
        if request.cache_key:
            # Routes a session's calls to the machines that hold its prefix (OpenAI's prompt
            # caching guide); compatible servers ignore a field they do not know.
            params["prompt_cache_key"] = request.cache_key
        if request.tools:
            params["tools"] = [to_openai_tool(t) for t in request.tools]
        if request.max_tokens is not None:
            # OpenAI's reasoning models accept only the newer name; compatible servers mostly know
            # only the older one.
            key = "max_completion_tokens" if self.base_url is None else "max_tokens"
            params[key] = request.max_tokens
        if request.temperature is not None:
            params["temperature"] = request.temperature
        return params

    def _safe_message(self, exc: Exception) -> str:
        return safe_error_message(exc, "the model provider", self._api_key)

    def probe(self, timeout_s: float) -> str | None:
        """What is wrong with the endpoint, in one line, or None (shared.providers.probe)."""
        import openai

        where = str(self._client.base_url).rstrip("/")
        return probe_endpoint(openai, self._client, where, timeout_s, self._api_key)


def safe_error_message(exc: Exception, what: str, api_key: str | None) -> str:
    """An SDK error as identifiers only (type, HTTP status, code, request id), never the
    upstream message, which can quote part of the key; the key itself is scrubbed besides."""
    parts = [f"{what} failed ({type(exc).__name__}"]
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        parts.append(f", HTTP {status}")
    code = getattr(exc, "code", None)
    if isinstance(code, str) and _SAFE_CODE.match(code):
        parts.append(f", code {code}")
    request_id = getattr(exc, "request_id", None)
    if isinstance(request_id, str) and _SAFE_CODE.match(request_id):
        parts.append(f", request {request_id}")
    cause = None if isinstance(status, int) else connection_cause(exc)
    if cause:
        # What the socket said (refused, no such host): the cause a log line needs.
        parts.append(f": {cause}")
    message = "".join(parts) + ")"
    return message.replace(api_key, "[redacted]") if api_key else message


# ---------------------------------------------------------------- request translation


def to_openai_messages(
    system: str, messages: Iterable[Message], images: Mapping[str, ImageData] | None = None
) -> list[ChatCompletionMessageParam]:
    out: list[ChatCompletionMessageParam] = []
    if system:
        out.append({"role": "system", "content": system})
    for m in messages:
        if isinstance(m, UserMessage):
            out.append({"role": "user", "content": _user_content(m, images or {})})
        elif isinstance(m, AssistantMessage):
            out.append(_assistant(m))
        elif isinstance(m, ToolResultMessage):
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
    return out


def _user_content(m: UserMessage, images: Mapping[str, ImageData]) -> Any:
    """A plain string for a message without photos (byte-identical to before, for the prompt
    cache); content parts with each photo as an `image_url` data URL otherwise (OpenAI's vision
    guide; compatible servers that see images take the same shape)."""
    if not m.images:
        return m.content
    parts: list[dict[str, Any]] = []
    for part in user_parts(m, images):
        if isinstance(part, ImageData):
            url = f"data:{part.mime_type};base64,{base64.b64encode(part.data).decode()}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        else:
            parts.append({"type": "text", "text": part})
    return parts


def _assistant(m: AssistantMessage) -> ChatCompletionMessageParam:
    if not m.tool_calls:
        return {"role": "assistant", "content": m.content}
    return {
        "role": "assistant",
        # The API wants null rather than "" beside tool calls.
        "content": m.content or None,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in m.tool_calls
        ],
    }


def to_openai_tool(spec: ToolSpec) -> ChatCompletionFunctionToolParam:
    return {
        "type": "function",
        "function": {"name": spec.name, "description": spec.description, "parameters": spec.parameters},
    }


# ---------------------------------------------------------------- stream translation


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: str = ""


def _translate_stream(chunks: Iterable[ChatCompletionChunk]) -> Iterator[ProviderEvent]:
    """Text as it arrives; each tool call once, complete, when the choice finishes; then usage, Done."""
    calls: dict[int, _PartialCall] = {}
    refusal: list[str] = []
    finish_reason: str | None = None
    usage: Usage | None = None
    for chunk in chunks:
        if chunk.usage is not None:
            details = chunk.usage.prompt_tokens_details
            # prompt_tokens counts the cached ones; OpenAI bills no cache write.
            cached = (details.cached_tokens or 0) if details is not None else 0
            usage = Usage(
                input_tokens=chunk.usage.prompt_tokens,
                output_tokens=chunk.usage.completion_tokens,
                cache_read_tokens=cached,
            )
        for choice in chunk.choices:
            if choice.index != 0:  # we never ask for n > 1
                continue
            delta = choice.delta
            if delta.content:
                yield TextDelta(text=delta.content)
            if delta.refusal:
                refusal.append(delta.refusal)
            for frag in delta.tool_calls or ():
                call = calls.setdefault(frag.index, _PartialCall())
                call.id = frag.id or call.id
                if frag.function is not None:
                    call.name = frag.function.name or call.name
                    call.arguments += frag.function.arguments or ""
            if choice.finish_reason is not None:
                finish_reason = choice.finish_reason
                # Calls are emitted only now: a compatible server may interleave their fragments.
                yield from _complete_calls(calls)
                calls.clear()
    if finish_reason is None:
        # A cut connection must not pass for a finished answer (it would be committed as one).
        raise ProviderError("the model stream ended before the model finished", retryable=True)
    if usage is not None:
        yield usage
    if refusal:
        yield Done(finish_reason="refusal", refusal="".join(refusal))
    else:
        yield Done(finish_reason=finish_reason)


def _complete_calls(calls: dict[int, _PartialCall]) -> Iterator[ToolCallEvent]:
    for _, c in sorted(calls.items()):
        # A call without parameters streams no argument text; "{}" is what the API expects back.
        yield ToolCallEvent(call=ToolCall(id=c.id, name=c.name, arguments=c.arguments or "{}"))

"""Amazon Bedrock's Converse API (ConverseStream) behind the Provider contract, through boto3.

Converse gives every Bedrock model one message shape, so this provider does not care which model
family answers. Credentials come from boto3's usual chain (the Lambda role in the cloud); no key
is configured here. boto3 is imported, and the bedrock-runtime client built, on the first call.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Final

from shared.deadline import bounded, check, cut_by, deadline, remaining, within
from shared.deadline.boto import bound_to_deadline
from shared.errors import DeadlineExceeded, ProviderError
from shared.models import AssistantMessage, Message, ToolCall, UserMessage
from shared.providers.anthropic import tool_input  # cheap: that module imports its SDK only when built
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
from shared.providers.resilient import is_retryable_status, retry_after_s

Json = dict[str, Any]

FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}

# Error codes worth another call. Errors inside the event stream name their member
# ("throttlingException"), those of the HTTP response their shape ("ThrottlingException"), so the
# comparison ignores case.
RETRYABLE_CODES = frozenset(
    code.lower()
    for code in (
        "ThrottlingException",
        "ServiceUnavailableException",
        "InternalServerException",
        "ModelNotReadyException",
        "ModelTimeoutException",
        "ModelStreamErrorException",
    )
)

_SAFE_CODE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")

_build_lock = threading.Lock()


@cache
def bedrock_client(region: str, max_attempts: int = 3, timeout_s: float = 60.0) -> Any:
    """One bedrock-runtime client per (region, retries, timeout) for the life of the process.

    Not shared.adapters.aws.clients: that factory's fixed retry policy and timeouts suit the
    adapters' short calls, not a model stream, and ResilientProvider wants botocore's retries off.
    """
    import boto3
    from botocore.config import Config

    config = Config(
        # `max_attempts` counts the first call, as ResilientProvider's does; standard mode retries
        # throttling and transient errors with jittered backoff.
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        read_timeout=timeout_s,
        connect_timeout=min(timeout_s, 10.0),
    )
    # boto3-stubs' overloads want a literal service name and the bedrock-runtime stubs are not
    # installed; the provider only relies on converse_stream's documented shape.
    build: Any = boto3.client
    with _build_lock:  # boto3's default session is not thread-safe while it builds a client
        client = build("bedrock-runtime", region_name=region, config=config)
    # The turn's deadline bounds the call's connect, its wait for the headers and its retries
    # (the stream's reads are cut by `_cut_reads`); a Titan embedding's whole call.
    return bound_to_deadline(client)


class BedrockProvider:
    name = "bedrock"

    def __init__(
        self,
        region: str,
        client: Any = None,
        *,
        max_attempts: int = 3,
        timeout_s: float = 60.0,
        deadline_s: float | None = None,
    ) -> None:
        """`timeout_s` bounds each wait on the network (the gap between two events); `deadline_s`
        the whole call, from its start to its last event (shared.deadline)."""
        self.region = region
        self.deadline_s = deadline_s
        self._client = client
        self._max_attempts = max_attempts
        self._timeout_s = timeout_s

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = bedrock_client(self.region, self._max_attempts, self._timeout_s)
        return self._client

    def stream(self, request: ChatRequest) -> Iterator[ProviderEvent]:
        from botocore.exceptions import BotoCoreError, ClientError
        from urllib3.exceptions import HTTPError

        at = within(self.deadline_s)
        try:
            check(at)
            with deadline(at):  # the connect and the wait for the headers, retries included
                response = self.client.converse_stream(**converse_params(request))
            stream = response.get("stream")
            if stream is None:
                raise ProviderError("the model stream ended before the model finished", retryable=True)
            try:
                events = _cut_reads(at, stream, self.client.meta.config.read_timeout)
                yield from translate_stream(bounded(at, events))
            finally:
                close = getattr(stream, "close", None)
                if close is not None:  # release the HTTP connection when the caller stops early
                    close()
        except DeadlineExceeded:
            raise
        except ClientError as exc:
            raise DeadlineExceeded() if cut_by(at) else _client_error(exc) from None
        except BotoCoreError as exc:
            raise DeadlineExceeded() if cut_by(at) else _botocore_error(exc) from None
        except HTTPError as exc:
            # botocore's event stream lets urllib3's own errors through (a read timeout, a
            # connection dropped mid-stream).
            if cut_by(at):
                raise DeadlineExceeded() from None
            raise ProviderError(f"the model provider failed ({type(exc).__name__})", retryable=True) from None


def _cut_reads(at: float | None, stream: Any, read_timeout: float | None) -> Iterator[Mapping[str, Any]]:
    """The event stream, its socket's timeout cut to the time left before each event is read.

    botocore sets the socket's timeout once, to read_timeout, for every read of the response: a
    read that starts just before the deadline would otherwise wait that long past it. The socket is
    the one under the stream's urllib3 response (botocore keeps it as `_raw_stream`); a stream with
    none (a test's stand-in body) is only checked between events, by `bounded`.
    """
    raw = getattr(stream, "_raw_stream", None)
    connection = getattr(raw, "connection", None)
    sock = getattr(connection, "sock", None)
    events = iter(stream)
    while True:
        left = remaining(at)
        if sock is not None and left is not None:
            sock.settimeout(max(0.001, left if read_timeout is None else min(read_timeout, left)))
        try:
            event = next(events)
        except StopIteration:
            return
        yield event


# ---------------------------------------------------------------- request translation


# Converse's prompt-cache checkpoint: the prompt up to it is cached (tools, then system, then
# messages). Only some model families accept one; the others refuse the request with a
# ValidationException, so it is sent to those alone (docs/context.md, "Prompt caching").
CACHE_POINT: Json = {"cachePoint": {"type": "default"}}
CACHING_FAMILIES: Final = ("anthropic.claude", "amazon.nova")


def caches_prompts(model_id: str) -> bool:
    """Whether Converse takes cache points for this model id (or inference profile, or ARN)."""
    model = model_id.rsplit("/", 1)[-1].lower()
    return any(family in model for family in CACHING_FAMILIES)


def converse_params(request: ChatRequest) -> Json:
    params: Json = {
        "modelId": request.model,
        "messages": to_converse_messages(request.messages, request.images),
    }
    static, context = system_parts(request)
    system: list[Json] = []
    if static:
        system.append({"text": static})
        if caches_prompts(request.model):
            system.append(dict(CACHE_POINT))  # the static prefix ends here; the tools come before it
    if context:
        system.append({"text": context})
    if system:
        params["system"] = system
    if request.tools:
        params["toolConfig"] = {"tools": [to_converse_tool(t) for t in request.tools]}
    inference: Json = {}
    if request.max_tokens is not None:
        inference["maxTokens"] = request.max_tokens
    if request.temperature is not None:
        inference["temperature"] = request.temperature
    if inference:
        params["inferenceConfig"] = inference
    return params


def to_converse_messages(
    messages: Iterable[Message], images: Mapping[str, ImageData] | None = None
) -> list[Json]:
    """Converse turns: tool results are user `toolResult` blocks, and turns of the same role in a
    row are merged, since Converse wants user and assistant to alternate."""
    return alternating_turns(messages, lambda m: _turn(m, images or {}))


# Converse's ImageBlock names the format, not the MIME type; boto3 sends the bytes base64-encoded.
IMAGE_FORMATS: Final = {"image/png": "png", "image/jpeg": "jpeg", "image/gif": "gif", "image/webp": "webp"}


def _user_block(part: str | ImageData) -> Json:
    if isinstance(part, str):
        return {"text": part}
    return {"image": {"format": IMAGE_FORMATS.get(part.mime_type, "jpeg"), "source": {"bytes": part.data}}}


def _turn(m: Message, images: Mapping[str, ImageData]) -> tuple[str, list[Json]]:
    if isinstance(m, UserMessage):
        return "user", [_user_block(part) for part in user_parts(m, images)]
    if isinstance(m, AssistantMessage):
        # Converse refuses blank text blocks, which an assistant turn that only called tools has.
        blocks: list[Json] = [{"text": m.content}] if m.content else []
        for c in m.tool_calls:
            blocks.append({"toolUse": {"toolUseId": c.id, "name": c.name, "input": tool_input(c)}})
        return "assistant", blocks
    result: Json = {
        "toolUseId": m.tool_call_id,
        "content": [{"text": m.content}],
        "status": "error" if m.is_error else "success",
    }
    return "user", [{"toolResult": result}]


def to_converse_tool(spec: ToolSpec) -> Json:
    tool: Json = {"name": spec.name, "inputSchema": {"json": spec.parameters}}
    if spec.description:  # the API refuses an empty description
        tool["description"] = spec.description
    return {"toolSpec": tool}


# ---------------------------------------------------------------- stream translation


@dataclass
class _ToolBlock:
    id: str
    name: str
    fragments: list[str] = field(default_factory=list)


def translate_stream(events: Iterable[Mapping[str, Any]]) -> Iterator[ProviderEvent]:
    """ConverseStream events (dicts, as botocore parses them) as our events.

    Text as it arrives; each tool call when its block stops; usage, which comes in the `metadata`
    event after `messageStop`; then Done.
    """
    tools: dict[int, _ToolBlock] = {}
    stop_reason: str | None = None
    usage: Usage | None = None
    for event in events:
        if "contentBlockStart" in event:
            body = event["contentBlockStart"]
            tool = body.get("start", {}).get("toolUse")
            if tool is not None:
                tools[body["contentBlockIndex"]] = _ToolBlock(tool["toolUseId"], tool["name"])
        elif "contentBlockDelta" in event:
            body = event["contentBlockDelta"]
            delta = body.get("delta", {})
            if delta.get("text"):
                yield TextDelta(text=delta["text"])
            elif "toolUse" in delta and body["contentBlockIndex"] in tools:
                tools[body["contentBlockIndex"]].fragments.append(delta["toolUse"].get("input", ""))
        elif "contentBlockStop" in event:
            call = tools.pop(event["contentBlockStop"]["contentBlockIndex"], None)
            if call is not None:
                yield ToolCallEvent(call=_complete(call))
        elif "messageStop" in event:
            stop_reason = event["messageStop"]["stopReason"]
        elif "metadata" in event:
            u = event["metadata"].get("usage", {})
            # Cached prompt tokens are counted apart from inputTokens; the prompt is their sum.
            read, write = u.get("cacheReadInputTokens", 0), u.get("cacheWriteInputTokens", 0)
            usage = Usage(
                input_tokens=u.get("inputTokens", 0) + read + write,
                output_tokens=u.get("outputTokens", 0),
                cache_read_tokens=read,
                cache_write_tokens=write,
            )
    if stop_reason is None:
        # A cut connection must not pass for a finished answer (it would be committed as one).
        raise ProviderError("the model stream ended before the model finished", retryable=True)
    if stop_reason in ("malformed_model_output", "malformed_tool_use"):
        raise ProviderError(
            f"the model's output could not be parsed (stop reason {stop_reason})", retryable=True
        )
    # A tool block still open here was cut by max_tokens: its input is incomplete JSON, so it is
    # dropped, and the "length" finish reason says the answer was cut.
    if usage is not None:
        yield usage
    yield Done(finish_reason=FINISH_REASONS.get(stop_reason, stop_reason))


def _complete(block: _ToolBlock) -> ToolCall:
    arguments = "".join(block.fragments) or "{}"
    try:
        json.loads(arguments)
    except json.JSONDecodeError:
        raise ProviderError(
            f"the model sent tool call {block.name!r} with arguments that are not valid JSON"
        ) from None
    return ToolCall(id=block.id, name=block.name, arguments=arguments)


# ---------------------------------------------------------------- errors


def _client_error(exc: Any) -> ProviderError:
    """A ProviderError from botocore's ClientError (HTTP errors and in-stream exception events).

    Only the code, status and request id are repeated: AWS messages name accounts and roles.
    """
    error = exc.response.get("Error", {})
    meta = exc.response.get("ResponseMetadata", {})
    code = str(error.get("Code", ""))
    status = meta.get("HTTPStatusCode")
    kind = type(exc).__name__
    parts = [f"the model provider failed ({kind}"]
    if isinstance(status, int) and status >= 400:
        parts.append(f", HTTP {status}")
    # botocore names a modeled error's class after its code: the code is added only when it differs.
    if _SAFE_CODE.match(code) and code.lower() != kind.lower():
        parts.append(f", code {code}")
    request_id = meta.get("RequestId")
    if isinstance(request_id, str) and _SAFE_CODE.match(request_id):
        parts.append(f", request {request_id}")
    retryable = code.lower() in RETRYABLE_CODES or (isinstance(status, int) and is_retryable_status(status))
    after = retry_after_s(meta.get("HTTPHeaders"))
    return ProviderError("".join(parts) + ")", retryable=retryable, retry_after_s=after)


def _botocore_error(exc: Exception) -> ProviderError:
    from botocore.exceptions import (
        ConnectionClosedError,
        ConnectTimeoutError,
        EndpointConnectionError,
        ReadTimeoutError,
        ResponseStreamingError,
    )

    transient = (
        ConnectionClosedError,
        ConnectTimeoutError,
        EndpointConnectionError,
        ReadTimeoutError,
        ResponseStreamingError,
    )
    # Credentials missing, a parameter botocore refused: no retry changes those.
    return ProviderError(
        f"the model provider failed ({type(exc).__name__})", retryable=isinstance(exc, transient)
    )

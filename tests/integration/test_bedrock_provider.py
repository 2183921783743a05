"""BedrockProvider on a real botocore bedrock-runtime client.

botocore's Stubber cannot answer converse_stream with an event stream: it validates the stubbed
response against the output shape, where `stream` must be a dict (one event), never an
EventStream. So the streaming tests answer the client's HTTP request itself (a `before-send`
hook) with binary event-stream frames in the AWS wire format, which botocore's own parser turns
into a real EventStream; the request they capture is what botocore serialised, after validating
it against the service model. Stubber drives the error responses, and `translate_stream` is also
fed event dicts from lists for the edge cases.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders
from botocore.config import Config
from botocore.stub import Stubber

from shared.config import Settings
from shared.errors import ModelNotConfigured, ProviderError
from shared.models import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from shared.providers import build_provider
from shared.providers.base import ChatRequest, Done, ProviderEvent, TextDelta, ToolCallEvent, ToolSpec, Usage
from shared.providers.bedrock import BedrockProvider, bedrock_client, translate_stream
from tests.support.fake_bedrock import event, frame

MODEL = "anthropic.claude-sonnet-4-6-v1:0"
Json = dict[str, Any]


# ---------------------------------------------------------------- the AWS event-stream wire format


def exception(name: str, message: str) -> bytes:
    headers = {":exception-type": name, ":content-type": "application/json", ":message-type": "exception"}
    return frame(headers, json.dumps({"message": message}).encode())


def metadata(input_tokens: int, output_tokens: int) -> bytes:
    usage = {
        "inputTokens": input_tokens,
        "outputTokens": output_tokens,
        "totalTokens": input_tokens + output_tokens,
    }
    return event("metadata", {"usage": usage, "metrics": {"latencyMs": 412}})


TEXT_STREAM = [
    event("messageStart", {"role": "assistant"}),
    event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hello"}}),
    event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": " there"}}),
    event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "!"}}),
    event("contentBlockStop", {"contentBlockIndex": 0}),
    event("messageStop", {"stopReason": "end_turn"}),
    metadata(11, 6),
]


def tool_use_stream(stop: str = "tool_use", *, close_tool: bool = True) -> list[bytes]:
    frames = [
        event("messageStart", {"role": "assistant"}),
        event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Checking Paris."}}),
        event("contentBlockStop", {"contentBlockIndex": 0}),
        event(
            "contentBlockStart",
            {
                "contentBlockIndex": 1,
                "start": {"toolUse": {"toolUseId": "tooluse_7Qz", "name": "get_weather"}},
            },
        ),
        *(
            event("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": part}}})
            for part in ('{"locati', 'on": "P', "ar", 'is"}')
        ),
    ]
    if close_tool:
        frames.append(event("contentBlockStop", {"contentBlockIndex": 1}))
    return [*frames, event("messageStop", {"stopReason": stop}), metadata(377, 65)]


class _Body:
    """What botocore reads an event-stream response from: chunks, cut across frame boundaries."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.closed = False

    def stream(self, **_: object) -> Iterator[bytes]:
        for start in range(0, len(self.data), 37):
            yield self.data[start : start + 37]

    def close(self) -> None:
        self.closed = True


class WireBedrock:
    """A real bedrock-runtime client whose ConverseStream calls get these frames over "HTTP"."""

    def __init__(self) -> None:
        session = boto3.session.Session(
            aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="not-a-secret", region_name="us-east-1"
        )
        self.client = session.client("bedrock-runtime", config=Config(retries={"total_max_attempts": 1}))
        self.client.meta.events.register("before-send.bedrock-runtime.ConverseStream", self._send)
        self.bodies: list[Json] = []
        self.paths: list[str] = []
        self._replies: list[list[bytes]] = []
        self.last: _Body | None = None

    def reply(self, frames: list[bytes]) -> WireBedrock:
        self._replies.append(frames)
        return self

    def _send(self, request: Any, **_: object) -> AWSResponse:
        self.bodies.append(json.loads(request.body))
        self.paths.append(request.url)
        self.last = _Body(b"".join(self._replies.pop(0)))
        headers = HTTPHeaders()
        headers["content-type"] = "application/vnd.amazon.eventstream"
        headers["x-amzn-requestid"] = "req-wire-1"
        return AWSResponse(request.url, 200, headers, self.last)


@pytest.fixture
def wire() -> WireBedrock:
    return WireBedrock()


def ask(text: str = "hello") -> ChatRequest:
    return ChatRequest(model=MODEL, system="be brief", messages=[UserMessage(content=text)])


def run(provider: BedrockProvider, request: ChatRequest | None = None) -> list[ProviderEvent]:
    return list(provider.stream(request or ask()))


def text_of(events: list[ProviderEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def calls_of(events: list[ProviderEvent]) -> list[ToolCall]:
    return [e.call for e in events if isinstance(e, ToolCallEvent)]


# ---------------------------------------------------------------- streams through botocore's parser


def test_a_text_answer_streams_its_deltas_usage_and_done(wire: WireBedrock) -> None:
    wire.reply(TEXT_STREAM)
    events = run(BedrockProvider("us-east-1", client=wire.client))
    assert events == [
        TextDelta(text="Hello"),
        TextDelta(text=" there"),
        TextDelta(text="!"),
        Usage(input_tokens=11, output_tokens=6),  # from the metadata event after messageStop
        Done(finish_reason="stop"),
    ]
    assert wire.paths[0].endswith(f"/model/{MODEL.replace(':', '%3A')}/converse-stream")
    assert wire.last is not None and wire.last.closed


def test_a_tool_use_block_becomes_one_complete_tool_call(wire: WireBedrock) -> None:
    wire.reply(tool_use_stream())
    events = run(BedrockProvider("us-east-1", client=wire.client))
    assert text_of(events) == "Checking Paris."
    assert calls_of(events) == [
        ToolCall(id="tooluse_7Qz", name="get_weather", arguments='{"location": "Paris"}')
    ]
    assert [type(e) for e in events[-3:]] == [ToolCallEvent, Usage, Done]
    assert events[-2:] == [Usage(input_tokens=377, output_tokens=65), Done(finish_reason="tool_calls")]


def test_a_tool_call_cut_by_max_tokens_is_dropped_and_the_finish_says_length(wire: WireBedrock) -> None:
    wire.reply(tool_use_stream("max_tokens", close_tool=False))
    events = run(BedrockProvider("us-east-1", client=wire.client))
    assert calls_of(events) == []
    assert events[-1] == Done(finish_reason="length")


def test_an_exception_event_inside_the_stream_is_a_retryable_error(wire: WireBedrock) -> None:
    wire.reply([event("messageStart", {"role": "assistant"}), exception("throttlingException", "slow down")])
    with pytest.raises(ProviderError) as info:
        run(BedrockProvider("us-east-1", client=wire.client))
    assert info.value.retryable
    assert "throttlingException" in info.value.message
    assert "slow down" not in info.value.message  # AWS messages are not repeated


def test_a_validation_exception_event_is_not_retryable(wire: WireBedrock) -> None:
    wire.reply([event("messageStart", {"role": "assistant"}), exception("validationException", "bad input")])
    with pytest.raises(ProviderError, match="validationException") as info:
        run(BedrockProvider("us-east-1", client=wire.client))
    assert not info.value.retryable


def test_a_stream_cut_before_message_stop_is_a_retryable_error(wire: WireBedrock) -> None:
    wire.reply(TEXT_STREAM[:3])
    with pytest.raises(ProviderError, match="ended before") as info:
        run(BedrockProvider("us-east-1", client=wire.client))
    assert info.value.retryable


# ---------------------------------------------------------------- request translation


def test_all_message_kinds_and_tools_are_translated(wire: WireBedrock) -> None:
    wire.reply(TEXT_STREAM)
    calls = [
        ToolCall(id="tooluse_1", name="get_weather", arguments='{"city":"Oslo"}'),
        ToolCall(id="tooluse_2", name="get_weather", arguments='{"city":"Bergen"}'),
    ]
    request = ChatRequest(
        model=MODEL,
        system="You are Sigil.",
        messages=[
            UserMessage(content="weather in Oslo and Bergen?"),
            AssistantMessage(content="", tool_calls=calls),
            ToolResultMessage(tool_call_id="tooluse_1", name="get_weather", content='{"temp_c": 3}'),
            ToolResultMessage(tool_call_id="tooluse_2", name="get_weather", content="timeout", is_error=True),
            AssistantMessage(content="It is 3 °C in Oslo."),
            UserMessage(content="thanks"),
        ],
        tools=[
            ToolSpec(
                name="get_weather",
                description="Current weather for a city.",
                parameters={"type": "object", "properties": {"city": {"type": "string"}}},
            )
        ],
        max_tokens=200,
        temperature=0.2,
    )
    run(BedrockProvider("us-east-1", client=wire.client), request)
    body = wire.bodies[0]  # as botocore serialised it, after validating it against the model
    assert body["system"] == [{"text": "You are Sigil."}]
    assert body["messages"] == [
        {"role": "user", "content": [{"text": "weather in Oslo and Bergen?"}]},
        {  # no blank text block beside the calls: Converse refuses those
            "role": "assistant",
            "content": [
                {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather", "input": {"city": "Oslo"}}},
                {"toolUse": {"toolUseId": "tooluse_2", "name": "get_weather", "input": {"city": "Bergen"}}},
            ],
        },
        {  # consecutive tool results share one user turn: Converse wants the roles to alternate
            "role": "user",
            "content": [
                {
                    "toolResult": {
                        "toolUseId": "tooluse_1",
                        "content": [{"text": '{"temp_c": 3}'}],
                        "status": "success",
                    }
                },
                {
                    "toolResult": {
                        "toolUseId": "tooluse_2",
                        "content": [{"text": "timeout"}],
                        "status": "error",
                    }
                },
            ],
        },
        {"role": "assistant", "content": [{"text": "It is 3 °C in Oslo."}]},
        {"role": "user", "content": [{"text": "thanks"}]},
    ]
    assert body["toolConfig"] == {
        "tools": [
            {
                "toolSpec": {
                    "name": "get_weather",
                    "description": "Current weather for a city.",
                    "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}}},
                }
            }
        ]
    }
    assert body["inferenceConfig"] == {"maxTokens": 200, "temperature": 0.2}


def test_unset_options_are_left_out(wire: WireBedrock) -> None:
    wire.reply(TEXT_STREAM)
    run(
        BedrockProvider("us-east-1", client=wire.client),
        ChatRequest(model=MODEL, system="", messages=[UserMessage(content="hi")]),
    )
    assert wire.bodies[0] == {"messages": [{"role": "user", "content": [{"text": "hi"}]}]}


# ---------------------------------------------------------------- errors through Stubber


@pytest.fixture
def stubbed() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.session.Session(
        aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="not-a-secret", region_name="us-east-1"
    ).client("bedrock-runtime")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def test_throttling_is_retryable_and_carries_retry_after(stubbed: tuple[Any, Stubber]) -> None:
    client, stubber = stubbed
    stubber.add_client_error(
        "converse_stream",
        service_error_code="ThrottlingException",
        service_message="Too many requests, please wait before trying again.",
        http_status_code=429,
        response_meta={"HTTPHeaders": {"retry-after": "2"}, "RequestId": "0c2a-req"},
        expected_params={
            "modelId": MODEL,
            "messages": [{"role": "user", "content": [{"text": "hello"}]}],
            "system": [{"text": "be brief"}],
        },
    )
    with pytest.raises(ProviderError) as info:
        run(BedrockProvider("us-east-1", client=client))
    err = info.value
    assert (err.retryable, err.retry_after_s) == (True, 2.0)
    assert err.message == "the model provider failed (ThrottlingException, HTTP 429, request 0c2a-req)"


@pytest.mark.parametrize(
    ("code", "status", "retryable"),
    [
        ("ServiceUnavailableException", 503, True),
        ("ModelNotReadyException", 429, True),
        ("InternalServerException", 500, True),
        ("ValidationException", 400, False),
        ("ResourceNotFoundException", 404, False),
    ],
)
def test_each_error_code_is_classified(
    stubbed: tuple[Any, Stubber], code: str, status: int, retryable: bool
) -> None:
    client, stubber = stubbed
    stubber.add_client_error("converse_stream", service_error_code=code, http_status_code=status)
    with pytest.raises(ProviderError, match=code) as info:
        run(BedrockProvider("us-east-1", client=client))
    assert info.value.retryable is retryable


def test_access_denied_names_no_account_or_role(stubbed: tuple[Any, Stubber]) -> None:
    client, stubber = stubbed
    message = "User: arn:aws:sts::123456789012:assumed-role/sigil-agent/fn is not authorized"
    stubber.add_client_error(
        "converse_stream",
        service_error_code="AccessDeniedException",
        service_message=message,
        http_status_code=403,
    )
    with pytest.raises(ProviderError) as info:
        run(BedrockProvider("us-east-1", client=client))
    assert not info.value.retryable
    assert "123456789012" not in str(info.value) and "sigil-agent" not in str(info.value)


def test_an_unreachable_endpoint_is_a_retryable_error() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = boto3.session.Session(
        aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="not-a-secret", region_name="us-east-1"
    ).client(
        "bedrock-runtime",
        endpoint_url=f"http://127.0.0.1:{port}",
        config=Config(retries={"total_max_attempts": 1}, connect_timeout=1),
    )
    with pytest.raises(ProviderError, match="EndpointConnectionError") as info:
        run(BedrockProvider("us-east-1", client=client))
    assert info.value.retryable


# ---------------------------------------------------------------- stream events fed from lists


def test_parallel_tool_calls_each_come_complete_in_order() -> None:
    def start(i: int, name: str) -> Json:
        return {
            "contentBlockStart": {
                "contentBlockIndex": i,
                "start": {"toolUse": {"toolUseId": f"t{i}", "name": name}},
            }
        }

    def part(i: int, text: str) -> Json:
        return {"contentBlockDelta": {"contentBlockIndex": i, "delta": {"toolUse": {"input": text}}}}

    events = list(
        translate_stream(
            [
                {"messageStart": {"role": "assistant"}},
                start(0, "get_weather"),
                start(1, "get_time"),
                part(0, '{"city": '),
                part(1, '{"tz": "CET"}'),
                part(0, '"Oslo"}'),
                {"contentBlockStop": {"contentBlockIndex": 0}},
                {"contentBlockStop": {"contentBlockIndex": 1}},
                {"messageStop": {"stopReason": "tool_use"}},
            ]
        )
    )
    assert calls_of(events) == [
        ToolCall(id="t0", name="get_weather", arguments='{"city": "Oslo"}'),
        ToolCall(id="t1", name="get_time", arguments='{"tz": "CET"}'),
    ]
    assert events[-1] == Done(finish_reason="tool_calls")  # no metadata event: no Usage either


def test_a_tool_without_input_gets_an_empty_object() -> None:
    start = {
        "contentBlockStart": {
            "contentBlockIndex": 0,
            "start": {"toolUse": {"toolUseId": "t0", "name": "ping"}},
        }
    }
    events = list(
        translate_stream(
            [
                start,
                {"contentBlockStop": {"contentBlockIndex": 0}},
                {"messageStop": {"stopReason": "tool_use"}},
            ]
        )
    )
    assert calls_of(events) == [ToolCall(id="t0", name="ping", arguments="{}")]


def test_a_closed_tool_block_with_broken_json_is_an_error_not_a_call() -> None:
    start = {
        "contentBlockStart": {
            "contentBlockIndex": 0,
            "start": {"toolUse": {"toolUseId": "t0", "name": "make_file"}},
        }
    }
    broken = {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"toolUse": {"input": '{"lines": ['}}}}
    seen: list[ProviderEvent] = []
    with pytest.raises(ProviderError, match="not valid JSON"):
        seen.extend(translate_stream([start, broken, {"contentBlockStop": {"contentBlockIndex": 0}}]))
    assert seen == []


@pytest.mark.parametrize(
    ("stop", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("guardrail_intervened", "content_filter"),
        ("content_filtered", "content_filter"),
    ],
)
def test_stop_reasons_map_to_finish_reasons(stop: str, finish: str) -> None:
    assert list(translate_stream([{"messageStop": {"stopReason": stop}}])) == [Done(finish_reason=finish)]


def test_a_malformed_tool_use_stop_is_a_retryable_error() -> None:
    with pytest.raises(ProviderError, match="malformed_tool_use") as info:
        list(translate_stream([{"messageStop": {"stopReason": "malformed_tool_use"}}]))
    assert info.value.retryable


def test_cached_prompt_tokens_count_as_input() -> None:
    usage = {
        "inputTokens": 5,
        "outputTokens": 2,
        "totalTokens": 7,
        "cacheReadInputTokens": 100,
        "cacheWriteInputTokens": 20,
    }
    events = list(
        translate_stream([{"messageStop": {"stopReason": "end_turn"}}, {"metadata": {"usage": usage}}])
    )
    assert events == [
        Usage(input_tokens=125, output_tokens=2, cache_read_tokens=100, cache_write_tokens=20),
        Done(finish_reason="stop"),
    ]


# ---------------------------------------------------------------- registry and client factory


def test_the_registry_builds_bedrock_without_building_a_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_REGION", raising=False)
    provider, model = build_provider(Settings(bedrock_region="eu-central-1"), f"bedrock/{MODEL}")
    assert isinstance(provider, BedrockProvider)
    assert (provider.name, provider.region, model) == ("bedrock", "eu-central-1", MODEL)
    assert provider._client is None  # boto3 is loaded by the first call, not by the build


def test_bedrock_region_defaults_to_aws_region(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_REGION", "ap-southeast-2")
    provider, _ = build_provider(Settings(), f"bedrock/{MODEL}")
    assert isinstance(provider, BedrockProvider) and provider.region == "ap-southeast-2"


def test_bedrock_without_a_region_says_which_variables_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_REGION", raising=False)
    with pytest.raises(ModelNotConfigured, match="SIGIL_BEDROCK_REGION"):
        build_provider(Settings(), f"bedrock/{MODEL}")


def test_the_client_comes_from_a_cached_factory_on_first_use() -> None:
    provider = BedrockProvider("eu-west-3", max_attempts=1, timeout_s=5)
    client = provider.client
    assert client is bedrock_client("eu-west-3", 1, 5)
    assert client.meta.region_name == "eu-west-3"
    assert client.meta.config.read_timeout == 5
    assert BedrockProvider("eu-west-3", max_attempts=1, timeout_s=5).client is client

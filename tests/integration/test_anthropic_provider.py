"""AnthropicProvider through the real `anthropic` SDK against a local server speaking the wire format.

The four captures are anthropic-sdk-python's own stream fixtures (tests/fixtures/SOURCES.md),
replayed byte for byte.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shared.config import Settings
from shared.errors import ModelNotConfigured, ProviderError
from shared.models import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from shared.providers import build_provider
from shared.providers.anthropic import DEFAULT_MAX_TOKENS, AnthropicProvider
from shared.providers.base import ChatRequest, Done, ProviderEvent, TextDelta, ToolCallEvent, ToolSpec, Usage
from shared.providers.resilient import ResilientProvider
from tests.support.fake_anthropic import FakeAnthropic, FakeReply

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "anthropic"
API_KEY = "sk-ant-test-0123456789abcdefSECRET"


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


def provider_for(fake: FakeAnthropic, *, max_retries: int = 0) -> AnthropicProvider:
    return AnthropicProvider(api_key=API_KEY, base_url=fake.base_url, timeout_s=10, max_retries=max_retries)


def ask(text: str = "hello") -> ChatRequest:
    return ChatRequest(model="claude-sonnet-4-6", system="be brief", messages=[UserMessage(content=text)])


def run(provider: AnthropicProvider, request: ChatRequest | None = None) -> list[ProviderEvent]:
    return list(provider.stream(request or ask()))


def text_of(events: list[ProviderEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def calls_of(events: list[ProviderEvent]) -> list[ToolCall]:
    return [e.call for e in events if isinstance(e, ToolCallEvent)]


def usage_of(events: list[ProviderEvent]) -> list[Usage]:
    return [e for e in events if isinstance(e, Usage)]


# ---------------------------------------------------------------- the four captures


def test_a_text_answer_streams_its_deltas_usage_and_done(fake: FakeAnthropic) -> None:
    fake.replay(FIXTURES / "messages_stream_basic_response.sse")
    events = run(provider_for(fake))
    assert events == [
        TextDelta(text="Hello"),
        TextDelta(text=" there"),
        TextDelta(text="!"),
        Usage(input_tokens=11, output_tokens=6),  # input from message_start, output from message_delta
        Done(finish_reason="stop"),
    ]


def test_a_tool_use_block_becomes_one_complete_tool_call(fake: FakeAnthropic) -> None:
    fake.replay(FIXTURES / "messages_stream_tool_use_response.sse")
    events = run(provider_for(fake))
    assert text_of(events) == "I'll check the current weather in Paris for you."
    # The input_json_delta fragments ('{"locati', 'on": "P', 'ar', 'is"}') arrive as one call
    assert calls_of(events) == [
        ToolCall(id="toolu_01NRLabsLyVHZPKxbKvkfSMn", name="get_weather", arguments='{"location": "Paris"}')
    ]
    assert [type(e) for e in events[-3:]] == [ToolCallEvent, Usage, Done]
    assert usage_of(events) == [Usage(input_tokens=377, output_tokens=65)]
    assert events[-1] == Done(finish_reason="tool_calls")


def test_a_refusal_ends_with_the_explanation(fake: FakeAnthropic) -> None:
    fake.replay(FIXTURES / "messages_stream_refusal_response.sse")
    events = run(provider_for(fake))
    assert events == [
        Usage(input_tokens=20, output_tokens=0),
        Done(finish_reason="refusal", refusal="This request was refused due to policy."),
    ]


def test_a_tool_call_cut_by_max_tokens_is_dropped_and_the_finish_says_length(fake: FakeAnthropic) -> None:
    # Given the capture whose make_file input stops mid-string when max_tokens is reached
    fake.replay(FIXTURES / "messages_stream_incomplete_partial_json_response.sse")
    events = run(provider_for(fake))
    # Then the text is kept, no call with broken arguments is passed on, and Done says "cut"
    assert text_of(events) == (
        "I'll create a comprehensive tax guide for someone with multiple W2s "
        "and save it in a file called taxes.txt. Let me do that for you now."
    )
    assert calls_of(events) == []
    assert usage_of(events) == [Usage(input_tokens=450, output_tokens=124)]
    assert events[-1] == Done(finish_reason="length")


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("*.sse")))
def test_the_fake_server_replays_a_capture_byte_for_byte(fake: FakeAnthropic, fixture: str) -> None:
    fake.replay(FIXTURES / fixture)
    response = httpx.post(f"{fake.base_url}/v1/messages", json={"model": "m", "stream": True})
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.content == (FIXTURES / fixture).read_bytes()


# ---------------------------------------------------------------- streams that go wrong


def test_a_stream_cut_before_the_stop_reason_is_a_retryable_error(
    fake: FakeAnthropic, tmp_path: Path
) -> None:
    # Given the text capture cut after its first delta (the connection dropped)
    events = (FIXTURES / "messages_stream_basic_response.sse").read_bytes().split(b"\n\n")
    cut = tmp_path / "cut.sse"
    cut.write_bytes(b"\n\n".join(events[:4]) + b"\n\n")
    fake.replay(cut)
    with pytest.raises(ProviderError, match="ended before") as info:
        run(provider_for(fake))
    assert info.value.retryable


def test_a_closed_tool_block_with_broken_json_is_an_error_not_a_call(fake: FakeAnthropic) -> None:
    fake.respond(FakeReply(tool_calls=[("make_file", '{"filename": "taxes.txt", "lines": [')]))
    seen: list[ProviderEvent] = []
    with pytest.raises(ProviderError, match="'make_file' with arguments that are not valid JSON"):
        seen.extend(provider_for(fake).stream(ask()))
    assert calls_of(seen) == []


def test_parallel_tool_calls_come_in_order_each_complete(fake: FakeAnthropic) -> None:
    fake.respond(FakeReply(tool_calls=[("get_weather", {"city": "Oslo"}), ("get_time", {"tz": "CET"})]))
    events = run(provider_for(fake))
    calls = calls_of(events)
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Oslo"}),
        ("get_time", {"tz": "CET"}),
    ]
    assert len({c.id for c in calls}) == 2
    assert events[-1] == Done(finish_reason="tool_calls")


def test_an_overloaded_error_event_inside_the_stream_is_retryable(fake: FakeAnthropic) -> None:
    fake.fail_in_stream("overloaded_error")
    with pytest.raises(ProviderError) as info:
        run(provider_for(fake))
    err = info.value
    assert err.retryable
    assert "overloaded_error" in err.message and "HTTP 200" not in err.message


# ---------------------------------------------------------------- HTTP errors and retries


def test_a_529_is_retried_by_the_sdk_and_then_succeeds(fake: FakeAnthropic) -> None:
    fake.fail(529).replay(FIXTURES / "messages_stream_basic_response.sse")
    events = run(provider_for(fake, max_retries=1))
    assert text_of(events) == "Hello there!"
    assert len(fake.requests) == 2


@pytest.mark.parametrize("status", [429, 500, 529])
def test_retryable_statuses_carry_retry_after(fake: FakeAnthropic, status: int) -> None:
    fake.fail(status, retry_after="7", retry_after_ms=None)
    with pytest.raises(ProviderError) as info:
        run(provider_for(fake))
    assert info.value.retryable
    assert info.value.retry_after_s == 7.0
    assert f"HTTP {status}" in info.value.message
    assert len(fake.requests) == 1  # max_retries=0: the SDK made no retry of its own


def test_the_servers_should_retry_header_wins(fake: FakeAnthropic) -> None:
    fake.fail(500, should_retry=False)
    with pytest.raises(ProviderError) as info:
        run(provider_for(fake))
    assert not info.value.retryable


def test_a_401_is_not_retried_and_never_leaks_the_key(fake: FakeAnthropic) -> None:
    # Given a server whose 401 message quotes the key it was sent
    fake.fail(401, message="invalid x-api-key: {api_key}")
    with pytest.raises(ProviderError) as info:
        run(provider_for(fake, max_retries=2))
    err = info.value
    assert API_KEY in json.dumps(fake.headers[0])  # the key did reach the server
    assert len(fake.requests) == 1
    assert not err.retryable
    assert "HTTP 401" in err.message and "authentication_error" in err.message
    for text in (str(err), repr(err), err.message, str(err.args)):
        assert API_KEY not in text
        assert "SECRET" not in text
    # The SDK's exception (which quotes the key) is not chained for a traceback to print
    assert err.__cause__ is None and err.__suppress_context__


def test_a_400_is_not_retryable(fake: FakeAnthropic) -> None:
    fake.fail(400, message="messages: roles must alternate")
    with pytest.raises(ProviderError, match="invalid_request_error") as info:
        run(provider_for(fake))
    assert not info.value.retryable


def test_a_server_that_is_down_is_a_retryable_provider_error() -> None:
    with FakeAnthropic() as gone:
        base_url = gone.base_url
    provider = AnthropicProvider(api_key=API_KEY, base_url=base_url, timeout_s=2, max_retries=0)
    with pytest.raises(ProviderError, match="APIConnectionError") as info:
        list(provider.stream(ask()))
    assert info.value.retryable


def test_the_resilient_wrapper_retries_an_overload_before_any_text(fake: FakeAnthropic) -> None:
    # Given an overload reported inside the stream, before any content, then a good answer
    fake.fail_in_stream("overloaded_error").replay(FIXTURES / "messages_stream_basic_response.sse")
    waits: list[float] = []
    provider = ResilientProvider(provider_for(fake), max_attempts=2, sleep=waits.append)
    # Then the caller sees one clean answer, after one wait
    events = list(provider.stream(ask()))
    assert text_of(events) == "Hello there!"
    assert len(fake.requests) == 2 and len(waits) == 1


# ---------------------------------------------------------------- request translation


def test_all_message_kinds_and_tools_are_translated(fake: FakeAnthropic) -> None:
    # Given a conversation with every message kind, two parallel calls and their two results
    calls = [
        ToolCall(id="toolu_1", name="get_weather", arguments='{"city":"Oslo"}'),
        ToolCall(id="toolu_2", name="get_weather", arguments='{"city":"Bergen"}'),
    ]
    request = ChatRequest(
        model="claude-sonnet-4-6",
        system="You are Sigil.",
        messages=[
            UserMessage(content="weather in Oslo and Bergen?"),
            AssistantMessage(content="Checking both.", tool_calls=calls),
            ToolResultMessage(tool_call_id="toolu_1", name="get_weather", content='{"temp_c": 3}'),
            ToolResultMessage(tool_call_id="toolu_2", name="get_weather", content="timeout", is_error=True),
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
    # When it is sent
    events = run(provider_for(fake), request)
    # Then the wire body is the Messages API shape for each kind
    body = fake.requests[0]
    assert body["system"] == "You are Sigil."
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "weather in Oslo and Bergen?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking both."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
                {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Bergen"}},
            ],
        },
        {  # consecutive tool results share one user turn
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"temp_c": 3}'},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "timeout", "is_error": True},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "It is 3 °C in Oslo."}]},
        {"role": "user", "content": [{"type": "text", "text": "thanks"}]},
    ]
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]
    assert (body["model"], body["max_tokens"], body["temperature"], body["stream"]) == (
        "claude-sonnet-4-6",
        200,
        0.2,
        True,
    )
    assert text_of(events) == "thanks"  # the fake echoes the last user text


def test_defaults_are_filled_and_unset_options_left_out(fake: FakeAnthropic) -> None:
    # Given an assistant turn that only called a tool (empty text), and no system, tools or options
    call = ToolCall(id="toolu_1", name="ping", arguments="")
    request = ChatRequest(
        model="m",
        system="",
        messages=[
            UserMessage(content="hi"),
            AssistantMessage(content="", tool_calls=[call]),
            ToolResultMessage(tool_call_id="toolu_1", name="ping", content="pong"),
        ],
    )
    run(provider_for(fake), request)
    body = fake.requests[0]
    assert body["max_tokens"] == DEFAULT_MAX_TOKENS  # Anthropic requires one
    assert not {"system", "tools", "temperature"} & body.keys()
    # The API refuses empty text blocks; a call without arguments is sent as an empty object
    assert body["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "ping", "input": {}}],
    }


# ---------------------------------------------------------------- registry and imports


def test_the_registry_builds_anthropic_from_its_settings(fake: FakeAnthropic) -> None:
    settings = Settings(
        model="anthropic/claude-sonnet-4-6",
        ANTHROPIC_API_KEY=API_KEY,
        ANTHROPIC_BASE_URL=fake.base_url,
        anthropic_max_tokens=321,
    )
    provider, model = build_provider(settings, None)
    assert isinstance(provider, AnthropicProvider)
    assert (provider.name, model) == ("anthropic", "claude-sonnet-4-6")
    list(provider.stream(ask()))
    assert fake.requests[0]["max_tokens"] == 321


def test_anthropic_without_key_or_base_url_names_both_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ModelNotConfigured, match="ANTHROPIC_API_KEY nor ANTHROPIC_BASE_URL"):
        build_provider(Settings(), "anthropic/claude-sonnet-4-6")


def test_importing_the_providers_does_not_import_any_sdk() -> None:
    code = (
        "import sys, shared.providers, shared.agent.turn; "
        "print(sorted(m for m in ('anthropic', 'openai', 'boto3') if m in sys.modules))"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

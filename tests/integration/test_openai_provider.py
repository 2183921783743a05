"""OpenAIProvider through the real `openai` SDK against a local server speaking the wire format."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shared.errors import ProviderError
from shared.models import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from shared.providers.base import ChatRequest, Done, ProviderEvent, TextDelta, ToolCallEvent, ToolSpec, Usage
from shared.providers.openai import KEYLESS_PLACEHOLDER, OpenAIProvider
from tests.support.fake_openai import FakeOpenAI, FakeReply

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "openai"
API_KEY = "sk-test-0123456789abcdefSECRET"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def provider_for(fake: FakeOpenAI, *, max_retries: int = 2, api_key: str | None = API_KEY) -> OpenAIProvider:
    return OpenAIProvider(api_key=api_key, base_url=fake.base_url, timeout_s=10, max_retries=max_retries)


def ask(text: str = "hello", **kw: object) -> ChatRequest:
    return ChatRequest.model_validate(
        {"model": "gpt-4o", "system": "be brief", "messages": [UserMessage(content=text)], **kw}
    )


def run(provider: OpenAIProvider, request: ChatRequest | None = None) -> list[ProviderEvent]:
    return list(provider.stream(request or ask()))


def text_of(events: list[ProviderEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def calls_of(events: list[ProviderEvent]) -> list[ToolCall]:
    return [e.call for e in events if isinstance(e, ToolCallEvent)]


# ---------------------------------------------------------------- the three captured streams


def test_text_stream_assembles_the_captured_reply_and_usage(fake: FakeOpenAI) -> None:
    # Given the captured text stream, when it is translated
    fake.replay(FIXTURES / "chat_stream_text_with_usage.sse")
    events = run(provider_for(fake))
    # Then the text, usage and finish are exactly the capture's, with Done last
    assert text_of(events) == (
        "I'm unable to provide real-time weather updates. To get the current weather in San Francisco, "
        "I recommend checking a reliable weather website or a weather app."
    )
    assert calls_of(events) == []
    assert [e for e in events if isinstance(e, Usage)] == [Usage(input_tokens=14, output_tokens=30)]
    assert events[-1] == Done(finish_reason="stop")
    assert sum(isinstance(e, Done) for e in events) == 1


def test_one_tool_call_is_assembled_from_its_fragments(fake: FakeOpenAI) -> None:
    fake.replay(FIXTURES / "chat_stream_tool_call_with_usage.sse")
    events = run(provider_for(fake))
    assert calls_of(events) == [
        ToolCall(id="call_4XzlGBLtUe9dy3GVNV4jhq7h", name="get_weather", arguments='{"city":"New York City"}')
    ]
    assert text_of(events) == ""
    assert [e for e in events if isinstance(e, Usage)] == [Usage(input_tokens=44, output_tokens=16)]
    assert events[-1] == Done(finish_reason="tool_calls")


def test_parallel_tool_calls_are_separate_complete_events_in_order(fake: FakeOpenAI) -> None:
    fake.replay(FIXTURES / "chat_stream_parallel_tool_calls_with_usage.sse")
    events = run(provider_for(fake))
    assert calls_of(events) == [
        ToolCall(
            id="call_JMW1whyEaYG438VE1OIflxA2",
            name="GetWeatherArgs",
            arguments='{"city": "Edinburgh", "country": "GB", "units": "c"}',
        ),
        ToolCall(
            id="call_DNYTawLBoN8fj3KN6qU9N1Ou",
            name="get_stock_price",
            arguments='{"ticker": "AAPL", "exchange": "NASDAQ"}',
        ),
    ]
    assert [e for e in events if isinstance(e, Usage)] == [Usage(input_tokens=149, output_tokens=60)]
    assert events[-1] == Done(finish_reason="tool_calls")


def test_a_refusal_ends_with_the_refusal_text(fake: FakeOpenAI) -> None:
    fake.respond(FakeReply(refusal="I'm sorry, I can't help with that."))
    events = run(provider_for(fake))
    assert events[-1] == Done(finish_reason="refusal", refusal="I'm sorry, I can't help with that.")
    assert text_of(events) == ""


def test_a_stream_cut_before_the_finish_is_an_error(fake: FakeOpenAI, tmp_path: Path) -> None:
    # Given a capture truncated after its first three events (the connection dropped)
    events = (FIXTURES / "chat_stream_text_with_usage.sse").read_bytes().split(b"\n\n")
    cut = tmp_path / "cut.sse"
    cut.write_bytes(b"\n\n".join(events[:3]) + b"\n\n")
    fake.replay(cut)
    # Then the partial text is not passed off as a finished answer
    with pytest.raises(ProviderError, match="ended before"):
        run(provider_for(fake))


# ---------------------------------------------------------------- errors and retries


def test_a_500_is_retried_by_the_sdk_and_then_succeeds(fake: FakeOpenAI) -> None:
    fake.fail(500).replay(FIXTURES / "chat_stream_text_with_usage.sse")
    events = run(provider_for(fake, max_retries=2))
    assert text_of(events).startswith("I'm unable")
    assert len(fake.requests) == 2


def test_errors_past_the_retries_become_a_provider_error(fake: FakeOpenAI) -> None:
    fake.fail(503, times=2)
    with pytest.raises(ProviderError) as info:
        run(provider_for(fake, max_retries=1))
    assert "HTTP 503" in info.value.message
    assert len(fake.requests) == 2


def test_a_401_is_not_retried_and_never_leaks_the_key(fake: FakeOpenAI) -> None:
    # Given a server whose 401 message quotes the key it was sent, as OpenAI's does
    fake.fail(401, message="Incorrect API key provided: {api_key}.", code="invalid_api_key")
    with pytest.raises(ProviderError) as info:
        run(provider_for(fake))
    err = info.value
    assert fake.headers[0]["authorization"] == f"Bearer {API_KEY}"  # the key did reach the server
    assert len(fake.requests) == 1
    assert "HTTP 401" in err.message and "invalid_api_key" in err.message
    for text in (str(err), repr(err), err.message, str(err.args)):
        assert API_KEY not in text
        assert "SECRET" not in text
    # The SDK's exception (which quotes the key) is not chained for a traceback to print
    assert err.__cause__ is None and err.__suppress_context__


def test_a_server_that_is_down_is_a_provider_error() -> None:
    with FakeOpenAI() as gone:
        base_url = gone.base_url
    provider = OpenAIProvider(api_key=API_KEY, base_url=base_url, timeout_s=2, max_retries=0)
    with pytest.raises(ProviderError, match="APIConnectionError"):
        list(provider.stream(ask()))


# ---------------------------------------------------------------- request translation


def test_all_message_kinds_and_tools_are_translated(fake: FakeOpenAI) -> None:
    # Given a conversation with every message kind, a tool and options
    call = ToolCall(id="call_1", name="get_weather", arguments='{"city":"Oslo"}')
    request = ChatRequest(
        model="gpt-4.1-mini",
        system="You are Sigil.",
        messages=[
            UserMessage(content="weather in Oslo?"),
            AssistantMessage(content="", tool_calls=[call]),
            ToolResultMessage(tool_call_id="call_1", name="get_weather", content='{"temp_c": 3}'),
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
    # Then the wire body is the chat-completions shape for each kind
    body = fake.requests[0]
    assert body["messages"] == [
        {"role": "system", "content": "You are Sigil."},
        {"role": "user", "content": "weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 3}'},
        {"role": "assistant", "content": "It is 3 °C in Oslo."},
        {"role": "user", "content": "thanks"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    assert body["model"] == "gpt-4.1-mini"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 200  # a compatible server (base_url set) gets the widely known name
    assert body["temperature"] == 0.2
    assert text_of(events) == "thanks"  # the fake echoes the last user message


def test_no_tools_and_no_options_are_left_out_of_the_body(fake: FakeOpenAI) -> None:
    run(provider_for(fake), ChatRequest(model="m", system="", messages=[UserMessage(content="hi")]))
    body = fake.requests[0]
    assert body["messages"] == [{"role": "user", "content": "hi"}]  # an empty system prompt is not sent
    assert not {"tools", "max_tokens", "max_completion_tokens", "temperature"} & body.keys()


def test_a_keyless_compatible_server_works_with_base_url_alone(fake: FakeOpenAI) -> None:
    events = run(provider_for(fake, api_key=None), ask("ping"))
    assert text_of(events) == "ping"
    assert fake.headers[0]["authorization"] == f"Bearer {KEYLESS_PLACEHOLDER}"


def test_importing_the_providers_does_not_import_the_sdk() -> None:
    code = "import sys, shared.providers, shared.agent.turn; print('openai' in sys.modules)"
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("*.sse")))
def test_the_fake_server_replays_a_capture_byte_for_byte(fake: FakeOpenAI, fixture: str) -> None:
    fake.replay(FIXTURES / fixture)
    response = httpx.post(f"{fake.base_url}/chat/completions", json={"model": "m", "stream": True})
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.content == (FIXTURES / fixture).read_bytes()

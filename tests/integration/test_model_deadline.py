"""A model call ends by its deadline, whatever the server does (issue 14, finding 1).

The SDKs' timeouts bound each wait on the network, not the call: a server that sends one chunk a
second kept a call with a 2 s timeout running for as long as it liked. Each test here points the
real SDK (openai, anthropic, boto3's bedrock-runtime) at a local fake server that is slow on the
wire (a chunk a second, or nothing at all after the first event or before the headers) and
checks, by what happened rather than by a stopwatch, that the call ended by its deadline:
DeadlineExceeded, fewer events than the server had to send, and the server saw the client hang
up. The providers are built by build_provider from Settings, as the gateway builds them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.config import Settings
from shared.errors import ProviderError
from shared.models import UserMessage
from shared.providers import build_provider
from shared.providers.base import ChatRequest, ProviderEvent, TextDelta
from shared.providers.bedrock import bedrock_client
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_bedrock import FakeBedrock
from tests.support.fake_openai import FakeOpenAI
from tests.support.slow_streams import StreamLog

# Fifteen words: fifteen text chunks, which the paced servers send one a second.
FIFTEEN = " ".join(f"word{i}" for i in range(1, 16))
WAIT_S = 30  # the longest a test waits for the server to notice the hang-up (a bound, never a sleep)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "SIGIL_MODEL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
    ):
        monkeypatch.delenv(name, raising=False)


def ask(model: str, text: str = "hello") -> ChatRequest:
    return ChatRequest(model=model, system="be brief", messages=[UserMessage(content=text)])


def run_until_error(
    settings: Settings, ref: str, text: str = "hello"
) -> tuple[list[ProviderEvent], ProviderError]:
    """The events the call yielded before it failed, and its error."""
    provider, model = build_provider(settings, ref)
    events: list[ProviderEvent] = []
    with pytest.raises(ProviderError) as info:
        for event in provider.stream(ask(model, text)):
            events.append(event)
    return events, info.value


def texts(events: list[ProviderEvent]) -> int:
    return sum(isinstance(e, TextDelta) for e in events)


def assert_cut(log: StreamLog) -> None:
    """The server stopped because the client hung up, before the end of its stream."""
    assert log.done.wait(WAIT_S)
    assert log.client_closed and not log.finished


# ---------------------------------------------------------------- a chunk a second, 2 s timeout


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def fake_anthropic() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


def test_an_openai_stream_of_a_chunk_a_second_is_cut_at_the_calls_deadline(fake_openai: FakeOpenAI) -> None:
    # Given a server that sends fifteen chunks one a second, and a 2 s timeout with a 3 s deadline
    fake_openai.pace(1.0, FIFTEEN)
    settings = Settings(
        OPENAI_BASE_URL=fake_openai.base_url,
        provider_timeout_s=2,
        provider_max_retries=0,
        provider_deadline_s=3,
    )
    # When the call streams
    events, error = run_until_error(settings, "openai/gpt-4.1-mini")
    # Then the deadline ends it, with most of the stream never read, and the connection closed
    assert error.code == "deadline_exceeded"
    assert texts(events) < 8
    assert_cut(fake_openai.streams[0])


def test_an_anthropic_stream_of_a_chunk_a_second_is_cut_at_the_calls_deadline(
    fake_anthropic: FakeAnthropic,
) -> None:
    fake_anthropic.pace(1.0, FIFTEEN)
    settings = Settings(
        ANTHROPIC_BASE_URL=fake_anthropic.base_url,
        provider_timeout_s=2,
        provider_max_retries=0,
        provider_deadline_s=3,
    )
    events, error = run_until_error(settings, "anthropic/claude-haiku-4-5")
    assert error.code == "deadline_exceeded"
    assert texts(events) < 8
    assert_cut(fake_anthropic.streams[0])


def test_the_deadline_holds_through_the_environments_proxy(
    fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a model host that only the proxy named in the environment reaches (the fake answers
    # the absolute-form requests a forward proxy receives), sending a chunk a second
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("HTTP_PROXY", fake_openai.base_url.removesuffix("/v1"))
    fake_openai.pace(1.0, FIFTEEN)
    settings = Settings(
        OPENAI_BASE_URL="http://model.invalid/v1",
        provider_timeout_s=2,
        provider_max_retries=0,
        provider_deadline_s=3,
    )
    events, error = run_until_error(settings, "openai/gpt-4.1-mini")
    # Then the call went through the proxy, and was cut at its deadline all the same
    assert error.code == "deadline_exceeded"
    assert texts(events) < 8
    assert_cut(fake_openai.streams[0])


# ---------------------------------------------------------------- a server that hangs


def test_an_openai_server_that_never_sends_its_headers_is_cut_and_not_retried(
    fake_openai: FakeOpenAI,
) -> None:
    # Given a server that accepts the request and then says nothing, a 10 s timeout the SDK would
    # retry twice, and a 2 s deadline
    fake_openai.hang(after_events=-1)
    settings = Settings(
        OPENAI_BASE_URL=fake_openai.base_url,
        provider_timeout_s=10,
        provider_max_retries=2,
        provider_deadline_s=2,
    )
    _, error = run_until_error(settings, "openai/gpt-4.1-mini")
    # Then the deadline ends the wait for the headers, and the SDK makes no retry past it
    assert error.code == "deadline_exceeded"
    assert_cut(fake_openai.streams[0])
    assert len(fake_openai.requests) == 1


def test_an_anthropic_stream_that_hangs_after_its_first_event_is_cut(fake_anthropic: FakeAnthropic) -> None:
    # Given a message that asks the server (by its marker) to hang after the stream's first event
    settings = Settings(
        ANTHROPIC_BASE_URL=fake_anthropic.base_url,
        provider_timeout_s=10,
        provider_max_retries=0,
        provider_deadline_s=2,
    )
    _, error = run_until_error(settings, "anthropic/claude-haiku-4-5", "[fake:hang] hello")
    assert error.code == "deadline_exceeded"
    assert fake_anthropic.streams[0].sent == 1
    assert_cut(fake_anthropic.streams[0])


# ---------------------------------------------------------------- Bedrock, boto3 on the wire


@pytest.fixture
def fake_bedrock(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeBedrock]:
    """A ConverseStream server that build_provider's bedrock client reaches (botocore reads the
    service's endpoint from AWS_ENDPOINT_URL_BEDROCK_RUNTIME when it builds the client)."""
    with FakeBedrock() as fake:
        monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", fake.base_url)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-secret")
        bedrock_client.cache_clear()  # a client built for another endpoint must not be reused
        yield fake
        bedrock_client.cache_clear()


def test_a_bedrock_stream_of_an_event_a_second_is_cut_at_the_calls_deadline(
    fake_bedrock: FakeBedrock,
) -> None:
    fake_bedrock.pace(1.0, FIFTEEN)
    settings = Settings(
        bedrock_region="us-east-1", provider_timeout_s=2, provider_max_retries=0, provider_deadline_s=3
    )
    events, error = run_until_error(settings, "bedrock/anthropic.claude-haiku-4-5-v1:0")
    assert error.code == "deadline_exceeded"
    assert texts(events) < 8
    assert_cut(fake_bedrock.streams[0])


def test_a_bedrock_stream_that_hangs_is_cut_before_its_read_timeout(fake_bedrock: FakeBedrock) -> None:
    # Given a 10 s read timeout and a 2 s deadline, and a stream that stops after its first event
    fake_bedrock.hang(after_events=1)
    settings = Settings(
        bedrock_region="us-east-1", provider_timeout_s=10, provider_max_retries=0, provider_deadline_s=2
    )
    _, error = run_until_error(settings, "bedrock/anthropic.claude-haiku-4-5-v1:0")
    assert error.code == "deadline_exceeded"
    assert_cut(fake_bedrock.streams[0])


# ---------------------------------------------------------------- retries and fallback


def test_the_fallback_is_not_tried_once_the_calls_deadline_has_passed(
    fake_openai: FakeOpenAI, fake_anthropic: FakeAnthropic
) -> None:
    # Given a primary that hangs and a fallback that would answer at once
    fake_openai.hang(after_events=1)
    settings = Settings(
        OPENAI_BASE_URL=fake_openai.base_url,
        fallback_model="anthropic/claude-haiku-4-5",
        ANTHROPIC_BASE_URL=fake_anthropic.base_url,
        provider_timeout_s=5,
        provider_max_retries=2,
        provider_deadline_s=2,
    )
    _, error = run_until_error(settings, "openai/gpt-4.1-mini")
    # Then the call ends at its deadline: no retry of the primary, and no fallback started
    assert error.code == "deadline_exceeded"
    assert len(fake_openai.requests) == 1
    assert fake_anthropic.requests == []


def test_the_sdk_makes_no_retry_whose_wait_would_pass_the_deadline(fake_openai: FakeOpenAI) -> None:
    # Given a server that answers 503 asking for a 3 s wait, an SDK allowed two retries of its
    # own (no fallback configured), and a 2 s deadline
    fake_openai.fail(503, retry_after_ms=3000)
    settings = Settings(OPENAI_BASE_URL=fake_openai.base_url, provider_max_retries=2, provider_deadline_s=2)
    _, error = run_until_error(settings, "openai/gpt-4.1-mini")
    # Then the 503 is the answer: the SDK did not sleep into the deadline for a retry
    assert "HTTP 503" in error.message
    assert len(fake_openai.requests) == 1


def test_a_retry_whose_wait_would_pass_the_deadline_gives_way_to_the_fallback(
    fake_openai: FakeOpenAI, fake_anthropic: FakeAnthropic
) -> None:
    # Given a primary that answers 503 asking for a 3 s wait, a fallback, and a 4 s deadline
    fake_openai.fail(503, retry_after_ms=3000)
    fake_anthropic.respond("from the fallback")
    settings = Settings(
        OPENAI_BASE_URL=fake_openai.base_url,
        fallback_model="anthropic/claude-haiku-4-5",
        ANTHROPIC_BASE_URL=fake_anthropic.base_url,
        provider_max_retries=2,
        provider_deadline_s=4,
    )
    provider, model = build_provider(settings, "openai/gpt-4.1-mini")
    events = list(provider.stream(ask(model)))
    # Then the primary is not retried after a wait that would leave too little time, and the
    # fallback, which has the time, answers
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "from the fallback"
    assert len(fake_openai.requests) == 1

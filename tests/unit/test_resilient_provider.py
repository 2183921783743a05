"""ResilientProvider: retries with backoff on retryable failures, never after output, then a fallback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.config import Settings
from shared.errors import ModelNotConfigured, ProviderError
from shared.models import UserMessage
from shared.providers import build_provider
from shared.providers.base import ChatRequest, Done, Provider, ProviderEvent, TextDelta, Usage
from shared.providers.function import FunctionProvider
from shared.providers.openai import OpenAIProvider
from shared.providers.resilient import ResilientProvider, http_error_retry, retry_after_s
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_openai import FakeOpenAI

RATE_LIMITED = ProviderError("the model provider failed (RateLimitError, HTTP 429)", retryable=True)
BAD_REQUEST = ProviderError("the model provider failed (BadRequestError, HTTP 400)")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The developer's own shell must not decide these tests.
    for name in (
        "SIGIL_MODEL",
        "SIGIL_FALLBACK_MODEL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
    ):
        monkeypatch.delenv(name, raising=False)


def req(text: str = "hello") -> ChatRequest:
    return ChatRequest(model="primary-model", system="", messages=[UserMessage(content=text)])


def scripted(*outcomes: ProviderError | str | list[ProviderEvent | ProviderError]) -> FunctionProvider:
    """A provider whose n-th call raises, answers with text, or streams events and maybe then fails."""
    queue = list(outcomes)

    def answer(request: ChatRequest) -> str | Iterator[ProviderEvent]:
        outcome = queue.pop(0)
        if isinstance(outcome, ProviderError):
            raise outcome
        if isinstance(outcome, str):
            return outcome
        return _events(outcome)

    return FunctionProvider(answer)


def _events(items: list[ProviderEvent | ProviderError]) -> Iterator[ProviderEvent]:
    for item in items:
        if isinstance(item, ProviderError):
            raise item
        yield item


def resilient(
    primary: Provider,
    fallback: Provider | None = None,
    *,
    max_attempts: int = 3,
    base_delay_s: float = 0.5,
    max_delay_s: float = 8.0,
    fallback_model: str | None = None,
) -> tuple[ResilientProvider, list[float]]:
    """The wrapper with its sleeps recorded (never slept) and the jitter pinned to the middle."""
    waits: list[float] = []
    provider = ResilientProvider(
        primary,
        fallback,
        max_attempts=max_attempts,
        base_delay_s=base_delay_s,
        max_delay_s=max_delay_s,
        sleep=waits.append,
        fallback_model=fallback_model,
        jitter=lambda: 0.5,
    )
    return provider, waits


def text_of(events: list[ProviderEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


# ---------------------------------------------------------------- retries


def test_it_is_a_provider_named_after_its_primary() -> None:
    provider, _ = resilient(scripted("x"))
    assert isinstance(provider, Provider)
    assert provider.name == "function"


def test_retryable_errors_are_retried_with_exponential_jittered_backoff() -> None:
    primary = scripted(RATE_LIMITED, RATE_LIMITED, "finally")
    provider, waits = resilient(primary)
    events = list(provider.stream(req()))
    assert text_of(events) == "finally"
    assert isinstance(events[-1], Done)
    assert len(primary.requests) == 3
    # Half of each step (0.5 s, then 1 s) plus half the jitter's share of the other half
    assert waits == [0.375, 0.75]


def test_the_backoff_is_capped_at_max_delay() -> None:
    primary = scripted(*[RATE_LIMITED] * 4, "ok")
    provider, waits = resilient(primary, max_attempts=5, base_delay_s=1.0, max_delay_s=2.0)
    list(provider.stream(req()))
    assert waits == [0.75, 1.5, 1.5, 1.5]


def test_retry_after_is_waited_instead_of_the_backoff() -> None:
    told = ProviderError("429", retryable=True, retry_after_s=1.25)
    provider, waits = resilient(scripted(told, "ok"))
    assert text_of(list(provider.stream(req()))) == "ok"
    assert waits == [1.25]


def test_a_retry_after_longer_than_max_delay_gives_up_instead_of_waiting() -> None:
    told = ProviderError("429", retryable=True, retry_after_s=60)
    primary = scripted(told, "never asked")
    provider, waits = resilient(primary, max_delay_s=8.0)
    with pytest.raises(ProviderError) as info:
        list(provider.stream(req()))
    assert info.value is told
    assert waits == [] and len(primary.requests) == 1


def test_non_retryable_errors_are_not_retried() -> None:
    primary = scripted(BAD_REQUEST, "never asked")
    provider, waits = resilient(primary)
    with pytest.raises(ProviderError) as info:
        list(provider.stream(req()))
    assert info.value is BAD_REQUEST
    assert waits == [] and len(primary.requests) == 1


def test_the_last_attempts_error_goes_up_when_attempts_run_out() -> None:
    last = ProviderError("503 again", retryable=True)
    primary = scripted(RATE_LIMITED, RATE_LIMITED, last)
    provider, waits = resilient(primary)
    with pytest.raises(ProviderError) as info:
        list(provider.stream(req()))
    assert info.value is last
    assert len(waits) == 2


def test_no_retry_once_part_of_the_answer_was_yielded() -> None:
    # Given a primary that streams some text and then drops, and a fallback that would answer
    primary = scripted([TextDelta(text="Half an ans"), RATE_LIMITED], "never asked")
    fallback = scripted("the fallback's answer")
    provider, waits = resilient(primary, fallback)
    # When the caller reads the stream
    seen: list[ProviderEvent] = []
    with pytest.raises(ProviderError) as info:
        seen.extend(provider.stream(req()))
    # Then it saw the half answer once, then the error: no retry and no fallback repeated it
    assert seen == [TextDelta(text="Half an ans")]
    assert info.value is RATE_LIMITED
    assert len(primary.requests) == 1 and fallback.requests == []
    assert waits == []


def test_errors_other_than_provider_errors_are_not_retried() -> None:
    def broken(request: ChatRequest) -> str:
        raise KeyError("a bug, not an outage")

    primary = FunctionProvider(broken)
    provider, waits = resilient(primary, scripted("fallback"))
    with pytest.raises(KeyError):
        list(provider.stream(req()))
    assert waits == [] and len(primary.requests) == 1


# ---------------------------------------------------------------- fallback


def test_the_fallback_is_used_after_the_primarys_attempts() -> None:
    primary = scripted(RATE_LIMITED, RATE_LIMITED, RATE_LIMITED)
    fallback = scripted("from the fallback")
    provider, waits = resilient(primary, fallback, fallback_model="fallback-model")
    request = req()
    events = list(provider.stream(request))
    assert text_of(events) == "from the fallback"
    assert len(primary.requests) == 3 and len(waits) == 2
    # The fallback gets the same conversation under its own model name
    (seen,) = fallback.requests
    assert seen.model == "fallback-model"
    assert seen.messages == request.messages


def test_a_non_retryable_primary_failure_goes_straight_to_the_fallback() -> None:
    primary = scripted(BAD_REQUEST)
    fallback = scripted("from the fallback")
    provider, waits = resilient(primary, fallback)
    assert text_of(list(provider.stream(req()))) == "from the fallback"
    assert len(primary.requests) == 1 and waits == []
    assert fallback.requests[0].model == "primary-model"  # no fallback_model: the name is kept


def test_the_fallback_is_retried_too_and_both_failures_are_reported() -> None:
    primary = scripted(BAD_REQUEST)
    fallback = scripted(RATE_LIMITED, ProviderError("fallback down", retryable=True))
    provider, waits = resilient(primary, fallback, max_attempts=2)
    with pytest.raises(ProviderError) as info:
        list(provider.stream(req()))
    assert info.value.message == f"{BAD_REQUEST.message}; then the fallback: fallback down"
    assert info.value.retryable  # as the last failure was
    assert len(fallback.requests) == 2 and len(waits) == 1


def test_the_fallbacks_partial_stream_is_not_retried_either() -> None:
    fallback = scripted([TextDelta(text="par"), RATE_LIMITED], "never asked")
    provider, _ = resilient(scripted(BAD_REQUEST), fallback)
    seen: list[ProviderEvent] = []
    with pytest.raises(ProviderError) as info:
        seen.extend(provider.stream(req()))
    assert info.value is RATE_LIMITED and seen == [TextDelta(text="par")]
    assert len(fallback.requests) == 1


# ---------------------------------------------------------------- the error and its classification


def test_provider_error_keeps_its_old_constructor_and_is_not_retryable_by_default() -> None:
    err = ProviderError("boom", code="upstream")
    assert (err.message, err.code, err.retryable, err.retry_after_s) == ("boom", "upstream", False, None)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after": "3"}, 3.0),
        ({"retry-after": "0.25", "retry-after-ms": "junk"}, 0.25),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # a date in the past: no wait
        ({"retry-after": "soon"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_retry_after_headers_are_read(headers: dict[str, str] | None, expected: float | None) -> None:
    assert retry_after_s(headers) == expected


class _Response:
    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers


class _StatusError(Exception):
    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(status)
        self.status_code = status
        self.response = _Response(headers or {})


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(408, True), (409, True), (429, True), (500, True), (529, True), (400, False), (404, False)],
)
def test_http_statuses_are_classified_like_the_sdks_do(status: int, retryable: bool) -> None:
    assert http_error_retry(_StatusError(status)) == (retryable, None)


def test_the_servers_x_should_retry_wins_over_the_status() -> None:
    assert http_error_retry(_StatusError(503, {"x-should-retry": "false"})) == (False, None)
    assert http_error_retry(_StatusError(400, {"x-should-retry": "true", "retry-after": "2"})) == (True, 2.0)


# ---------------------------------------------------------------- through the real openai SDK


def test_a_429_from_the_real_openai_sdk_is_retried_by_the_wrapper() -> None:
    with FakeOpenAI() as fake:
        fake.fail(429, message="Rate limit reached", code="rate_limit_exceeded").respond("hello back")
        # The SDK makes no retry of its own: the wrapper counts them
        sdk = OpenAIProvider(api_key="sk-test", base_url=fake.base_url, timeout_s=5, max_retries=0)
        provider, waits = resilient(sdk, max_attempts=2)
        events = list(
            provider.stream(ChatRequest(model="gpt-4o", system="", messages=[UserMessage(content="x")]))
        )
    assert text_of(events) == "hello back"
    assert events[-2:] == [Usage(input_tokens=1, output_tokens=2), Done(finish_reason="stop")]
    assert len(fake.requests) == 2
    assert waits == [0.001]  # the fake's retry-after-ms, not the backoff


# ---------------------------------------------------------------- build_provider with a fallback


def test_a_fallback_model_wraps_both_providers_with_sdk_retries_off() -> None:
    settings = Settings(
        model="openai/gpt-4.1-mini",
        OPENAI_API_KEY="sk-x",
        fallback_model="openai/gpt-4o",
        provider_max_retries=3,
        provider_retry_base_delay_s=0.1,
        provider_retry_max_delay_s=2.0,
    )
    provider, model = build_provider(settings, None)
    assert isinstance(provider, ResilientProvider)
    assert (provider.name, model, provider.fallback_model) == ("openai", "gpt-4.1-mini", "gpt-4o")
    assert (provider.max_attempts, provider.base_delay_s, provider.max_delay_s) == (4, 0.1, 2.0)
    for inner in (provider.primary, provider.fallback):
        assert isinstance(inner, OpenAIProvider)
        assert inner._client.max_retries == 0  # retries are counted in one place


def test_no_fallback_or_the_same_model_builds_the_bare_provider() -> None:
    for fallback in (None, "openai/gpt-4.1-mini"):
        settings = Settings(model="openai/gpt-4.1-mini", OPENAI_API_KEY="sk-x", fallback_model=fallback)
        provider, _ = build_provider(settings, None)
        assert isinstance(provider, OpenAIProvider)
        assert provider._client.max_retries == settings.provider_max_retries  # the SDK retries itself


@pytest.mark.parametrize("fallback", ["gpt-4o", "mistral/large"])
def test_a_bad_fallback_reference_names_its_variable(fallback: str) -> None:
    settings = Settings(model="openai/gpt-4.1-mini", OPENAI_API_KEY="sk-x", fallback_model=fallback)
    with pytest.raises(ModelNotConfigured, match="SIGIL_FALLBACK_MODEL"):
        build_provider(settings, None)


def test_another_providers_fallback_serves_the_call_when_the_primary_keeps_failing() -> None:
    # Given OpenAI as the model and Anthropic as the fallback, each on its local server
    with FakeOpenAI() as primary, FakeAnthropic() as fallback:
        primary.fail(503, times=2)
        fallback.respond("fallback here")
        settings = Settings(
            model="openai/gpt-4.1-mini",
            OPENAI_BASE_URL=primary.base_url,
            fallback_model="anthropic/claude-haiku-4-5",
            ANTHROPIC_BASE_URL=fallback.base_url,
            provider_max_retries=1,
        )
        provider, model = build_provider(settings, None)
        # When OpenAI answers 503 to the first try and to the one retry
        events = list(
            provider.stream(ChatRequest(model=model, system="", messages=[UserMessage(content="q")]))
        )
    # Then Anthropic answers, asked for its own model, and no SDK retried on its own
    assert text_of(events) == "fallback here"
    assert len(primary.requests) == 2
    assert [r["model"] for r in fallback.requests] == ["claude-haiku-4-5"]

"""Retries with backoff, then a fallback provider, behind the same Provider contract.

ResilientProvider wraps a primary provider (and optionally a fallback). A call that fails with a
retryable ProviderError (429, 5xx, timeout, dropped connection) is made again after an
exponential, jittered delay, or after the server's Retry-After, but only while nothing of that
attempt has been yielded: once text has reached the caller (and maybe the user's chat), a second
attempt would show the answer twice, so the error goes up as it is. When the primary's attempts
are used up, or it fails in a way no retry fixes, the fallback gets the same request under its own
model name, with the same policy.

The whole call, retries, waits and fallback included, ends by one deadline (shared.providers.
deadline): `deadline_s` from the call's start, or the turn's deadline in scope if earlier. A retry
or the fallback is not started unless its wait leaves at least `min_attempt_s` before it, and an
attempt that reaches the deadline (DeadlineExceeded) is neither retried nor handed on.

The helpers below turn an SDK's HTTP error into (retryable, retry-after) so every provider
classifies failures the same way.

Each retry counts ProviderRetries and each hand-over ProviderFallbacks (shared.metric_catalogue),
in the functions that publish metrics.
"""

from __future__ import annotations

import email.utils
import logging
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

from shared.deadline import bounded, remaining, within
from shared.errors import DeadlineExceeded, ProviderError
from shared.metric_catalogue import PROVIDER_FALLBACKS, PROVIDER_RETRIES, record
from shared.providers.base import ChatRequest, Provider, ProviderEvent

log = logging.getLogger("sigil.providers")


class ResilientProvider:
    def __init__(
        self,
        primary: Provider,
        fallback: Provider | None = None,
        *,
        max_attempts: int = 3,
        base_delay_s: float = 0.5,
        max_delay_s: float = 8.0,
        sleep: Callable[[float], None] = time.sleep,
        fallback_model: str | None = None,
        jitter: Callable[[], float] = random.random,
        deadline_s: float | None = None,
        min_attempt_s: float = 2.0,
    ) -> None:
        """`max_attempts` counts calls per provider (1 means no retry). `fallback_model` replaces
        the request's model name for the fallback (None keeps it). `jitter` returns [0, 1).
        `deadline_s` bounds the whole call; `min_attempt_s` is the least time left worth
        starting another attempt with."""
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.deadline_s = deadline_s
        self.min_attempt_s = min_attempt_s
        self.primary = primary
        self.fallback = fallback
        self.fallback_model = fallback_model
        self.max_attempts = max_attempts
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        self._sleep = sleep
        self._jitter = jitter
        # The turn records "provider/model" from this name and the primary's model name.
        self.name = primary.name

    def stream(self, request: ChatRequest) -> Iterator[ProviderEvent]:
        plan: list[tuple[Provider, ChatRequest]] = [(self.primary, request)]
        if self.fallback is not None:
            fallback_request = request
            if self.fallback_model:
                fallback_request = request.model_copy(update={"model": self.fallback_model})
            plan.append((self.fallback, fallback_request))
        at = within(self.deadline_s)
        failures: list[ProviderError] = []
        for index, (provider, attempt_request) in enumerate(plan):
            try:
                yield from self._with_retries(provider, attempt_request, at)
                return
            except _Unrecoverable as stop:
                raise stop.error from None
            except ProviderError as exc:
                failures.append(exc)
                if index + 1 < len(plan):
                    if isinstance(exc, DeadlineExceeded) or not self._time_for(0.0, at):
                        break  # the fallback could not finish either
                    log.warning(
                        "model provider failed, using the fallback",
                        extra={"provider": provider.name, "error": exc.message},
                    )
                    record(PROVIDER_FALLBACKS)
        raise _combined(failures) from None

    def _with_retries(
        self, provider: Provider, request: ChatRequest, at: float | None
    ) -> Iterator[ProviderEvent]:
        attempt = 1
        while True:
            started = False
            try:
                # Each pull inside the call's deadline: the provider's own limit counts from its
                # start, and the earlier of the two ends it.
                for event in bounded(at, provider.stream(request)):
                    started = True
                    yield event
                return
            except ProviderError as exc:
                if started:
                    # Part of this answer is already out: neither a retry nor the fallback may
                    # repeat it.
                    raise _Unrecoverable(exc) from None
                delay = self._delay(attempt, exc)
                if delay is None or isinstance(exc, DeadlineExceeded) or not self._time_for(delay, at):
                    raise
                log.warning(
                    "model call failed, retrying",
                    extra={
                        "provider": provider.name,
                        "attempt": attempt,
                        "delay_s": round(delay, 3),
                        "error": exc.message,
                    },
                )
                record(PROVIDER_RETRIES)
                self._sleep(delay)
                attempt += 1

    def _time_for(self, delay: float, at: float | None) -> bool:
        """Whether an attempt after `delay` would still have `min_attempt_s` before the deadline."""
        left = remaining(at)
        return left is None or left - delay >= self.min_attempt_s

    def _delay(self, attempt: int, exc: ProviderError) -> float | None:
        """Seconds to wait before the next attempt, or None when this provider is done."""
        if not exc.retryable or attempt >= self.max_attempts:
            return None
        if exc.retry_after_s is not None:
            # Sooner than the server asked would most likely be refused again (and count against
            # the rate limit); a wait longer than ours is better spent on the fallback, or by the
            # lane's own redelivery.
            return exc.retry_after_s if exc.retry_after_s <= self.max_delay_s else None
        # Exponential with "equal jitter": at least half the step, so retries never bunch at zero,
        # and spread over the other half so many turns failing together do not retry together.
        step = min(self.max_delay_s, self.base_delay_s * 2.0 ** (attempt - 1))
        return step / 2 + self._jitter() * step / 2


class _Unrecoverable(Exception):
    """Carries an error raised after output was yielded past the fallback handling."""

    def __init__(self, error: ProviderError) -> None:
        super().__init__(error.message)
        self.error = error


def _combined(failures: list[ProviderError]) -> ProviderError:
    last = failures[-1]
    if len(failures) == 1:
        return last
    message = "; then the fallback: ".join(f.message for f in failures)
    if isinstance(last, DeadlineExceeded):
        return DeadlineExceeded(message)
    return ProviderError(message, retryable=last.retryable, retry_after_s=last.retry_after_s)


# ---------------------------------------------------------------- classifying SDK errors


def is_retryable_status(status: int) -> bool:
    """The statuses the OpenAI and Anthropic SDKs retry themselves: timeout, lock, rate, server."""
    return status in (408, 409, 429) or status >= 500


def retry_after_s(headers: Any) -> float | None:
    """The wait a response asks for: `retry-after-ms`, then `retry-after` (seconds or a date)."""
    if headers is None:
        return None
    try:
        millis = headers.get("retry-after-ms")
        if millis is not None:
            return max(0.0, float(millis) / 1000)
    except (TypeError, ValueError):
        pass
    value = headers.get("retry-after")
    if not isinstance(value, str):
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    return max(0.0, email.utils.mktime_tz(parsed) - time.time())


def http_error_retry(exc: BaseException) -> tuple[bool, float | None]:
    """(retryable, retry-after) for an OpenAI/Anthropic SDK status error (`status_code`, `response`).

    The server's `x-should-retry` header wins, as it does in the SDKs' own retry loops.
    """
    status = getattr(exc, "status_code", None)
    headers = getattr(getattr(exc, "response", None), "headers", None)
    after = retry_after_s(headers)
    should = headers.get("x-should-retry") if headers is not None else None
    if should in ("true", "false"):
        return should == "true", after
    return isinstance(status, int) and is_retryable_status(status), after

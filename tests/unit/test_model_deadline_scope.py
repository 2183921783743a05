"""shared.deadline: the earliest deadline wins, and a pull past it stops the stream.

The wire behaviour (slow and hanging servers, each SDK) is tests/integration/test_model_deadline.py;
these pin the scope's rules with function-backed providers and deadlines already passed, so no
test waits on a clock.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from shared.deadline import bounded, current, deadline, within
from shared.errors import DeadlineExceeded
from shared.models import UserMessage
from shared.providers.base import ChatRequest
from shared.providers.function import FunctionProvider
from shared.providers.resilient import ResilientProvider


def req() -> ChatRequest:
    return ChatRequest(model="m", system="", messages=[UserMessage(content="hello")])


class Closable:
    """An iterator that notes whether it was closed."""

    def __init__(self, items: list[int]) -> None:
        self._items = iter(items)
        self.closed = False

    def __iter__(self) -> Iterator[int]:
        return self

    def __next__(self) -> int:
        return next(self._items)

    def close(self) -> None:
        self.closed = True


def test_nested_deadlines_keep_the_earliest_and_end_with_their_scope() -> None:
    now = time.monotonic()
    assert current() is None
    with deadline(now + 100):
        with deadline(now + 500) as inner:
            assert inner == now + 100  # a call's own limit never extends the turn's
            assert within(1000) == now + 100
        with deadline(now + 10) as inner:
            assert inner == now + 10
        assert current() == now + 100
    assert current() is None


def test_a_pull_past_the_deadline_raises_and_closes_the_stream() -> None:
    items = Closable([1, 2, 3])
    with pytest.raises(DeadlineExceeded):
        next(bounded(time.monotonic() - 1, items))
    assert items.closed


def test_a_consumer_that_stops_early_closes_the_stream() -> None:
    items = Closable([1, 2, 3])
    stream = bounded(time.monotonic() + 3600, items)
    assert next(stream) == 1
    stream.close()
    assert items.closed


def test_no_attempt_is_started_once_the_turns_deadline_has_passed() -> None:
    # Given a turn whose deadline has passed, and a primary and a fallback that would answer
    primary, fallback = FunctionProvider(lambda r: "primary"), FunctionProvider(lambda r: "fallback")
    resilient = ResilientProvider(primary, fallback, max_attempts=3, sleep=lambda s: None)
    with deadline(time.monotonic() - 1), pytest.raises(DeadlineExceeded):
        list(resilient.stream(req()))
    # Then neither was called
    assert primary.requests == [] and fallback.requests == []

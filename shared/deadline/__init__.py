"""The overall deadline of a model call, and of the turn around it: of every outbound call.

An SDK's timeout bounds each wait on the network (a connect, one read), never the call: a server
that sends a chunk a second keeps a stream alive for as long as it likes. So a model call gets an
end time (on `time.monotonic()`): the earlier of its own limit (SIGIL_PROVIDER_DEADLINE_S, counted
from its start, retries and fallback included) and the deadline in scope, which the agent sets for
a turn from the Lambda's remaining time (shared.agent.batch) and the local lane worker from
SIGIL_TURN_TIMEOUT_S (shared.local.gateway).

Each provider pulls its SDK's stream through `bounded`, which raises DeadlineExceeded once the end
time has passed, and runs every SDK step inside `deadline(...)`, where the network waits are cut to
the time left: the OpenAI and Anthropic clients' transport (shared.providers.http_deadline) reads
the scope on every socket operation; Bedrock's socket timeout is set before each event. A wait
that the cut ends is an SDK timeout, which the provider reports as DeadlineExceeded.

The turn's scope holds for everything else the turn calls too, each client cutting its waits to
the time left (`cut`) and refusing a call or a retry once it has passed (`out_of_time`): the
embedders (the OpenAI one on the same transport; Titan, like every boto3 client, through
shared.deadline.boto), the AWS stores, skill reads and WebSocket posts (the same
botocore hooks, on shared.adapters.aws.clients), OpenSearch (its connection class) and the
channels' HTTP posts (shared.channels.out.http). A turn keeps `BOOKKEEPING_S` of its deadline for
recording a failed attempt (shared.agent.turn), so that too ends by the deadline its caller set.

Below the features (it imports shared.errors alone): the webhook's cold start, which imports the
AWS clients and the channels, pays nothing for it and never imports shared.providers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

from shared.errors import DeadlineExceeded

T = TypeVar("T")

# The end time in scope (time.monotonic()), or None for none. A ContextVar, so each lane worker
# thread and each Lambda invocation has its own.
_deadline: ContextVar[float | None] = ContextVar("sigil_model_deadline", default=None)


def earliest(*times: float | None) -> float | None:
    """The earliest of these end times; None (no deadline) when none is set."""
    known = [t for t in times if t is not None]
    return min(known) if known else None


def current() -> float | None:
    """The end time in scope, if any."""
    return _deadline.get()


@contextmanager
def deadline(at: float | None) -> Iterator[float | None]:
    """Everything inside ends by `at`, or by the deadline already in scope if that is earlier."""
    effective = earliest(_deadline.get(), at)
    token = _deadline.set(effective)
    try:
        yield effective
    finally:
        _deadline.reset(token)


def within(seconds: float | None) -> float | None:
    """The end time of something that may take `seconds` from now, bounded by the scope's."""
    own = None if seconds is None else time.monotonic() + seconds
    return earliest(_deadline.get(), own)


def remaining(at: float | None) -> float | None:
    """Seconds left until `at` (negative once past it); None when there is no deadline."""
    return None if at is None else at - time.monotonic()


def passed(at: float | None, slack_s: float = 0.0) -> bool:
    """Whether `at` has passed (or is within `slack_s` of passing)."""
    return at is not None and time.monotonic() >= at - slack_s


def check(at: float | None) -> None:
    if passed(at):
        raise DeadlineExceeded()


def out_of_time(what: str) -> DeadlineExceeded:
    """The error for a call (`what`: "the embedding call", "telegram sendMessage"...) refused, or
    cut, by the deadline in scope."""
    return DeadlineExceeded(f"{what} did not finish by the turn's deadline")


def cut(timeout: float | None, at: float | None) -> float | None:
    """A network wait's timeout cut to the time left before `at` (never below a millisecond:
    zero means "no timeout" to some clients); `timeout` itself outside a deadline."""
    left = remaining(at)
    if left is None:
        return timeout
    left = max(0.001, left)
    return left if timeout is None else min(timeout, left)


def before(at: float | None, seconds: float) -> float | None:
    """`seconds` before `at`: the end of the part of a turn that leaves time after it."""
    return None if at is None else at - seconds


def cut_by(at: float | None) -> bool:
    """Whether a network wait that just failed was the one the deadline cut: a wait cut to the
    time left ends on the deadline, give or take the clock's granularity."""
    return passed(at, slack_s=0.05)


def bounded(at: float | None, items: Iterator[T]) -> Iterator[T]:
    """`items` pulled one by one inside the deadline's scope, so the network waits behind each are
    cut to the time left; DeadlineExceeded instead of the next item once `at` has passed.

    The scope is entered and left around each pull, never held across a `yield`: the consumer's
    own work between items is not the model's. However it ends, `items` is closed (a provider's
    stream closes its HTTP response then), not left to the garbage collector.
    """
    try:
        while True:
            check(at)
            with deadline(at):
                try:
                    item = next(items)
                except StopIteration:
                    return
            yield item
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()

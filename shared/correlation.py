"""The correlation id of the work in hand: one id from a webhook request to the consolidation run
its turn set off (docs/observability.md, "Correlation").

The webhook takes API Gateway's request id (powertools' `correlation_paths.API_GATEWAY_HTTP`; the
local gateway mints one per request), the ingress stamps it on each LaneItem it queues, the agent
binds the item's id around its turn, the turn's AuditRecord and the CompactionDue it emits carry
it, and the consolidate function binds the event's. What reads it (`current`) never takes it as a
parameter, so the turn's code needs no new argument on every call on the way.

A context variable, not the powertools logger's keys (which are one dict per process): the local
gateway runs sessions' turns in parallel threads, each with its own id. No powertools import
here either, for the same reason: the local gateway must not grow powertools' log handler.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Final, Protocol

# The log key (powertools' own name for it) and the X-Ray annotation, searchable in the console
# as `annotation.correlation_id = "..."` across the three functions' traces.
KEY: Final = "correlation_id"

_current: ContextVar[str | None] = ContextVar(KEY, default=None)


class CorrelatedLogger(Protocol):
    """What `correlated` needs of a logger: powertools' Logger has both."""

    def set_correlation_id(self, value: str | None) -> None: ...


class Annotating(Protocol):
    """What `correlated` needs of a tracer: powertools' Tracer (a no-op when tracing is off)."""

    def put_annotation(self, key: str, value: str) -> None: ...


def current() -> str | None:
    """The id of the work in hand (None outside any: a schedule tick, an old queued item)."""
    return _current.get()


@contextmanager
def correlated(
    correlation_id: str | None, *, logger: CorrelatedLogger | None = None, tracer: Annotating | None = None
) -> Iterator[str | None]:
    """Bind `correlation_id` for the block: `current()`, the logger's lines and the tracer's open
    segment. The logger keeps it after the block, so a failure logged by the caller on the way out
    (powertools' batch processor logs a failed record after its handler raised) still carries it;
    the next `correlated` replaces it."""
    token = _current.set(correlation_id)
    if logger is not None:
        logger.set_correlation_id(correlation_id)
    if tracer is not None and correlation_id:
        tracer.put_annotation(KEY, correlation_id)
    try:
        yield correlation_id
    finally:
        _current.reset(token)


class Stamp(logging.Filter):
    """Puts the bound id on each record as `correlation_id` (the local gateway's key=value lines);
    a record that names one in its `extra` keeps its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        correlation_id = _current.get()
        if correlation_id is not None and not hasattr(record, KEY):
            setattr(record, KEY, correlation_id)
        return True

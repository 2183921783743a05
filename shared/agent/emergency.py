"""Emergency compaction (spec 003's progressive compaction, spec 004's EmergencyCompact): when the
model says a turn's context is too long, roll more of the window out into Tier 1 and try again.

The window normally holds the workspace's `active_window` messages (20). A provider that reports
a context overflow gets the same call again with the window cut to the newest 10 messages, then 3,
then 1 (the `keep` stages), each cut at a user message (shared.agent.window.split_window, so no
turn is split). The messages cut off are not lost: they become Tier-1 records (the shape the
turn's commit writes, with their owners) and index documents (through the memory writer, as the
commit's: vectors, chunks, neighbours as context), saved with the session before the retry, so the
memory tools find them and the next turn starts from the smaller window. A CompactionDue is
published for every batch boundary the roll-out crosses, as the turn's commit does.

If the overflow survives the last stage (the newest message alone is too long, or the system
prompt is), the provider's error is raised as it was: the turn fails as any provider error does.

It lives beside the turn it serves and rolls messages out through the turn's own window module
(shared.agent.window), so both write the same records, documents and events.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from shared.agent.window import Origin, announce_compaction, index_rolled, split_window, tier1_records
from shared.backend import Backend
from shared.errors import ConcurrencyConflict, ProviderError
from shared.models import MemoryRecord, Session, WorkspaceConfig
from shared.providers.base import ChatRequest

# The name it had under shared.consolidation, kept so log filters and alarms still match.
log = logging.getLogger("sigil.consolidation.emergency")

T = TypeVar("T")

KEEP_STAGES: Final = (10, 3, 1)
# How providers say "too long": OpenAI's error code (in the ProviderError message), a code a
# provider may set on the error, and the phrases compatible servers use.
_OVERFLOW_CODES: Final = frozenset({"context_overflow", "context_length_exceeded"})
_OVERFLOW_MARKERS: Final = (
    "context_length_exceeded",
    "maximum context length",
    "context window",
    "prompt is too long",
    "input is too long",
    "too many tokens",
)


def is_context_overflow(exc: BaseException) -> bool:
    if not isinstance(exc, ProviderError):
        return False
    if exc.code in _OVERFLOW_CODES:
        return True
    message = exc.message.casefold()
    return any(marker in message for marker in _OVERFLOW_MARKERS)


@dataclass(frozen=True)
class Compacted:
    """One stage: the session with a smaller window, and the Tier-1 records of what left it."""

    keep: int
    session: Session
    records: list[MemoryRecord]
    origin: Origin


def emergency_compact(
    session: Session, origin: Origin, keep: Sequence[int] = KEEP_STAGES
) -> Iterator[Compacted]:
    """The successive stages for `session`: each keeps fewer messages in the window (stages that
    would keep as many as the one before are skipped). Each cut is the turn's own (split_window:
    at a user message, never inside a turn), its records scoped in `origin`'s conversation as the
    commit's are. Nothing is stored here."""
    current = session
    for n in keep:
        rolled, kept = split_window(current.active_messages, n)
        if not rolled:
            continue
        records = tier1_records(current, rolled, origin)
        current = current.model_copy(
            update={"active_messages": kept, "rolled_out_count": current.rolled_out_count + len(rolled)}
        )
        yield Compacted(n, current, records, origin)


def persist(backend: Backend, workspace: WorkspaceConfig, before: Session, stage: Compacted) -> Session:
    """Index the stage's records, save the session with them (optimistically, as the turn commits),
    and announce the batches the roll-out completed. Returns the session as stored."""
    # Through the memory writer, as the turn's commit indexes its roll-out: vectors, chunks and
    # each message's neighbours as context, the next ones taken from the window that stays.
    index_rolled(backend, before, stage.records, stage.session.active_messages, stage.origin)
    saved = backend.sessions.save(stage.session, expected_version=before.version, archive=stage.records)
    announce_compaction(backend.events, workspace, before, saved, log=log)
    return saved


def with_emergency_compaction(
    backend: Backend,
    workspace: WorkspaceConfig,
    session: Session,
    request: ChatRequest,
    call: Callable[[ChatRequest], T],
    *,
    origin: Origin,
    keep: Sequence[int] = KEEP_STAGES,
) -> tuple[T, Session]:
    """`call(request)`; on a context overflow, compact the window stage by stage and call again
    with the smaller window (the request's last message, the new one, always stays). Returns the
    result and the session as it now stands (saved, at a new version, if a stage was needed)."""
    try:
        return call(request), session
    except ProviderError as exc:
        if not is_context_overflow(exc):
            raise
        overflow = exc
    new = request.messages[-1:]
    for stage in emergency_compact(session, origin, keep):
        try:
            saved = persist(backend, workspace, session, stage)
        except ConcurrencyConflict:
            raise overflow from None  # the session moved under the turn: let the lane retry it
        log.warning(
            "context overflow: window compacted",
            extra={"session_id": session.id, "keep": stage.keep, "rolled_out": len(stage.records)},
        )
        session = saved
        try:
            return call(request.model_copy(update={"messages": [*saved.active_messages, *new]})), session
        except ProviderError as exc:
            if not is_context_overflow(exc):
                raise
            overflow = exc
    raise overflow

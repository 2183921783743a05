"""A turn's commit: one SessionStore.save.

The session, the Tier-1 records rolled out of the window and the turn's audit record land
together or not at all (one DynamoDB transaction in the cloud), with what the turn's budget spent
added to its counters in the same write. The save is optimistic: a version conflict reloads the
session and tries again, unless another delivery of the same event committed first.

The session keeps the event ids of its last day of turns (EVENT_ID_TTL, at most
MAX_RECENT_EVENT_IDS) with their commit times, so a redelivered event is found and skipped (see
shared.agent.turn): a few hundred bytes for a conversation at an ordinary pace.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from shared import correlation
from shared.agent.preflight import load_session
from shared.agent.window import announce_compaction, index_rolled, origin_of, split_window, tier1_records
from shared.backend import Backend
from shared.budgets import TurnBudget
from shared.consolidation.turn_event import turn_committed
from shared.errors import ConcurrencyConflict
from shared.models import AuditRecord, InboundMessage, Message, Session, WorkspaceConfig

log = logging.getLogger("sigil.turn")

# How long a committed event id is remembered: past every platform's redelivery (see
# shared.agent.turn), and past SQS FIFO's 5-minute deduplication window by far.
EVENT_ID_TTL = timedelta(hours=24)
# A bound on the session item whatever the pace: 500 turns within a day is a busy group channel,
# whose retries (minutes or hours late) are still among its last 500 events.
MAX_RECENT_EVENT_IDS = 500
COMMIT_ATTEMPTS = 5


def commit(
    backend: Backend,
    workspace: WorkspaceConfig,
    session: Session,
    inbound: InboundMessage,
    new: list[Message],
    *,
    clock: Callable[[], datetime],
    audit: AuditRecord | None = None,
    updates: dict[str, Any] | None = None,
    budget: TurnBudget | None = None,
    fresh: bool = False,
) -> Session:
    """Append to the window and save (optimistically), with the overflow's Tier-1 records and
    `audit` in the same write; the overflow goes to the index first. `updates` are the session
    changes the turn's tools asked for (ToolContext.session_updates, e.g. the active-task pin).
    What `budget` spent is added to its counters in that write too. `fresh` rolls the whole
    window out, leaving it empty (the /new command, shared.agent.commands)."""
    origin = origin_of(inbound)
    for _ in range(COMMIT_ATTEMPTS):
        messages = [*session.active_messages, *new]
        rolled, kept = (messages, []) if fresh else split_window(messages, workspace.active_window)
        records = tier1_records(session, rolled, origin)
        # The index is another store, outside the save's transaction, so it goes first: a crash
        # before the save leaves documents the retry rewrites in place (ids are message ids),
        # whereas the reverse order could leave Tier-1 records that search never finds.
        index_rolled(backend, session, records, kept, origin)
        now = clock()
        event_ids, event_times = recent_events(
            session, inbound.event_id, now, merged=inbound.merged_event_ids
        )
        updated = session.model_copy(
            update={
                "active_messages": kept,
                "message_count": session.message_count + len(new),
                "rolled_out_count": session.rolled_out_count + len(rolled),
                "recent_event_ids": event_ids,
                "recent_event_times": event_times,
                "updated_at": now,
                **(updates or {}),
            }
        )
        try:
            saved = backend.sessions.save(
                updated,
                expected_version=session.version,
                archive=records,
                audit=audit,
                charge=budget.pending() if budget is not None else None,
            )
        except ConcurrencyConflict:
            session = load_session(backend.sessions, inbound, session.user_id or inbound.sender.id)
            if inbound.event_id in session.recent_event_ids:
                # Another delivery of this same turn committed first, with its own audit record:
                # this one's is not written, so the turn is counted once.
                return session
            continue
        if budget is not None:
            budget.recorded()
        announce_compaction(backend.events, workspace, session, saved, log=log)
        if new:
            announce_turn(backend, workspace, inbound, saved)
        return saved
    raise ConcurrencyConflict(
        f"session {inbound.session_id} kept changing under the commit; gave up after {COMMIT_ATTEMPTS} tries"
    )


def announce_turn(
    backend: Backend, workspace: WorkspaceConfig, inbound: InboundMessage, saved: Session
) -> None:
    """Publish the turn's TurnCommitted, delivered after the workspace's debounce, for its facts to
    be extracted (shared.consolidation.turn_extraction). Like CompactionDue, a failure is logged:
    the session is saved, and compaction extracts the messages when they roll out."""
    if not workspace.turn_extraction:
        return
    origin = origin_of(inbound)
    event = turn_committed(
        saved, conversation=origin.conversation, group=origin.group, correlation_id=correlation.current()
    )
    try:
        backend.events.publish_after(event, workspace.extraction_debounce_s)
    except Exception:
        log.exception("TurnCommitted not published", extra={"session_id": saved.id})


def recent_events(
    session: Session, event_id: str, now: datetime, *, merged: Sequence[str] = ()
) -> tuple[list[str], list[int]]:
    """The session's event ids and times with `event_id` (and a coalesced burst's `merged` ids)
    added at `now`: those of the last EVENT_ID_TTL, the newest MAX_RECENT_EVENT_IDS of them,
    oldest first."""
    at = int(now.timestamp())
    horizon = at - int(EVENT_ID_TTL.total_seconds())
    seen = zip(session.recent_event_ids, session.recent_event_times, strict=True)
    new = [(e, at) for e in (*merged, event_id)]
    kept = [*((e, t) for e, t in seen if t >= horizon), *new][-MAX_RECENT_EVENT_IDS:]
    return [e for e, _ in kept], [t for _, t in kept]


def settle(budget: TurnBudget) -> None:
    """Record what the turn spent if its commit did not (a no-op once it did, or with nothing
    spent). Called on the way out of a failure too, so its own failure is logged, not raised."""
    try:
        budget.settle()
    except Exception:
        log.exception(
            "budget spending not recorded",
            extra={"workspace_id": budget.workspace_id, "tokens": budget.spent.tokens},
        )

"""Per-turn fact extraction (spec 003, "Debounced Idle Extraction", and its "Memory Flush Guard").

After a turn commits, the agent publishes a TurnCommitted (`turn_committed`) to be delivered once
the workspace's `extraction_debounce_s` (5 s) has passed: an SQS delay queue in the cloud, an
available-at time on the local bus. Nobody waits meanwhile. When it arrives, `extract_turn`:

1. does nothing when the workspace turned `turn_extraction` off ("off"), or when the session
   committed a later turn since ("superseded": that turn's own event, delayed in turn, will do
   it), so a burst of turns is extracted once, after its last turn, whatever its length;
2. takes the session's lease, compaction's own (compaction.lease_name), so two extractions of one
   session, per turn or by compaction, never overlap; one that cannot take it is "busy" and
   skipped (spec 003: "silently skipped"), and what it would have extracted is extracted by
   compaction when those messages roll out, since the watermark below does not cover them;
3. reads the last TURN_WINDOW (6) messages up to the turn's last seq, reaching back to the first
   one not yet extracted when more than 6 are new (a burst), MAX_WINDOW at most: from the window
   (and from Tier 1 for any that already rolled out), with the scope their Tier-1 records have or
   will have (shared.memory.writer.message_scope in the event's conversation);
4. checks the workspace's budget as compaction does (its workspace scope, before the call): a
   used-up budget extracts nothing and says so ("over_budget", a warning line and the
   TurnExtractionOverBudget metric);
5. asks the consolidation model (compaction's prompt, shared.consolidation.extraction) and stores
   the facts with compaction's FactWriter (normalisation, sanitisation, injection scan, redaction,
   dedup, scope, provenance: the message each fact was read from, as the model cites it, checked
   against the window, or found by the fallback of extraction.fact_sources);
6. keys those messages' index documents with their facts (shared.consolidation.extraction_keys):
   a message still in the window is not indexed yet, so its keys wait, and are put on once it has
   rolled out, by a later extraction (or compaction);
7. moves the session's watermark (`extracted_range`): the seqs already extracted, which
   compaction's extraction skips (the flush guard), then charges the call to the budget.

The watermark is one range, first:last, in the consolidation state (a checkpoint beside
compaction's, so a turn's commit never races it for the session's version). A window that
continues the range extends it; one that leaves a gap (more than MAX_WINDOW new messages) starts
a new range, and the messages of the old one are extracted again by compaction: dedup merges
them, nothing is lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Final, Literal

from pydantic import BaseModel

from shared.backend import Backend
from shared.clock import new_id, utcnow
from shared.consolidation.compaction import (
    ConsolidationModel,
    ModelSource,
    fact_speaker,
    lease_name,
    union_scope,
)
from shared.consolidation.extraction import (
    EXTRACTION_SYSTEM,
    FactWriter,
    extraction_input,
    extraction_sources,
    parse_extraction,
)
from shared.consolidation.extraction_keys import key_extracted
from shared.consolidation.personality import record_styles

# In __all__: the event is this module's, defined apart so the agent imports it alone.
from shared.consolidation.turn_event import turn_committed
from shared.consolidation.watermark import extracted_range, watermark_name
from shared.memory.writer import message_scope
from shared.metric_catalogue import (
    TURN_EXTRACTION_BUSY,
    TURN_EXTRACTION_FACTS,
    TURN_EXTRACTION_OVER_BUDGET,
    TURN_EXTRACTION_SUPERSEDED,
    TURN_EXTRACTIONS,
    record,
)
from shared.models import (
    DomainEvent,
    MemoryRecord,
    Message,
    Session,
    UserMessage,
    WorkspaceConfig,
    new_workspace,
)

log = logging.getLogger("sigil.consolidation.turn")

# Spec 003: the last 6 messages (the last exchange and a little before it).
TURN_WINDOW: Final = 6
# A burst's unextracted messages are taken back to this many (500 characters each stays well
# within extraction_input's 15,000).
MAX_WINDOW: Final = 20
# One model call and a few store writes; the lease outlives a stuck call by far.
LEASE_S: Final = 300.0

Status = Literal["done", "superseded", "busy", "over_budget", "off", "nothing"]


class TurnExtractionResult(BaseModel):
    """What one TurnCommitted came to: a log line, metrics and the handler's answer."""

    workspace_id: str
    session_id: str
    run_id: str
    # done: facts extracted (maybe none); superseded: a later turn committed since, whose event
    # extracts; busy: another extraction or compaction of the session holds its lease; over_budget:
    # the workspace's budget is used up, nothing extracted; off: turn_extraction is off;
    # nothing: no session, or its messages up to the turn were extracted already (a redelivery).
    status: Status
    seq: int = -1  # the turn's last message
    first_seq: int = -1  # the window extracted
    last_seq: int = -1
    facts_extracted: int = 0
    facts_merged: int = 0
    facts_reinforced: int = 0
    facts_dropped: int = 0
    # Fact-augmented keys (shared.consolidation.extraction_keys): message documents keyed, and
    # (message, fact) pairs waiting for their message to roll out and be indexed.
    keyed_docs: int = 0
    keys_pending: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    budget_exhausted: str | None = None
    # What the learned personality did (shared.consolidation.personality.PersonalityOutcome.status).
    personality: str | None = None
    duration_ms: float = 0.0


# ---------------------------------------------------------------- the event


# ---------------------------------------------------------------- the run


def extract_turn(
    backend: Backend,
    model: ModelSource,
    event: DomainEvent,
    *,
    run_id: str,
    clock: Callable[[], datetime] = utcnow,
) -> TurnExtractionResult:
    """Extract the facts of the event's turn (module docstring). A provider error is raised, after
    the lease is released, for the trigger to retry; nothing is marked extracted then."""
    started = time.monotonic()
    ws, sid = event.workspace_id, event.session_id or ""
    seq = int(event.detail.get("seq", -1))
    result = TurnExtractionResult(workspace_id=ws, session_id=sid, run_id=run_id, status="nothing", seq=seq)
    try:
        _run(backend, model, event, result, clock)
    finally:
        result.duration_ms = round((time.monotonic() - started) * 1000, 3)
        _publish(result)
    return result


def _run(
    backend: Backend,
    source: ModelSource,
    event: DomainEvent,
    result: TurnExtractionResult,
    clock: Callable[[], datetime],
) -> None:
    ws, sid, seq = result.workspace_id, result.session_id, result.seq
    workspace = backend.workspaces.get(ws) or new_workspace(ws)
    if not workspace.turn_extraction:
        result.status = "off"
        return
    session = backend.sessions.get(ws, sid) if sid else None
    if session is None or seq < 0:
        return
    if session.message_count - 1 > seq:
        result.status = "superseded"
        return
    owner = f"{result.run_id}/{new_id()}"
    name = lease_name(sid)
    if not backend.consolidation.acquire_lease(ws, name, owner, LEASE_S):
        result.status = "busy"
        log.info("turn extraction busy", extra={"workspace_id": ws, "session_id": sid})
        return
    try:
        covered = extracted_range(backend, ws, sid)
        first = _window_start(seq, covered)
        if first > seq:
            return  # a redelivery: these messages were extracted already
        records = _records(backend, session, event, first, seq)
        if not records:
            return
        result.first_seq, result.last_seq = records[0].seq, records[-1].seq
        if _over_budget(backend, workspace, result, clock):
            return
        model = source if isinstance(source, ConsolidationModel) else source()
        answer, usage = model.complete(EXTRACTION_SYSTEM, extraction_input(records))
        result.tokens_in, result.tokens_out = usage.input_tokens, usage.output_tokens
        try:
            scope = union_scope(records)
            speaker = fact_speaker(records, scope, session.user_id)
            now = clock()
            writer = FactWriter(
                memory=backend.memory,
                index=backend.index,
                embedder=backend.embedder,
                workspace_id=ws,
                session_id=sid,
                user_id=speaker,
                scope=scope,
                run_id=result.run_id,
                # Each fact's provenance: the message it was read from (a retry, or the next turn's
                # overlapping window reading that message again, changes nothing twice).
                sources=extraction_sources(records),
                now=now,
                pii=workspace.pii_redaction,
            )
            outcome = writer.store(parse_extraction(answer))
            result.facts_extracted, result.facts_merged = outcome.extracted, outcome.merged
            result.facts_reinforced, result.facts_dropped = outcome.reinforced, outcome.dropped
            # Their keys on the messages they came from: pending while those are in the window,
            # and the keys pending from earlier turns whose messages have rolled out since.
            keys = key_extracted(
                backend,
                ws,
                sid,
                written=outcome.written,
                sources=outcome.sources,
                seqs={r.id: r.seq for r in records},
                rolled_out=session.rolled_out_count,
            )
            result.keyed_docs, result.keys_pending = keys.docs, keys.pending
            # The learned personality, as compaction recomputes it (spec 003: after every
            # extraction that stored style observations); its call is charged with this one.
            styles = record_styles(
                backend,
                workspace,
                user=speaker,
                scope=writer.owner(speaker) if speaker else None,
                styles=outcome.written,
                now=now,
                model=model,
                run_id=result.run_id,
            )
            result.tokens_in += styles.usage.input_tokens
            result.tokens_out += styles.usage.output_tokens
            result.personality = styles.status
            backend.consolidation.put_checkpoint(ws, watermark_name(sid), _extended(covered, first, seq))
            result.status = "done"
        finally:
            _charge(backend, workspace, model, result, clock)
    finally:
        backend.consolidation.release_lease(ws, name, owner)
        log.info("turn extraction", extra=result.model_dump(mode="json"))


def _window_start(seq: int, covered: tuple[int, int] | None) -> int:
    """The first seq to read: TURN_WINDOW back, or further back to the first message not yet
    extracted (MAX_WINDOW at most); past `seq` when everything up to it was extracted."""
    start = max(0, seq - TURN_WINDOW + 1)
    last = covered[1] if covered is not None else -1
    if last >= seq:
        return seq + 1
    return max(min(start, last + 1), seq - MAX_WINDOW + 1, 0)


def _extended(covered: tuple[int, int] | None, first: int, last: int) -> str:
    if covered is not None and first <= covered[1] + 1:
        first = min(first, covered[0])
    return f"{first}:{last}"


def _records(
    backend: Backend, session: Session, event: DomainEvent, first: int, last: int
) -> list[MemoryRecord]:
    """Messages `first`..`last` of the session as Tier-1 records: read from Tier 1 where they
    rolled out already, built from the window (as shared.agent.window.tier1_records builds them
    when they roll out) where not."""
    ws, sid = session.workspace_id, session.id
    rolled: list[MemoryRecord] = []
    if first < session.rolled_out_count:
        page = backend.memory.get_messages(ws, sid, after_seq=first - 1, limit=last - first + 1)
        rolled = [r for r in page if first <= r.seq <= last]
    conversation = str(event.detail.get("conversation") or sid)
    group = bool(event.detail.get("group", False))
    owner = session.user_id
    active: list[MemoryRecord] = []
    for i, m in enumerate(session.active_messages):
        if isinstance(m, UserMessage) and m.user_id is not None:
            owner = m.user_id
        position = session.rolled_out_count + i
        if not first <= position <= last:
            continue
        active.append(
            MemoryRecord(
                id=m.id,
                workspace_id=ws,
                session_id=sid,
                role=m.kind,
                text=_text(m),
                seq=position,
                created_at=m.created_at,
                user_id=owner,
                author=m.sender_name if isinstance(m, UserMessage) else None,
                scope=message_scope(m.kind, owner, conversation=conversation, group=group),
            )
        )
    return [*rolled, *active]


def _text(m: Message) -> str:
    # Tool calls hold no facts about the person (and tool results are skipped by the prompt's
    # input): an assistant step's own words alone.
    return m.content


# ---------------------------------------------------------------- the budget


def _over_budget(
    backend: Backend, workspace: WorkspaceConfig, result: TurnExtractionResult, clock: Callable[[], datetime]
) -> bool:
    if workspace.budget is None:
        return False
    # A store failure is raised like any read before the work: nothing written, the trigger retries.
    decision = backend.budgets.check(result.workspace_id, None, workspace.budget, clock())
    exhausted = decision.exhausted
    if exhausted is None:
        return False
    result.status = "over_budget"
    result.budget_exhausted = exhausted.summary
    log.warning(
        "turn extraction skipped: the workspace's budget is used up",
        extra={
            "workspace_id": result.workspace_id,
            "session_id": result.session_id,
            "budget": exhausted.summary,
        },
    )
    return True


def _charge(
    backend: Backend,
    workspace: WorkspaceConfig,
    model: ConsolidationModel,
    result: TurnExtractionResult,
    clock: Callable[[], datetime],
) -> None:
    """The call, charged to the workspace scope of its budget at the consolidation model's price."""
    if workspace.budget is None or not (result.tokens_in or result.tokens_out):
        return
    try:
        usage = model.prices.usage(model.ref, tokens_in=result.tokens_in, tokens_out=result.tokens_out)
        backend.budgets.charge(result.workspace_id, None, usage, workspace.budget, clock())
    except Exception as exc:  # noqa: BLE001 -- the facts are written; the tokens are in the result
        log.warning(
            "turn extraction not charged to the budget",
            extra={
                "workspace_id": result.workspace_id,
                "session_id": result.session_id,
                "tokens_in": result.tokens_in,
                "tokens_out": result.tokens_out,
                "error_type": type(exc).__name__,
            },
        )


def _publish(result: TurnExtractionResult) -> None:
    """Counts only (no workspace dimension: it would be unbounded per session)."""
    if result.status == "done":
        record(TURN_EXTRACTIONS)
        record(TURN_EXTRACTION_FACTS, float(result.facts_extracted))
    elif result.status == "superseded":
        record(TURN_EXTRACTION_SUPERSEDED)
    elif result.status == "busy":
        record(TURN_EXTRACTION_BUSY)
    elif result.status == "over_budget":
        record(TURN_EXTRACTION_OVER_BUDGET)


__all__ = [
    "MAX_WINDOW",
    "TURN_WINDOW",
    "TurnExtractionResult",
    "extract_turn",
    "extracted_range",
    "turn_committed",
    "watermark_name",
]

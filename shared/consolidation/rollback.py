"""Undo one consolidation run (spec 001: provenance lets a consolidation be rolled back).

What a run leaves behind, and how it is undone:

- triples it wrote (`source == "consolidation"` and `run_id` = the run: compaction's facts) and
  summaries it wrote (`Summary.run_id`) are deleted, with their index documents;
- lifecycle changes maintenance made (promote, prune, merge, absorb) are recorded on the triple as
  a TripleChange holding the values before the run; the newest entry, when it is the run's, is
  put back, and a fact that becomes active again is indexed again;
- a triple the run changed that a later run changed again is left as it is and counted as
  "superseded": roll back the later run first.

Tier-1 messages are never touched: consolidation never changed them. A session's rolling summary
(Session.summary) is rewritten by every compaction and is not restored. Merged and pruned
triples are purged 30 days after their change (maintenance's retention), so that is as far back
as a rollback reaches.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel

from shared.clock import utcnow
from shared.consolidation.maintenance import relevance
from shared.models import WORKSPACE_WIDE, Triple
from shared.tools.memory import fact_index_doc

if TYPE_CHECKING:
    from shared.backend import Backend

_PAGE = 500
_MAX_SUMMARIES = 1_000_000


class RollbackReport(BaseModel):
    workspace_id: str
    run_id: str
    restored: int = 0
    superseded: int = 0
    deleted_triples: int = 0
    deleted_summaries: int = 0
    reindexed: int = 0


def _restore(triple: Triple, now: datetime) -> Triple:
    entry = triple.changes[-1]
    restored = triple.model_copy(
        update={
            "status": entry.status,
            "merged_into": entry.merged_into,
            "long_term": entry.long_term,
            "access_count": entry.access_count,
            "reinforced_count": entry.reinforced_count,
            "last_accessed_at": entry.last_accessed_at,
            "updated_at": entry.updated_at,
            "message_ids": list(entry.message_ids),
            "changes": triple.changes[:-1],
        }
    )
    return restored.model_copy(update={"relevance": relevance(restored, now)})


def run_exists(backend: Backend, workspace_id: str, run_id: str) -> bool:
    """Whether anything in `workspace_id`'s derived memory carries `run_id`: a triple or summary it
    wrote, or a change it made. A run rolled back entirely, or purged, leaves nothing and is gone."""
    memory = backend.memory
    after: str | None = None
    while page := memory.list_triples(workspace_id, scope=WORKSPACE_WIDE, after=after, limit=_PAGE):
        after = page[-1].id
        if any(t.run_id == run_id or any(c.run_id == run_id for c in t.changes) for t in page):
            return True
    return any(
        s.run_id == run_id
        for s in memory.list_summaries(workspace_id, scope=WORKSPACE_WIDE, limit=_MAX_SUMMARIES)
    )


def rollback_run(
    backend: Backend, workspace_id: str, run_id: str, *, clock: Callable[[], datetime] = utcnow
) -> RollbackReport:
    """Undo what run `run_id` did to `workspace_id`'s derived memory; see the module docstring.

    Idempotent: a second rollback of the same run finds nothing more to undo.
    """
    now = clock()
    report = RollbackReport(workspace_id=workspace_id, run_id=run_id)
    memory, index = backend.memory, backend.index
    after: str | None = None
    while page := memory.list_triples(workspace_id, scope=WORKSPACE_WIDE, after=after, limit=_PAGE):
        after = page[-1].id
        written = [t.id for t in page if t.source == "consolidation" and t.run_id == run_id]
        restored: list[Triple] = []
        reindex: list[Triple] = []
        unindex: list[str] = list(written)
        for t in page:
            if t.id in written or not t.changes:
                continue
            if t.changes[-1].run_id != run_id:
                report.superseded += any(c.run_id == run_id for c in t.changes)
                continue
            back = _restore(t, now)
            restored.append(back)
            if back.status == "active" and t.status != "active":
                reindex.append(back)
            elif back.status != "active" and t.status == "active":
                unindex.append(back.id)
        # The index first: a rollback cut off after it is finished by running it again.
        if reindex:
            index.upsert(workspace_id, [fact_index_doc(t, t.embedding) for t in reindex])
        if unindex:
            index.delete(workspace_id, unindex)
        memory.put_triples(workspace_id, restored)
        memory.delete_triples(workspace_id, written)
        report.restored += len(restored)
        report.reindexed += len(reindex)
        report.deleted_triples += len(written)

    summaries = [
        s.id
        for s in memory.list_summaries(workspace_id, scope=WORKSPACE_WIDE, limit=_MAX_SUMMARIES)
        if s.run_id == run_id
    ]
    if summaries:
        index.delete(workspace_id, summaries)
        memory.delete_summaries(workspace_id, summaries)
    report.deleted_summaries = len(summaries)
    return report

"""The backfill of scopes: records written before scopes existed get one (docs/privacy.md).

Until then such a record is visible in its own session and under the workspace-wide policy only
(shared.memory.scope.visible). Each run stamps one page of them (`MaintenancePolicy.backfill_page`)
with shared.memory.scope.legacy_scope (its session as its conversation, its user as its owner:
never wider than before), the index first and then the store, which is what `unscoped` reads: a
run cut off in between leaves the page for the next run to stamp again, never a record whose
documents stay unscoped while the store says otherwise.
"""

from __future__ import annotations

from shared.consolidation.maintenance.context import Run
from shared.consolidation.maintenance.report import PhaseResult
from shared.memory.scope import legacy_scope
from shared.models import MemoryRecord, MemoryScope, MemoryTier, Summary


class ScopesResult(PhaseResult):
    scopes_backfilled: int = 0


def backfill_scopes(run: Run, after: str | None) -> ScopesResult:
    """One page of unscoped records stamped; nothing to resume (`after` is unused)."""
    result = ScopesResult()
    if run.out_of_time():
        return result.stop()
    page = run.backend.memory.unscoped(run.workspace_id, limit=run.policy.backfill_page)
    if not page:
        return result
    stamps: dict[str, tuple[MemoryTier, MemoryScope]] = {}
    for record in page:
        tier: MemoryTier = (
            "message"
            if isinstance(record, MemoryRecord)
            else "summary"
            if isinstance(record, Summary)
            else "fact"
        )
        stamps[record.id] = (tier, legacy_scope(record.session_id, record.user_id))
    run.backend.index.stamp_scopes(run.workspace_id, {rid: scope for rid, (_, scope) in stamps.items()})
    result.scopes_backfilled = run.backend.memory.stamp_scopes(run.workspace_id, stamps)
    return result

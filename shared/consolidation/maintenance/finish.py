"""The finish phase (steps 5-7), over the whole scope: dedup, cap, then purge what was merged or
pruned longer than the retention ago (until then a run can be rolled back:
shared.consolidation.rollback). Recomputed from the store when a run is cut off in it."""

from __future__ import annotations

from shared.consolidation.maintenance.context import Run
from shared.consolidation.maintenance.merging import cap, exact_merges, merge, near_merges
from shared.consolidation.maintenance.policy import aware, relevance
from shared.consolidation.maintenance.report import PhaseResult
from shared.consolidation.maintenance.scope import Scope
from shared.models import WORKSPACE_WIDE


class FinishResult(PhaseResult):
    merged_exact: int = 0
    merged_near: int = 0
    capped: int = 0
    purged: int = 0
    active: int = 0
    dedup_vectors: int = 0
    dedup_comparisons: int = 0
    dedup_all_pairs: int = 0


def finish(run: Run, after: str | None) -> FinishResult:
    """Dedup, cap and purge; stopped when the deadline came before the writes were done.
    `after` is the score phase's cursor: this phase always takes the whole scope."""
    result = FinishResult()
    if run.out_of_time():
        return result.stop()
    scope = run.scope if run.scope is not None else _load(run)
    policy, now = run.policy, run.now
    for t in scope.active():
        t.relevance = relevance(t, now, policy)  # the scope's own copy: no write for this
    merges = exact_merges(scope)
    current = run.backend.embedder.model_id if run.backend.embedder is not None else None
    near, costs = near_merges(scope, {loser for loser, _ in merges}, current, policy.dedup_cosine)
    result.merged_exact, result.merged_near = len(merges), len(near)
    for stats in costs:
        result.dedup_vectors += stats.n
        result.dedup_comparisons += stats.comparisons
        result.dedup_all_pairs += stats.all_pairs
    for loser_id, survivor_id in [*merges, *near]:
        merge(scope, loser_id, survivor_id, run_id=run.run_id, now=now, policy=policy)
    capped = cap(scope, run_id=run.run_id, now=now, policy=policy)
    result.capped, result.active = len(capped), len(scope.active())

    run.unindex(result, [loser for loser, _ in merges] + [loser for loser, _ in near] + capped)
    dirty = scope.dirty()
    for lo in range(0, len(dirty), policy.page_size):
        if run.out_of_time():
            return result.stop()
        run.write(result, [scope.full(t) for t in dirty[lo : lo + policy.page_size]])
    purge = [
        t.id
        for t in scope.triples.values()
        if t.status != "active"
        and aware(t.changes[-1].at if t.changes else t.updated_at) < now - policy.retention
    ]
    for lo in range(0, len(purge), policy.page_size):
        if run.out_of_time():
            return result.stop()
        run.backend.memory.delete_triples(run.workspace_id, purge[lo : lo + policy.page_size])
        result.purged += len(purge[lo : lo + policy.page_size])
    return result


def _load(run: Run) -> Scope:
    scope, after = Scope(), None
    while page := run.backend.memory.list_triples(
        run.workspace_id, scope=WORKSPACE_WIDE, after=after, limit=run.policy.page_size
    ):
        for t in page:
            scope.add(t)
        after = page[-1].id
    return scope

"""The score phase (steps 1-4), page by page with a checkpoint after each: score every active
triple, promote the relevant and used, prune the faded, and embed what has no vector of the
current model."""

from __future__ import annotations

from collections.abc import Sequence

from shared.consolidation.maintenance.context import Run
from shared.consolidation.maintenance.policy import changed, relevance
from shared.consolidation.maintenance.report import PhaseResult
from shared.consolidation.maintenance.scope import Scope
from shared.models import WORKSPACE_WIDE, Triple
from shared.tools.memory import fact_index_doc, fact_text


class ScoreResult(PhaseResult):
    scored: int = 0
    promoted: int = 0
    pruned: int = 0
    backfilled: int = 0


def score(run: Run, after: str | None) -> ScoreResult:
    """Every page after `after` (all of them when None); stops between pages at the deadline."""
    result = ScoreResult()
    # A pass that starts at the first page sees the whole scope: kept for the finish phase.
    run.scope = scope = Scope() if after is None else None
    page_size = run.policy.page_size
    while True:
        if run.out_of_time():
            return result.stop(after)
        page = run.backend.memory.list_triples(
            run.workspace_id, scope=WORKSPACE_WIDE, after=after, limit=page_size
        )
        if not page:
            return result
        scored = _backfill(run, result, _score_page(run, result, page))
        if scored is None:
            return result.stop(after)  # the page is scored again (a no-op) and finished
        if scope is not None:
            for t in scored:
                scope.add(t)
        after = page[-1].id
        run.checkpoint("score", after)
        if len(page) < page_size:
            return result


def _score_page(run: Run, result: ScoreResult, page: Sequence[Triple]) -> list[Triple]:
    """Score, promote and prune one page; returns the page as it now stands."""
    policy, now = run.policy, run.now
    out: list[Triple] = []
    dirty: list[Triple] = []
    gone: list[str] = []
    for t in page:
        if t.status != "active":
            out.append(t)
            continue
        result.scored += 1
        r = relevance(t, now, policy)
        new = t
        if not t.long_term and r > policy.promote_relevance and t.access_count > policy.promote_accesses:
            new = changed(t, run.run_id, "promoted", now, policy)
            new.long_term = True
            r = relevance(new, now, policy)
            result.promoted += 1
        elif r < policy.prune_below:
            new = changed(t, run.run_id, "pruned", now, policy)
            new.status = "pruned"
            gone.append(t.id)
            result.pruned += 1
        if new is not t or abs(r - t.relevance) >= policy.write_delta:
            new = new.model_copy(update={"relevance": r})
            dirty.append(new)
        out.append(new)
    run.unindex(result, gone)
    run.write(result, dirty)
    return out


def _backfill(run: Run, result: ScoreResult, page: list[Triple]) -> list[Triple] | None:
    """Embed the page's active triples that have no vector of the current model, 50 a call.

    Returns the page as it now stands, or None when the deadline came first (what was done
    is stored; the rest is found again by the next run)."""
    embedder = run.embedder
    if embedder is None:
        return page
    batch_size = run.policy.embed_batch
    stale = [
        i
        for i, t in enumerate(page)
        if t.status == "active" and (t.embedding is None or t.embedding_model != embedder.model_id)
    ]
    for lo in range(0, len(stale), batch_size):
        if run.out_of_time():
            return None
        batch = [page[i] for i in stale[lo : lo + batch_size]]
        vectors = run.embed_or_give_up(result, embedder, [fact_text(t) for t in batch], "embedding backfill")
        if vectors is None:
            return page
        done = [
            t.model_copy(update={"embedding": list(v), "embedding_model": embedder.model_id})
            for t, v in zip(batch, vectors, strict=True)
        ]
        run.backend.index.upsert(run.workspace_id, [fact_index_doc(t, t.embedding) for t in done])
        run.write(result, done)
        result.backfilled += len(done)
        for i, t in zip(stale[lo : lo + batch_size], done, strict=True):
            page[i] = t
    return page

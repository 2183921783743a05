"""Dedup in two layers and the cap, over a whole Scope (the finish phase's decisions).

Layer 1 merges the same subject / predicate / object up to case, punctuation and spacing; layer 2
near-duplicates by embedding cosine, found by LSH (shared.consolidation.dedup), never by
comparing every pair. The loser becomes "merged" into the survivor, which absorbs its use,
reinforcement and provenance.

Both layers only ever join facts of the same owner (shared.memory.facts.owner_key): a merged
fact keeps the survivor's scope, so merging across owners would show one person's fact to
someone who could not see it. A fact from before scopes counts as the owner the backfill gives
it (shared.memory.scope.legacy_scope: its user's, private).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime

import numpy as np
import numpy.typing as npt

from shared.consolidation.dedup import DedupStats, near_duplicate_pairs
from shared.consolidation.maintenance.policy import MaintenancePolicy, aware, changed, relevance
from shared.consolidation.maintenance.scope import Scope
from shared.memory.facts import owner_key
from shared.memory.scope import legacy_scope
from shared.models import Triple

_MAX_PROVENANCE = 50
_NOT_WORD = re.compile(r"[\W_]+")


def rank(t: Triple) -> tuple[object, ...]:
    # The survivor of a group: long-term first, then the most relevant, most used, most
    # reinforced, then the oldest (its provenance goes back furthest), then by id.
    return (
        not t.long_term,
        -t.relevance,
        -t.access_count,
        -t.reinforced_count,
        aware(t.created_at),
        t.id,
    )


def exact_merges(scope: Scope) -> list[tuple[str, str]]:
    """Layer 1: the same fact stated under other ids (spelling, case, punctuation)."""
    groups: dict[tuple[str, str, str, str], list[Triple]] = {}
    for t in scope.active():
        groups.setdefault(_exact_key(t), []).append(t)
    merges: list[tuple[str, str]] = []
    for members in groups.values():
        if len(members) > 1:
            survivor, *losers = sorted(members, key=rank)
            merges += [(loser.id, survivor.id) for loser in losers]
    return merges


def near_merges(
    scope: Scope, merged: set[str], current_model: str | None, threshold: float
) -> tuple[list[tuple[str, str]], list[DedupStats]]:
    """Layer 2: near-duplicates by embedding, per owner and embedding model; with what finding
    them cost in each bucket."""
    buckets: dict[tuple[str, str], list[Triple]] = {}
    for t in scope.active():
        if t.id in merged or t.id not in scope.vectors or t.embedding_model is None:
            continue
        if current_model is not None and t.embedding_model != current_model:
            continue  # not re-embedded yet (the embedder failed): not comparable
        buckets.setdefault((owner(t), t.embedding_model), []).append(t)
    merges: list[tuple[str, str]] = []
    costs: list[DedupStats] = []
    for members in buckets.values():
        if len(members) < 2:
            continue
        matrix = np.stack([scope.vectors[t.id] for t in members])
        pairs, stats = near_duplicate_pairs(matrix, threshold)
        costs.append(stats)
        merges += _greedy_clusters(members, matrix, pairs, threshold)
    return merges, costs


def merge(
    scope: Scope, loser_id: str, survivor_id: str, *, run_id: str, now: datetime, policy: MaintenancePolicy
) -> None:
    loser, survivor = scope.triples[loser_id], scope.triples[survivor_id]
    gone = changed(loser, run_id, "merged", now, policy)
    gone.status, gone.merged_into = "merged", survivor.id
    kept = changed(survivor, run_id, "absorbed", now, policy)
    kept.access_count += loser.access_count
    kept.reinforced_count += loser.reinforced_count
    kept.long_term = kept.long_term or loser.long_term
    kept.confidence = max(kept.confidence, loser.confidence)
    kept.updated_at = max(aware(kept.updated_at), aware(loser.updated_at))
    if loser.last_accessed_at is not None:
        kept.last_accessed_at = max(
            aware(kept.last_accessed_at or loser.last_accessed_at), aware(loser.last_accessed_at)
        )
    kept.message_ids = list(dict.fromkeys([*kept.message_ids, *loser.message_ids]))[-_MAX_PROVENANCE:]
    kept.relevance = relevance(kept, now, policy)
    scope.update(gone)
    scope.update(kept)


def cap(scope: Scope, *, run_id: str, now: datetime, policy: MaintenancePolicy) -> list[str]:
    """Prune the active triples over `policy.cap`; their ids."""
    active = scope.active()
    excess = len(active) - policy.cap
    if excess <= 0:
        return []
    # The least relevant go first, long-term facts last; ties: the longest untouched first.
    order = sorted(active, key=lambda t: (t.long_term, t.relevance, aware(t.updated_at), t.id))
    capped = []
    for t in order[:excess]:
        gone = changed(t, run_id, "pruned", now, policy)
        gone.status = "pruned"
        scope.update(gone)
        capped.append(t.id)
    return capped


def _loose(text: str) -> str:
    """Text as layer 1 compares it: case, punctuation and spacing do not make another fact."""
    return _NOT_WORD.sub(" ", text.casefold()).strip()


def owner(t: Triple) -> str:
    """Whose fact it is, as merging compares it: facts of different owners never merge."""
    return owner_key(t.scope if t.scope is not None else legacy_scope(t.session_id, t.user_id))


def _exact_key(t: Triple) -> tuple[str, str, str, str]:
    return (owner(t), _loose(t.subject), _loose(t.predicate), _loose(t.object))


def _greedy_clusters(
    members: Sequence[Triple],
    matrix: npt.NDArray[np.float64],
    pairs: Iterable[tuple[int, int, float]],
    threshold: float,
) -> list[tuple[str, str]]:
    """(loser id, survivor id) for each connected group of near-duplicates.

    Members of a group are taken best first; each joins the closest survivor it is a
    near-duplicate of, or becomes a survivor itself. So a loser is always within the threshold of
    its own survivor (no drift along a chain A~B~C), and survivors are never near-duplicates of
    each other: the next run finds nothing more to merge among them.
    """
    parent = list(range(len(members)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j, _ in pairs:
        a, b = find(i), find(j)
        if a != b:
            parent[max(a, b)] = min(a, b)
    groups: dict[int, list[int]] = {}
    for i in range(len(members)):
        groups.setdefault(find(i), []).append(i)
    x = matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    merges: list[tuple[str, str]] = []
    for group in groups.values():
        if len(group) < 2:
            continue
        ordered = sorted(group, key=lambda i: rank(members[i]))
        survivors: list[int] = []
        for i in ordered:
            if survivors:
                sims = x[survivors] @ x[i]
                best = int(np.argmax(sims))
                if sims[best] > threshold:
                    merges.append((members[i].id, members[survivors[best]].id))
                    continue
            survivors.append(i)
    return merges

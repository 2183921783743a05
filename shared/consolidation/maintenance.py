"""Maintenance of a workspace's Tier-3 facts (spec 001's consolidation pipeline; docs/consolidation.md).

One run over one scope (a workspace), in this order:

1. **score** every active triple: relevance decays exponentially with the time since it was last
   used or restated, at a rate set by its category (`DEFAULT_LIFETIMES_DAYS`), slowed by
   reinforcement, use and promotion;
2. **promote** what is relevant (> 0.7) and used (access_count > 3) to long-term;
3. **prune** what has faded (relevance < 0.01): status "pruned", out of the index. Derived
   memories only: Tier-1 messages are never touched by consolidation;
4. **backfill embeddings** in batches of 50: a triple without a vector, or with one made by
   another model than `backend.embedder` (a model change), is embedded again and its fact
   document re-indexed;
5. **dedup** in two layers, per user: the same subject / predicate / object up to case,
   punctuation and spacing first, then near-duplicates by embedding cosine > 0.95 found by
   LSH (shared.consolidation.dedup), never by comparing every pair. The loser becomes
   "merged" into the survivor, which absorbs its use, reinforcement and provenance;
6. **cap** the active triples at 10,000 per scope, pruning the least relevant first;
7. **purge** merged and pruned triples 30 days after the change (until then a run can be
   rolled back: shared.consolidation.rollback);
8. **re-embed messages** written without vectors (the memory writer indexes text only when the
   embedder fails): the index lists the workspace's Tier-1 documents without a vector
   (`missing_vectors`, an optional index method), their records are read back from the
   MemoryStore (one read per run of consecutive messages, with the neighbours around it) and
   written again through the MemoryWriter, 50 documents a batch. Ids are stable, so the
   documents get their vectors in place; what the index no longer lists is done, so the index
   itself is the cursor. Then Tier-2 summary documents written without vectors (compaction
   indexes them text only when the embedder fails) are embedded again, from their own text.

Lambda-safe: steps 1-4 go page by page (500 triples by id) with a checkpoint after each page
(ConsolidationState, name "maintenance"); steps 5-7 need the whole scope and are recomputed from
the store when a run is cut off in them; step 8 checkpoints its phase, and a run cut off in it
resumes there. Every decision is a function of the stored state and the
run's clock, so a retried or resumed run converges on the state an uninterrupted one reaches.

Writes: a triple is written when its lifecycle changes or its stored relevance is off by 0.05 or
more (relevance is derived and re-derived every run; rewriting 10,000 items an hour for a change
in the third decimal would cost more than it tells). The index is changed before the store, so
a run cut off in between leaves work the next run redoes rather than a pruned fact still found.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, Field, ValidationError

from shared.clock import utcnow
from shared.consolidation.deadline import Deadline
from shared.consolidation.dedup import near_duplicate_pairs
from shared.memory.search import RECORD_ID_KEY
from shared.memory.writer import MemoryWriter
from shared.models import FactCategory, IndexDoc, MemoryRecord, Triple, TripleChange
from shared.ports import FindsMissingVectors
from shared.tools.memory import fact_index_doc, fact_text

if TYPE_CHECKING:
    from shared.backend import Backend
    from shared.ports import Embedder

log = logging.getLogger("sigil.consolidation.maintenance")

CHECKPOINT = "maintenance"

# Days for an untouched fact of each category to fade from relevance 1 to the prune threshold
# (0.01): relevance = 0.01 ** (age / lifetime). Style observations follow spec 003 (a one-off
# observation expires after 14 days, one seen n times after n x 14); daily decisions go within a
# month; artifacts in a season; facts stored by hand in half a year; preferences and entities,
# what a user is and cares about, last one and two years.
DEFAULT_LIFETIMES_DAYS: Mapping[FactCategory, float] = MappingProxyType(
    {
        "style": 14.0,
        "decision": 30.0,
        "artifact": 90.0,
        "fact": 180.0,
        "preference": 365.0,
        "entity": 730.0,
    }
)


@dataclass(frozen=True)
class MaintenancePolicy:
    lifetimes_days: Mapping[FactCategory, float] = field(default_factory=lambda: DEFAULT_LIFETIMES_DAYS)
    long_term_factor: float = 10.0  # long-term facts fade ten times slower
    promote_relevance: float = 0.7
    promote_accesses: int = 3  # promoted when access_count > this
    prune_below: float = 0.01
    dedup_cosine: float = 0.95
    cap: int = 10_000
    embed_batch: int = 50
    page_size: int = 500
    write_delta: float = 0.05
    retention: timedelta = timedelta(days=30)
    max_history: int = 8
    # Seconds a unit of work (a page, a batch of embeddings, a chunk of writes) may take: a run
    # does not start one with less than this left before its deadline.
    unit_reserve_s: float = 2.0


DEFAULT_POLICY = MaintenancePolicy()


class MaintenanceReport(BaseModel):
    workspace_id: str
    run_id: str
    complete: bool = False
    # Where an incomplete run stopped; the next run continues there.
    stopped_in: Literal["score", "finish", "messages"] | None = None
    resumed: bool = False
    scored: int = 0
    promoted: int = 0
    pruned: int = 0
    merged_exact: int = 0
    merged_near: int = 0
    capped: int = 0
    backfilled: int = 0
    embed_failures: int = 0
    purged: int = 0
    messages_backfilled: int = 0  # message documents given the vector they were written without
    summaries_backfilled: int = 0  # summary documents likewise
    written: int = 0
    index_deleted: int = 0
    active: int = 0  # active triples at the end of the finish step (0 when it did not run)
    dedup_vectors: int = 0
    dedup_comparisons: int = 0  # candidate pairs whose cosine was computed
    dedup_all_pairs: int = 0  # what comparing every pair of each bucket would have cost
    duration_s: float = 0.0

    @property
    def merged(self) -> int:
        return self.merged_exact + self.merged_near

    def metrics(self) -> dict[str, float]:
        """What the handler publishes (no workspace or user dimension)."""
        return {
            "MaintenanceScored": self.scored,
            "MaintenancePromoted": self.promoted,
            "MaintenancePruned": self.pruned + self.capped,
            "MaintenanceMerged": self.merged,
            "MaintenanceBackfilled": self.backfilled,
            "MaintenancePurged": self.purged,
            "MaintenanceMessagesBackfilled": self.messages_backfilled,
            "MaintenanceSummariesBackfilled": self.summaries_backfilled,
            "MaintenanceDurationMs": self.duration_s * 1000.0,
            "MaintenanceComplete": 1.0 if self.complete else 0.0,
        }


Phase = Literal["score", "finish", "messages", "done"]


class _Checkpoint(BaseModel):
    phase: Phase
    after: str | None = None
    run_id: str
    at: datetime = Field(default_factory=utcnow)


# ---------------------------------------------------------------- scoring


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def lifetime_days(triple: Triple, policy: MaintenancePolicy = DEFAULT_POLICY) -> float:
    """Days until an untouched `triple` fades to the prune threshold."""
    base = policy.lifetimes_days.get(triple.category, policy.lifetimes_days.get("fact", 180.0))
    use = 1.0 + math.log1p(triple.access_count)
    promoted = policy.long_term_factor if triple.long_term else 1.0
    return base * triple.reinforced_count * use * promoted


def relevance(triple: Triple, now: datetime, policy: MaintenancePolicy = DEFAULT_POLICY) -> float:
    """1.0 when just stated or used, falling exponentially to `prune_below` after its lifetime."""
    last = _aware(triple.updated_at)
    if triple.last_accessed_at is not None:
        last = max(last, _aware(triple.last_accessed_at))
    age_days = max(0.0, (_aware(now) - last).total_seconds() / 86_400.0)
    value = float(policy.prune_below ** (age_days / lifetime_days(triple, policy)))
    return min(1.0, max(0.0, value))


def _changed(
    triple: Triple,
    run_id: str,
    action: Literal["promoted", "pruned", "merged", "absorbed"],
    now: datetime,
    policy: MaintenancePolicy,
) -> Triple:
    """The triple with this run's change recorded: the values before the run, once per run."""
    if triple.changes and triple.changes[-1].run_id == run_id:
        return triple.model_copy()  # already recorded: the entry holds the values before the run
    entry = TripleChange(
        run_id=run_id,
        at=now,
        action=action,
        status=triple.status,
        merged_into=triple.merged_into,
        long_term=triple.long_term,
        access_count=triple.access_count,
        reinforced_count=triple.reinforced_count,
        last_accessed_at=triple.last_accessed_at,
        updated_at=triple.updated_at,
        message_ids=list(triple.message_ids),
    )
    return triple.model_copy(update={"changes": [*triple.changes, entry][-policy.max_history :]})


# ---------------------------------------------------------------- the run


@dataclass
class _Run:
    backend: Backend
    workspace_id: str
    run_id: str
    deadline: Deadline
    now: datetime
    policy: MaintenancePolicy
    report: MaintenanceReport
    embedding_ok: bool = True

    @property
    def embedder(self) -> Embedder | None:
        return self.backend.embedder if self.embedding_ok else None

    def out_of_time(self) -> bool:
        return self.deadline.expired(self.policy.unit_reserve_s)

    def checkpoint(self, phase: Phase, after: str | None = None) -> None:
        value = _Checkpoint(phase=phase, after=after, run_id=self.run_id, at=self.now)
        self.backend.consolidation.put_checkpoint(self.workspace_id, CHECKPOINT, value.model_dump_json())

    def write(self, triples: Sequence[Triple]) -> None:
        if triples:
            self.backend.memory.put_triples(self.workspace_id, triples)
            self.report.written += len(triples)

    def unindex(self, ids: Sequence[str]) -> None:
        if ids:
            self.backend.index.delete(self.workspace_id, list(ids))
            self.report.index_deleted += len(ids)

    # ---- score, promote, prune, backfill: page by page

    def score_page(self, page: Sequence[Triple]) -> list[Triple]:
        """Score, promote and prune one page; returns the page as it now stands."""
        policy = self.policy
        out: list[Triple] = []
        changed: list[Triple] = []
        gone: list[str] = []
        for t in page:
            if t.status != "active":
                out.append(t)
                continue
            self.report.scored += 1
            r = relevance(t, self.now, policy)
            new = t
            if not t.long_term and r > policy.promote_relevance and t.access_count > policy.promote_accesses:
                new = _changed(t, self.run_id, "promoted", self.now, policy)
                new.long_term = True
                r = relevance(new, self.now, policy)
                self.report.promoted += 1
            elif r < policy.prune_below:
                new = _changed(t, self.run_id, "pruned", self.now, policy)
                new.status = "pruned"
                gone.append(t.id)
                self.report.pruned += 1
            if new is not t or abs(r - t.relevance) >= policy.write_delta:
                new = new.model_copy(update={"relevance": r})
                changed.append(new)
            out.append(new)
        self.unindex(gone)
        self.write(changed)
        return out

    def backfill(self, page: list[Triple]) -> list[Triple] | None:
        """Embed the page's active triples that have no vector of the current model, 50 a call.

        Returns the page as it now stands, or None when the deadline came first (what was done
        is stored; the rest is found again by the next run)."""
        embedder = self.embedder
        if embedder is None:
            return page
        stale = [
            i
            for i, t in enumerate(page)
            if t.status == "active" and (t.embedding is None or t.embedding_model != embedder.model_id)
        ]
        for lo in range(0, len(stale), self.policy.embed_batch):
            if self.out_of_time():
                return None
            batch = [page[i] for i in stale[lo : lo + self.policy.embed_batch]]
            vectors = self.embed_or_give_up(embedder, [fact_text(t) for t in batch], "embedding backfill")
            if vectors is None:
                return page
            done = [
                t.model_copy(update={"embedding": list(v), "embedding_model": embedder.model_id})
                for t, v in zip(batch, vectors, strict=True)
            ]
            self.backend.index.upsert(self.workspace_id, [fact_index_doc(t, t.embedding) for t in done])
            self.write(done)
            self.report.backfilled += len(done)
            for i, t in zip(stale[lo : lo + self.policy.embed_batch], done, strict=True):
                page[i] = t
        return page

    # ---- re-embed the messages written without vectors

    def backfill_messages(self) -> bool:
        """Step 8; False when the deadline came first (the rest is found by the next run)."""
        index, embedder = self.backend.index, self.embedder
        if embedder is None or not isinstance(index, FindsMissingVectors):
            return True
        writer = MemoryWriter(index, embedder)
        batch = self.policy.embed_batch
        # Documents a rewrite cannot give a vector (the record is gone, or its vector is zero):
        # skipped for the rest of the run, so they never hold the loop.
        stuck: set[str] = set()
        while True:
            if self.out_of_time():
                return False
            listed = index.missing_vectors(self.workspace_id, tier="message", limit=batch + len(stuck))
            todo = [d for d in listed if d.id not in stuck][:batch]
            if not todo:
                return True
            records, runs = self.message_runs(todo)
            for run, before, after in runs:
                result = writer.write_messages(self.workspace_id, run, before=before, after=after)
                if result.error is not None:
                    log.warning(
                        "message re-embedding failed; the rest of this run goes without it",
                        extra={"workspace_id": self.workspace_id, "error": result.error},
                    )
                    self.report.embed_failures += len(todo)
                    self.embedding_ok = False
                    return True
                self.report.messages_backfilled += result.embedded
                stuck.update(result.text_only)
            stuck.update(d.id for d in todo if _record_id(d) not in records)

    def embed_or_give_up(self, embedder: Embedder, texts: list[str], what: str) -> list[list[float]] | None:
        """The vectors of `texts`, or None when the embedder failed: counted and logged, and the
        rest of this run goes without embeddings (an outage must not stop maintenance; the next
        run tries again)."""
        try:
            return embedder.embed(texts)
        except Exception as exc:  # noqa: BLE001
            log.warning(
                f"{what} failed; the rest of this run goes without it",
                extra={"workspace_id": self.workspace_id, "error_type": type(exc).__name__},
            )
            self.report.embed_failures += len(texts)
            self.embedding_ok = False
            return None

    def backfill_summaries(self) -> bool:
        """Step 8, for summary documents. Compaction indexes a summary as one document of its
        whole text (`_index_summary`), so its vector is that text's, embedded here as compaction
        would have. False when the deadline came first."""
        index, embedder = self.backend.index, self.embedder
        if embedder is None or not isinstance(index, FindsMissingVectors):
            return True
        stuck: set[str] = set()  # documents the model gave a zero vector: not tried again this run
        while True:
            if self.out_of_time():
                return False
            listed = index.missing_vectors(
                self.workspace_id, tier="summary", limit=self.policy.embed_batch + len(stuck)
            )
            todo = [d for d in listed if d.id not in stuck][: self.policy.embed_batch]
            if not todo:
                return True
            vectors = self.embed_or_give_up(embedder, [d.text for d in todo], "summary re-embedding")
            if vectors is None:
                return True
            ready = [d.model_copy(update={"vector": v}) for d, v in zip(todo, vectors, strict=True) if any(v)]
            stuck.update(d.id for d, v in zip(todo, vectors, strict=True) if not any(v))
            if ready:
                index.upsert(self.workspace_id, ready)
            self.report.summaries_backfilled += len(ready)

    def message_runs(
        self, docs: Sequence[IndexDoc]
    ) -> tuple[set[str], list[tuple[list[MemoryRecord], list[MemoryRecord], list[MemoryRecord]]]]:
        """The records of `docs` read back from the MemoryStore as runs of consecutive messages,
        each with the neighbours before and after it that lend context; and the ids found."""
        wanted: dict[str, dict[int, str]] = {}  # session -> seq -> record id
        for d in docs:
            seq = d.metadata.get("seq", "")
            if d.session_id and seq.isdigit():
                wanted.setdefault(d.session_id, {})[int(seq)] = _record_id(d)
        found: set[str] = set()
        runs: list[tuple[list[MemoryRecord], list[MemoryRecord], list[MemoryRecord]]] = []
        context = 2  # MemoryWriter's default context on either side
        for session_id, by_seq in sorted(wanted.items()):
            for lo, hi in _spans(sorted(by_seq)):
                start = max(-1, lo - 1 - context)
                read = self.backend.memory.get_messages(
                    self.workspace_id, session_id, after_seq=start, limit=hi - start + context
                )
                run = [r for r in read if lo <= r.seq <= hi and by_seq.get(r.seq) == r.id]
                if not run:
                    continue
                found.update(r.id for r in run)
                runs.append(
                    (run, [r for r in read if r.seq < run[0].seq], [r for r in read if r.seq > run[-1].seq])
                )
        return found, runs

    # ---- dedup, cap, purge: over the whole scope

    def finish(self, scope: _Scope) -> bool:
        """Dedup, cap and purge; False when the deadline came before the writes were done."""
        policy = self.policy
        for t in scope.active():
            t.relevance = relevance(t, self.now, policy)  # the scope's own copy: no write for this
        merges = self.exact_merges(scope)
        self.report.merged_exact = len(merges)
        near = self.near_merges(scope, {loser for loser, _ in merges})
        self.report.merged_near = len(near)
        for loser_id, survivor_id in [*merges, *near]:
            self.merge(scope, loser_id, survivor_id)
        capped = self.cap(scope)
        self.report.active = len(scope.active())

        gone = [loser for loser, _ in merges] + [loser for loser, _ in near] + capped
        self.unindex(gone)
        dirty = scope.dirty()
        for lo in range(0, len(dirty), policy.page_size):
            if self.out_of_time():
                return False
            self.write([scope.full(t) for t in dirty[lo : lo + policy.page_size]])
        purge = [
            t.id
            for t in scope.triples.values()
            if t.status != "active"
            and _aware(t.changes[-1].at if t.changes else t.updated_at) < self.now - policy.retention
        ]
        for lo in range(0, len(purge), policy.page_size):
            if self.out_of_time():
                return False
            self.backend.memory.delete_triples(self.workspace_id, purge[lo : lo + policy.page_size])
            self.report.purged += len(purge[lo : lo + policy.page_size])
        return True

    @staticmethod
    def rank(t: Triple) -> tuple[object, ...]:
        # The survivor of a group: long-term first, then the most relevant, most used, most
        # reinforced, then the oldest (its provenance goes back furthest), then by id.
        return (
            not t.long_term,
            -t.relevance,
            -t.access_count,
            -t.reinforced_count,
            _aware(t.created_at),
            t.id,
        )

    def exact_merges(self, scope: _Scope) -> list[tuple[str, str]]:
        """Layer 1: the same fact stated under other ids (spelling, case, punctuation)."""
        groups: dict[tuple[str | None, str, str, str], list[Triple]] = {}
        for t in scope.active():
            groups.setdefault(_exact_key(t), []).append(t)
        merges: list[tuple[str, str]] = []
        for members in groups.values():
            if len(members) > 1:
                survivor, *losers = sorted(members, key=self.rank)
                merges += [(loser.id, survivor.id) for loser in losers]
        return merges

    def near_merges(self, scope: _Scope, merged: set[str]) -> list[tuple[str, str]]:
        """Layer 2: near-duplicates by embedding, per user and embedding model."""
        buckets: dict[tuple[str | None, str], list[Triple]] = {}
        current = self.backend.embedder.model_id if self.backend.embedder is not None else None
        for t in scope.active():
            if t.id in merged or t.id not in scope.vectors or t.embedding_model is None:
                continue
            if current is not None and t.embedding_model != current:
                continue  # not re-embedded yet (the embedder failed): not comparable
            buckets.setdefault((t.user_id, t.embedding_model), []).append(t)
        merges: list[tuple[str, str]] = []
        for members in buckets.values():
            if len(members) < 2:
                continue
            matrix = np.stack([scope.vectors[t.id] for t in members])
            pairs, stats = near_duplicate_pairs(matrix, self.policy.dedup_cosine)
            self.report.dedup_vectors += stats.n
            self.report.dedup_comparisons += stats.comparisons
            self.report.dedup_all_pairs += stats.all_pairs
            merges += _greedy_clusters(members, matrix, pairs, self.policy.dedup_cosine, self.rank)
        return merges

    def merge(self, scope: _Scope, loser_id: str, survivor_id: str) -> None:
        loser, survivor = scope.triples[loser_id], scope.triples[survivor_id]
        gone = _changed(loser, self.run_id, "merged", self.now, self.policy)
        gone.status, gone.merged_into = "merged", survivor.id
        kept = _changed(survivor, self.run_id, "absorbed", self.now, self.policy)
        kept.access_count += loser.access_count
        kept.reinforced_count += loser.reinforced_count
        kept.long_term = kept.long_term or loser.long_term
        kept.confidence = max(kept.confidence, loser.confidence)
        kept.updated_at = max(_aware(kept.updated_at), _aware(loser.updated_at))
        if loser.last_accessed_at is not None:
            kept.last_accessed_at = max(
                _aware(kept.last_accessed_at or loser.last_accessed_at), _aware(loser.last_accessed_at)
            )
        kept.message_ids = list(dict.fromkeys([*kept.message_ids, *loser.message_ids]))[-_MAX_PROVENANCE:]
        kept.relevance = relevance(kept, self.now, self.policy)
        scope.update(gone)
        scope.update(kept)

    def cap(self, scope: _Scope) -> list[str]:
        active = scope.active()
        excess = len(active) - self.policy.cap
        if excess <= 0:
            return []
        # The least relevant go first, long-term facts last; ties: the longest untouched first.
        order = sorted(active, key=lambda t: (t.long_term, t.relevance, _aware(t.updated_at), t.id))
        capped = []
        for t in order[:excess]:
            gone = _changed(t, self.run_id, "pruned", self.now, self.policy)
            gone.status = "pruned"
            scope.update(gone)
            capped.append(t.id)
        self.report.capped = len(capped)
        return capped


_MAX_PROVENANCE = 50


def _record_id(doc: IndexDoc) -> str:
    return doc.metadata.get(RECORD_ID_KEY) or doc.id


def _spans(seqs: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted sequence numbers as (first, last) runs of consecutive numbers."""
    spans: list[tuple[int, int]] = []
    for seq in seqs:
        if spans and seq == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], seq)
        else:
            spans.append((seq, seq))
    return spans


_NOT_WORD = re.compile(r"[\W_]+")


def _loose(text: str) -> str:
    """Text as layer 1 compares it: case, punctuation and spacing do not make another fact."""
    return _NOT_WORD.sub(" ", text.casefold()).strip()


def _exact_key(t: Triple) -> tuple[str | None, str, str, str]:
    return (t.user_id, _loose(t.subject), _loose(t.predicate), _loose(t.object))


def _greedy_clusters(
    members: Sequence[Triple],
    matrix: npt.NDArray[np.float64],
    pairs: Iterable[tuple[int, int, float]],
    threshold: float,
    rank: Callable[[Triple], tuple[object, ...]],
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


@dataclass
class _Scope:
    """A workspace's triples in memory, with each vector as one numpy row instead of a list of
    Python floats (a twelfth of the memory); `full` puts it back for a write."""

    triples: dict[str, Triple] = field(default_factory=dict)
    vectors: dict[str, npt.NDArray[np.float64]] = field(default_factory=dict)
    _dirty: set[str] = field(default_factory=set)

    def add(self, t: Triple) -> None:
        if t.status != "active" or t.embedding is None:
            # Merged and pruned triples are only read (for the purge): kept as they are.
            self.triples[t.id] = t.model_copy()
            return
        self.vectors[t.id] = np.asarray(t.embedding, dtype=np.float64)
        self.triples[t.id] = t.model_copy(update={"embedding": None})

    def update(self, t: Triple) -> None:
        """A changed triple (the vector, if any, stays in `vectors`), written by the finish step."""
        self.triples[t.id] = t if t.embedding is None else t.model_copy(update={"embedding": None})
        self._dirty.add(t.id)

    def active(self) -> list[Triple]:
        return [t for t in self.triples.values() if t.status == "active"]

    def dirty(self) -> list[Triple]:
        return [self.triples[i] for i in sorted(self._dirty)]

    def full(self, t: Triple) -> Triple:
        vector = self.vectors.get(t.id)
        return t if vector is None else t.model_copy(update={"embedding": vector.tolist()})


def _load_checkpoint(backend: Backend, workspace_id: str) -> _Checkpoint | None:
    raw = backend.consolidation.get_checkpoint(workspace_id, CHECKPOINT)
    if not raw:
        return None
    try:
        return _Checkpoint.model_validate(json.loads(raw))
    except (ValueError, ValidationError):
        log.warning("maintenance checkpoint unreadable; starting over", extra={"workspace_id": workspace_id})
        return None


def run_maintenance(
    backend: Backend,
    workspace_id: str,
    *,
    run_id: str,
    deadline: Deadline | None = None,
    clock: Callable[[], datetime] = utcnow,
    policy: MaintenancePolicy = DEFAULT_POLICY,
) -> MaintenanceReport:
    """One maintenance run over `workspace_id`'s facts; see the module docstring.

    `run_id` is recorded on every lifecycle change (rollback_run undoes them); `deadline` bounds
    the run (it stops between units of work and leaves a checkpoint); `clock` is the time decay
    is measured against. The caller holds the workspace's consolidation lease.
    """
    started = time.perf_counter()
    deadline = deadline or Deadline.never()
    report = MaintenanceReport(workspace_id=workspace_id, run_id=run_id)
    run = _Run(backend, workspace_id, run_id, deadline, clock(), policy, report)
    checkpoint = _load_checkpoint(backend, workspace_id)
    phase = "score" if checkpoint is None or checkpoint.phase == "done" else checkpoint.phase
    after = checkpoint.after if checkpoint is not None and phase == "score" else None
    report.resumed = checkpoint is not None and checkpoint.phase != "done"

    # A pass that starts at the first page sees the whole scope, so the finish step reuses it
    # instead of reading everything again.
    scope: _Scope | None = _Scope() if phase == "score" and after is None else None

    def stop(where: Literal["score", "finish", "messages"], at: str | None = None) -> MaintenanceReport:
        run.checkpoint(where, at)
        report.stopped_in = where
        report.duration_s = time.perf_counter() - started
        log.info("maintenance stopped at its deadline", extra={"workspace_id": workspace_id, "phase": where})
        return report

    if phase == "score":
        while True:
            if run.out_of_time():
                return stop("score", after)
            page = backend.memory.list_triples(workspace_id, after=after, limit=policy.page_size)
            if not page:
                break
            scored = run.backfill(run.score_page(page))
            if scored is None:
                return stop("score", after)  # the page is scored again (a no-op) and finished
            if scope is not None:
                for t in scored:
                    scope.add(t)
            after = page[-1].id
            run.checkpoint("score", after)
            if len(page) < policy.page_size:
                break

    if phase != "messages":
        if run.out_of_time():
            return stop("finish")
        if scope is None:
            scope = _Scope()
            after = None
            while page := backend.memory.list_triples(workspace_id, after=after, limit=policy.page_size):
                for t in page:
                    scope.add(t)
                after = page[-1].id
        if not run.finish(scope):
            return stop("finish")
        run.checkpoint("messages")
    if not run.backfill_messages() or not run.backfill_summaries():
        return stop("messages")
    run.checkpoint("done")
    report.complete = True
    report.duration_s = time.perf_counter() - started
    log.info("maintenance done", extra={"workspace_id": workspace_id, **report.metrics()})
    return report

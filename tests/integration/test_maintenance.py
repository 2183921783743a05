"""Maintenance and rollback on the real embedded backend with a deterministic embedder."""

from __future__ import annotations

import itertools
import pathlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from shared.adapters.embedded import build_embedded_backend
from shared.adapters.embedded.index import SqliteMemoryIndex
from shared.backend import Backend
from shared.config import Settings
from shared.consolidation.deadline import Deadline
from shared.consolidation.maintenance import CHECKPOINT, MaintenancePolicy, relevance
from shared.consolidation.maintenance.driver import run_maintenance
from shared.consolidation.rollback import rollback_run
from shared.memory.writer import EMBEDDING_KEY, MemoryWriter
from shared.models import WORKSPACE_WIDE, FactCategory, IndexDoc, IndexQuery, MemoryRecord, Triple
from shared.tools.memory import fact_index_doc, fact_text
from tests.support.hashing_embedder import HashingEmbedder

WS = "ws1"
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def backend(tmp_path: pathlib.Path) -> Iterator[Backend]:
    b = build_embedded_backend(Settings(data_dir=tmp_path / "data"))
    b.embedder = HashingEmbedder()
    try:
        yield b
    finally:
        b.close()


def fact(
    triple_id: str,
    obj: str,
    *,
    subject: str = "alice",
    predicate: str = "likes",
    age_days: float = 0.0,
    category: FactCategory = "fact",
    user_id: str | None = "alice",
    embedder: HashingEmbedder | None = None,
    **fields: object,
) -> Triple:
    t = Triple.model_validate(
        {
            "id": triple_id,
            "workspace_id": WS,
            "subject": subject,
            "predicate": predicate,
            "object": obj,
            "created_at": NOW - timedelta(days=age_days),
            "updated_at": NOW - timedelta(days=age_days),
            "user_id": user_id,
            "category": category,
            "session_id": "s1",
            "message_ids": [f"{triple_id}.m"],
            **fields,
        }
    )
    if embedder is not None:
        (vector,) = embedder.embed([fact_text(t)])
        t = t.model_copy(update={"embedding": vector, "embedding_model": embedder.model_id})
    return t


def store(backend: Backend, *triples: Triple) -> None:
    backend.memory.put_triples(WS, triples)
    backend.index.upsert(WS, [fact_index_doc(t, t.embedding) for t in triples])


def state(backend: Backend) -> dict[str, Triple]:
    return {t.id: t for t in backend.memory.list_triples(WS, scope=WORKSPACE_WIDE, limit=100_000)}


def active_ids(backend: Backend) -> set[str]:
    return {i for i, t in state(backend).items() if t.status == "active"}


def indexed(backend: Backend, text: str) -> set[str]:
    result = backend.index.search(WS, IndexQuery(scope=WORKSPACE_WIDE, text=text, k=100, tiers=["fact"]))
    return {h.doc.id for h in result.text_hits}


def run(backend: Backend, run_id: str = "run1", **kw: object) -> object:
    return run_maintenance(backend, WS, run_id=run_id, clock=lambda: NOW, **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------- decay, promote, prune


def test_relevance_decays_by_category_and_slower_with_use_and_reinforcement() -> None:
    def r(**kw: object) -> float:
        return relevance(fact("t", "x", **kw), NOW)  # type: ignore[arg-type]

    assert r() == 1.0
    # A one-off style observation is gone after 14 days (spec 003); one seen twice lasts 28.
    assert r(category="style", age_days=13) > 0.01 > r(category="style", age_days=15)
    assert (
        r(category="style", age_days=20, reinforced_count=2)
        > 0.01
        > r(category="style", age_days=29, reinforced_count=2)
    )
    # Faster for daily decisions than for entities, slower when used or long-term.
    assert (
        r(category="decision", age_days=20)
        < r(category="preference", age_days=20)
        < r(category="entity", age_days=20)
    )
    assert r(age_days=100) < r(age_days=100, access_count=5) < r(age_days=100, long_term=True)
    # Time runs from the last use when that is later than the last statement.
    assert r(age_days=100, last_accessed_at=NOW - timedelta(days=1)) > r(age_days=99)


def test_promote_prune_and_the_index(backend: Backend) -> None:
    e = HashingEmbedder()
    store(
        backend,
        fact("used", "jazz records", access_count=4, last_accessed_at=NOW - timedelta(days=1), embedder=e),
        fact("seldom", "opera", access_count=1, last_accessed_at=NOW - timedelta(days=1), embedder=e),
        fact("faded", "disco", category="decision", age_days=60, embedder=e),
        fact("fresh", "chess", category="decision", age_days=1, embedder=e),
    )
    assert indexed(backend, "disco") == {"faded"}

    report = run(backend)

    after = state(backend)
    assert after["used"].long_term and not after["seldom"].long_term
    assert after["faded"].status == "pruned" and after["fresh"].status == "active"
    assert (report.promoted, report.pruned, report.scored) == (1, 1, 4)
    # Out of the index and out of recall, still listed for provenance.
    assert indexed(backend, "disco") == set()
    assert {t.id for t in backend.memory.triples_by_subject(WS, "alice", scope=WORKSPACE_WIDE)} == {
        "used",
        "seldom",
        "fresh",
    }
    assert after["faded"].changes[-1].run_id == "run1"
    assert after["faded"].changes[-1].status == "active"
    assert report.complete


def test_tier1_messages_are_never_touched(backend: Backend) -> None:
    from tests.contract.builders import record

    backend.memory.append_messages(WS, [record(WS, "s1", seq) for seq in range(5)])
    store(backend, fact("old", "something", age_days=10_000))
    run(backend)
    assert backend.memory.count_messages(WS, "s1") == 5
    assert state(backend)["old"].status == "pruned"


# ---------------------------------------------------------------- dedup


def test_exact_duplicates_under_other_ids_merge_into_one(backend: Backend) -> None:
    e = HashingEmbedder()
    store(
        backend,
        fact("a", "Green tea", access_count=2, embedder=e),
        fact("b", "green  tea.", access_count=3, reinforced_count=2, age_days=3, embedder=e),
        fact("c", "GREEN TEA!", embedder=e, user_id="bob"),  # another user's: never merged with alice's
        fact("d", "coffee", embedder=e),
    )

    report = run(backend)

    after = state(backend)
    assert {i for i in "abcd" if after[i].status == "active"} == {"a", "c", "d"}
    assert after["b"].status == "merged" and after["b"].merged_into == "a"
    # The survivor absorbs use, reinforcement and provenance.
    assert after["a"].access_count == 5 and after["a"].reinforced_count == 3
    assert set(after["a"].message_ids) == {"a.m", "b.m"}
    assert report.merged_exact == 1 and report.merged_near == 0
    assert indexed(backend, "tea") == {"a", "c"}


def test_near_duplicates_by_embedding_merge_and_others_stay(backend: Backend) -> None:
    e = HashingEmbedder()
    long = "a senior software engineer at Analytical Engines in central London since 2019"
    variants = [
        long,
        long.replace("central London", "central London, UK"),
        long.replace("2019", "2019 or so"),
    ]
    facts = [fact(f"n{i}", v, predicate="works as", embedder=e) for i, v in enumerate(variants)]
    other = fact(
        "o", "a painter of large watercolour landscapes in Cornwall", predicate="works as", embedder=e
    )
    vectors = np.array([t.embedding for t in facts])
    sims = vectors @ vectors.T
    # The premise: both variants are near-duplicates of the first (not of each other: 0.93).
    assert (sims[0, 1:] > 0.95).all() and sims[1, 2] < 0.95
    store(backend, *facts, other)

    report = run(backend)

    assert active_ids(backend) == {"n0", "o"}
    assert {state(backend)[i].merged_into for i in ("n1", "n2")} == {"n0"}
    assert report.merged_near == 2
    assert report.dedup_comparisons < report.dedup_all_pairs or report.dedup_all_pairs <= 6


def test_a_second_run_changes_nothing(backend: Backend) -> None:
    e = HashingEmbedder()
    store(
        backend,
        fact("a", "tea", embedder=e),
        fact("b", "Tea.", embedder=e),
        fact("c", "gone", age_days=9999, embedder=e),
        fact("d", "used", access_count=9, last_accessed_at=NOW, embedder=e),
    )
    run(backend, "run1")
    first = state(backend)

    again = run(backend, "run2")

    assert state(backend) == first
    assert again.written == 0 and again.merged == 0 and again.pruned == 0 and again.promoted == 0


# ---------------------------------------------------------------- cap


def test_the_cap_prunes_the_least_relevant_first(backend: Backend) -> None:
    store(backend, *(fact(f"t{i}", f"thing {i}", age_days=i) for i in range(8)))
    store(backend, fact("kept", "old but long-term", age_days=30, long_term=True))

    report = run(backend, policy=MaintenancePolicy(cap=5))

    assert active_ids(backend) == {"t0", "t1", "t2", "t3", "kept"}
    assert report.capped == 4 and report.active == 5
    assert indexed(backend, "thing") == {"t0", "t1", "t2", "t3"}


# ---------------------------------------------------------------- embedding backfill


def test_backfill_embeds_in_batches_of_fifty_and_indexes_the_vectors(backend: Backend) -> None:
    store(backend, *(fact(f"t{i:03d}", f"distinct fact number {i} about {i * 7}") for i in range(120)))
    embedder = backend.embedder
    assert isinstance(embedder, HashingEmbedder)

    report = run(backend)

    assert report.backfilled == 120
    assert embedder.calls == [50, 50, 20]
    after = state(backend)
    assert all(t.embedding_model == embedder.model_id and t.embedding for t in after.values())
    (query,) = embedder.embed([fact_text(after["t042"])])
    hits = backend.index.search(
        WS, IndexQuery(scope=WORKSPACE_WIDE, vector=query, k=1, tiers=["fact"])
    ).vector_hits
    assert [h.doc.id for h in hits] == ["t042"]


def test_a_model_change_schedules_re_embedding(backend: Backend) -> None:
    old = HashingEmbedder(model_id="test/old-model")
    store(backend, *(fact(f"t{i}", f"fact {i}", embedder=old) for i in range(3)))
    new = HashingEmbedder(model_id="test/new-model")
    backend.embedder = new

    assert run(backend).backfilled == 3
    assert {t.embedding_model for t in state(backend).values()} == {"test/new-model"}
    assert run(backend, "run2").backfilled == 0


def test_an_embedder_outage_does_not_stop_maintenance(backend: Backend) -> None:
    class Down:
        model_id = "test/down"
        dimensions = 384

        def embed(self, texts: object) -> list[list[float]]:
            raise RuntimeError("provider unavailable")

    backend.embedder = Down()
    store(backend, fact("a", "tea"), fact("b", "Tea."), fact("c", "gone", age_days=9999))

    report = run(backend)

    assert report.complete and report.embed_failures >= 1 and report.backfilled == 0
    assert active_ids(backend) == {"a"}


# ---------------------------------------------------------------- deadlines and checkpoints


def _workload(e: HashingEmbedder) -> list[Triple]:
    triples = []
    for i in range(60):
        triples.append(fact(f"t{i:03d}", f"fact {i} is about topic {i % 17}", age_days=i * 3))
        if i % 5 == 0:
            triples.append(fact(f"t{i:03d}x", f"Fact {i} is about topic {i % 17}.", age_days=i))
    triples.append(fact("u1", "often used", access_count=7, last_accessed_at=NOW, embedder=e))
    return triples


def _lifecycle(b: Backend) -> dict[str, tuple[object, ...]]:
    return {
        i: (t.status, t.merged_into, t.long_term, t.access_count, t.reinforced_count, t.embedding_model)
        for i, t in state(b).items()
    }


def test_a_run_cut_off_by_its_deadline_continues_and_ends_where_an_uninterrupted_one_does(
    tmp_path: pathlib.Path,
) -> None:
    e = HashingEmbedder()
    policy = MaintenancePolicy(page_size=7, embed_batch=5)
    reference = build_embedded_backend(Settings(data_dir=tmp_path / "ref"))
    reference.embedder = HashingEmbedder()
    store(reference, *_workload(e))
    assert run(reference, policy=policy).complete
    expected = _lifecycle(reference)
    reference.close()

    b = build_embedded_backend(Settings(data_dir=tmp_path / "cut"))
    b.embedder = HashingEmbedder()
    store(b, *_workload(e))
    ticks = itertools.count()
    reports = []
    for attempt in range(100):
        # A clock that advances one second per look: each run gets a few units of work.
        start = next(ticks)
        deadline = Deadline(at=start + 6, clock=lambda: float(next(ticks)))
        report = run(
            b,
            f"run{attempt}",
            deadline=deadline,
            policy=MaintenancePolicy(page_size=7, embed_batch=5, unit_reserve_s=1.0),
        )
        reports.append(report)
        if report.complete:
            break
    assert len(reports) > 2 and not reports[0].complete and reports[1].resumed
    assert _lifecycle(b) == expected
    assert b.consolidation.get_checkpoint(WS, CHECKPOINT) is not None
    b.close()


# ---------------------------------------------------------------- rollback


def test_rollback_restores_what_a_run_changed(backend: Backend) -> None:
    e = HashingEmbedder()
    store(
        backend,
        fact("a", "tea", access_count=1, embedder=e),
        fact("b", "Tea.", access_count=2, embedder=e),
        fact("c", "gone", age_days=9999, embedder=e),
        fact("d", "used", access_count=9, last_accessed_at=NOW, embedder=e),
    )
    extracted = fact("x", "written by compaction", source="consolidation", run_id="run1", embedder=e)
    store(backend, extracted)
    before = _lifecycle(backend)
    run(backend, "run1")
    assert active_ids(backend) == {"b", "d", "x"}  # b is the more used of the two teas

    report = rollback_run(backend, WS, "run1", clock=lambda: NOW)

    before.pop("x")
    assert _lifecycle(backend) == before
    assert (report.restored, report.deleted_triples, report.reindexed) == (4, 1, 2)
    assert indexed(backend, "tea") == {"a", "b"} and indexed(backend, "gone") == {"c"}
    assert all(not t.changes for t in state(backend).values())
    again = rollback_run(backend, WS, "run1", clock=lambda: NOW)
    assert again.restored == 0 and again.deleted_triples == 0


def test_rollback_leaves_what_a_later_run_changed_again(backend: Backend) -> None:
    store(backend, fact("a", "tea"), fact("b", "Tea."))
    run(backend, "run1")  # b merged into a
    later = state(backend)["a"].model_copy(update={"updated_at": NOW - timedelta(days=10_000)})
    backend.memory.put_triple(later)
    run(backend, "run2")  # a pruned

    report = rollback_run(backend, WS, "run1", clock=lambda: NOW)

    assert report.superseded == 1 and report.restored == 1  # b back to active, a left to run2
    assert state(backend)["a"].status == "pruned"


# ---------------------------------------------------------------- bounded memory


def test_restated_facts_leave_one_active_record_per_distinct_fact(backend: Backend) -> None:
    from tests.support.fact_workload import distinct_facts, restate_facts

    facts = distinct_facts(25)
    result = restate_facts(backend, WS, facts=facts, turns=400, maintenance_every=100, start=NOW)

    assert result.facts_stated == 25
    assert result.active_per_fact == dict.fromkeys(result.active_per_fact, 1)
    # Both layers had work: the tool made new triples for new keys, maintenance merged them.
    assert sum(r.merged_exact for r in result.reports) > 0
    assert sum(r.merged_near for r in result.reports) > 0
    assert result.stored > result.active == 25


# ---------------------------------------------------------------- on both adapter sets


@pytest.mark.parametrize("kind", ["embedded", "aws"])
def test_maintenance_and_rollback_on_each_adapter_set(kind: str, tmp_path: pathlib.Path) -> None:
    from tests.contract.factories import BACKEND_FACTORIES

    e = HashingEmbedder()
    with BACKEND_FACTORIES[kind](tmp_path / kind) as contract:
        b = contract.backend
        b.embedder = HashingEmbedder()
        store(
            b,
            fact("a", "green tea", access_count=1, embedder=e),
            fact("b", "Green tea!", access_count=2, embedder=e),
            fact("c", "disco", age_days=9999, embedder=e),
            fact("d", "no vector yet"),
        )
        before = _lifecycle(b)

        report = run(b, "run1", policy=MaintenancePolicy(page_size=2))

        assert report.complete and (report.merged, report.pruned, report.backfilled) == (1, 1, 1)
        assert {t.id for t in b.memory.triples_by_subject(WS, "alice", scope=WORKSPACE_WIDE)} == {"b", "d"}
        assert indexed(b, "disco") == set() and indexed(b, "tea") == {"b"}
        assert run(b, "run2").written == 0

        rollback_run(b, WS, "run1", clock=lambda: NOW)
        after = _lifecycle(b)
        # Everything as before, but the new vector stays (an embedding is not a lifecycle change).
        assert {i: v[:-1] for i, v in after.items()} == {i: v[:-1] for i, v in before.items()}
        assert {t.id for t in b.memory.triples_by_subject(WS, "alice", scope=WORKSPACE_WIDE)} == {
            "a",
            "b",
            "c",
            "d",
        }


# ---------------------------------------------------------------- messages written without vectors


class _Down:
    model_id = "test/down"
    dimensions = 384

    def embed(self, texts: object) -> list[list[float]]:
        raise RuntimeError("provider unavailable")


def _messages(session_id: str, n: int, *, user_id: str = "alice") -> list[MemoryRecord]:
    return [
        MemoryRecord(
            id=f"{session_id}-m{seq:03d}",
            workspace_id=WS,
            session_id=session_id,
            role="user" if seq % 2 == 0 else "assistant",
            text=f"message {seq} of {session_id} about topic {seq * 7}",
            seq=seq,
            created_at=NOW - timedelta(minutes=n - seq),
            user_id=user_id,
        )
        for seq in range(n)
    ]


def test_messages_written_without_vectors_are_re_embedded_in_batches(backend: Backend) -> None:
    s1, s2 = _messages("s1", 100), _messages("s2", 9, user_id="bob")
    # A long message: one document per chunk, all without vectors.
    s2.append(s2[-1].model_copy(update={"id": "s2-long", "seq": 9, "text": "a pasted report " * 150}))
    backend.memory.append_messages(WS, [*s1, *s2])
    down = MemoryWriter(backend.index, _Down())
    # Written as roll-outs of 10 while the embedder was down: text only, BM25 finds them.
    for records in (s1, s2):
        for lo in range(0, len(records), 10):
            result = down.write_messages(WS, records[lo : lo + 10], before=records[max(0, lo - 2) : lo])
            assert result.embedded == 0 and result.error
    assert isinstance(backend.index, SqliteMemoryIndex)
    missing = backend.index.missing_vectors(WS, limit=1000)
    assert len(missing) == 100 + 9 + 2 and all(d.metadata[EMBEDDING_KEY] == "missing" for d in missing)
    embedder = backend.embedder
    assert isinstance(embedder, HashingEmbedder)
    embedder.calls.clear()

    report = run(backend)

    assert report.complete and report.messages_backfilled == 111 and report.embed_failures == 0
    assert backend.index.missing_vectors(WS, limit=1000) == []
    # Batches of 50 documents (one embed call each, texts and their neighbours deduplicated).
    assert len(embedder.calls) == 3
    # The vectors are the writer's (own text blended with its neighbours'): k-NN finds each.
    for record in (s1[42], s2[3]):
        (query,) = embedder.embed([record.text])
        hits = backend.index.search(
            WS, IndexQuery(scope=WORKSPACE_WIDE, vector=query, k=3, tiers=["message"])
        ).vector_hits
        assert hits[0].doc.id == record.id
        assert EMBEDDING_KEY not in hits[0].doc.metadata and hits[0].doc.metadata["context"]
    # Context stays within the user's own messages, as the turn writes it.
    (hit,) = backend.index.search(
        WS, IndexQuery(scope=WORKSPACE_WIDE, text="s2", k=100, session_id="s2")
    ).text_hits[:1]
    assert "s1" not in hit.doc.metadata.get("context", "")
    assert run(backend, "run2").messages_backfilled == 0


def test_message_re_embedding_waits_for_the_embedder_and_resumes_after_a_deadline(backend: Backend) -> None:
    records = _messages("s1", 30)
    backend.memory.append_messages(WS, records)
    MemoryWriter(backend.index, _Down()).write_messages(WS, records)
    working = backend.embedder
    backend.embedder = _Down()
    report = run(backend)
    assert report.complete and report.messages_backfilled == 0
    assert isinstance(backend.index, SqliteMemoryIndex)
    assert len(backend.index.missing_vectors(WS, limit=100)) == 30

    backend.embedder = working
    ticks = itertools.count()
    policy = MaintenancePolicy(embed_batch=10, unit_reserve_s=1.0)
    done = 0
    for attempt in range(20):
        start = next(ticks)
        deadline = Deadline(at=start + 4, clock=lambda: float(next(ticks)))
        report = run(backend, f"run{attempt}", deadline=deadline, policy=policy)
        done += report.messages_backfilled
        if report.complete:
            break
        assert report.stopped_in in {"finish", "messages"}
    assert report.complete and done == 30 and attempt > 0
    assert backend.index.missing_vectors(WS, limit=100) == []


def _summary_docs(n: int) -> list[IndexDoc]:
    # As compaction indexes a summary when the embedder fails: one document, no vector.
    return [
        IndexDoc(
            id=f"sum-{i:03d}",
            workspace_id=WS,
            session_id="s1",
            tier="summary",
            text=f"summary {i}: alice planned a trip to city {i * 13} and booked hotel {i * 7}",
            created_at=NOW - timedelta(hours=n - i),
            metadata={"first_seq": str(50 * i), "last_seq": str(50 * i + 49)},
        )
        for i in range(n)
    ]


def test_summaries_indexed_without_vectors_are_re_embedded(backend: Backend) -> None:
    backend.index.upsert(WS, _summary_docs(60))
    assert isinstance(backend.index, SqliteMemoryIndex)
    assert len(backend.index.missing_vectors(WS, tier="summary", limit=100)) == 60
    embedder = backend.embedder
    assert isinstance(embedder, HashingEmbedder)
    embedder.calls.clear()

    report = run(backend)

    assert report.complete and report.summaries_backfilled == 60 and report.messages_backfilled == 0
    assert report.metrics()["MaintenanceSummariesBackfilled"] == 60
    assert backend.index.missing_vectors(WS, tier="summary", limit=100) == []
    assert len(embedder.calls) == 2  # batches of 50
    # The vector is the summary text's own, as compaction would have written it; nothing else moved.
    (query,) = embedder.embed(["summary 42: alice planned a trip to city 546 and booked hotel 294"])
    (hit,) = backend.index.search(
        WS, IndexQuery(scope=WORKSPACE_WIDE, vector=query, k=1, tiers=["summary"])
    ).vector_hits
    assert (hit.doc.id, hit.doc.metadata) == ("sum-042", {"first_seq": "2100", "last_seq": "2149"})
    assert hit.score == pytest.approx(1.0)
    assert run(backend, "run2").summaries_backfilled == 0


def test_summary_re_embedding_waits_for_the_embedder(backend: Backend) -> None:
    backend.index.upsert(WS, _summary_docs(5))
    working = backend.embedder
    backend.embedder = _Down()
    report = run(backend)
    assert report.complete and report.summaries_backfilled == 0 and report.embed_failures == 5
    assert isinstance(backend.index, SqliteMemoryIndex)
    assert len(backend.index.missing_vectors(WS, tier="summary", limit=100)) == 5
    # BM25 still finds them meanwhile.
    assert backend.index.search(WS, IndexQuery(scope=WORKSPACE_WIDE, text="hotel", k=10)).text_hits

    backend.embedder = working
    assert run(backend, "run2").summaries_backfilled == 5
    assert backend.index.missing_vectors(WS, tier="summary", limit=100) == []

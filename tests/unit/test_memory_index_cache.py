"""SqliteMemoryIndex's in-memory copy of a workspace (index_cache.Shard): same answers as SQL,
kept current across writers, never ahead of a rolled-back write."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from shared.adapters.embedded import Database, SqliteMemoryIndex
from shared.adapters.embedded.index_cache import CachedDoc, Shard
from shared.memory.search import CONTEXT_KEY
from shared.models import WORKSPACE_WIDE, IndexDoc, IndexQuery, MemoryScope, MemoryTier, RecallScope

WS = "ws-cache"
WORDS = ["kayak", "fjord", "pasta", "pesto", "garden", "basil", "budget", "meeting", "seal", "summer"]
WORDS += ["winter", "tomato", "river"]
T0 = datetime(2025, 5, 1, tzinfo=UTC)


def corpus(n: int = 60, seed: int = 3) -> list[IndexDoc]:
    rng = np.random.default_rng(seed)
    tiers: list[MemoryTier] = ["message", "summary", "fact"]
    docs = []
    for i in range(n):
        words = rng.choice(WORDS, size=int(rng.integers(3, 9)))
        vector = rng.standard_normal(16)
        docs.append(
            IndexDoc(
                id=f"d{i}",
                workspace_id=WS,
                session_id=f"s{i % 3}",
                tier=tiers[i % 3],
                text=" ".join(words),
                vector=(vector / np.linalg.norm(vector)).tolist(),
                created_at=T0,
                metadata={CONTEXT_KEY: " ".join(rng.choice(WORDS, size=4))} if i % 2 else {},
                # Scopes of every kind, and some documents from before scopes existed.
                scope=None
                if i % 11 == 0
                else MemoryScope(
                    conversation=f"c{i % 5}",
                    users=(f"u{i % 4}",) if i % 6 else (f"u{i % 4}", "u9"),
                    group=i % 5 == 0,
                    shared=i % 7 == 0,
                ),
            )
        )
    return docs


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(tmp_path / "index.db", load_vec=True)
    yield database
    database.close()


QUERIES = [
    IndexQuery(scope=WORKSPACE_WIDE, text="kayak fjord seal", vector=corpus()[0].vector, k=8),
    IndexQuery(
        scope=WORKSPACE_WIDE,
        text="pasta pesto basil",
        vector=corpus()[5].vector,
        k=5,
        tiers=["message", "fact"],
    ),
    IndexQuery(
        scope=WORKSPACE_WIDE, text="budget meeting winter", vector=corpus()[7].vector, k=6, session_id="s1"
    ),
    IndexQuery(scope=WORKSPACE_WIDE, text="garden tomato", k=20),
    IndexQuery(scope=WORKSPACE_WIDE, vector=corpus()[9].vector, k=3, tiers=["summary"], session_id="s2"),
    # Scoped: FTS5's WHERE and sqlite-vec's rowid prefilter against the copy's mask.
    IndexQuery(
        scope=RecallScope(session_id="s1", users=("u1", "u9"), shared=True),
        text="kayak fjord pasta garden",
        vector=corpus()[2].vector,
        k=7,
    ),
    IndexQuery(
        scope=RecallScope(session_id="s0", conversation="c3", shared=True),
        text="budget meeting seal summer",
        vector=corpus()[4].vector,
        k=9,
        tiers=["message", "summary"],
    ),
    IndexQuery(
        scope=RecallScope(session_id="s2"), text="river winter tomato", vector=corpus()[1].vector, k=4
    ),
]


@pytest.mark.parametrize("query", QUERIES)
def test_the_copy_ranks_as_fts5_and_sqlite_vec_do(db: Database, tmp_path: Path, query: IndexQuery) -> None:
    cached = SqliteMemoryIndex(db)
    sql_db = Database(tmp_path / "sql.db", load_vec=True)
    try:
        in_sql = SqliteMemoryIndex(sql_db, cache_max_docs=0)
        cached.upsert(WS, corpus())
        in_sql.upsert(WS, corpus())

        a, b = cached.search(WS, query), in_sql.search(WS, query)
        # One workspace in the file: FTS5's statistics are the workspace's, so even scores agree.
        assert [h.doc.id for h in a.text_hits] == [h.doc.id for h in b.text_hits]
        assert [h.score for h in a.text_hits] == pytest.approx([h.score for h in b.text_hits], rel=1e-4)
        assert [h.doc.id for h in a.vector_hits] == [h.doc.id for h in b.vector_hits]
        assert [h.score for h in a.vector_hits] == pytest.approx([h.score for h in b.vector_hits], abs=1e-5)
        assert [h.doc for h in a.text_hits + a.vector_hits] == [h.doc for h in b.text_hits + b.vector_hits]
    finally:
        sql_db.close()


def test_a_write_by_another_index_on_the_same_file_is_seen(db: Database, tmp_path: Path) -> None:
    # Two processes, as far as the cache can tell: two indexes, two Database objects, one file.
    other_db = Database(tmp_path / "index.db", load_vec=True)
    try:
        mine, theirs = SqliteMemoryIndex(db), SqliteMemoryIndex(other_db)
        mine.upsert(WS, corpus(10))
        assert (
            mine.search(WS, IndexQuery(scope=WORKSPACE_WIDE, text="zeppelin")).text_hits == []
        )  # the copy is built

        theirs.upsert(
            WS, [IndexDoc(id="z", workspace_id=WS, tier="message", text="a zeppelin over the fjord")]
        )
        assert [
            h.doc.id for h in mine.search(WS, IndexQuery(scope=WORKSPACE_WIDE, text="zeppelin")).text_hits
        ] == ["z"]

        theirs.delete(WS, ["z"])
        assert mine.search(WS, IndexQuery(scope=WORKSPACE_WIDE, text="zeppelin")).text_hits == []
    finally:
        other_db.close()


def test_own_writes_replace_and_delete_in_the_copy(db: Database) -> None:
    index = SqliteMemoryIndex(db)
    index.upsert(WS, corpus(10))
    index.search(WS, IndexQuery(scope=WORKSPACE_WIDE, text="kayak"))  # built

    index.upsert(WS, [IndexDoc(id="d1", workspace_id=WS, tier="message", text="now about a zeppelin")])
    index.delete(WS, ["d2"])

    assert [
        h.doc.id for h in index.search(WS, IndexQuery(scope=WORKSPACE_WIDE, text="zeppelin")).text_hits
    ] == ["d1"]
    found = {
        h.doc.id
        for h in index.search(WS, IndexQuery(scope=WORKSPACE_WIDE, text=" ".join(WORDS), k=100)).text_hits
    }
    assert "d2" not in found and "d1" not in found
    assert index.count(WS) == 9


def test_a_write_rolled_back_with_its_callers_transaction_is_never_found(db: Database) -> None:
    index = SqliteMemoryIndex(db)
    index.upsert(WS, corpus(10))
    index.search(WS, IndexQuery(scope=WORKSPACE_WIDE, text="kayak"))  # built

    with pytest.raises(RuntimeError), db.transaction():
        index.upsert(WS, [IndexDoc(id="ghost", workspace_id=WS, tier="message", text="ghost zeppelin")])
        raise RuntimeError("the caller's transaction fails after the upsert")

    assert index.search(WS, IndexQuery(scope=WORKSPACE_WIDE, text="zeppelin")).text_hits == []
    assert index.count(WS) == 10


def test_a_workspace_larger_than_the_cache_is_searched_in_sql(db: Database) -> None:
    index = SqliteMemoryIndex(db, cache_max_docs=5)
    index.upsert(WS, corpus(10))
    index.upsert("ws-small", [IndexDoc(id="s", workspace_id="ws-small", tier="message", text="small kayak")])

    big = index.search(WS, IndexQuery(scope=WORKSPACE_WIDE, text="kayak", k=100))
    assert big.text_hits and all(h.doc.workspace_id == WS for h in big.text_hits)
    assert [
        h.doc.id for h in index.search("ws-small", IndexQuery(scope=WORKSPACE_WIDE, text="kayak")).text_hits
    ] == ["s"]


def test_workspaces_keep_their_own_statistics_and_documents(db: Database) -> None:
    index = SqliteMemoryIndex(db)
    index.upsert(WS, corpus(20))
    index.upsert("ws-b", [IndexDoc(id="b1", workspace_id="ws-b", tier="message", text="kayak kayak kayak")])

    assert {
        h.doc.id for h in index.search("ws-b", IndexQuery(scope=WORKSPACE_WIDE, text="kayak", k=50)).text_hits
    } == {"b1"}
    assert "b1" not in {
        h.doc.id for h in index.search(WS, IndexQuery(scope=WORKSPACE_WIDE, text="kayak", k=50)).text_hits
    }


def test_the_sign_bit_prefilter_of_a_large_workspace_finds_the_near_neighbours(db: Database) -> None:
    rng = np.random.default_rng(5)
    centres = rng.standard_normal((50, 32))
    vectors = centres[rng.integers(0, 50, size=5000)] + 0.3 * rng.standard_normal((5000, 32))
    docs = [
        IndexDoc(
            id=f"v{i}", workspace_id=WS, tier="message", text=f"doc {i}", vector=v.tolist(), created_at=T0
        )
        for i, v in enumerate(vectors)
    ]
    prefiltered = SqliteMemoryIndex(db, knn_exact_below=1000)  # 5,000 vectors: past the threshold
    prefiltered.upsert(WS, docs)
    exact = SqliteMemoryIndex(db)  # the same file, exact k-NN

    for i in rng.integers(0, 5000, size=20):
        query = IndexQuery(
            scope=WORKSPACE_WIDE, vector=(vectors[i] + 0.01 * rng.standard_normal(32)).tolist(), k=5
        )
        fast = prefiltered.search(WS, query).vector_hits
        truth = exact.search(WS, query).vector_hits
        assert fast[0].doc.id == f"v{i}"
        assert [h.doc.id for h in fast] == [h.doc.id for h in truth]
        assert [h.score for h in fast] == pytest.approx([h.score for h in truth], abs=1e-6)


@pytest.mark.parametrize("cache_max_docs", [0, 1000])
def test_hits_can_come_without_their_vectors(db: Database, cache_max_docs: int) -> None:
    index = SqliteMemoryIndex(db, cache_max_docs=cache_max_docs)
    docs = corpus(10)
    index.upsert(WS, docs)
    query = IndexQuery(scope=WORKSPACE_WIDE, text="kayak pasta budget", vector=docs[0].vector, k=5)

    full = index.search(WS, query)
    light = index.search(WS, query.model_copy(update={"with_vectors": False}))

    assert [h.doc.id for h in light.text_hits] == [h.doc.id for h in full.text_hits]
    assert [h.doc.id for h in light.vector_hits] == [h.doc.id for h in full.vector_hits]
    assert all(h.doc.vector is None for h in light.text_hits + light.vector_hits)
    assert all(h.doc.vector is not None for h in full.text_hits + full.vector_hits)
    by_id = {d.id: d for d in docs}
    assert all(h.doc == by_id[h.doc.id].model_copy(update={"vector": None}) for h in light.text_hits)


def test_k_hits_come_back_when_most_of_the_workspace_is_out_of_scope(db: Database) -> None:
    rng = np.random.default_rng(9)
    docs = []
    for i in range(3000):
        vector = rng.standard_normal(16)
        mine = i % 500 == 0  # 6 of 3,000 are u1's
        docs.append(
            IndexDoc(
                id=f"d{i}",
                workspace_id=WS,
                session_id=f"s{i % 40}",
                tier="message",
                text="kayak fjord" if mine else "kayak kayak kayak fjord fjord",
                vector=vector.tolist(),
                created_at=T0,
                scope=MemoryScope(conversation=f"c{i % 40}", users=("u1",) if mine else ("u2",)),
            )
        )
    index = SqliteMemoryIndex(db)
    index.upsert(WS, docs)
    scope = RecallScope(session_id="elsewhere", users=("u1",))
    result = index.search(WS, IndexQuery(text="kayak", vector=docs[7].vector, k=4, scope=scope))
    allowed = {f"d{i}" for i in range(0, 3000, 500)}
    assert len(result.text_hits) == 4 and {h.doc.id for h in result.text_hits} <= allowed
    assert len(result.vector_hits) == 4 and {h.doc.id for h in result.vector_hits} <= allowed
    everything = index.search(WS, IndexQuery(text="kayak", vector=docs[7].vector, k=100, scope=scope))
    assert {h.doc.id for h in everything.text_hits} == {h.doc.id for h in everything.vector_hits} == allowed


def test_a_shard_masks_by_scope_before_its_top_k() -> None:
    shard = Shard(0, str.split, 0.5)
    for i, scope in enumerate(
        [
            MemoryScope(conversation="c1", users=("u1",)),
            MemoryScope(conversation="c2", users=("u2", "u3"), group=True),
            MemoryScope(conversation="c2", users=("u2",), shared=True),
            None,
        ]
    ):
        shard.add(CachedDoc(i, f"d{i}", "message", f"s{i}", "tea", "", [1.0, float(i)], scope))

    def found(scope: RecallScope) -> set[int]:
        text = {rowid for rowid, _ in shard.text_search(["tea"], 10, None, None, scope)}
        vector = {rowid for rowid, _ in shard.vector_search([1.0, 0.0], 10, None, None, scope)}
        assert text == vector
        return text

    assert found(WORKSPACE_WIDE) == {0, 1, 2, 3}
    assert found(RecallScope(users=("u3",))) == {1}
    assert found(RecallScope(conversation="c2")) == {1, 2}
    assert found(RecallScope(shared=True)) == {2}
    assert found(RecallScope(session_id="s3")) == {3}  # before scopes: its own session only
    assert found(RecallScope(session_id="s0", users=("u9",))) == {0}
    assert found(RecallScope()) == set()
    # A document replaced with another scope leaves its old users behind.
    shard.add(CachedDoc(9, "d1", "message", "s1", "tea", "", [1.0, 1.0], MemoryScope(users=("u4",))))
    assert found(RecallScope(users=("u3",))) == set() and found(RecallScope(users=("u4",))) == {9}


def test_the_sign_bit_prefilter_runs_over_the_visible_vectors_only(db: Database) -> None:
    rng = np.random.default_rng(6)
    vectors = rng.standard_normal((5000, 32))
    docs = [
        IndexDoc(
            id=f"v{i}",
            workspace_id=WS,
            tier="message",
            text=f"doc {i}",
            vector=v.tolist(),
            created_at=T0,
            scope=MemoryScope(users=("u2",) if i % 6 == 0 else ("u1",)),
        )
        for i, v in enumerate(vectors)
    ]
    prefiltered = SqliteMemoryIndex(db, knn_exact_below=1000)  # ~4,170 visible: past the threshold
    prefiltered.upsert(WS, docs)
    exact = SqliteMemoryIndex(db)
    scope = RecallScope(users=("u1",))
    for i in [1, 7, 6, 12]:  # near a visible vector, and near a hidden one
        query = IndexQuery(vector=(vectors[i] + 0.01 * rng.standard_normal(32)).tolist(), k=5, scope=scope)
        fast = [h.doc.id for h in prefiltered.search(WS, query).vector_hits]
        assert fast == [h.doc.id for h in exact.search(WS, query).vector_hits]
        assert len(fast) == 5 and all(int(d[1:]) % 6 for d in fast)
        assert (fast[0] == f"v{i}") == bool(i % 6)

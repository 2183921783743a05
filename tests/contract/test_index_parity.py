"""Index parity: SqliteMemoryIndex and OpenSearchIndex rank a shared corpus the same way.

BM25: the OpenSearch adapter runs over real HTTP against osmem-server (tests/integration/
test_opensearch_osmem.py has the adapter's own suite). The two analysers differ (FTS5's porter
unicode61 keeps stop words; OpenSearch's `english` drops them, and the two compute IDF and
document length a little differently), so scores are never compared: the corpus gives each query
a clear best document and at most a few matches, and the suites compare the top-1 id and the
top-3 id set.

k-NN: osmem-server accepts the knn_vector mapping but answers every `knn` query with an error,
so there is no second k-NN engine to compare against locally. Instead the embedded index's
k-NN (sqlite-vec, exact search) is checked against a brute-force cosine ranking of the same
vectors with numpy, filters and workspaces included. The OpenSearch k-NN request itself is
checked at the wire level in tests/unit/test_opensearch_requests.py.
"""

from __future__ import annotations

import pathlib
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from osmem_server import OsmemServer

from shared.adapters.aws.opensearch import OpenSearchIndex, opensearch_client
from shared.adapters.embedded.db import Database
from shared.adapters.embedded.index import SqliteMemoryIndex
from shared.models import WORKSPACE_WIDE, IndexDoc, IndexHit, IndexQuery, MemoryTier
from shared.ports import MemoryIndex

WS = "ws-parity"
OTHER = "ws-other"
DIM = 16

# (id, tier, session, text): each query below has one clearly best document and few matches.
CORPUS: list[tuple[str, MemoryTier, str, str]] = [
    ("kayak-1", "message", "s1", "Kayak day on the fjord: kayak out, kayak back, kayak lunch on a rock"),
    ("kayak-2", "message", "s1", "Booked a kayak rental near the harbour"),
    ("kayak-3", "message", "s2", "The fjord was calm in the morning"),
    ("pesto-1", "message", "s1", "Pasta with basil from the balcony"),
    ("pesto-2", "message", "s2", "Pesto again: basil pesto, pine nuts, parmesan pesto sauce"),
    ("pesto-3", "summary", "s2", "Dinner plans: pesto"),
    ("garden-1", "message", "s1", "Watering the garden twice a week in July"),
    ("garden-2", "message", "s3", "Tomatoes in the garden need stakes, garden twine and garden gloves"),
    ("meeting-1", "message", "s3", "Budget meeting moved to Thursday afternoon, budget slides due"),
    ("meeting-2", "message", "s3", "Quarterly budget review with the finance team"),
    ("meeting-3", "message", "s1", "The team lunch is on Friday"),
    ("violin-1", "message", "s2", "Violin lesson every Tuesday with Marguerite, bring the violin"),
    ("violin-2", "fact", "s2", "Bought new violin strings and rosin"),
    ("dentist-1", "message", "s1", "Dentist appointment on the fourteenth, bring the radiograph forms"),
    (
        "passport-1",
        "message",
        "s3",
        "Passport renewal: passport form sent to the consulate with old passport",
    ),
    ("passport-2", "fact", "s3", "Passport photos taken at the pharmacy"),
    ("lighthouse-1", "summary", "s1", "The lighthouse keeper logbook mentions a storm"),
    ("zeppelin-1", "message", "s2", "Museum of zeppelin history in Friedrichshafen"),
    ("sourdough-1", "message", "s1", "Sourdough starter fed with rye flour"),
    ("sourdough-2", "message", "s2", "Sourdough loaf with a crisp crust, sourdough starter, sourdough again"),
]
# Another workspace holding the same texts under the same ids: never seen from WS. (Not more of
# the query terms: both engines take term statistics over the whole index, and FTS5's IDF drops
# to nothing for a term in over half the documents, where Lucene's stays positive.)
OTHER_CORPUS = [(doc_id, tier, session, text.upper()) for doc_id, tier, session, text in CORPUS]

# (query, filters, expected top-1): content words, where both analysers agree on the terms.
QUERIES: list[tuple[str, dict[str, Any], str]] = [
    ("kayak", {}, "kayak-1"),
    ("fjord kayak", {}, "kayak-1"),
    ("basil pesto", {}, "pesto-2"),
    ("garden", {}, "garden-2"),
    ("budget meeting", {}, "meeting-1"),
    ("violin", {}, "violin-1"),
    ("passport", {}, "passport-1"),
    ("sourdough starter", {}, "sourdough-2"),
    ("zeppelin museum", {}, "zeppelin-1"),
    ("lighthouse storm", {}, "lighthouse-1"),
    # Filters: the best document within the tier or session asked for
    ("pesto", {"tiers": ["summary"]}, "pesto-3"),
    ("passport", {"tiers": ["fact"]}, "passport-2"),
    ("kayak fjord", {"session_id": "s2"}, "kayak-3"),
    ("violin", {"tiers": ["fact", "summary"], "session_id": "s2"}, "violin-2"),
]
# Natural questions carry stop words, which FTS5 matches and OpenSearch drops: the best
# document still wins on both, though the tails may differ.
QUESTIONS = [
    ("when is the budget meeting?", "meeting-1"),
    ("what did we say about the sourdough starter?", "sourdough-2"),
    ("where is my passport form", "passport-1"),
]


def _docs(workspace_id: str, rows: list[tuple[str, MemoryTier, str, str]]) -> list[IndexDoc]:
    return [
        IndexDoc(id=doc_id, workspace_id=workspace_id, session_id=session, tier=tier, text=text)
        for doc_id, tier, session, text in rows
    ]


@pytest.fixture(scope="module")
def indexes(osmem: OsmemServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, MemoryIndex]]:
    """Both adapters, loaded once with the same corpus in two workspaces."""
    db = Database(tmp_path_factory.mktemp("parity") / "index.db", load_vec=True)
    embedded = SqliteMemoryIndex(db)
    opensearch = OpenSearchIndex(
        client=opensearch_client(osmem.url), index=f"parity-{uuid.uuid4().hex[:12]}", dimension=DIM
    )
    pair: dict[str, MemoryIndex] = {"embedded": embedded, "opensearch": opensearch}
    for index in pair.values():
        index.upsert(WS, _docs(WS, CORPUS))
        index.upsert(OTHER, _docs(OTHER, OTHER_CORPUS))
    yield pair
    db.close()


def _ranked(index: MemoryIndex, text: str, **filters: Any) -> list[IndexHit]:
    hits = index.search(WS, IndexQuery(scope=WORKSPACE_WIDE, text=text, k=10, **filters)).text_hits
    assert all(h.doc.workspace_id == WS for h in hits)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    return hits


@pytest.mark.parametrize(("query", "filters", "best"), QUERIES, ids=[q for q, _, _ in QUERIES])
def test_bm25_top_hits_agree(
    indexes: dict[str, MemoryIndex], query: str, filters: dict[str, Any], best: str
) -> None:
    embedded = [h.doc.id for h in _ranked(indexes["embedded"], query, **filters)]
    opensearch = [h.doc.id for h in _ranked(indexes["opensearch"], query, **filters)]

    assert embedded[0] == opensearch[0] == best
    assert set(embedded[:3]) == set(opensearch[:3])
    # The documents come back whole and as written, from either adapter
    by_id = {d.id: d for d in _docs(WS, CORPUS)}
    for name in ("embedded", "opensearch"):
        top = _ranked(indexes[name], query, **filters)[0]
        assert top.doc.model_dump(exclude={"created_at"}) == by_id[best].model_dump(exclude={"created_at"})


@pytest.mark.parametrize(("question", "best"), QUESTIONS, ids=[q for q, _ in QUESTIONS])
def test_bm25_best_hit_agrees_on_natural_questions(
    indexes: dict[str, MemoryIndex], question: str, best: str
) -> None:
    assert _ranked(indexes["embedded"], question)[0].doc.id == best
    assert _ranked(indexes["opensearch"], question)[0].doc.id == best


def test_a_term_no_document_holds_finds_nothing_on_both(indexes: dict[str, MemoryIndex]) -> None:
    for index in indexes.values():
        assert _ranked(index, "xylophone") == []
        hits = _ranked(index, "KAYAK")  # the other workspace's upper-case copies never come back
        assert [h.doc.id for h in hits] == ["kayak-1", "kayak-2"]
        assert all(h.doc.workspace_id == WS and h.doc.text != h.doc.text.upper() for h in hits)


# ---------------------------------------------------------------- k-NN against brute force


def _brute_force(
    docs: list[IndexDoc],
    query: np.ndarray[Any, Any],
    k: int,
    *,
    tiers: list[MemoryTier] | None,
    session: str | None,
) -> list[tuple[str, float]]:
    kept = [
        d for d in docs if (tiers is None or d.tier in tiers) and (session is None or d.session_id == session)
    ]
    matrix = np.array([d.vector for d in kept], dtype=np.float64)
    cosine = matrix @ query / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(query))
    order = np.argsort(-cosine, kind="stable")[:k]
    return [(kept[i].id, float(cosine[i])) for i in order]


@pytest.mark.parametrize(
    ("tiers", "session"),
    [(None, None), (["message"], None), (["summary", "fact"], None), (None, "s2"), (["message"], "s1")],
)
def test_knn_matches_an_exact_cosine_ranking(
    tmp_path: pathlib.Path, tiers: list[MemoryTier] | None, session: str | None
) -> None:
    rng = np.random.default_rng(7)
    tier_of: list[MemoryTier] = ["message", "summary", "fact"]

    def random_docs(workspace_id: str, n: int) -> list[IndexDoc]:
        return [
            IndexDoc(
                id=f"v{i}",
                workspace_id=workspace_id,
                session_id=f"s{i % 3 + 1}",
                tier=tier_of[i % 3],
                text=f"document {i}",
                vector=[float(x) for x in rng.normal(size=DIM)],  # not unit length: cosine must normalise
            )
            for i in range(n)
        ]

    db = Database(tmp_path / "index.db", load_vec=True)
    try:
        index = SqliteMemoryIndex(db)
        mine, theirs = random_docs(WS, 300), random_docs(OTHER, 300)
        index.upsert(WS, mine)
        index.upsert(OTHER, theirs)  # nearer neighbours, some of them, in another workspace
        for _ in range(10):
            query = rng.normal(size=DIM)
            k = 10
            expected = _brute_force(mine, query, k, tiers=tiers, session=session)
            got = index.search(
                WS,
                IndexQuery(
                    scope=WORKSPACE_WIDE,
                    vector=[float(x) for x in query],
                    k=k,
                    tiers=tiers,
                    session_id=session,
                ),
            ).vector_hits
            assert [h.doc.id for h in got] == [doc_id for doc_id, _ in expected]
            assert all(h.doc.workspace_id == WS for h in got)
            assert [h.score for h in got] == pytest.approx([c for _, c in expected], abs=1e-5)
    finally:
        db.close()

"""MemoryIndex contract: BM25 and k-NN rankings, filters, replacement, deletion, isolation.

Each test runs on each index adapter it can execute on, named for that adapter: "embedded"
(SqliteMemoryIndex: FTS5 and sqlite-vec) and "opensearch" (OpenSearchIndex over real HTTP against
osmem-server). The AWS contract set is not among them: it runs the embedded index (moto has no
OpenSearch), so it would repeat the "embedded" runs under another name. osmem-server answers no
k-NN query, so the tests marked `knn` run on the embedded index only; the OpenSearch k-NN request
is checked at the wire level (tests/unit/test_opensearch_requests.py; docs/memory.md, "Where each
index adapter is proven").
"""

from __future__ import annotations

import pathlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from osmem_server import OsmemServer

from shared.adapters.aws.opensearch import OpenSearchIndex, opensearch_client
from shared.models import WORKSPACE_WIDE, IndexDoc, IndexHit, IndexQuery, MemoryTier
from shared.ports import MemoryIndex

from .builders import at, unit_vector
from .factories import BACKEND_FACTORIES, CONTRACT_VECTOR_DIM

INDEXES = ["embedded", "opensearch"]
# The adapters whose k-NN runs here: osmem-server refuses every `knn` query.
KNN_INDEXES = ["embedded"]
knn = pytest.mark.knn


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "index" in metafunc.fixturenames:
        kinds = KNN_INDEXES if metafunc.definition.get_closest_marker("knn") else INDEXES
        metafunc.parametrize("index", kinds, indirect=True)


@pytest.fixture
def index(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[MemoryIndex]:
    if request.param == "opensearch":
        osmem: OsmemServer = request.getfixturevalue("osmem")
        yield OpenSearchIndex(
            client=opensearch_client(osmem.url),
            index=f"contract-{uuid.uuid4().hex[:12]}",
            dimension=CONTRACT_VECTOR_DIM,
        )
        return
    with BACKEND_FACTORIES[request.param](tmp_path / "backend") as contract:
        yield contract.backend.index


def _doc(
    workspace_id: str,
    doc_id: str,
    text: str,
    *,
    vector: list[float] | None = None,
    tier: MemoryTier = "message",
    session_id: str | None = "s1",
) -> IndexDoc:
    return IndexDoc(
        id=doc_id,
        workspace_id=workspace_id,
        session_id=session_id,
        tier=tier,
        text=text,
        vector=vector,
        created_at=at(0),
        metadata={"role": "user", "seq": "3"},
    )


@pytest.fixture
def corpus(index: MemoryIndex, ws_a: str) -> list[IndexDoc]:
    docs = [
        _doc(ws_a, "d-kayak", "We went kayaking on the fjord last summer", vector=unit_vector(0)),
        _doc(ws_a, "d-pasta", "My favourite dinner is pasta with pesto", vector=unit_vector(1)),
        _doc(ws_a, "d-garden", "The garden needs watering twice a week", vector=unit_vector(2)),
        _doc(
            ws_a, "d-meeting", "The budget meeting moved to Thursday", vector=unit_vector(3), session_id="s2"
        ),
        _doc(ws_a, "d-sum", "Summary: kayaking trip and dinner plans", vector=unit_vector(4), tier="summary"),
        _doc(
            ws_a, "d-fact", "Ada prefers pasta over rice", vector=unit_vector(5), tier="fact", session_id=None
        ),
    ]
    index.upsert(ws_a, docs)
    return docs


def _ids(hits: list[IndexHit]) -> list[str]:
    return [h.doc.id for h in hits]


def test_count_is_per_workspace(index: MemoryIndex, corpus: list[IndexDoc], ws_a: str, ws_b: str) -> None:
    assert index.count(ws_a) == len(corpus)
    assert index.count(ws_b) == 0


def test_bm25_puts_the_doc_with_the_distinctive_term_first(
    index: MemoryIndex, corpus: list[IndexDoc], ws_a: str
) -> None:
    result = index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="where did we go kayaking?"))

    assert _ids(result.text_hits)[0] in {"d-kayak", "d-sum"}
    assert set(_ids(result.text_hits)) >= {"d-kayak", "d-sum"}
    assert "d-garden" not in _ids(result.text_hits)
    scores = [h.score for h in result.text_hits]
    assert scores == sorted(scores, reverse=True)
    assert result.vector_hits == []

    result = index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="pesto"))
    assert _ids(result.text_hits) == ["d-pasta"]
    assert result.text_hits[0].doc == corpus[1]


def test_bm25_ranks_the_doc_richer_in_the_term_higher(index: MemoryIndex, ws_a: str) -> None:
    index.upsert(
        ws_a,
        [
            _doc(ws_a, "once", "the deployment of the service went fine and everyone went home early"),
            _doc(ws_a, "often", "deployment deployment: the deployment failed"),
            _doc(ws_a, "never", "lunch was soup"),
        ],
    )
    result = index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="deployment"))
    assert _ids(result.text_hits) == ["often", "once"]
    assert result.text_hits[0].score > result.text_hits[1].score


def test_text_matching_stems_words(index: MemoryIndex, corpus: list[IndexDoc], ws_a: str) -> None:
    result = index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="watered gardens"))
    assert _ids(result.text_hits)[0] == "d-garden"


@pytest.mark.parametrize(
    "text",
    [
        'kayaking" OR "pasta',
        "kayaking AND NOT pasta",
        "text:kayaking",
        "kayak* NEAR(fjord pasta)",
        "(kayaking",
        "kayaking; DROP TABLE docs; --",
        "'kayaking'",
        "^kayaking",
    ],
)
def test_query_syntax_in_user_text_is_just_text(
    index: MemoryIndex, corpus: list[IndexDoc], ws_a: str, text: str, request: pytest.FixtureRequest
) -> None:
    if isinstance(index, OpenSearchIndex) and text == "text:kayaking":
        # A gap this suite found and leaves open: the standard tokenizer (osmem-server's, after
        # OpenSearch's, which follows Unicode word breaking: ':' between letters joins them) makes
        # "text:kayaking" one term, which matches no document; FTS5 splits it. Strict: the day
        # the adapter splits it, this fails and the mark goes.
        request.applymarker(pytest.mark.xfail(strict=True, reason="'text:kayaking' is one OpenSearch term"))
    result = index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, text=text))
    assert "d-kayak" in _ids(result.text_hits)


@pytest.mark.parametrize("text", ["", "   ", "?!*()\"'", "-- ;", "_"])
def test_text_with_no_words_finds_nothing_and_is_no_error(
    index: MemoryIndex, corpus: list[IndexDoc], ws_a: str, text: str
) -> None:
    assert index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, text=text)).text_hits == []


@knn
def test_knn_returns_the_nearest_vector_first(index: MemoryIndex, corpus: list[IndexDoc], ws_a: str) -> None:
    query = unit_vector(1, tilt=0.3, towards=5)  # near "pasta", then the pasta fact
    result = index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, vector=query, k=3))

    assert _ids(result.vector_hits)[:2] == ["d-pasta", "d-fact"]
    assert len(result.vector_hits) == 3
    scores = [h.score for h in result.vector_hits]
    assert scores == sorted(scores, reverse=True)
    assert result.text_hits == []


@knn
def test_knn_score_is_cosine_similarity(index: MemoryIndex, corpus: list[IndexDoc], ws_a: str) -> None:
    result = index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, vector=unit_vector(2), k=2))
    assert result.vector_hits[0].doc.id == "d-garden"
    assert result.vector_hits[0].score == pytest.approx(1.0, abs=1e-3)
    # Orthogonal vectors are dissimilar: they score well below the match.
    assert result.vector_hits[1].score < 0.5


@knn
def test_one_search_returns_both_rankings(index: MemoryIndex, corpus: list[IndexDoc], ws_a: str) -> None:
    result = index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="pesto", vector=unit_vector(2), k=2))
    assert _ids(result.text_hits) == ["d-pasta"]
    assert _ids(result.vector_hits)[0] == "d-garden"


def test_k_caps_the_text_ranking(index: MemoryIndex, corpus: list[IndexDoc], ws_a: str) -> None:
    result = index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="the kayaking pasta dinner", k=2))
    assert len(result.text_hits) == 2


@knn
def test_k_caps_both_rankings(index: MemoryIndex, corpus: list[IndexDoc], ws_a: str) -> None:
    result = index.search(
        ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="the kayaking pasta dinner", vector=unit_vector(0), k=2)
    )
    assert len(result.text_hits) == 2
    assert len(result.vector_hits) == 2


@dataclass(frozen=True)
class FilterCase:
    """A filtered query, what it matches in the corpus, and the same query under another value."""

    query: IndexQuery
    matches: set[str]
    other: dict[str, object]  # the filter's other value, as a model_copy update
    field: str  # the IndexDoc field the filter reads
    other_values: set[object]  # what that field holds in every hit under the other value


FILTER_CASES = {
    "tier": FilterCase(
        IndexQuery(scope=WORKSPACE_WIDE, text="kayaking pasta dinner", k=10, tiers=["summary", "fact"]),
        {"d-sum", "d-fact"},
        {"tiers": ["message"]},
        "tier",
        {"message"},
    ),
    "session": FilterCase(
        IndexQuery(scope=WORKSPACE_WIDE, text="the budget meeting kayaking", k=10, session_id="s2"),
        {"d-meeting"},
        {"session_id": "s1"},
        "session_id",
        {"s1"},
    ),
}


@pytest.mark.parametrize("case", FILTER_CASES)
def test_a_filter_applies_to_the_text_path(
    index: MemoryIndex, corpus: list[IndexDoc], ws_a: str, case: str
) -> None:
    f = FILTER_CASES[case]
    assert set(_ids(index.search(ws_a, f.query).text_hits)) == f.matches
    others = index.search(ws_a, f.query.model_copy(update=f.other)).text_hits
    assert others
    assert {getattr(h.doc, f.field) for h in others} == f.other_values


@knn
@pytest.mark.parametrize("case", FILTER_CASES)
def test_a_filter_applies_to_both_paths(
    index: MemoryIndex, corpus: list[IndexDoc], ws_a: str, case: str
) -> None:
    f = FILTER_CASES[case]
    query = f.query.model_copy(update={"vector": unit_vector(0)})
    result = index.search(ws_a, query)

    assert set(_ids(result.text_hits)) == f.matches
    assert set(_ids(result.vector_hits)) == f.matches
    others = index.search(ws_a, query.model_copy(update=f.other))
    assert others.vector_hits
    assert {getattr(h.doc, f.field) for h in others.text_hits + others.vector_hits} == f.other_values


def _replace_kayak(index: MemoryIndex, ws: str) -> IndexDoc:
    replacement = _doc(ws, "d-kayak", "We went sailing on the lake", vector=unit_vector(6), tier="summary")
    index.upsert(ws, [replacement])
    return replacement


def test_upsert_replaces_a_doc_with_the_same_id(
    index: MemoryIndex, corpus: list[IndexDoc], ws_a: str
) -> None:
    replacement = _replace_kayak(index, ws_a)

    assert index.count(ws_a) == len(corpus)
    assert (
        index.search(
            ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="kayaking fjord", tiers=["message"])
        ).text_hits
        == []
    )
    (sailing,) = index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="sailing")).text_hits
    assert sailing.doc == replacement


@knn
def test_upsert_replaces_the_vector_too(index: MemoryIndex, corpus: list[IndexDoc], ws_a: str) -> None:
    replacement = _replace_kayak(index, ws_a)

    nearest = index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, vector=unit_vector(6), k=1)).vector_hits
    assert nearest[0].doc == replacement
    old_axis = index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, vector=unit_vector(0), k=10)).vector_hits
    (kayak,) = [h for h in old_axis if h.doc.id == "d-kayak"]
    assert kayak.score < 0.5


def _plain_and_vector_docs(index: MemoryIndex, ws: str) -> None:
    index.upsert(
        ws,
        [
            _doc(ws, "plain", "no embedding yet for this zeppelin"),
            _doc(ws, "v", "x", vector=unit_vector(0)),
        ],
    )


def test_a_doc_without_a_vector_is_found_by_text(index: MemoryIndex, ws_a: str) -> None:
    _plain_and_vector_docs(index, ws_a)
    assert _ids(index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="zeppelin")).text_hits) == ["plain"]


@knn
def test_a_doc_without_a_vector_is_no_vector_hit(index: MemoryIndex, ws_a: str) -> None:
    _plain_and_vector_docs(index, ws_a)
    assert _ids(
        index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, vector=unit_vector(0), k=10)).vector_hits
    ) == ["v"]


def test_delete_removes_from_the_text_path(index: MemoryIndex, corpus: list[IndexDoc], ws_a: str) -> None:
    index.delete(ws_a, ["d-pasta", "never-existed"])

    assert index.count(ws_a) == len(corpus) - 1
    assert index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="pesto")).text_hits == []
    # The other docs stay findable.
    assert _ids(index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="rice")).text_hits) == ["d-fact"]


@knn
def test_delete_removes_from_both_paths(index: MemoryIndex, corpus: list[IndexDoc], ws_a: str) -> None:
    index.delete(ws_a, ["d-pasta", "never-existed"])

    assert index.count(ws_a) == len(corpus) - 1
    assert index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="pesto")).text_hits == []
    vector_hits = index.search(
        ws_a, IndexQuery(scope=WORKSPACE_WIDE, vector=unit_vector(1), k=10)
    ).vector_hits
    assert "d-pasta" not in _ids(vector_hits)
    assert len(vector_hits) == len(corpus) - 1


ISOLATION_QUERY = IndexQuery(scope=WORKSPACE_WIDE, text="kayaking pasta garden budget", k=50)


def _check_isolation(index: MemoryIndex, query: IndexQuery, ws_a: str, ws_b: str, *, vectors: bool) -> None:
    empty = index.search(ws_b, query)
    assert empty.text_hits == [] and empty.vector_hits == []

    index.upsert(ws_b, [_doc(ws_b, "d-kayak", "kayaking in b", vector=unit_vector(0))])
    own = index.search(ws_b, query)
    assert [(h.doc.workspace_id, h.doc.text) for h in own.text_hits] == [(ws_b, "kayaking in b")]
    a = index.search(ws_a, query)
    assert a.text_hits
    assert all(h.doc.workspace_id == ws_a for h in a.text_hits)
    if vectors:
        assert [(h.doc.workspace_id, h.doc.text) for h in own.vector_hits] == [(ws_b, "kayaking in b")]
        assert a.vector_hits
        assert all(h.doc.workspace_id == ws_a for h in a.vector_hits)


def test_a_workspace_never_reads_another_workspaces_text(
    index: MemoryIndex, corpus: list[IndexDoc], ws_a: str, ws_b: str
) -> None:
    _check_isolation(index, ISOLATION_QUERY, ws_a, ws_b, vectors=False)


@knn
def test_a_workspace_never_reads_another_workspaces_index(
    index: MemoryIndex, corpus: list[IndexDoc], ws_a: str, ws_b: str
) -> None:
    query = ISOLATION_QUERY.model_copy(update={"vector": unit_vector(0)})
    _check_isolation(index, query, ws_a, ws_b, vectors=True)


def test_deleting_in_one_workspace_leaves_another_alone(
    index: MemoryIndex, corpus: list[IndexDoc], ws_a: str, ws_b: str
) -> None:
    index.delete(ws_b, [d.id for d in corpus])
    assert index.count(ws_a) == len(corpus)
    assert _ids(index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="pesto")).text_hits) == ["d-pasta"]


def test_a_doc_of_another_workspace_is_refused(index: MemoryIndex, ws_a: str, ws_b: str) -> None:
    with pytest.raises(ValueError):
        index.upsert(ws_a, [_doc(ws_b, "x", "intruder")])
    assert index.count(ws_a) == 0
    assert index.count(ws_b) == 0

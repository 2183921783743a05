"""MemoryIndex contract: BM25 and k-NN rankings, filters, replacement, deletion, isolation."""

from __future__ import annotations

import pytest

from shared.models import WORKSPACE_WIDE, IndexDoc, IndexHit, IndexQuery, MemoryTier

from .builders import at, unit_vector
from .factories import ContractBackend


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
def corpus(contract: ContractBackend, ws_a: str) -> list[IndexDoc]:
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
    contract.backend.index.upsert(ws_a, docs)
    return docs


def _ids(hits: list[IndexHit]) -> list[str]:
    return [h.doc.id for h in hits]


def test_count_is_per_workspace(
    contract: ContractBackend, corpus: list[IndexDoc], ws_a: str, ws_b: str
) -> None:
    assert contract.backend.index.count(ws_a) == len(corpus)
    assert contract.backend.index.count(ws_b) == 0


def test_bm25_puts_the_doc_with_the_distinctive_term_first(
    contract: ContractBackend, corpus: list[IndexDoc], ws_a: str
) -> None:
    result = contract.backend.index.search(
        ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="where did we go kayaking?")
    )

    assert _ids(result.text_hits)[0] in {"d-kayak", "d-sum"}
    assert set(_ids(result.text_hits)) >= {"d-kayak", "d-sum"}
    assert "d-garden" not in _ids(result.text_hits)
    scores = [h.score for h in result.text_hits]
    assert scores == sorted(scores, reverse=True)
    assert result.vector_hits == []

    result = contract.backend.index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="pesto"))
    assert _ids(result.text_hits) == ["d-pasta"]
    assert result.text_hits[0].doc == corpus[1]


def test_bm25_ranks_the_doc_richer_in_the_term_higher(contract: ContractBackend, ws_a: str) -> None:
    index = contract.backend.index
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


def test_text_matching_stems_words(contract: ContractBackend, corpus: list[IndexDoc], ws_a: str) -> None:
    result = contract.backend.index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="watered gardens"))
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
    contract: ContractBackend, corpus: list[IndexDoc], ws_a: str, text: str
) -> None:
    result = contract.backend.index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, text=text))
    assert "d-kayak" in _ids(result.text_hits)


@pytest.mark.parametrize("text", ["", "   ", "?!*()\"'", "-- ;", "_"])
def test_text_with_no_words_finds_nothing_and_is_no_error(
    contract: ContractBackend, corpus: list[IndexDoc], ws_a: str, text: str
) -> None:
    assert contract.backend.index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, text=text)).text_hits == []


def test_knn_returns_the_nearest_vector_first(
    contract: ContractBackend, corpus: list[IndexDoc], ws_a: str
) -> None:
    query = unit_vector(1, tilt=0.3, towards=5)  # near "pasta", then the pasta fact
    result = contract.backend.index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, vector=query, k=3))

    assert _ids(result.vector_hits)[:2] == ["d-pasta", "d-fact"]
    assert len(result.vector_hits) == 3
    scores = [h.score for h in result.vector_hits]
    assert scores == sorted(scores, reverse=True)
    assert result.text_hits == []


def test_knn_score_is_cosine_similarity(contract: ContractBackend, corpus: list[IndexDoc], ws_a: str) -> None:
    result = contract.backend.index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, vector=unit_vector(2), k=2))
    assert result.vector_hits[0].doc.id == "d-garden"
    assert result.vector_hits[0].score == pytest.approx(1.0, abs=1e-3)
    # Orthogonal vectors are dissimilar: they score well below the match.
    assert result.vector_hits[1].score < 0.5


def test_one_search_returns_both_rankings(
    contract: ContractBackend, corpus: list[IndexDoc], ws_a: str
) -> None:
    result = contract.backend.index.search(
        ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="pesto", vector=unit_vector(2), k=2)
    )
    assert _ids(result.text_hits) == ["d-pasta"]
    assert _ids(result.vector_hits)[0] == "d-garden"


def test_k_caps_both_rankings(contract: ContractBackend, corpus: list[IndexDoc], ws_a: str) -> None:
    result = contract.backend.index.search(
        ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="the kayaking pasta dinner", vector=unit_vector(0), k=2)
    )
    assert len(result.text_hits) == 2
    assert len(result.vector_hits) == 2


def test_tier_filter_applies_to_both_paths(
    contract: ContractBackend, corpus: list[IndexDoc], ws_a: str
) -> None:
    index = contract.backend.index
    query = IndexQuery(
        scope=WORKSPACE_WIDE,
        text="kayaking pasta dinner",
        vector=unit_vector(0),
        k=10,
        tiers=["summary", "fact"],
    )
    result = index.search(ws_a, query)

    assert set(_ids(result.text_hits)) == {"d-sum", "d-fact"}
    assert set(_ids(result.vector_hits)) == {"d-sum", "d-fact"}
    only_messages = index.search(ws_a, query.model_copy(update={"tiers": ["message"]}))
    assert {h.doc.tier for h in only_messages.text_hits + only_messages.vector_hits} == {"message"}


def test_session_filter_applies_to_both_paths(
    contract: ContractBackend, corpus: list[IndexDoc], ws_a: str
) -> None:
    query = IndexQuery(
        scope=WORKSPACE_WIDE, text="the budget meeting kayaking", vector=unit_vector(3), k=10, session_id="s2"
    )
    result = contract.backend.index.search(ws_a, query)

    assert _ids(result.text_hits) == ["d-meeting"]
    assert _ids(result.vector_hits) == ["d-meeting"]
    s1 = contract.backend.index.search(ws_a, query.model_copy(update={"session_id": "s1"}))
    assert "d-meeting" not in _ids(s1.text_hits) + _ids(s1.vector_hits)
    assert {h.doc.session_id for h in s1.text_hits + s1.vector_hits} == {"s1"}


def test_upsert_replaces_a_doc_with_the_same_id(
    contract: ContractBackend, corpus: list[IndexDoc], ws_a: str
) -> None:
    index = contract.backend.index
    replacement = _doc(ws_a, "d-kayak", "We went sailing on the lake", vector=unit_vector(6), tier="summary")
    index.upsert(ws_a, [replacement])

    assert index.count(ws_a) == len(corpus)
    assert (
        index.search(
            ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="kayaking fjord", tiers=["message"])
        ).text_hits
        == []
    )
    assert _ids(index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="sailing")).text_hits) == ["d-kayak"]
    nearest = index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, vector=unit_vector(6), k=1)).vector_hits
    assert nearest[0].doc == replacement
    old_axis = index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, vector=unit_vector(0), k=10)).vector_hits
    assert all(h.score < 0.5 for h in old_axis if h.doc.id == "d-kayak")


def test_a_doc_without_a_vector_is_found_by_text_only(contract: ContractBackend, ws_a: str) -> None:
    index = contract.backend.index
    index.upsert(
        ws_a,
        [
            _doc(ws_a, "plain", "no embedding yet for this zeppelin"),
            _doc(ws_a, "v", "x", vector=unit_vector(0)),
        ],
    )

    assert _ids(index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="zeppelin")).text_hits) == ["plain"]
    assert _ids(
        index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, vector=unit_vector(0), k=10)).vector_hits
    ) == ["v"]


def test_delete_removes_from_both_paths(contract: ContractBackend, corpus: list[IndexDoc], ws_a: str) -> None:
    index = contract.backend.index
    index.delete(ws_a, ["d-pasta", "never-existed"])

    assert index.count(ws_a) == len(corpus) - 1
    assert index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="pesto")).text_hits == []
    vector_hits = index.search(
        ws_a, IndexQuery(scope=WORKSPACE_WIDE, vector=unit_vector(1), k=10)
    ).vector_hits
    assert "d-pasta" not in _ids(vector_hits)
    assert len(vector_hits) == len(corpus) - 1


def test_a_workspace_never_reads_another_workspaces_index(
    contract: ContractBackend, corpus: list[IndexDoc], ws_a: str, ws_b: str
) -> None:
    index = contract.backend.index
    query = IndexQuery(scope=WORKSPACE_WIDE, text="kayaking pasta garden budget", vector=unit_vector(0), k=50)

    empty = index.search(ws_b, query)
    assert empty.text_hits == [] and empty.vector_hits == []

    index.upsert(ws_b, [_doc(ws_b, "d-kayak", "kayaking in b", vector=unit_vector(0))])
    own = index.search(ws_b, query)
    assert [(h.doc.workspace_id, h.doc.text) for h in own.text_hits] == [(ws_b, "kayaking in b")]
    assert [(h.doc.workspace_id, h.doc.text) for h in own.vector_hits] == [(ws_b, "kayaking in b")]
    assert all(h.doc.workspace_id == ws_a for h in index.search(ws_a, query).text_hits)
    assert all(h.doc.workspace_id == ws_a for h in index.search(ws_a, query).vector_hits)


def test_deleting_in_one_workspace_leaves_another_alone(
    contract: ContractBackend, corpus: list[IndexDoc], ws_a: str, ws_b: str
) -> None:
    index = contract.backend.index
    index.delete(ws_b, [d.id for d in corpus])
    assert index.count(ws_a) == len(corpus)
    assert _ids(index.search(ws_a, IndexQuery(scope=WORKSPACE_WIDE, text="pesto")).text_hits) == ["d-pasta"]


def test_a_doc_of_another_workspace_is_refused(contract: ContractBackend, ws_a: str, ws_b: str) -> None:
    with pytest.raises(ValueError):
        contract.backend.index.upsert(ws_a, [_doc(ws_b, "x", "intruder")])
    assert contract.backend.index.count(ws_a) == 0
    assert contract.backend.index.count(ws_b) == 0

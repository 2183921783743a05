"""shared.memory.fusion: weighted min-max and reciprocal rank fusion of BM25 and k-NN rankings."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from shared.memory.fusion import FusedHit, fuse
from shared.models import IndexDoc, IndexHit, IndexResult


def _hit(doc_id: str, score: float) -> IndexHit:
    return IndexHit(doc=IndexDoc(id=doc_id, workspace_id="w1", tier="message", text=doc_id), score=score)


def _result(text: Sequence[tuple[str, float]] = (), vector: Sequence[tuple[str, float]] = ()) -> IndexResult:
    return IndexResult(text_hits=[_hit(i, s) for i, s in text], vector_hits=[_hit(i, s) for i, s in vector])


def _scores(hits: list[FusedHit]) -> dict[str, float]:
    return {h.doc.id: h.score for h in hits}


# ---------------------------------------------------------------- min-max


def test_minmax_blends_normalised_scores_with_the_default_weights() -> None:
    result = _result(
        text=[("a", 12.0), ("b", 7.0), ("c", 2.0)],
        vector=[("b", 0.9), ("c", 0.7), ("d", 0.5)],
    )
    fused = fuse(result)

    # text: a=1, b=0.5, c=0; vector: b=1, c=0.5, d=0; fused = 0.3 text + 0.7 vector.
    assert _scores(fused) == pytest.approx({"b": 0.85, "c": 0.35, "a": 0.3, "d": 0.0})
    assert [h.doc.id for h in fused] == ["b", "c", "a", "d"]


def test_minmax_keeps_the_raw_scores_of_each_list() -> None:
    fused = fuse(_result(text=[("a", 12.0), ("b", 7.0)], vector=[("b", 0.9)]))
    by_id = {h.doc.id: h for h in fused}
    assert (by_id["a"].text_score, by_id["a"].vector_score) == (12.0, None)
    assert (by_id["b"].text_score, by_id["b"].vector_score) == (7.0, 0.9)


def test_custom_weights() -> None:
    fused = fuse(
        _result(text=[("a", 2.0), ("b", 1.0)], vector=[("b", 0.9), ("a", 0.1)]),
        text_weight=0.9,
        vector_weight=0.1,
    )
    assert _scores(fused) == pytest.approx({"a": 0.9, "b": 0.1})


@pytest.mark.parametrize("side", ["text", "vector"])
def test_with_one_list_missing_the_other_stands_alone_at_full_weight(side: str) -> None:
    hits = [("a", 10.0), ("b", 6.0), ("c", 2.0)]
    result = _result(text=hits) if side == "text" else _result(vector=hits)
    fused = fuse(result, min_score=0.3)

    # Not capped at the list's weight: a BM25-only fallback can still clear min_score.
    assert _scores(fused) == pytest.approx({"a": 1.0, "b": 0.5})


def test_a_single_hit_or_a_tie_counts_as_the_best_of_its_list() -> None:
    assert _scores(fuse(_result(text=[("a", 3.3)]))) == {"a": 1.0}
    assert _scores(fuse(_result(vector=[("a", 0.4), ("b", 0.4)]))) == {"a": 1.0, "b": 1.0}
    both = fuse(_result(text=[("a", 5.0)], vector=[("b", 0.2)]))
    assert _scores(both) == pytest.approx({"b": 0.7, "a": 0.3})


def test_min_score_drops_weak_hits() -> None:
    result = _result(text=[("a", 12.0), ("b", 7.0), ("c", 2.0)], vector=[("b", 0.9), ("c", 0.7), ("d", 0.5)])
    assert [h.doc.id for h in fuse(result, min_score=0.3)] == ["b", "c", "a"]
    assert [h.doc.id for h in fuse(result, min_score=0.5)] == ["b"]
    assert fuse(result, min_score=0.99) == []


def test_k_caps_the_result_after_ranking() -> None:
    result = _result(text=[(f"d{i}", float(i)) for i in range(20)])
    fused = fuse(result, k=3)
    assert [h.doc.id for h in fused] == ["d19", "d18", "d17"]


def test_a_doc_in_both_lists_appears_once() -> None:
    fused = fuse(_result(text=[("a", 1.0), ("b", 2.0)], vector=[("a", 0.3), ("b", 0.1)]))
    assert sorted(h.doc.id for h in fused) == ["a", "b"]


def test_duplicate_hits_in_one_list_are_merged_into_one_result() -> None:
    result = _result(text=[("a", 9.0), ("a", 1.0), ("b", 5.0)])
    fused = fuse(result)
    assert sorted(h.doc.id for h in fused) == ["a", "b"]
    # The raw score reported is the first (best) occurrence's.
    assert next(h for h in fused if h.doc.id == "a").text_score == 9.0


def test_equal_scores_are_ordered_by_id() -> None:
    fused = fuse(_result(text=[("z", 1.0), ("m", 1.0), ("a", 1.0)]))
    assert [h.doc.id for h in fused] == ["a", "m", "z"]


def test_nothing_in_nothing_out() -> None:
    assert fuse(IndexResult()) == []
    assert fuse(IndexResult(), method="rrf") == []


# ---------------------------------------------------------------- reciprocal rank fusion


def test_rrf_sums_weighted_reciprocal_ranks() -> None:
    result = _result(text=[("a", 50.0), ("b", 40.0)], vector=[("b", 0.99), ("c", 0.98)])
    fused = fuse(result, method="rrf", text_weight=1.0, vector_weight=1.0, rrf_k=60)

    assert _scores(fused) == pytest.approx({"a": 1 / 61, "b": 1 / 62 + 1 / 61, "c": 1 / 62})
    assert [h.doc.id for h in fused] == ["b", "a", "c"]


def test_rrf_ignores_score_magnitudes() -> None:
    close = _result(text=[("a", 1.01), ("b", 1.0)])
    far = _result(text=[("a", 1000.0), ("b", 0.001)])
    assert _scores(fuse(close, method="rrf")) == _scores(fuse(far, method="rrf"))


def test_rrf_uses_the_default_weights_and_k() -> None:
    fused = fuse(_result(text=[("a", 1.0)], vector=[("b", 1.0)]), method="rrf")
    assert _scores(fused) == pytest.approx({"b": 0.7 / 61, "a": 0.3 / 61})


def test_rrf_duplicates_do_not_take_a_rank() -> None:
    fused = fuse(_result(text=[("a", 3.0), ("a", 2.0), ("b", 1.0)]), method="rrf", text_weight=1.0)
    assert _scores(fused) == pytest.approx({"a": 1 / 61, "b": 1 / 62})


def test_rrf_min_score_and_k() -> None:
    result = _result(text=[(f"d{i}", float(100 - i)) for i in range(10)])
    fused = fuse(result, method="rrf", text_weight=1.0, k=4, min_score=1 / 63)
    assert [h.doc.id for h in fused] == ["d0", "d1", "d2"]

"""shared.memory.second_step: the proper names a second search adds, its Rocchio vector, how its
scores join the first's, and the score a message's neighbours lend it."""

from __future__ import annotations

import pytest

from shared.memory.fusion import FusedHit
from shared.memory.second_step import add_second, feedback_terms, feedback_vector, lend_to_neighbours
from shared.models import IndexDoc


def _hit(
    doc_id: str, score: float, *, seq: int | None = None, session: str = "s1", tier: str = "message"
) -> FusedHit:
    metadata = {"seq": str(seq)} if seq is not None else {}
    doc = IndexDoc(
        id=doc_id,
        workspace_id="w1",
        session_id=session,
        tier=tier,
        text=doc_id,
        metadata=metadata,  # type: ignore[arg-type]
    )
    return FusedHit(doc=doc, score=score, text_score=None, vector_score=None)


def _order(hits: list[FusedHit]) -> list[tuple[str, float]]:
    return [(h.doc.id, round(h.score, 6)) for h in hits]


# ---------------------------------------------------------------- feedback terms


def test_names_inside_a_sentence_are_terms_and_a_sentence_opening_word_is_not() -> None:
    texts = ["Thanks! This necklace is from my grandma in Sweden. Lovely, said Mel to Sweden's queen"]
    assert feedback_terms(texts, exclude={"mel"}, limit=5) == ["sweden"]


def test_terms_are_ranked_by_the_weight_of_the_hits_that_name_them() -> None:
    texts = ["we saw Oslo and Bergen", "then Bergen again", "and Tromso"]
    assert feedback_terms(texts, exclude=(), limit=2, weights=[1.0, 0.9, 0.1]) == ["bergen", "oslo"]
    assert feedback_terms(texts, exclude=(), limit=3, weights=[0.1, 0.1, 5.0]) == ["tromso", "bergen", "oslo"]


def test_the_question_words_stop_words_and_calendar_words_are_never_terms() -> None:
    texts = ["[1 pm on 8 May, 2023] we went to Paris in June with The Louvre on Monday"]
    assert feedback_terms(texts, exclude={"louvre", "the"}, limit=10) == ["paris"]
    assert feedback_terms(texts, exclude=(), limit=0) == []


# ---------------------------------------------------------------- Rocchio


def test_the_vector_moves_towards_the_mean_of_the_hits() -> None:
    moved = feedback_vector([2.0, 0.0], [[0.0, 3.0], [0.0, 1.0]], 0.5)
    assert moved == pytest.approx([1.0, 0.5])


def test_without_usable_hit_vectors_the_query_vector_stands() -> None:
    assert feedback_vector([0.6, 0.8], [], 0.5) == [0.6, 0.8]
    assert feedback_vector([0.6, 0.8], [[0.0, 0.0], [1.0, 0.0, 0.0]], 0.5) == [0.6, 0.8]


# ---------------------------------------------------------------- joining the second search


def test_the_second_search_adds_its_scaled_scores_and_brings_new_documents() -> None:
    first = [_hit("a", 1.0), _hit("b", 0.8), _hit("c", 0.5)]
    second = [_hit("c", 2.0), _hit("d", 1.0)]
    # scale = 0.6 x first best (1.0) / second best (2.0): c gains 0.6, d joins at 0.3.
    assert _order(add_second(first, second, 0.6)) == [("c", 1.1), ("a", 1.0), ("b", 0.8), ("d", 0.3)]


def test_an_empty_second_search_or_no_weight_changes_nothing() -> None:
    first = [_hit("a", 1.0), _hit("b", 0.5)]
    assert add_second(first, [], 0.5) == first
    assert add_second(first, [_hit("b", 1.0)], 0.0) == first


# ---------------------------------------------------------------- neighbours


def test_a_message_gains_a_share_of_its_best_neighbour() -> None:
    fused = [_hit("q", 1.0, seq=4), _hit("a", 0.6, seq=5), _hit("far", 0.7, seq=9), _hit("b", 0.2, seq=3)]
    out = lend_to_neighbours(fused, 0.5)
    # a (seq 5) and b (seq 3) sit beside q (1.0); q beside a (0.6) and b (0.2); far beside none.
    assert _order(out) == [("q", 1.3), ("a", 1.1), ("far", 0.7), ("b", 0.7)]  # ties keep their order


def test_neighbours_are_of_the_same_session_and_only_messages_lend_or_gain() -> None:
    fused = [
        _hit("q", 1.0, seq=4),
        _hit("summary", 0.9, seq=5, tier="summary"),
        _hit("other", 0.5, seq=5, session="s2"),
        _hit("noseq", 0.4),
    ]
    assert _order(lend_to_neighbours(fused, 0.5)) == _order(fused)
    assert lend_to_neighbours(fused, 0.0) == fused

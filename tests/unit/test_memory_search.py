"""shared.memory.search: hybrid search over the real embedded index, its fallbacks and its input checks.

The embedder is tests/support's HashingEmbedder (hashed trigrams: a real, deterministic vector
model, not a language model); failures are real ones: the local MiniLM pointed at a directory
without weights, and an index whose database is closed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from shared.adapters.embedded import Database, SqliteMemoryIndex, SqliteMemoryStore
from shared.adapters.embedded.identities import SqliteIdentityStore
from shared.errors import BadRequest
from shared.memory.embeddings.minilm import LocalMiniLM
from shared.memory.people import WorkspacePeople, people_of
from shared.memory.search import (
    AUTHOR_BOOST,
    CONTEXT_KEY,
    MAX_QUERY_BYTES,
    MemoryHit,
    MemorySearch,
    keyword_query,
    validate_query,
    without_names,
)
from shared.memory.writer import MemoryWriter
from shared.models import WORKSPACE_WIDE, Identity, IndexDoc, MemoryRecord
from tests.support.hashing_embedder import HashingEmbedder

WS = "ws-search"
T0 = datetime(2025, 5, 1, 9, 0, tzinfo=UTC)

CONVERSATION = [
    "We went kayaking on the fjord last summer, the water was freezing.",
    "Did you see any seals out there?",
    "Yes, two of them followed us for an hour.",
    "My favourite dinner is pasta with basil pesto.",
    "I planted tomatoes and basil in the garden this spring.",
    "The budget meeting moved to Thursday afternoon.",
]


def record(i: int, text: str, *, session_id: str = "s1", workspace_id: str = WS) -> MemoryRecord:
    return MemoryRecord(
        id=f"m{i}",
        workspace_id=workspace_id,
        session_id=session_id,
        role="user" if i % 2 == 0 else "assistant",
        text=text,
        seq=i,
        created_at=T0 + timedelta(minutes=i),
    )


@pytest.fixture
def stored(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, embedder: HashingEmbedder
) -> list[MemoryRecord]:
    records = [record(i, text) for i, text in enumerate(CONVERSATION)]
    MemoryWriter(index, embedder).write_messages(WS, records)
    memory.append_messages(WS, records)
    return records


def ids(hits: list[MemoryHit]) -> list[str]:
    return [h.id for h in hits]


# ---------------------------------------------------------------- answering


def test_hybrid_finds_the_record_and_says_it_was_hybrid(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, embedder: HashingEmbedder, stored: list[MemoryRecord]
) -> None:
    outcome = MemorySearch(index, memory, embedder).search(
        WS, "what do I like for dinner? pesto", scope=WORKSPACE_WIDE, k=3
    )

    assert outcome.mode == "hybrid"
    assert outcome.degraded is None
    assert outcome.hits[0].id == "m3"
    hit = outcome.hits[0]
    assert (hit.tier, hit.session_id, hit.created_at) == ("message", "s1", stored[3].created_at)
    # The hit is the record's own text; the neighbours that helped find it stay out of it.
    assert hit.text == CONVERSATION[3]
    assert CONTEXT_KEY not in hit.metadata
    assert hit.metadata["role"] == "assistant"
    scores = [h.score for h in outcome.hits]
    assert scores == sorted(scores, reverse=True)


def test_an_answer_is_found_by_the_words_of_the_question_before_it(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, embedder: HashingEmbedder, stored: list[MemoryRecord]
) -> None:
    # "Yes, two of them followed us" has no word of the query; the question before it has, and
    # it is found through it (as is every message within two of it), at a lower score.
    outcome = MemorySearch(index, memory, None).search(
        WS, "how many seals were there", scope=WORKSPACE_WIDE, k=10
    )
    found = ids(outcome.hits)
    assert found[0] == "m1"
    assert set(found) == {"m0", "m1", "m2", "m3"}
    assert outcome.hits[0].score > max(h.score for h in outcome.hits[1:])


@pytest.mark.parametrize("mode", ["bm25", "vector"])
def test_one_sided_modes_answer_as_asked(
    index: SqliteMemoryIndex,
    memory: SqliteMemoryStore,
    embedder: HashingEmbedder,
    stored: list[MemoryRecord],
    mode: str,
) -> None:
    outcome = MemorySearch(index, memory, embedder).search(
        WS, "budget meeting Thursday", scope=WORKSPACE_WIDE, k=2, mode=mode
    )  # type: ignore[arg-type]
    assert outcome.mode == mode
    assert outcome.hits[0].id == "m5"


def test_k_bounds_the_hits(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, embedder: HashingEmbedder, stored: list[MemoryRecord]
) -> None:
    outcome = MemorySearch(index, memory, embedder).search(
        WS, "the kayaks seals basil garden", scope=WORKSPACE_WIDE, k=2
    )
    assert len(outcome.hits) == 2
    assert len(set(ids(outcome.hits))) == 2


def test_both_fusion_methods_rank_the_obvious_match_first(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, embedder: HashingEmbedder, stored: list[MemoryRecord]
) -> None:
    for fusion in ("minmax", "rrf"):
        outcome = MemorySearch(index, memory, embedder, fusion=fusion).search(
            WS, "tomatoes in the garden", scope=WORKSPACE_WIDE
        )
        assert outcome.hits[0].id == "m4", fusion


def test_min_score_drops_weak_hits(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, embedder: HashingEmbedder, stored: list[MemoryRecord]
) -> None:
    everything = MemorySearch(index, memory, embedder).search(
        WS, "pasta pesto dinner", scope=WORKSPACE_WIDE, k=10
    )
    strict = MemorySearch(index, memory, embedder, min_score=0.5).search(
        WS, "pasta pesto dinner", scope=WORKSPACE_WIDE, k=10
    )

    assert len(strict.hits) < len(everything.hits)
    assert all(h.score >= 0.5 for h in strict.hits)
    assert strict.hits[0].id == everything.hits[0].id == "m3"


def test_tier_and_session_filters(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, embedder: HashingEmbedder, stored: list[MemoryRecord]
) -> None:
    writer = MemoryWriter(index, embedder)
    writer.write_messages(WS, [record(10, "Kayaking again next weekend?", session_id="s2")])
    writer.write_docs(
        WS, [IndexDoc(id="f1", workspace_id=WS, tier="fact", text="user likes kayaking", session_id=None)]
    )
    search = MemorySearch(index, memory, embedder)

    assert {h.id for h in search.search(WS, "kayaking", scope=WORKSPACE_WIDE, tiers=["fact"]).hits} == {"f1"}
    only_s2 = search.search(WS, "kayaking", scope=WORKSPACE_WIDE, session_id="s2").hits
    assert ids(only_s2) == ["m10"]
    everywhere = ids(search.search(WS, "kayaking", scope=WORKSPACE_WIDE, k=10).hits)
    assert {"m0", "m10", "f1"} <= set(everywhere)


def test_a_workspace_never_sees_another(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, embedder: HashingEmbedder, stored: list[MemoryRecord]
) -> None:
    assert (
        MemorySearch(index, memory, embedder)
        .search("ws-other", "kayaking fjord seals", scope=WORKSPACE_WIDE)
        .hits
        == []
    )


def test_chunks_of_a_long_record_come_back_as_one_hit(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, embedder: HashingEmbedder
) -> None:
    sentences = [f"Paragraph {i} talks about the quarterly report and its numbers." for i in range(80)]
    long = record(0, " ".join(sentences) + " The zeppelin finale closes the report.")
    result = MemoryWriter(index, embedder).write_messages(WS, [long])
    assert result.docs > 2  # chunked

    outcome = MemorySearch(index, memory, embedder).search(
        WS, "quarterly report numbers zeppelin", scope=WORKSPACE_WIDE, k=5
    )
    assert ids(outcome.hits) == ["m0"]


# ---------------------------------------------------------------- fallbacks


def test_without_an_embedder_it_is_bm25_and_says_why(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, stored: list[MemoryRecord]
) -> None:
    outcome = MemorySearch(index, memory, None).search(WS, "pesto", scope=WORKSPACE_WIDE)
    assert outcome.mode == "bm25"
    assert outcome.degraded == "no embedding model configured"
    assert outcome.hits[0].id == "m3"


def test_a_failing_embedder_falls_back_to_bm25(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, stored: list[MemoryRecord], tmp_path: Path
) -> None:
    broken = LocalMiniLM(tmp_path / "no-model-here")  # no weights: embed raises EmbeddingError
    for mode in ("hybrid", "vector"):
        outcome = MemorySearch(index, memory, broken).search(
            WS, "budget meeting", scope=WORKSPACE_WIDE, mode=mode
        )
        assert outcome.mode == "bm25"
        assert outcome.degraded is not None and "embedding model unavailable" in outcome.degraded
        assert outcome.hits[0].id == "m5"


def test_a_failing_index_falls_back_to_the_sessions_recent_messages(
    dbs: tuple[Database, Database],
    index: SqliteMemoryIndex,
    memory: SqliteMemoryStore,
    embedder: HashingEmbedder,
    stored: list[MemoryRecord],
) -> None:
    dbs[0].close()  # the index's database is gone: every search raises
    search = MemorySearch(index, memory, embedder)

    outcome = search.search(WS, "pesto", scope=WORKSPACE_WIDE, k=3, session_id="s1")
    assert outcome.mode == "recent"
    assert outcome.degraded is not None and "memory index unavailable" in outcome.degraded
    assert ids(outcome.hits) == ["m5", "m4", "m3"]  # newest first
    assert outcome.hits[0].text == CONVERSATION[5]

    no_session = search.search(WS, "pesto", scope=WORKSPACE_WIDE)
    assert (no_session.mode, no_session.hits) == ("recent", [])
    assert no_session.degraded is not None and "no session" in no_session.degraded

    facts_only = search.search(WS, "pesto", scope=WORKSPACE_WIDE, session_id="s1", tiers=["fact"])
    assert facts_only.hits == []


# ---------------------------------------------------------------- input


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("", "empty"),
        ("   \n\t ", "empty"),
        ("x" * (MAX_QUERY_BYTES + 1), "longer than 100 KB"),
        ("é" * (MAX_QUERY_BYTES // 2 + 1), "longer than 100 KB"),  # bytes, not characters
        ("kayak\x00", "control characters"),
        ("kayak\x1b[31m", "control characters"),
        ("kayak\x7f", "control characters"),
    ],
)
def test_bad_queries_are_refused_clearly(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, query: str, message: str
) -> None:
    with pytest.raises(BadRequest, match=message):
        MemorySearch(index, memory, None).search(WS, query, scope=WORKSPACE_WIDE)


def test_newlines_and_tabs_are_fine(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, stored: list[MemoryRecord]
) -> None:
    assert validate_query("  pasta\n\twith pesto ") == "pasta\n\twith pesto"
    assert (
        MemorySearch(index, memory, None).search(WS, "pasta\n\tpesto", scope=WORKSPACE_WIDE).hits[0].id
        == "m3"
    )


def test_k_must_be_positive(index: SqliteMemoryIndex, memory: SqliteMemoryStore) -> None:
    with pytest.raises(BadRequest):
        MemorySearch(index, memory, None).search(WS, "pesto", scope=WORKSPACE_WIDE, k=0)


def test_stop_words_leave_the_bm25_query_unless_nothing_else_is_left() -> None:
    assert keyword_query("When did we go to the fjord?") == "go fjord"
    assert keyword_query("who are you?") == "who are you"


# ---------------------------------------------------------------- authors

GROUP = [
    ("Alice Smith", "I painted the sunset by the lake."),
    ("Bob", "I painted the sunset by the lake, too."),
    ("Will", "My sunset painting hangs in the hall."),
]


@pytest.fixture
def group(index: SqliteMemoryIndex, memory: SqliteMemoryStore, embedder: HashingEmbedder) -> None:
    # A group session: three people, each record written by its author (MemoryRecord.author, as
    # the turn sets it from the channel's sender name). No context: each record stands alone.
    records = [
        record(2 * i, text).model_copy(update={"author": author}) for i, (author, text) in enumerate(GROUP)
    ]
    MemoryWriter(index, embedder, context_before=0, context_after=0).write_messages(WS, records)


@pytest.mark.parametrize("fusion", ["minmax", "rrf"])
def test_a_query_naming_an_author_ranks_their_own_words_higher(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, embedder: HashingEmbedder, group: None, fusion: str
) -> None:
    search = MemorySearch(index, memory, embedder, fusion=fusion)  # type: ignore[arg-type]
    unboosted = MemorySearch(index, memory, embedder, fusion=fusion, author_boost=0.0)  # type: ignore[arg-type]
    query = "when did Bob paint the sunset by the lake?"
    # Alice's words match the question a little better (they are shorter); Bob's are his own, and
    # he is who it asks about.
    assert ids(unboosted.search(WS, query, scope=WORKSPACE_WIDE, k=3).hits)[0] == "m0"
    hits = search.search(WS, query, scope=WORKSPACE_WIDE, k=3).hits
    assert ids(hits)[0] == "m2"
    assert hits[0].metadata["author"] == "Bob"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # Any word of a name, in any case, names its author: the bonus is a share of the best score.
    assert ids(search.search(WS, query.replace("Bob", "bob"), scope=WORKSPACE_WIDE, k=3).hits)[0] == "m2"
    query = "when did Smith paint the sunset by the lake?"
    plain, boosted = (
        unboosted.search(WS, query, scope=WORKSPACE_WIDE, k=3).hits,
        search.search(WS, query, scope=WORKSPACE_WIDE, k=3).hits,
    )
    assert (plain[0].id, boosted[0].id) == ("m0", "m0")
    assert boosted[0].score == pytest.approx(plain[0].score * (1 + AUTHOR_BOOST))
    assert [h.score for h in boosted[1:]] == [h.score for h in plain[1:]]


def test_a_name_that_is_a_stop_word_names_nobody(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, embedder: HashingEmbedder, group: None
) -> None:
    # "will" is a function word far more often than a person: the query is ranked as without it.
    query = "will the sunset painting hang in the hall?"
    boosted = MemorySearch(index, memory, embedder).search(WS, query, scope=WORKSPACE_WIDE, k=3).hits
    plain = (
        MemorySearch(index, memory, embedder, author_boost=0.0)
        .search(WS, query, scope=WORKSPACE_WIDE, k=3)
        .hits
    )
    assert [(h.id, h.score) for h in boosted] == [(h.id, h.score) for h in plain]


def test_the_author_boost_must_not_be_negative(index: SqliteMemoryIndex, memory: SqliteMemoryStore) -> None:
    with pytest.raises(ValueError, match="author_boost"):
        MemorySearch(index, memory, None, author_boost=-0.1)


# ---------------------------------------------------------------- people's names and the embedding


@pytest.mark.parametrize(
    "settings",
    [
        {"feedback_weight": -0.1},
        {"feedback_beta": -1.0},
        {"feedback_docs": 0},
        {"feedback_terms": -1},
        {"neighbour_weight": -0.5},
    ],
)
def test_second_step_settings_must_not_be_negative(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, settings: dict[str, float]
) -> None:
    with pytest.raises(ValueError, match="feedback and neighbour settings"):
        MemorySearch(index, memory, None, **settings)  # type: ignore[arg-type]


def test_names_are_left_out_with_their_possessive_and_nothing_else() -> None:
    names = frozenset({"caroline", "melanie", "smith"})
    assert without_names("What did Caroline research?", names) == "What did research?"
    assert without_names("Where is Melanie\u2019s grandma from?", names) == "Where is grandma from?"
    assert (
        without_names("When did CAROLINE and Bob meet Mr Smith's dog", names)
        == "When did and Bob meet Mr dog"
    )
    # A name inside another word is not a name; nothing but names keeps the query whole.
    assert without_names("Carolines caroliner", names) == "Carolines caroliner"
    assert without_names("Caroline's", names) == "Caroline's"
    assert without_names("anything", frozenset()) == "anything"


def test_the_workspace_people_are_the_display_names_of_its_identities(dbs: tuple[Database, Database]) -> None:
    identities = SqliteIdentityStore(dbs[1])
    now = [0.0]
    people = WorkspacePeople(identities, ttl_s=60.0, clock=lambda: now[0])

    def identity(workspace: str, user: str, name: str | None) -> Identity:
        return Identity(
            workspace_id=workspace, channel="web", channel_user_id=user, user_id=user, display_name=name
        )

    identities.create(identity(WS, "u1", "Ada Lovelace"))
    identities.create(identity(WS, "u2", None))
    identities.create(identity("ws-other", "u3", "Grace Hopper"))
    assert people(WS) == {"ada", "lovelace"}
    assert people("ws-other") == {"grace", "hopper"}

    identities.create(identity(WS, "u4", "Bob"))
    assert people(WS) == {"ada", "lovelace"}  # read once a minute
    now[0] = 61.0
    assert people(WS) == {"ada", "lovelace", "bob"}
    # The tools share one instance per identity store.
    assert people_of(identities) is people_of(identities)


def test_a_name_is_matched_as_an_author_not_embedded(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, embedder: HashingEmbedder
) -> None:
    records = [
        record(0, "Go Bob! Bob is great.").model_copy(update={"author": "Alice"}),
        record(2, "I paint sunsets.").model_copy(update={"author": "Bob"}),
    ]
    MemoryWriter(index, embedder, context_before=0, context_after=0).write_messages(WS, records)
    query = "what did Bob paint?"
    # With the name in the embedding, Alice's message about Bob is nearer; without it, Bob's own.
    plain = MemorySearch(index, memory, embedder, author_boost=0.0)
    assert (
        ids(plain.search(WS, query, scope=WORKSPACE_WIDE, k=2, mode="vector", tiers=["message"]).hits)[0]
        == "m0"
    )
    people = MemorySearch(
        index, memory, embedder, author_boost=0.0, people=lambda ws: frozenset({"bob", "alice"})
    )
    assert (
        ids(people.search(WS, query, scope=WORKSPACE_WIDE, k=2, mode="vector", tiers=["message"]).hits)[0]
        == "m2"
    )
    # Over facts and summaries too, a name is content (a fact's subject): it stays embedded.
    assert ids(people.search(WS, query, scope=WORKSPACE_WIDE, k=2, mode="vector").hits)[0] == "m0"
    assert (
        ids(
            people.search(WS, query, scope=WORKSPACE_WIDE, k=2, mode="vector", tiers=["message", "fact"]).hits
        )[0]
        == "m0"
    )


def test_people_that_cannot_be_read_leave_the_query_as_it_is(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, embedder: HashingEmbedder, stored: list[MemoryRecord]
) -> None:
    def broken(workspace_id: str) -> frozenset[str]:
        raise RuntimeError("identity store down")

    outcome = MemorySearch(index, memory, embedder, people=broken).search(
        WS, "budget meeting Thursday", scope=WORKSPACE_WIDE, k=2
    )
    assert outcome.mode == "hybrid" and outcome.degraded is None
    assert outcome.hits[0].id == "m5"

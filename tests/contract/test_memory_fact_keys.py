"""Fact-augmented keys and search units that point to their messages (shared.memory.fact_keys,
shared.memory.expand), on both adapter sets (the embedded index over a SQLite and a DynamoDB
memory store; OpenSearch has its own in tests/integration/test_fact_keys_osmem.py): a message is
found by the facts extracted from it, a fact that changes or goes leaves no text behind, scopes
still filter, and a summary or fact that ranks lends its score to its messages."""

from __future__ import annotations

import pytest

from shared.memory.fact_keys import attach_fact_keys, drop_fact_keys, keys_of
from shared.memory.facts import fact_index_doc
from shared.memory.scope import owner_scope, recall_scope
from shared.memory.search import FACT_IDS_KEY, FACTS_KEY, MemorySearch
from shared.memory.writer import MemoryWriter, summary_doc
from shared.models import WORKSPACE_WIDE, MemoryRecord, MemoryScope, RecallScope, Summary, Triple
from shared.ports import ReadsDocs
from tests.support.hashing_embedder import HashingEmbedder

from .builders import at
from .factories import ContractBackend

ADA = "ada"
CONVERSATION = "telegram.100"
TEXTS = [
    "I signed up for the pottery class",
    "Nice! When does it start?",
    "Next Tuesday evening",
    "Sounds relaxing",
    "I hope so, work has been busy",
    "Busy week for you then",
]


def _scope() -> MemoryScope:
    return owner_scope(CONVERSATION, [ADA], group=False)


def _ada() -> RecallScope:
    return recall_scope(
        "personal", session_id="s1", conversation=CONVERSATION, group=False, user_aliases=(ADA,)
    )


def _records(ws: str, session_id: str = "s1", texts: list[str] = TEXTS) -> list[MemoryRecord]:
    return [
        MemoryRecord(
            id=f"{session_id}-r{seq}",
            workspace_id=ws,
            session_id=session_id,
            role="user" if seq % 2 == 0 else "assistant",
            text=text,
            seq=seq,
            created_at=at(seq),
            user_id=ADA,
            scope=_scope(),
        )
        for seq, text in enumerate(texts)
    ]


def _fact(
    ws: str, obj: str, message_ids: list[str], *, fact_id: str = "f-hobby", session_id: str = "s1"
) -> Triple:
    return Triple(
        id=fact_id,
        workspace_id=ws,
        subject=ADA,
        predicate="hobby",
        object=obj,
        session_id=session_id,
        message_ids=message_ids,
        user_id=ADA,
        scope=_scope(),
        source="consolidation",
    )


class _World:
    def __init__(self, contract: ContractBackend, ws: str) -> None:
        self.backend = contract.backend
        self.ws = ws
        self.embedder = HashingEmbedder(64)
        self.writer = MemoryWriter(self.backend.index, self.embedder)

    def write(self, records: list[MemoryRecord]) -> None:
        self.backend.memory.append_messages(self.ws, records)
        self.writer.write_messages(self.ws, records)

    def attach(self, *facts: Triple):  # type: ignore[no-untyped-def]
        return attach_fact_keys(
            self.backend.index, self.backend.memory, self.embedder, self.ws, list(facts), writer=self.writer
        )

    def found(self, query: str, *, scope: RecallScope = WORKSPACE_WIDE, **search: object) -> list[str]:
        engine = MemorySearch(self.backend.index, self.backend.memory, self.embedder, **search)  # type: ignore[arg-type]
        outcome = engine.search(self.ws, query, scope=scope, k=10, tiers=["message"], mode="bm25")
        assert all(h.tier == "message" for h in outcome.hits)
        return [h.id for h in outcome.hits]


@pytest.fixture
def world(contract: ContractBackend, ws_a: str) -> _World:
    w = _World(contract, ws_a)
    w.write(_records(ws_a))
    return w


def test_a_message_is_found_by_the_fact_extracted_from_it(world: _World) -> None:
    assert world.found("ceramics workshop") == []
    result = world.attach(_fact(world.ws, "ceramics workshop", ["s1-r0"]))
    assert (result.records, result.pending, result.skipped) == (1, [], 0)
    assert world.found("ceramics workshop") == ["s1-r0"]
    # The document keeps its context and scope; the hit shows neither the context nor the facts.
    assert isinstance(world.backend.index, ReadsDocs)
    [doc] = world.backend.index.get_docs(world.ws, ["s1-r0"])
    assert doc.metadata[FACTS_KEY] == "ada hobby: ceramics workshop"
    assert doc.metadata["context"].startswith("Nice! When does it start?")
    assert doc.scope == _scope()
    engine = MemorySearch(world.backend.index, world.backend.memory, world.embedder)
    [hit] = engine.search(world.ws, "ceramics", scope=WORKSPACE_WIDE, tiers=["message"], mode="bm25").hits
    assert (
        FACTS_KEY not in hit.metadata and FACT_IDS_KEY not in hit.metadata and "context" not in hit.metadata
    )


def test_a_changed_fact_replaces_its_text_and_a_dropped_one_leaves_none(world: _World) -> None:
    world.attach(
        _fact(world.ws, "ceramics workshop", ["s1-r0"]), _fact(world.ws, "rowing", ["s1-r0"], fact_id="f2")
    )
    world.attach(_fact(world.ws, "glazing course", ["s1-r0"]))
    assert world.found("ceramics") == []
    assert world.found("glazing") == ["s1-r0"]
    assert isinstance(world.backend.index, ReadsDocs)
    [doc] = world.backend.index.get_docs(world.ws, ["s1-r0"])
    assert [k.id for k in keys_of(doc)] == ["f2", "f-hobby"]

    result = drop_fact_keys(
        world.backend.index,
        world.backend.memory,
        world.embedder,
        world.ws,
        gone=[_fact(world.ws, "glazing course", ["s1-r0"])],
        writer=world.writer,
    )
    assert result.records == 1
    assert world.found("glazing") == []
    assert world.found("rowing") == ["s1-r0"]
    assert world.found("pottery")[0] == "s1-r0"  # its own words still find it (its neighbours by context)


def test_a_document_that_holds_the_keys_already_is_not_written_again(world: _World) -> None:
    # Extraction attaches a fact every time it is found again (a refresh, a reinforcement): a
    # document that holds it as it is already costs a read, not a rewrite (nor an embedding).
    assert world.attach(_fact(world.ws, "ceramics workshop", ["s1-r0"])).records == 1
    again = world.attach(_fact(world.ws, "ceramics workshop", ["s1-r0"]))
    assert (again.records, again.docs, again.pending) == (0, 0, [])
    # The same fact with its text unchanged is no change for drop_fact_keys' `replaced` either
    same = drop_fact_keys(
        world.backend.index,
        world.backend.memory,
        world.embedder,
        world.ws,
        replaced=[_fact(world.ws, "ceramics workshop", ["s1-r0"])],
        writer=world.writer,
    )
    assert same.records == 0
    # A new value is
    changed = drop_fact_keys(
        world.backend.index,
        world.backend.memory,
        world.embedder,
        world.ws,
        replaced=[_fact(world.ws, "glazing course", ["s1-r0"])],
        writer=world.writer,
    )
    assert changed.records == 1 and world.found("glazing") == ["s1-r0"] and world.found("ceramics") == []


def test_pending_and_other_session_facts_are_not_attached(world: _World) -> None:
    result = world.attach(
        _fact(world.ws, "kayaking", ["s1-r9"], fact_id="f-later"),  # still in the window
        _fact(world.ws, "fencing", ["s1-r2"], fact_id="f-elsewhere", session_id="s2"),
    )
    assert result.pending == ["s1-r9"]
    assert result.skipped == 1 and result.records == 0
    assert world.found("fencing") == []


def test_the_scope_still_filters_a_message_found_by_its_fact(world: _World) -> None:
    world.attach(_fact(world.ws, "ceramics workshop", ["s1-r0"]))
    stranger = recall_scope(
        "personal", session_id="s9", conversation="telegram.999", group=False, user_aliases=("bob",)
    )
    assert world.found("ceramics", scope=stranger) == []
    assert world.found("ceramics", scope=_ada()) == ["s1-r0"]


def test_a_summary_that_ranks_brings_its_messages(world: _World) -> None:
    world.write(_records(world.ws, "s2", ["We talked about the kiln budget", "Fine"]))
    summary = Summary(
        id="sum-1",
        workspace_id=world.ws,
        session_id="s1",
        text="Ada booked an evening kiln session",
        first_seq=0,
        last_seq=3,
        start_at=at(0),
        end_at=at(3),
        scope=_scope(),
    )
    world.backend.memory.put_summary(summary)
    world.writer.write_docs(world.ws, [summary_doc(summary)])
    # Without summaries only the other session's kiln (its words, and its neighbour's context).
    assert set(world.found("kiln booked")) == {"s2-r0", "s2-r1"}
    expanding = {"summary_weight": 0.5, "summary_bring_in": True}
    found = set(world.found("kiln booked", **expanding))
    # The summary's span joins them, and nothing else of its session.
    assert found == {"s2-r0", "s2-r1", "s1-r0", "s1-r1", "s1-r2", "s1-r3"}
    # A stranger sees neither the summary nor its messages.
    stranger = recall_scope(
        "personal", session_id="s9", conversation="telegram.999", group=False, user_aliases=()
    )
    assert world.found("kiln booked", scope=stranger, **expanding) == []


def test_a_summary_brings_only_the_messages_the_scope_admits(world: _World) -> None:
    summary = Summary(
        id="sum-shared",
        workspace_id=world.ws,
        session_id="s1",
        text="A kiln was booked",
        first_seq=0,
        last_seq=5,
        start_at=at(0),
        end_at=at(5),
        scope=MemoryScope(shared=True),
    )
    world.backend.memory.put_summary(summary)
    world.writer.write_docs(world.ws, [summary_doc(summary)])
    bob = recall_scope(
        "personal", session_id="s9", conversation="telegram.999", group=False, user_aliases=("bob",)
    )
    assert world.found("kiln", scope=bob, summary_weight=0.5, summary_bring_in=True) == []
    assert len(world.found("kiln", scope=_ada(), summary_weight=0.5, summary_bring_in=True)) == 6


def test_a_fact_that_ranks_lends_its_score_to_its_message(world: _World) -> None:
    fact = _fact(world.ws, "stressful job", ["s1-r4"], fact_id="f-job")
    world.writer.write_docs(world.ws, [fact_index_doc(fact)])
    plain = world.found("busy stressful")
    assert plain[0] == "s1-r5"  # the shorter message matching "busy" ranks first on its own
    lent = world.found("busy stressful", fact_weight=1.0)
    assert lent[0] == "s1-r4" and set(lent) == set(plain)

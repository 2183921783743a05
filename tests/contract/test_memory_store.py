"""MemoryStore contract: Tier-1 messages, Tier-2 summaries, Tier-3 triples, workspace isolation."""

from __future__ import annotations

import pytest

from shared.errors import SigilError
from shared.models import WORKSPACE_WIDE, AssistantMessage, Summary, Triple, UserMessage

from .builders import at, record
from .factories import ContractBackend

# ---------------------------------------------------------------- Tier 1


def test_messages_round_trip_with_their_structured_message(contract: ContractBackend, ws_a: str) -> None:
    memory = contract.backend.memory
    records = [record(ws_a, "s1", seq) for seq in range(5)]
    memory.append_messages(ws_a, records)

    assert memory.get_messages(ws_a, "s1") == records
    kinds = {type(r.message).__name__ for r in memory.get_messages(ws_a, "s1")}
    assert kinds == {"UserMessage", "AssistantMessage", "ToolResultMessage"}


def test_messages_come_back_in_seq_order_whatever_the_append_order(
    contract: ContractBackend, ws_a: str
) -> None:
    memory = contract.backend.memory
    memory.append_messages(ws_a, [record(ws_a, "s1", seq) for seq in (3, 1, 4)])
    memory.append_messages(ws_a, [record(ws_a, "s1", seq) for seq in (0, 2)])

    assert [r.seq for r in memory.get_messages(ws_a, "s1")] == [0, 1, 2, 3, 4]
    assert [r.seq for r in memory.get_messages(ws_a, "s1", after_seq=1)] == [2, 3, 4]
    assert [r.seq for r in memory.get_messages(ws_a, "s1", after_seq=1, limit=2)] == [2, 3]
    assert memory.get_messages(ws_a, "s1", after_seq=4) == []


def test_appending_a_record_twice_stores_it_once(contract: ContractBackend, ws_a: str) -> None:
    memory = contract.backend.memory
    first = [record(ws_a, "s1", seq) for seq in range(3)]
    memory.append_messages(ws_a, first)
    memory.append_messages(ws_a, first)
    # A retried turn re-sends an overlapping batch.
    memory.append_messages(ws_a, [record(ws_a, "s1", seq) for seq in range(2, 5)])

    assert memory.count_messages(ws_a, "s1") == 5
    assert [r.id for r in memory.get_messages(ws_a, "s1")] == [f"r{seq}-s1" for seq in range(5)]


def test_recent_messages_are_the_newest_oldest_first(contract: ContractBackend, ws_a: str) -> None:
    memory = contract.backend.memory
    memory.append_messages(ws_a, [record(ws_a, "s1", seq) for seq in range(10)])

    assert [r.seq for r in memory.recent_messages(ws_a, "s1", limit=3)] == [7, 8, 9]
    assert len(memory.recent_messages(ws_a, "s1")) == 10
    assert memory.recent_messages(ws_a, "other") == []


def test_counts_and_reads_are_per_session(contract: ContractBackend, ws_a: str) -> None:
    memory = contract.backend.memory
    memory.append_messages(ws_a, [record(ws_a, "s1", seq) for seq in range(3)])
    memory.append_messages(ws_a, [record(ws_a, "s2", seq) for seq in range(2)])

    assert memory.count_messages(ws_a, "s1") == 3
    assert memory.count_messages(ws_a, "s2") == 2
    assert memory.count_messages(ws_a, "s3") == 0
    assert {r.session_id for r in memory.get_messages(ws_a, "s2")} == {"s2"}


def test_a_workspace_never_reads_another_workspaces_messages(
    contract: ContractBackend, ws_a: str, ws_b: str
) -> None:
    memory = contract.backend.memory
    memory.append_messages(ws_a, [record(ws_a, "s1", seq, text="a's secret") for seq in range(3)])

    assert memory.get_messages(ws_b, "s1") == []
    assert memory.recent_messages(ws_b, "s1") == []
    assert memory.count_messages(ws_b, "s1") == 0
    # The same ids in another workspace are other records.
    memory.append_messages(ws_b, [record(ws_b, "s1", 0, text="b's own")])
    assert [r.text for r in memory.get_messages(ws_b, "s1")] == ["b's own"]
    assert [r.text for r in memory.get_messages(ws_a, "s1")] == ["a's secret"] * 3


def test_a_record_of_another_workspace_is_refused(contract: ContractBackend, ws_a: str, ws_b: str) -> None:
    with pytest.raises((ValueError, SigilError)):
        contract.backend.memory.append_messages(ws_a, [record(ws_b, "s1", 0)])
    assert contract.backend.memory.count_messages(ws_a, "s1") == 0
    assert contract.backend.memory.count_messages(ws_b, "s1") == 0


# ---------------------------------------------------------------- Tier 2


def _summary(workspace_id: str, summary_id: str, start: float, end: float, session_id: str = "s1") -> Summary:
    return Summary(
        id=summary_id,
        workspace_id=workspace_id,
        session_id=session_id,
        text=f"summary {summary_id}",
        first_seq=int(start),
        last_seq=int(end),
        start_at=at(start),
        end_at=at(end),
        created_at=at(end + 1),
    )


def test_summaries_round_trip_oldest_first(contract: ContractBackend, ws_a: str) -> None:
    memory = contract.backend.memory
    late, early = _summary(ws_a, "late", 100, 150), _summary(ws_a, "early", 0, 50)
    memory.put_summary(late)
    memory.put_summary(early)

    assert memory.list_summaries(ws_a, scope=WORKSPACE_WIDE) == [early, late]


def test_summaries_overlapping_a_date_range(contract: ContractBackend, ws_a: str) -> None:
    memory = contract.backend.memory
    for sid, start, end in [("jan", 0, 50), ("feb", 60, 110), ("mar", 120, 170), ("apr", 180, 230)]:
        memory.put_summary(_summary(ws_a, sid, start, end))

    def ids(**kwargs: object) -> list[str]:
        return [s.id for s in memory.list_summaries(ws_a, **kwargs, scope=WORKSPACE_WIDE)]  # type: ignore[arg-type]

    # Overlap, not containment: ranges cutting through a summary still return it.
    assert ids(start=at(100), end=at(130)) == ["feb", "mar"]
    assert ids(start=at(55), end=at(58)) == []
    assert ids(start=at(170)) == ["mar", "apr"]
    assert ids(end=at(60)) == ["jan", "feb"]
    # Range edges are inclusive.
    assert ids(start=at(50), end=at(50)) == ["jan"]
    assert ids(limit=2) == ["jan", "feb"]


def test_summaries_by_session(contract: ContractBackend, ws_a: str) -> None:
    memory = contract.backend.memory
    memory.put_summary(_summary(ws_a, "one", 0, 10, session_id="s1"))
    memory.put_summary(_summary(ws_a, "two", 20, 30, session_id="s2"))
    memory.put_summary(_summary(ws_a, "three", 40, 50, session_id="s1"))

    assert [s.id for s in memory.list_summaries(ws_a, session_id="s1", scope=WORKSPACE_WIDE)] == [
        "one",
        "three",
    ]
    assert [
        s.id for s in memory.list_summaries(ws_a, session_id="s2", start=at(25), scope=WORKSPACE_WIDE)
    ] == ["two"]
    assert [s.id for s in memory.list_summaries(ws_a, scope=WORKSPACE_WIDE)] == ["one", "two", "three"]


def test_putting_a_summary_again_replaces_it(contract: ContractBackend, ws_a: str) -> None:
    memory = contract.backend.memory
    memory.put_summary(_summary(ws_a, "one", 0, 10))
    revised = _summary(ws_a, "one", 0, 10).model_copy(update={"text": "revised"})
    memory.put_summary(revised)

    assert memory.list_summaries(ws_a, scope=WORKSPACE_WIDE) == [revised]


def test_a_workspace_never_reads_another_workspaces_summaries(
    contract: ContractBackend, ws_a: str, ws_b: str
) -> None:
    memory = contract.backend.memory
    memory.put_summary(_summary(ws_a, "one", 0, 10))
    assert memory.list_summaries(ws_b, scope=WORKSPACE_WIDE) == []
    assert memory.list_summaries(ws_b, session_id="s1", start=at(0), end=at(10), scope=WORKSPACE_WIDE) == []


# ---------------------------------------------------------------- Tier 3


def _triple(
    workspace_id: str, triple_id: str, subject: str, predicate: str, obj: str, **kw: object
) -> Triple:
    return Triple.model_validate(
        {
            "id": triple_id,
            "workspace_id": workspace_id,
            "subject": subject,
            "predicate": predicate,
            "object": obj,
            "session_id": "s1",
            "message_ids": ["m1", "m2"],
            "confidence": 0.8,
            "created_at": at(0),
            "updated_at": at(1),
            **kw,
        }
    )


def test_triples_by_subject_and_by_object(contract: ContractBackend, ws_a: str) -> None:
    memory = contract.backend.memory
    lives = _triple(ws_a, "t1", "Ada", "lives in", "London")
    works = _triple(ws_a, "t2", "Ada", "works at", "Analytical Engines Ltd")
    other = _triple(ws_a, "t3", "Charles", "lives in", "London")
    for t in (lives, works, other):
        memory.put_triple(t)

    by_subject = memory.triples_by_subject(ws_a, "Ada", scope=WORKSPACE_WIDE)
    assert {t.id for t in by_subject} == {"t1", "t2"}
    assert next(t for t in by_subject if t.id == "t1") == lives
    assert {t.id for t in memory.triples_by_object(ws_a, "London", scope=WORKSPACE_WIDE)} == {"t1", "t3"}
    assert memory.triples_by_subject(ws_a, "London", scope=WORKSPACE_WIDE) == []
    assert memory.triples_by_object(ws_a, "Nobody", scope=WORKSPACE_WIDE) == []
    assert len(memory.triples_by_subject(ws_a, "Ada", limit=1, scope=WORKSPACE_WIDE)) == 1


def test_triple_lookups_ignore_case_and_surrounding_space(contract: ContractBackend, ws_a: str) -> None:
    memory = contract.backend.memory
    memory.put_triple(_triple(ws_a, "t1", "Ada Lovelace", "born in", "London"))

    assert [t.id for t in memory.triples_by_subject(ws_a, "ada lovelace", scope=WORKSPACE_WIDE)] == ["t1"]
    assert [t.id for t in memory.triples_by_subject(ws_a, "  ADA LOVELACE ", scope=WORKSPACE_WIDE)] == ["t1"]
    assert [t.id for t in memory.triples_by_object(ws_a, "LONDON", scope=WORKSPACE_WIDE)] == ["t1"]
    # The stored triple keeps its original spelling.
    assert memory.triples_by_subject(ws_a, "ada lovelace", scope=WORKSPACE_WIDE)[0].subject == "Ada Lovelace"


def test_putting_a_triple_again_upserts_it_by_id(contract: ContractBackend, ws_a: str) -> None:
    memory = contract.backend.memory
    memory.put_triple(_triple(ws_a, "t1", "Ada", "lives in", "London"))
    moved = _triple(ws_a, "t1", "Ada", "lives in", "Paris", confidence=0.95, updated_at=at(10))
    memory.put_triple(moved)

    assert memory.triples_by_subject(ws_a, "Ada", scope=WORKSPACE_WIDE) == [moved]
    assert memory.triples_by_object(ws_a, "London", scope=WORKSPACE_WIDE) == []
    assert memory.triples_by_object(ws_a, "Paris", scope=WORKSPACE_WIDE) == [moved]


def test_replace_triple_writes_only_over_the_triple_as_read(contract: ContractBackend, ws_a: str) -> None:
    memory = contract.backend.memory
    memory.put_triple(_triple(ws_a, "t1", "Ada", "likes", "tea"))
    (read,) = memory.triples_by_subject(ws_a, "Ada", scope=WORKSPACE_WIDE)
    counted = read.model_copy(update={"access_count": 1, "last_accessed_at": at(5)})

    assert memory.replace_triple(read, counted)
    assert memory.triples_by_subject(ws_a, "Ada", scope=WORKSPACE_WIDE) == [counted]
    # The same stale copy again: the stored triple is `counted` now, so nothing is written.
    assert not memory.replace_triple(read, read.model_copy(update={"access_count": 1}))
    assert memory.triples_by_subject(ws_a, "Ada", scope=WORKSPACE_WIDE) == [counted]


def test_replace_triple_never_undoes_a_concurrent_merge_or_delete(
    contract: ContractBackend, ws_a: str
) -> None:
    memory = contract.backend.memory
    memory.put_triple(_triple(ws_a, "t1", "Ada", "likes", "tea"))
    (read,) = memory.triples_by_subject(ws_a, "Ada", scope=WORKSPACE_WIDE)
    # Maintenance merges the fact between a recall's read and its write.
    merged = read.model_copy(update={"status": "merged", "merged_into": "t0", "updated_at": at(6)})
    memory.put_triple(merged)

    assert not memory.replace_triple(read, read.model_copy(update={"access_count": 1}))
    assert (
        memory.triples_by_subject(ws_a, "Ada", scope=WORKSPACE_WIDE) == []
    )  # still merged: lookups see active only
    assert [t.status for t in memory.list_triples(ws_a, scope=WORKSPACE_WIDE)] == ["merged"]

    memory.delete_triple(ws_a, "t1")
    assert not memory.replace_triple(merged, merged.model_copy(update={"access_count": 1}))
    assert memory.list_triples(ws_a, scope=WORKSPACE_WIDE) == []


def test_replace_triple_refuses_another_workspace_or_id(
    contract: ContractBackend, ws_a: str, ws_b: str
) -> None:
    memory = contract.backend.memory
    original = _triple(ws_a, "t1", "Ada", "likes", "tea")
    memory.put_triple(original)
    with pytest.raises(ValueError, match="workspace"):
        memory.replace_triple(original, original.model_copy(update={"workspace_id": ws_b}))
    with pytest.raises(ValueError, match="another id"):
        memory.replace_triple(original, original.model_copy(update={"id": "t2"}))
    assert (
        memory.list_triples(ws_a, scope=WORKSPACE_WIDE) == [original]
        and memory.list_triples(ws_b, scope=WORKSPACE_WIDE) == []
    )


def test_delete_triple(contract: ContractBackend, ws_a: str, ws_b: str) -> None:
    memory = contract.backend.memory
    memory.put_triple(_triple(ws_a, "t1", "Ada", "lives in", "London"))
    memory.put_triple(_triple(ws_a, "t2", "Ada", "likes", "tea"))

    memory.delete_triple(ws_b, "t1")  # another workspace cannot delete it
    assert {t.id for t in memory.triples_by_subject(ws_a, "Ada", scope=WORKSPACE_WIDE)} == {"t1", "t2"}

    memory.delete_triple(ws_a, "t1")
    memory.delete_triple(ws_a, "never-existed")
    assert [t.id for t in memory.triples_by_subject(ws_a, "Ada", scope=WORKSPACE_WIDE)] == ["t2"]
    assert memory.triples_by_object(ws_a, "London", scope=WORKSPACE_WIDE) == []


def test_a_workspace_never_reads_another_workspaces_triples(
    contract: ContractBackend, ws_a: str, ws_b: str
) -> None:
    memory = contract.backend.memory
    memory.put_triple(_triple(ws_a, "t1", "Ada", "lives in", "London"))

    assert memory.triples_by_subject(ws_b, "Ada", scope=WORKSPACE_WIDE) == []
    assert memory.triples_by_object(ws_b, "London", scope=WORKSPACE_WIDE) == []
    memory.put_triple(_triple(ws_b, "t1", "Ada", "lives in", "Rome"))
    assert [t.object for t in memory.triples_by_subject(ws_a, "Ada", scope=WORKSPACE_WIDE)] == ["London"]
    assert [t.object for t in memory.triples_by_subject(ws_b, "Ada", scope=WORKSPACE_WIDE)] == ["Rome"]


def test_structured_messages_keep_their_kind(contract: ContractBackend, ws_a: str) -> None:
    memory = contract.backend.memory
    memory.append_messages(ws_a, [record(ws_a, "s1", 0), record(ws_a, "s1", 1)])
    first, second = memory.get_messages(ws_a, "s1")
    assert isinstance(first.message, UserMessage)
    assert isinstance(second.message, AssistantMessage)
    assert second.message.tool_calls[0].name == "get_weather"


# ---------------------------------------------------------------- lifecycle, paging, erasure


def test_lookups_by_subject_and_object_return_active_triples_only(
    contract: ContractBackend, ws_a: str
) -> None:
    memory = contract.backend.memory
    memory.put_triple(_triple(ws_a, "t1", "Ada", "likes", "tea"))
    memory.put_triple(_triple(ws_a, "t2", "Ada", "likes", "Tea.", status="merged", merged_into="t1"))
    memory.put_triple(_triple(ws_a, "t3", "Ada", "liked", "tea", status="pruned"))

    assert [t.id for t in memory.triples_by_subject(ws_a, "Ada", scope=WORKSPACE_WIDE)] == ["t1"]
    assert [t.id for t in memory.triples_by_object(ws_a, "tea", scope=WORKSPACE_WIDE)] == ["t1"]
    # Every status is still stored, for provenance and rollback.
    assert {t.id: t.status for t in memory.list_triples(ws_a, scope=WORKSPACE_WIDE)} == {
        "t1": "active",
        "t2": "merged",
        "t3": "pruned",
    }
    # A pruned triple restored to active is found again.
    restored = memory.list_triples(ws_a, after="t2", scope=WORKSPACE_WIDE)[0].model_copy(
        update={"status": "active"}
    )
    memory.put_triple(restored)
    assert {t.id for t in memory.triples_by_subject(ws_a, "Ada", scope=WORKSPACE_WIDE)} == {"t1", "t3"}


def test_list_triples_pages_by_id(contract: ContractBackend, ws_a: str, ws_b: str) -> None:
    memory = contract.backend.memory
    ids = [f"t{n:03d}" for n in range(23)]
    memory.put_triples(ws_a, [_triple(ws_a, i, f"subject {i}", "is", "x") for i in reversed(ids)])
    memory.put_triple(_triple(ws_b, "t000", "someone else", "is", "y"))

    seen: list[str] = []
    after: str | None = None
    while page := memory.list_triples(ws_a, after=after, limit=5, scope=WORKSPACE_WIDE):
        assert len(page) <= 5
        seen += [t.id for t in page]
        after = page[-1].id
    assert seen == ids
    assert memory.list_triples(ws_a, after="t021", scope=WORKSPACE_WIDE) == [
        memory.list_triples(ws_a, scope=WORKSPACE_WIDE)[-1]
    ]
    assert memory.list_triples(ws_a, limit=0, scope=WORKSPACE_WIDE) == []
    assert [t.subject for t in memory.list_triples(ws_b, scope=WORKSPACE_WIDE)] == ["someone else"]


def test_put_triples_upserts_many_and_refuses_another_workspaces(
    contract: ContractBackend, ws_a: str, ws_b: str
) -> None:
    memory = contract.backend.memory
    batch = [_triple(ws_a, f"t{n:02d}", "Ada", "said", f"thing {n}") for n in range(30)]
    memory.put_triples(ws_a, batch)
    memory.put_triples(ws_a, [])
    assert memory.list_triples(ws_a, limit=100, scope=WORKSPACE_WIDE) == batch

    changed = [t.model_copy(update={"relevance": 0.5, "status": "pruned"}) for t in batch[:3]]
    memory.put_triples(ws_a, changed)
    stored = {t.id: t for t in memory.list_triples(ws_a, limit=100, scope=WORKSPACE_WIDE)}
    assert [stored[t.id] for t in changed] == changed
    assert len(memory.triples_by_subject(ws_a, "Ada", limit=100, scope=WORKSPACE_WIDE)) == 27

    with pytest.raises((ValueError, SigilError)):
        memory.put_triples(ws_a, [_triple(ws_a, "fine", "a", "b", "c"), _triple(ws_b, "t99", "a", "b", "c")])
    assert memory.list_triples(ws_b, scope=WORKSPACE_WIDE) == []
    assert "fine" not in {t.id for t in memory.list_triples(ws_a, limit=100, scope=WORKSPACE_WIDE)}


def test_delete_triples(contract: ContractBackend, ws_a: str, ws_b: str) -> None:
    memory = contract.backend.memory
    memory.put_triples(ws_a, [_triple(ws_a, f"t{n}", "Ada", "said", f"thing {n}") for n in range(30)])
    memory.put_triple(_triple(ws_b, "t1", "Ada", "said", "b's"))

    memory.delete_triples(ws_a, [f"t{n}" for n in range(28)] + ["t1", "never-existed"])
    memory.delete_triples(ws_a, [])
    assert [t.id for t in memory.list_triples(ws_a, scope=WORKSPACE_WIDE)] == ["t28", "t29"]
    assert [t.object for t in memory.triples_by_subject(ws_b, "Ada", scope=WORKSPACE_WIDE)] == ["b's"]


def test_delete_summaries(contract: ContractBackend, ws_a: str, ws_b: str) -> None:
    memory = contract.backend.memory
    for sid, start in [("one", 0), ("two", 20), ("three", 40)]:
        memory.put_summary(_summary(ws_a, sid, start, start + 10))
    memory.put_summary(_summary(ws_b, "one", 0, 10))

    memory.delete_summaries(ws_a, ["one", "three", "never-existed"])
    memory.delete_summaries(ws_a, [])
    assert [s.id for s in memory.list_summaries(ws_a, scope=WORKSPACE_WIDE)] == ["two"]
    assert [s.id for s in memory.list_summaries(ws_a, session_id="s1", scope=WORKSPACE_WIDE)] == ["two"]
    assert [s.id for s in memory.list_summaries(ws_b, scope=WORKSPACE_WIDE)] == ["one"]


def test_delete_messages_of_a_session(contract: ContractBackend, ws_a: str, ws_b: str) -> None:
    memory = contract.backend.memory
    memory.append_messages(ws_a, [record(ws_a, "s1", seq) for seq in range(30)])
    memory.append_messages(ws_a, [record(ws_a, "s2", seq) for seq in range(3)])
    memory.append_messages(ws_b, [record(ws_b, "s1", seq) for seq in range(3)])

    assert memory.delete_messages(ws_a, "s1", ["r3-s1", "r4-s1", "r4-s2", "nope"]) == 2
    assert [r.seq for r in memory.get_messages(ws_a, "s1", limit=5)] == [0, 1, 2, 5, 6]
    assert memory.delete_messages(ws_a, "s1") == 28
    assert memory.count_messages(ws_a, "s1") == 0
    assert memory.recent_messages(ws_a, "s1") == []
    assert memory.delete_messages(ws_a, "s1") == 0
    assert memory.count_messages(ws_a, "s2") == 3
    assert memory.count_messages(ws_b, "s1") == 3

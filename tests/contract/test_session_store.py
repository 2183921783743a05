"""SessionStore contract: round trips, optimistic concurrency, the atomic commit (session, Tier-1
records, audit record and budget charge in one write), the session read with the budget's
counters, workspace isolation."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from shared.budgets import BudgetCharge, BudgetUsage, Counters, buckets
from shared.errors import ConcurrencyConflict
from shared.models import (
    AssistantMessage,
    AuditRecord,
    BudgetLimits,
    ScopeLimits,
    Session,
    ToolResultMessage,
    UserMessage,
)
from shared.ports import SessionStore

from .builders import record, session
from .factories import ContractBackend


def test_get_of_an_unknown_session_is_none(contract: ContractBackend, ws_a: str) -> None:
    assert contract.backend.sessions.get(ws_a, "nope") is None


def test_round_trip_keeps_every_field_and_message_kind(contract: ContractBackend, ws_a: str) -> None:
    store = contract.backend.sessions
    original = session(ws_a)

    stored = store.save(original, expected_version=0)

    assert stored.version == 1
    assert stored == original.model_copy(update={"version": 1})
    loaded = store.get(ws_a, original.id)
    assert loaded == stored
    assert loaded is not None
    kinds = [type(m) for m in loaded.active_messages]
    assert kinds == [UserMessage, AssistantMessage, ToolResultMessage, AssistantMessage, ToolResultMessage]
    assert loaded.active_messages[1].tool_calls[0].arguments == '{"city": "Zürich", "unit": "c"}'  # type: ignore[union-attr]
    assert loaded.created_at.tzinfo is not None


def test_save_does_not_change_the_callers_object(contract: ContractBackend, ws_a: str) -> None:
    original = session(ws_a)
    contract.backend.sessions.save(original, expected_version=0)
    assert original.version == 0


def test_each_save_moves_the_version_by_one(contract: ContractBackend, ws_a: str) -> None:
    store = contract.backend.sessions
    current = store.save(session(ws_a), expected_version=0)
    for expected in range(2, 5):
        current.summary = f"summary {expected}"
        current = store.save(current, expected_version=current.version)
        assert current.version == expected
    loaded = store.get(ws_a, "s1")
    assert loaded is not None
    assert (loaded.version, loaded.summary) == (4, "summary 4")


def test_creating_an_existing_session_conflicts(contract: ContractBackend, ws_a: str) -> None:
    store = contract.backend.sessions
    store.save(session(ws_a, summary="first"), expected_version=0)
    with pytest.raises(ConcurrencyConflict):
        store.save(session(ws_a, summary="second"), expected_version=0)
    loaded = store.get(ws_a, "s1")
    assert loaded is not None
    assert (loaded.version, loaded.summary) == (1, "first")


def test_of_two_writers_from_one_version_only_the_first_wins(contract: ContractBackend, ws_a: str) -> None:
    store = contract.backend.sessions
    store.save(session(ws_a), expected_version=0)
    one, two = store.get(ws_a, "s1"), store.get(ws_a, "s1")
    assert one is not None and two is not None

    one.summary = "writer one"
    store.save(one, expected_version=one.version)
    two.summary = "writer two"
    with pytest.raises(ConcurrencyConflict):
        store.save(two, expected_version=two.version)

    loaded = store.get(ws_a, "s1")
    assert loaded is not None
    assert (loaded.version, loaded.summary) == (2, "writer one")


def test_saving_at_a_version_never_stored_conflicts(contract: ContractBackend, ws_a: str) -> None:
    store = contract.backend.sessions
    with pytest.raises(ConcurrencyConflict):
        store.save(session(ws_a), expected_version=3)
    stored = store.save(session(ws_a), expected_version=0)
    with pytest.raises(ConcurrencyConflict):
        store.save(stored, expected_version=5)
    assert store.get(ws_a, "s1") == stored


def _race(store: SessionStore, workspace_id: str, expected: int, label: str, writers: int) -> list[int]:
    """`writers` threads save from version `expected` at the same moment; returns the winners."""
    barrier = threading.Barrier(writers)
    won: list[int] = []
    lost: list[int] = []
    lock = threading.Lock()

    def write(writer: int) -> None:
        candidate = session(workspace_id, summary=f"{label} writer {writer}", version=expected)
        barrier.wait(timeout=10)
        try:
            store.save(candidate, expected_version=expected)
        except ConcurrencyConflict:
            with lock:
                lost.append(writer)
        else:
            with lock:
                won.append(writer)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(won + lost) == list(range(writers)), "a writer neither won nor conflicted"
    return won


@pytest.mark.parametrize("start_version", [0, 1])
def test_racing_threads_from_one_version_exactly_one_wins(
    contract: ContractBackend, ws_a: str, start_version: int
) -> None:
    store = contract.backend.sessions
    if start_version:
        store.save(session(ws_a), expected_version=0)
    for round_no in range(5):
        expected = start_version + round_no
        won = _race(store, ws_a, expected, f"round {round_no}", writers=4)

        assert len(won) == 1, f"round {round_no}: winners {won}"
        loaded = store.get(ws_a, "s1")
        assert loaded is not None
        assert loaded.version == expected + 1
        assert loaded.summary == f"round {round_no} writer {won[0]}"


def test_list_sessions_is_scoped_and_limited(contract: ContractBackend, ws_a: str, ws_b: str) -> None:
    store = contract.backend.sessions
    for i in range(3):
        store.save(session(ws_a, f"a{i}"), expected_version=0)
    store.save(session(ws_b, "b0"), expected_version=0)

    assert {s.id for s in store.list_sessions(ws_a)} == {"a0", "a1", "a2"}
    assert all(s.workspace_id == ws_a for s in store.list_sessions(ws_a))
    assert [s.id for s in store.list_sessions(ws_b)] == ["b0"]
    assert len(store.list_sessions(ws_a, limit=2)) == 2


def test_delete_removes_only_that_workspaces_session(contract: ContractBackend, ws_a: str, ws_b: str) -> None:
    store = contract.backend.sessions
    store.save(session(ws_a), expected_version=0)
    store.save(session(ws_b), expected_version=0)

    store.delete(ws_b, "s1")
    store.delete(ws_b, "never-existed")

    assert store.get(ws_b, "s1") is None
    assert store.get(ws_a, "s1") is not None
    # A deleted session can be created again from scratch.
    assert store.save(session(ws_b), expected_version=0).version == 1


def test_a_workspace_never_reads_another_workspaces_session(
    contract: ContractBackend, ws_a: str, ws_b: str
) -> None:
    store = contract.backend.sessions
    store.save(session(ws_a, summary="secret of a"), expected_version=0)

    assert store.get(ws_b, "s1") is None
    assert store.list_sessions(ws_b) == []
    # The same session id in another workspace is another session, with its own versions.
    mine: Session = store.save(session(ws_b, summary="b's own"), expected_version=0)
    assert mine.version == 1
    loaded = store.get(ws_a, "s1")
    assert loaded is not None
    assert loaded.summary == "secret of a"


# ---------------------------------------------------------------- the atomic commit


def _audit(workspace_id: str, turn: str = "t1") -> AuditRecord:
    return AuditRecord(workspace_id=workspace_id, session_id="s1", turn_id=turn, outcome="ok")


def test_a_save_writes_its_archive_and_audit_record_with_the_session(
    contract: ContractBackend, ws_a: str
) -> None:
    backend = contract.backend
    archive = [record(ws_a, "s1", 0), record(ws_a, "s1", 1)]
    audit = _audit(ws_a)

    stored = backend.sessions.save(session(ws_a), expected_version=0, archive=archive, audit=audit)

    assert backend.sessions.get(ws_a, "s1") == stored
    assert backend.memory.get_messages(ws_a, "s1") == archive
    assert backend.audit.list_records(ws_a) == [audit]


def test_a_save_with_nothing_to_archive_or_audit_writes_only_the_session(
    contract: ContractBackend, ws_a: str
) -> None:
    backend = contract.backend
    stored = backend.sessions.save(session(ws_a), expected_version=0, archive=[], audit=None)
    assert backend.sessions.get(ws_a, "s1") == stored
    assert backend.memory.count_messages(ws_a, "s1") == 0
    assert backend.audit.list_records(ws_a) == []


@pytest.mark.parametrize("expected", [0, 5])
def test_a_conflicting_save_writes_none_of_it(contract: ContractBackend, ws_a: str, expected: int) -> None:
    backend = contract.backend
    first = backend.sessions.save(session(ws_a, summary="first"), expected_version=0)

    with pytest.raises(ConcurrencyConflict):
        backend.sessions.save(
            session(ws_a, summary="second"),
            expected_version=expected,
            archive=[record(ws_a, "s1", 0), record(ws_a, "s1", 1)],
            audit=_audit(ws_a),
        )

    assert backend.sessions.get(ws_a, "s1") == first
    assert backend.memory.count_messages(ws_a, "s1") == 0
    assert backend.audit.list_records(ws_a) == []


def test_records_stored_before_are_kept_and_the_save_still_lands(
    contract: ContractBackend, ws_a: str
) -> None:
    backend = contract.backend
    # Given Tier-1 record 0 and an audit record already stored (an earlier, interrupted commit)
    backend.memory.append_messages(ws_a, [record(ws_a, "s1", 0, text="as first stored")])
    audit = _audit(ws_a)
    backend.audit.append(audit)

    # When a save carries them again, with record 1 new
    stored = backend.sessions.save(
        session(ws_a),
        expected_version=0,
        archive=[record(ws_a, "s1", 0, text="written again"), record(ws_a, "s1", 1)],
        audit=audit,
    )

    # Then the session is saved, the first write of each record wins, and nothing is doubled
    assert backend.sessions.get(ws_a, "s1") == stored
    assert [r.text for r in backend.memory.get_messages(ws_a, "s1")] == [
        "as first stored",
        "message number 1",
    ]
    assert backend.audit.list_records(ws_a) == [audit]


def test_an_archive_larger_than_one_transaction_is_stored_whole(contract: ContractBackend, ws_a: str) -> None:
    backend = contract.backend
    archive = [record(ws_a, "s1", seq) for seq in range(150)]  # DynamoDB: 100 items a transaction

    stored = backend.sessions.save(session(ws_a), expected_version=0, archive=archive, audit=_audit(ws_a))

    assert backend.sessions.get(ws_a, "s1") == stored
    assert backend.memory.get_messages(ws_a, "s1", limit=200) == archive
    assert len(backend.audit.list_records(ws_a)) == 1


def test_a_save_carrying_another_workspaces_records_is_refused_whole(
    contract: ContractBackend, ws_a: str, ws_b: str
) -> None:
    backend = contract.backend
    with pytest.raises(ValueError):
        backend.sessions.save(session(ws_a), expected_version=0, archive=[record(ws_b, "s1", 0)])
    with pytest.raises(ValueError):
        backend.sessions.save(session(ws_a), expected_version=0, audit=_audit(ws_b))

    assert backend.sessions.get(ws_a, "s1") is None
    assert backend.memory.count_messages(ws_a, "s1") == backend.memory.count_messages(ws_b, "s1") == 0
    assert backend.audit.list_records(ws_a) == backend.audit.list_records(ws_b) == []


# ---------------------------------------------------------------- budget counters, read and charged with it

NOON = datetime(2026, 3, 17, 12, 0, tzinfo=UTC)
LIMITS = BudgetLimits(workspace=ScopeLimits(tokens_per_day=1000), user=ScopeLimits(tool_calls_per_day=5))


def _charge(workspace_id: str, tokens: int = 0, tool_calls: int = 0) -> BudgetCharge:
    return BudgetCharge(
        workspace_id=workspace_id,
        buckets=tuple(buckets("alice", LIMITS, NOON)),
        amounts=Counters(tokens=tokens, tool_calls=tool_calls),
        at=NOON,
    )


def _keys(user_id: str = "alice") -> list[str]:
    return [b.key for b in buckets(user_id, LIMITS, NOON)]


def test_get_with_budget_reads_the_session_and_the_counters_together(
    contract: ContractBackend, ws_a: str
) -> None:
    backend = contract.backend
    stored = backend.sessions.save(session(ws_a), expected_version=0)
    backend.budgets.charge(ws_a, "alice", BudgetUsage(tokens_in=300, tool_calls=2), None, NOON)
    workspace_day, _, user_day, _ = _keys()

    found, totals = backend.sessions.get_with_budget(
        ws_a, "s1", [workspace_day, user_day, "user#V#nobody#day#x"]
    )

    assert found == stored
    # The counters written, as BudgetStore reads them; one never written is missing
    assert totals == {
        workspace_day: Counters(tokens=300, tool_calls=2),
        user_day: Counters(tokens=300, tool_calls=2),
    }
    assert totals == backend.budgets.totals(ws_a, [workspace_day, user_day, "user#V#nobody#day#x"])
    # No session yet: None, and the counters all the same; no counters asked: a plain get
    assert backend.sessions.get_with_budget(ws_a, "new", [workspace_day]) == (
        None,
        {workspace_day: Counters(tokens=300, tool_calls=2)},
    )
    assert backend.sessions.get_with_budget(ws_a, "s1", []) == (stored, {})


def test_a_save_adds_its_charge_to_the_budget_counters(contract: ContractBackend, ws_a: str) -> None:
    backend = contract.backend
    first = backend.sessions.save(session(ws_a), expected_version=0, charge=_charge(ws_a, tokens=600))
    backend.sessions.save(
        first,
        expected_version=1,
        archive=[record(ws_a, "s1", 0)],
        audit=_audit(ws_a),
        charge=_charge(ws_a, tokens=400, tool_calls=5),
    )

    # Every bucket of the charge, limited or not, holds the sum; the budget store decides on it
    totals = backend.budgets.totals(ws_a, _keys())
    assert set(totals.values()) == {Counters(tokens=1000, tool_calls=5)}
    denied = backend.budgets.check(ws_a, "alice", LIMITS, NOON)
    assert denied.exhausted is not None and denied.exhausted.summary == "workspace/day/tokens 1000/1000"
    assert backend.memory.count_messages(ws_a, "s1") == 1
    assert len(backend.audit.list_records(ws_a)) == 1


def test_a_conflicting_save_charges_nothing(contract: ContractBackend, ws_a: str) -> None:
    backend = contract.backend
    backend.sessions.save(session(ws_a), expected_version=0)
    with pytest.raises(ConcurrencyConflict):
        backend.sessions.save(
            session(ws_a), expected_version=0, audit=_audit(ws_a), charge=_charge(ws_a, 500)
        )
    with pytest.raises(ConcurrencyConflict):
        backend.sessions.save(session(ws_a), expected_version=7, charge=_charge(ws_a, 500))
    assert backend.budgets.totals(ws_a, _keys()) == {}


def test_a_charge_rides_with_an_archive_too_large_for_one_transaction(
    contract: ContractBackend, ws_a: str
) -> None:
    backend = contract.backend
    archive = [record(ws_a, "s1", seq) for seq in range(97)]  # with the session, audit and 4 updates: 103
    backend.sessions.save(
        session(ws_a), expected_version=0, archive=archive, audit=_audit(ws_a), charge=_charge(ws_a, 7)
    )
    assert backend.memory.count_messages(ws_a, "s1") == 97
    assert set(backend.budgets.totals(ws_a, _keys()).values()) == {Counters(tokens=7)}


def test_a_charge_of_another_workspace_is_refused_whole(
    contract: ContractBackend, ws_a: str, ws_b: str
) -> None:
    backend = contract.backend
    with pytest.raises(ValueError):
        backend.sessions.save(session(ws_a), expected_version=0, charge=_charge(ws_b, 5))
    assert backend.sessions.get(ws_a, "s1") is None
    assert backend.budgets.totals(ws_a, _keys()) == backend.budgets.totals(ws_b, _keys()) == {}


def test_a_workspace_never_reads_another_workspaces_counters_with_its_session(
    contract: ContractBackend, ws_a: str, ws_b: str
) -> None:
    backend = contract.backend
    backend.sessions.save(session(ws_b), expected_version=0, charge=_charge(ws_b, 900))
    backend.sessions.save(session(ws_a), expected_version=0)
    found, totals = backend.sessions.get_with_budget(ws_a, "s1", _keys())
    assert found is not None and found.workspace_id == ws_a
    assert totals == {}

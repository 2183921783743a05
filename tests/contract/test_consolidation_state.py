"""ConsolidationState contract: leases (one holder at a time, expiring, owner-only release) and
checkpoints, on every adapter set.

Expiry is tested with the adapter's clock set by the test (both adapters read `clock` for "now"),
so no test sleeps.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from shared.ports import ConsolidationState

from .conftest import OpenBackend
from .factories import ContractBackend

T0 = 1_800_000_000.0


@contextmanager
def clock_at(state: ConsolidationState, now: list[float]) -> Iterator[None]:
    """Point the adapter's clock at `now[0]` for the block (both adapters take it as `clock`)."""
    adapter: Any = state
    original = adapter.clock
    adapter.clock = lambda: now[0]
    try:
        yield
    finally:
        adapter.clock = original


def test_a_lease_is_held_by_one_owner_until_released(contract: ContractBackend, ws_a: str) -> None:
    state = contract.backend.consolidation
    assert isinstance(state, ConsolidationState)
    assert state.acquire_lease(ws_a, "compact:s1", "run-1", 60)
    assert not state.acquire_lease(ws_a, "compact:s1", "run-2", 60)
    # The holder may take it again (a renewal); the other owner still may not.
    assert state.acquire_lease(ws_a, "compact:s1", "run-1", 60)
    assert not state.acquire_lease(ws_a, "compact:s1", "run-2", 60)
    state.release_lease(ws_a, "compact:s1", "run-1")
    assert state.acquire_lease(ws_a, "compact:s1", "run-2", 60)


def test_only_the_holder_releases_a_lease(contract: ContractBackend, ws_a: str) -> None:
    state = contract.backend.consolidation
    assert state.acquire_lease(ws_a, "catchup", "run-1", 60)
    state.release_lease(ws_a, "catchup", "run-2")  # not theirs: nothing happens
    assert not state.acquire_lease(ws_a, "catchup", "run-2", 60)
    state.release_lease(ws_a, "never-taken", "run-1")  # releasing nothing is fine
    state.release_lease(ws_a, "catchup", "run-1")
    state.release_lease(ws_a, "catchup", "run-1")  # twice too
    assert state.acquire_lease(ws_a, "catchup", "run-2", 60)


def test_an_expired_lease_can_be_taken_over(contract: ContractBackend, ws_a: str) -> None:
    state = contract.backend.consolidation
    now = [T0]
    with clock_at(state, now):
        assert state.acquire_lease(ws_a, "compact:s1", "killed-run", 30)
        now[0] = T0 + 29
        assert not state.acquire_lease(ws_a, "compact:s1", "next-run", 30)
        now[0] = T0 + 31
        assert state.acquire_lease(ws_a, "compact:s1", "next-run", 30)
        # The killed run, back from the dead, finds its lease gone and cannot end its successor's.
        state.release_lease(ws_a, "compact:s1", "killed-run")
        assert not state.acquire_lease(ws_a, "compact:s1", "killed-run", 30)


def test_a_renewal_extends_the_lease(contract: ContractBackend, ws_a: str) -> None:
    state = contract.backend.consolidation
    now = [T0]
    with clock_at(state, now):
        assert state.acquire_lease(ws_a, "compact:s1", "run-1", 30)
        now[0] = T0 + 20
        assert state.acquire_lease(ws_a, "compact:s1", "run-1", 30)  # now until T0 + 50
        now[0] = T0 + 40
        assert not state.acquire_lease(ws_a, "compact:s1", "run-2", 30)


def test_leases_are_per_workspace_and_name(contract: ContractBackend, ws_a: str, ws_b: str) -> None:
    state = contract.backend.consolidation
    assert state.acquire_lease(ws_a, "compact:s1", "run-1", 60)
    assert state.acquire_lease(ws_b, "compact:s1", "run-2", 60)
    assert state.acquire_lease(ws_a, "compact:s2", "run-3", 60)
    state.release_lease(ws_b, "compact:s1", "run-1")  # run-1 holds ws_a's, not ws_b's
    assert not state.acquire_lease(ws_b, "compact:s1", "run-1", 60)


def race(state: ConsolidationState, workspace_id: str, name: str, owners: list[str]) -> dict[str, bool]:
    """Every owner asks for lease `name` at once, each from its own thread; who got it."""
    barrier = threading.Barrier(len(owners))
    won: dict[str, bool] = {}
    errors: list[BaseException] = []

    def take(owner: str) -> None:
        try:
            barrier.wait(timeout=10)
            won[owner] = state.acquire_lease(workspace_id, name, owner, 60)
        except BaseException as exc:  # surfaced below, with the thread's own traceback
            errors.append(exc)

    threads = [threading.Thread(target=take, args=(owner,)) for owner in owners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    assert sorted(won) == sorted(owners)
    return won


def test_two_owners_racing_for_one_lease_one_wins(contract: ContractBackend, ws_a: str) -> None:
    state = contract.backend.consolidation
    owners = [f"run-{i}" for i in range(6)]
    for round_no in range(3):
        name = f"compact:race{round_no}"
        won = race(state, ws_a, name, owners)
        winners = [owner for owner, ok in won.items() if ok]
        assert len(winners) == 1, won
        # Whoever won holds it: every loser is still refused afterwards.
        for loser in set(owners) - set(winners):
            assert not state.acquire_lease(ws_a, name, loser, 60)


def test_checkpoints_are_kept_per_workspace_and_name(contract: ContractBackend, ws_a: str, ws_b: str) -> None:
    state = contract.backend.consolidation
    assert state.get_checkpoint(ws_a, "compact:s1") is None
    state.put_checkpoint(ws_a, "compact:s1", "49")
    state.put_checkpoint(ws_a, "compact:s2", "99")
    state.put_checkpoint(ws_b, "compact:s1", "149")
    assert state.get_checkpoint(ws_a, "compact:s1") == "49"
    state.put_checkpoint(ws_a, "compact:s1", "99")
    assert state.get_checkpoint(ws_a, "compact:s1") == "99"
    assert state.get_checkpoint(ws_a, "compact:s2") == "99"
    assert state.get_checkpoint(ws_b, "compact:s1") == "149"
    assert state.get_checkpoint(ws_b, "compact:s2") is None
    state.put_checkpoint(ws_a, "catchup", "")
    assert state.get_checkpoint(ws_a, "catchup") == ""


def test_checkpoints_and_leases_survive_a_restart(open_backend: OpenBackend, ws_a: str) -> None:
    with open_backend() as first:
        first.backend.consolidation.put_checkpoint(ws_a, "compact:s1", "49")
        assert first.backend.consolidation.acquire_lease(ws_a, "compact:s1", "run-1", 600)
    with open_backend() as again:
        state = again.backend.consolidation
        assert state.get_checkpoint(ws_a, "compact:s1") == "49"
        assert not state.acquire_lease(ws_a, "compact:s1", "run-2", 600)

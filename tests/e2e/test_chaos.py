"""A small run of bench/chaos.py on the embedded gateway: every fault once, nothing lost or doubled.

The bench itself (50 sessions x 20 messages, both backends) is `make bench`; this keeps its
harness and the guarantees it measures from rotting between runs. The AWS mode is left to the
bench: one poller takes minutes over the same traffic. Every wait is the bench's own, on a
condition (the queue empty, each outbox complete), with deadlines only as a safety net.
"""

from __future__ import annotations

from bench import chaos

SESSIONS, MESSAGES = len(chaos.ROWS), 15  # one session per row, each with its faults (a kill at 14)


def test_each_fault_once_on_the_embedded_gateway_loses_and_doubles_nothing() -> None:
    # A generous client timeout: on a loaded machine an ordinary stream must not time out too.
    args = chaos.parse(["--sessions", str(SESSIONS), "--messages", str(MESSAGES), "--client-timeout-s", "5"])
    run = chaos.run_backend("embedded", args)
    rows = {row.name: row for row in chaos.score(run)}

    assert run.finished and not run.problems, run.problems
    # Then spend decided nothing: the run's own sigil.yaml turned the workspace's budget off, as
    # the gateway stored it (issue 27: the default $10 a day refused the last turns of a long run)
    assert run.stored_budget == "null"
    # and the bench's own verdict, which fails its run, finds nothing
    assert chaos.failures(run, chaos.score(run)) == []
    # Then every message has exactly one reply, in the order sent, with its own text
    for row in rows.values():
        counts = (row.expected, row.received, row.duplicates, row.out_of_order, row.lost, row.wrong)
        assert counts == (MESSAGES, MESSAGES, 0, 0, 0, 0), (row.name, counts)
    # and only the poisoned message was dead-lettered, with the apology, once in the lane's table
    assert {name: row.dead for name, row in rows.items() if row.dead} == {"poison": 1}
    assert run.dead_letters_queue == 1
    # and every fault was really made: each model fault answered, the gateway killed mid-turn and
    # started again, a second writer's save landed under a turn, the late re-sends reached the
    # agent (which skipped them as already answered)
    assert all(row.injected > 0 for name, row in rows.items() if name != "none"), {
        name: row.injected for name, row in rows.items()
    }
    assert run.kills >= 1 and run.killed_turns >= 1
    # and the drip (a chunk a second, never a gap the per-chunk timeout sees) was cut by the call's
    # overall deadline, the client hanging up long before the drip would have ended
    assert run.drips_cut == run.injected["drip"] >= 1
    assert run.skipped_late == len([m for m in chaos.LATE_AT if m < MESSAGES])
    # and the conflicted session holds every turn and the second write: neither overwrote the other
    writes = len([m for m in chaos.FAULT_AT["conflict"] if m < MESSAGES])
    assert run.second_writes == writes
    assert run.conflict_versions == {MESSAGES + writes: 1}

"""A small run of `bench/chaos.py --tasks` (bench/chaos_tasks.py) on the embedded gateway: agents
delegating tasks while the process is killed and task model calls hang, fail and are cut under
them; every task's outcome told exactly once, none lost, no side effect repeated.

The bench itself (20 sessions x 3 tasks, both backends) is `make bench`; this keeps its harness and
the guarantees it measures from rotting. Every wait is the bench's own, on a condition (the queue
empty, each outbox complete), with deadlines only as a safety net.
"""

from __future__ import annotations

from bench import chaos, chaos_tasks

SESSIONS, TASKS = 2, 3  # six tasks: each row's fault at least once, two without one


def test_delegated_tasks_under_faults_are_told_once_and_repeat_no_side_effect() -> None:
    args = chaos.parse(
        ["--tasks", str(TASKS), "--sessions", str(SESSIONS), "--client-timeout-s", "5", "--hang-s", "12"]
    )
    run = chaos_tasks.run_backend("embedded", args)
    rows = {row.name: row for row in chaos_tasks.score(run)}

    assert run.finished and not run.problems, run.problems
    assert run.stored_budget == "null"
    # the bench's own verdict, which fails its run, finds nothing
    assert chaos_tasks.failures(run, list(rows.values())) == []
    # Then every task finished and was told exactly once, and each of its side effects ran once
    for row in rows.values():
        counts = (row.done, row.delivered, row.duplicates, row.lost, row.effects_repeated)
        assert counts == (row.tasks, row.tasks, 0, 0, 0), (row.name, counts)
        assert row.effects_executed == row.effects_expected == chaos_tasks.STEPS * row.tasks
    assert sum(row.tasks for row in rows.values()) == SESSIONS * TASKS
    # And every fault was really made under a task: the gateway killed mid-step and started again,
    # the hang, the 500s beyond the SDK's retries and the cut stream answered
    assert all(row.injected > 0 for name, row in rows.items() if name != "none"), {
        name: row.injected for name, row in rows.items()
    }
    assert run.kills >= 1 and run.killed_turns >= 1
    # And each session got the agent's first reply once, before its tasks' outcomes
    for s in range(SESSIONS):
        texts = [str(e["text"]) for e in sorted(run.replies[s], key=lambda e: int(e["seq"]))]
        assert texts[0] == "delegated" and texts.count("delegated") == 1, texts


def test_the_score_finds_a_doubled_outcome_a_lost_task_and_a_repeated_side_effect() -> None:
    """The verdict is not vacuous: what it must catch, it catches."""
    run = chaos_tasks.TaskRun("embedded", sessions=1, tasks=2)
    run.sent_at[0] = 0.0
    told = {"seq": 1, "text": "outcome s00t0", "created_at": "2026-11-29T06:00:00+00:00"}
    run.replies[0] = [
        {"seq": 0, "text": "delegated", "created_at": told["created_at"]},
        told,
        {**told, "seq": 2},
    ]
    run.statuses = {"s00t0": "done", "s00t1": "done"}
    run.facts = {"s00t0": [1, 2, 1], "s00t1": [1, 1, 1]}
    run.stored_budget = "null"
    rows = chaos_tasks.score(run)
    found = chaos_tasks.failures(run, rows)
    assert found == [
        "1 outcome(s) delivered twice or more",
        "1 task(s) lost (never told, or never made)",
        "1 side effect(s) repeated",
        "1 outcome(s) not delivered",
    ]


def test_a_task_the_sweep_ended_counts_as_told_and_as_not_done() -> None:
    """A task timed out by the end-of-run sweep: its "outcome failed <id>" reply is its telling,
    and the verdict still says it was not done."""
    run = chaos_tasks.TaskRun("embedded", sessions=1, tasks=1)
    run.sent_at[0] = 0.0
    at = "2026-11-29T06:00:00+00:00"
    run.replies[0] = [
        {"seq": 0, "text": "delegated", "created_at": at},
        {"seq": 1, "text": "outcome failed tsk-1", "created_at": at},
    ]
    run.statuses, run.task_ids = {"s00t0": "timed_out"}, {"s00t0": "tsk-1"}
    run.stored_budget = "null"
    rows = chaos_tasks.score(run)
    (row,) = [r for r in rows if r.tasks]
    assert (row.delivered, row.duplicates, row.lost, row.other_endings) == (1, 0, 0, 1)
    assert chaos_tasks.failures(run, rows) == ["1 task(s) not done"]

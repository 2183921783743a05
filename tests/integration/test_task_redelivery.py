"""A task's step redelivered after its process died between counting the invocation and what
follows it (found by `bench/chaos.py --tasks 3` on `sigil dev --aws`, where a killed container
takes a whole batch of steps with it): the task is neither stuck "running" nor left untold.

The step runner counts an invocation (Task.invocations, with the usage) before it ends the task
or submits its next step, and the lane redelivers the same item (the same `seq`) when the process
dies. Before, a redelivered step older than `invocations` was dropped, so a death in that window
left the task running with no step on its lane, forever; and a death between the task's end and
its outcome's submit was dropped the same way, so the user was never told.

Both backends (test_delegation_crash's fixture: embedded, and DynamoDB/SQS on moto); the lanes'
items are run by hand, as there, so the process can die at a chosen point.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.agent.turn import run_turn
from shared.backend import Backend
from shared.models import LaneItem
from shared.tasks import runner
from shared.tasks.items import step_item
from tests.integration import test_delegation_crash as crash
from tests.integration.test_delegation_crash import backend  # noqa: F401 - both backends


def queued(on: Backend, item: LaneItem) -> bool:
    """Whether `item` is on its lane already: embedded, a second submission is a duplicate; on
    SQS (which takes a duplicate and drops it) the queue is drained and looked through."""
    if not crash.DRAIN:
        return on.lanes.submit(item).status == "duplicate"
    assert item.task is not None
    return any(
        i.task is not None
        and (i.task.task_id, i.task.kind, i.task.seq) == (item.task.task_id, "step", item.task.seq)
        for i in crash.DRAIN[0](100)
    )


def dies_once(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """runner.<name> kills the process the first time it is called."""
    real = getattr(runner, name)
    calls = {"n": 0}

    def dying(*args: object, **kwargs: object) -> object:
        calls["n"] += 1
        if calls["n"] == 1:
            raise crash.Killed
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, name, dying)


def started(on: Backend, tmp_path: Path) -> tuple[object, LaneItem]:
    on.workspaces.put(crash.workspace())
    deps = crash.deps_for(on, tmp_path, crash.Script())
    run_turn(deps, crash.user_item("e1", "Pay my three bills"))
    task = crash.the_task(on)
    if crash.DRAIN:
        crash.DRAIN[0](100)  # the first step, which the test delivers itself
    return deps, step_item(task, 0)


def test_a_step_whose_process_died_after_counting_its_invocation_ends_the_task_on_redelivery(
    backend: Backend,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deps, first = started(backend, tmp_path)
    # Given the task's one invocation ran every step (three payments and finish_task) and was
    # counted, and its process died before the task ended
    dies_once(monkeypatch, "_finish")
    with pytest.raises(crash.Killed):
        run_turn(deps, first)  # type: ignore[arg-type]
    task = crash.the_task(backend)
    assert task.status == "running" and task.invocations == 1 and crash.Ledger.runs == ["p1", "p2", "p3"]
    # When the lane delivers that same step again
    run_turn(deps, first)  # type: ignore[arg-type]
    # Then the next step is on the task's lane, and it ends the task from its saved steps
    successor = step_item(task, 1)
    assert queued(backend, successor)
    run_turn(deps, successor)  # type: ignore[arg-type]
    done = crash.the_task(backend)
    assert done.status == "done" and done.result is not None and done.result.summary == "Paid three bills."
    # without paying again, and its outcome is on the parent's lane, once
    assert crash.Ledger.runs == ["p1", "p2", "p3"]
    assert crash.outcomes_submitted(backend, done) == 1


def test_a_step_whose_process_died_between_the_end_and_the_outcome_tells_it_on_redelivery(
    backend: Backend,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deps, first = started(backend, tmp_path)
    # Given the task ended "done" and its process died before the outcome was submitted
    dies_once(monkeypatch, "_tell")
    with pytest.raises(crash.Killed):
        run_turn(deps, first)  # type: ignore[arg-type]
    ended = crash.the_task(backend)
    assert ended.status == "done" and not ended.outcome_delivered
    if crash.DRAIN:
        assert not [i for i in crash.DRAIN[0](100) if i.task is not None and i.task.kind == "outcome"]
    # When the lane delivers that same step again, its outcome is submitted, once
    run_turn(deps, first)  # type: ignore[arg-type]
    if crash.DRAIN:  # the runner's own submission, read off the queue
        outcomes = [i for i in crash.DRAIN[0](100) if i.task is not None and i.task.kind == "outcome"]
        assert [i.inbound.event_id for i in outcomes] == [f"task.{ended.id}.outcome"]
    else:  # a second submission is a duplicate: the runner's came first
        assert crash.outcomes_submitted(backend, ended) == 1

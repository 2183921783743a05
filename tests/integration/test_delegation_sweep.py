"""The sweep of overdue tasks (shared.tasks.sweep, docs/delegation.md "The sweep"), on both
backends: a task whose step item died (dead-lettered without the runner's give-up) and a task
waiting for the user's answer are timed out past their deadline and the user is told once; a task
within its deadline is untouched; a step that saves the task while the sweep ends it keeps it.

The tasks are made by a real delegating turn (tests/integration/test_delegation_crash.py's script
and fixtures), so each is stored as the `delegate` tool stores it.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path
from typing import Any

from shared.agent.turn import run_turn
from shared.backend import Backend
from shared.clock import utcnow
from shared.models import ToolResultMessage
from shared.models.tasks import Task
from shared.providers.base import ChatRequest, ProviderEvent
from shared.tasks.items import outcome_item, step_item
from shared.tasks.runner import TASK_NOTE
from shared.tasks.sweep import GRACE, sweep_tasks
from tests.integration.test_delegation_crash import (
    Script,
    backend,
    deliver_until_done,
    deps_for,
    outcomes_submitted,
    replies,
    the_task,
    user_item,
    workspace,
)

__all__ = ["backend"]  # the fixture, both backends


def delegated(backend: Backend, tmp_path: Path, script: Script) -> Task:
    backend.workspaces.put(workspace())
    run_turn(deps_for(backend, tmp_path, script), user_item("e1", "Pay my three bills"))
    return the_task(backend)


def after_deadline(task: Task) -> Any:
    moment = task.deadline_at + GRACE + timedelta(seconds=1)
    return lambda: moment


def test_a_running_task_whose_step_was_lost_is_timed_out_and_told_once(
    backend: Backend, tmp_path: Path
) -> None:
    script = Script()
    task = delegated(backend, tmp_path, script)
    deps = deps_for(backend, tmp_path, script)
    # Given a task whose step was running when its item died with its batch (dead-lettered, so
    # the runner's give-up never ran): it is saved "running" and nothing is queued for it
    assert backend.tasks is not None
    running = backend.tasks.save(task.model_copy(update={"status": "running"}))
    # When the sweep runs past its deadline, twice
    first = sweep_tasks(backend, clock=after_deadline(running))
    second = sweep_tasks(backend, clock=after_deadline(running))
    # Then it is timed out, and its outcome was submitted by the first sweep only
    ended = the_task(backend)
    assert ended.status == "timed_out" and ended.error is not None and "sweep" in ended.error
    assert (first.timed_out, first.raced, second.timed_out) == (1, 0, 0)
    # And the parent's lane holds that one outcome (a second submission is dropped)
    assert outcomes_submitted(backend, ended) == 1
    # And the outcome's turn tells the user, once
    run_turn(deps, outcome_item(ended, pii=False))
    assert replies(backend)[-1].startswith(f"Told: [Task {task.id} (payer) ran out of time:")
    assert the_task(backend).outcome_delivered
    assert sweep_tasks(backend, clock=after_deadline(running)).timed_out == 0


def test_a_task_waiting_for_the_user_past_its_deadline_is_timed_out_and_told(
    backend: Backend, tmp_path: Path
) -> None:
    task = delegated(backend, tmp_path, Script())
    assert backend.tasks is not None
    waiting = backend.tasks.save(
        task.model_copy(update={"status": "waiting_user", "question": "Which bank account?"})
    )
    report = sweep_tasks(backend, clock=after_deadline(waiting))
    ended = the_task(backend)
    assert report.timed_out == 1 and ended.status == "timed_out"
    assert ended.error is not None and "waiting_user" in ended.error
    assert outcomes_submitted(backend, ended) == 1


def test_a_task_within_its_deadline_and_its_grace_is_untouched(backend: Backend, tmp_path: Path) -> None:
    task = delegated(backend, tmp_path, Script())
    # Now, and just inside the grace past its deadline: a step may be running it
    for moment in (utcnow(), task.deadline_at + GRACE - timedelta(seconds=1)):
        assert sweep_tasks(backend, clock=lambda m=moment: m).timed_out == 0
    assert the_task(backend) == task


class RacingStore:
    """The real task store, with a step saving each task between the sweep's read and its save."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def list_tasks(self, *args: Any, **kwargs: Any) -> list[Task]:
        found: list[Task] = self.store.list_tasks(*args, **kwargs)
        for task in found:
            self.store.save(task.model_copy(update={"status": "running", "updated_at": utcnow()}))
        return found


def test_a_step_saving_the_task_meanwhile_keeps_it_and_ends_it(backend: Backend, tmp_path: Path) -> None:
    script = Script()
    task = delegated(backend, tmp_path, script)
    # When a step saves the task after the sweep read it, before the sweep's save
    racing = dataclasses.replace(backend, tasks=RacingStore(backend.tasks))
    report = sweep_tasks(racing, clock=after_deadline(task))
    # Then the sweep's save lost on the task's version, and left the task to its step
    assert (report.timed_out, report.raced) == (0, 1)
    assert the_task(backend).status == "running"
    # And the step goes on and ends it
    deliver_until_done(deps_for(backend, tmp_path, script), backend)
    assert the_task(backend).status == "done"


def test_a_step_delivered_after_the_sweep_ended_its_task_keeps_that_ending(
    backend: Backend, tmp_path: Path
) -> None:
    script = Script()
    task = delegated(backend, tmp_path, script)
    deps = deps_for(backend, tmp_path, script)
    assert backend.tasks is not None
    # Given the sweep timed out the task while its step item was still on its lane
    backend.tasks.save(task.model_copy(update={"status": "running"}))
    assert sweep_tasks(backend, clock=after_deadline(task)).timed_out == 1
    # When a step of it runs all the same
    run_turn(deps, step_item(task, 0))
    # Then the task keeps the sweep's ending, told once
    ended = the_task(backend)
    assert ended.status == "timed_out"
    assert outcomes_submitted(backend, ended) == 1


class SweptMidStep(Script):
    """The model of test_delegation_crash, with the hourly sweep running (past the task's
    deadline) while the task's step waits for its last model call."""

    def __init__(self, backend: Backend) -> None:
        super().__init__()
        self.backend = backend

    def answer(self, request: ChatRequest) -> list[ProviderEvent]:
        results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
        if TASK_NOTE in request.system and len(results) == 3:
            task = the_task(self.backend)
            assert sweep_tasks(self.backend, clock=after_deadline(task)).timed_out == 1
        return super().answer(request)


def test_a_step_running_when_the_sweep_ends_its_task_keeps_the_sweeps_ending(
    backend: Backend, tmp_path: Path
) -> None:
    script = SweptMidStep(backend)
    delegated(backend, tmp_path, script)
    # When the task's step runs, and the sweep times the task out during its last model call
    deliver_until_done(deps_for(backend, tmp_path, script), backend)
    # Then the step, saving after it, keeps the sweep's ending (its finish_task is not a second
    # ending), with the step's usage counted, and the outcome told once
    ended = the_task(backend)
    assert ended.status == "timed_out" and ended.result is None
    assert ended.usage.model_calls == 4 and ended.invocations == 1
    assert outcomes_submitted(backend, ended) == 1

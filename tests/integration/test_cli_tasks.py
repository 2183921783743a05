"""`sigil tasks list|show|cancel` (docs/delegation.md#control) on the embedded data dir, and with
--stack on a stack on moto (its outputs as infra/stack.py's): the task and its parent turn's spend
side by side, JSON output, and a cancel that lands although the task's runner saves it meanwhile."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shared.adapters import build_backend
from shared.backend import Backend
from shared.cli import app
from shared.config import Settings
from shared.models import AuditRecord, new_workspace
from shared.models.tasks import Task, TaskResult, TaskUsage
from tests.contract.builders import lane_item
from tests.support import moto_aws
from tests.support.moto_stack import REGION, create_stack, outputs

runner = CliRunner()
WS = "team"


def a_task(
    task_id: str, session: str, *, turn: str = "turn-parent", workspace: str = WS, **fields: object
) -> Task:
    """A delegated task as the delegate tool stores it: the parent's inbound, turn and correlation id."""
    now = datetime.now(UTC)
    data: dict[str, object] = {
        "id": task_id,
        "workspace_id": workspace,
        "session_id": session,
        "role": "researcher",
        "brief": "Find what the team decided about the Lisbon offsite, with sources.",
        "parent": lane_item(workspace, session, f"ev-{task_id}", text="research it").inbound,
        "parent_turn_id": turn,
        "correlation_id": f"corr-{turn}",
        # 6.5 min ago: shown as "7 min" (rounded up to the minute), with half a minute to spare
        "created_at": now - timedelta(minutes=6, seconds=30),
        "updated_at": now,
        "deadline_at": now + timedelta(hours=1),
    }
    data.update(fields)
    return Task.model_validate(data)


def seed(backend: Backend) -> None:
    """Two tasks of session s1 (one running, one done) and one of s2, and the audit records of the
    delegating turn (two model calls' worth) and of an unrelated turn."""
    if backend.workspaces.get(WS) is None:
        backend.workspaces.put(new_workspace(WS))
    assert backend.tasks is not None
    usage = TaskUsage(model_calls=4, tool_calls=6, tokens_in=12_000, tokens_out=900, usd=Decimal("0.0123"))
    for task in (
        a_task("tsk-running", "s1", status="running", usage=usage, steps=10, invocations=2),
        a_task(
            "tsk-done",
            "s1",
            status="done",
            result=TaskResult(summary="The offsite moved to May.", confidence=0.8),
        ),
        a_task("tsk-other", "s2", turn="turn-other"),
    ):
        backend.tasks.create(task, max_per_session=3, max_per_workspace=20)
    for turn, cost in (("turn-parent", 0.0031), ("turn-other", 0.5)):
        backend.audit.append(
            AuditRecord(
                workspace_id=WS,
                session_id="s1",
                turn_id=turn,
                model="openai/gpt-4.1-mini",
                tokens_in=1000,
                tokens_out=50,
                cost_usd=cost,
                outcome="ok",
                correlation_id=f"corr-{turn}",
            )
        )


def list_show_cancel(args: list[str], backend_of: Opened) -> None:
    listed = runner.invoke(app, ["tasks", "list", "-w", WS, *args])
    assert listed.exit_code == 0, listed.output
    lines = listed.output.splitlines()
    assert len(lines) == 3
    running = next(line for line in lines if "tsk-running" in line)
    # session, id, role, status, age, spend, brief
    assert running.startswith("s1  tsk-running  researcher  running  7 min  $0.0123  Find what the team")
    mine = runner.invoke(app, ["tasks", "list", "-w", WS, "--session", "s1", "--active", *args])
    assert [line.split()[1] for line in mine.output.splitlines()] == ["tsk-running"]
    as_json = runner.invoke(app, ["tasks", "list", "-w", WS, "--session", "s1", "--json", *args])
    assert sorted(json.loads(line)["id"] for line in as_json.output.splitlines()) == [
        "tsk-done",
        "tsk-running",
    ]

    # show: the task's spend beside its parent turn's (that turn's audit record, not the other's)
    shown = runner.invoke(app, ["tasks", "show", "tsk-running", "-w", WS, *args])
    assert shown.exit_code == 0, shown.output
    assert "Task tsk-running: researcher, running" in shown.output
    assert "4 model calls, 6 tool calls, 12,000 tokens in, 900 out, est. $0.0123" in shown.output
    assert (
        "Spend: task est. $0.0123, parent turn turn-parent est. $0.0031, together est. $0.0154"
        in shown.output
    )
    detail = json.loads(
        runner.invoke(app, ["tasks", "show", "tsk-running", "-w", WS, "--json", *args]).output
    )
    assert detail["spend"] == {"task_usd": "0.0123", "parent_usd": "0.0031", "parent_records": 1}
    assert detail["parent_turn_id"] == "turn-parent" and detail["correlation_id"] == "corr-turn-parent"
    done = runner.invoke(app, ["tasks", "show", "tsk-done", "-w", WS, *args])
    assert "Result (80% confident): The offsite moved to May." in done.output
    missing = runner.invoke(app, ["tasks", "show", "tsk-nope", "-w", WS, *args])
    assert missing.exit_code == 1 and "no task tsk-nope in workspace team" in missing.output

    # cancel: the flag is stored; the runner reads it before the task's next step
    cancelled = runner.invoke(app, ["tasks", "cancel", "tsk-running", "-w", WS, *args])
    assert cancelled.exit_code == 0, cancelled.output
    assert "cancel requested for tsk-running" in cancelled.output
    with backend_of as backend:
        assert backend.tasks is not None
        stored = backend.tasks.get(WS, "tsk-running")
        assert stored is not None and stored.cancel_requested and stored.status == "running"
    listed = runner.invoke(app, ["tasks", "list", "-w", WS, "--session", "s1", *args])
    assert "running (cancel requested)" in listed.output
    ended = runner.invoke(app, ["tasks", "cancel", "tsk-done", "-w", WS, *args])
    assert ended.exit_code == 0 and "tsk-done has already ended (done)" in ended.output


class Opened:
    """The target's backend, opened for one look and closed again."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def __enter__(self) -> Backend:
        self.backend = build_backend(self.settings)
        return self.backend

    def __exit__(self, *exc: object) -> None:
        self.backend.close()


def test_list_show_and_cancel_on_the_data_dir(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "state")
    with Opened(settings) as backend:
        seed(backend)
    list_show_cancel(["--data-dir", str(settings.data_dir)], Opened(settings))


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[list[str]]:
    with moto_aws.persistent_mock(), moto_aws.moto_like_aws():
        stem = moto_aws.name_for(tmp_path)
        resources = moto_aws.provision(stem)
        create_stack(f"sigil-{stem}", outputs(resources))
        yield ["--stack", f"sigil-{stem}", "--region", REGION]


def test_list_show_and_cancel_on_a_stack(stack: list[str], tmp_path: Path) -> None:
    from shared.cli._app import target_settings

    settings = target_settings(tmp_path / "unused", stack[1], REGION)
    with Opened(settings) as backend:
        if backend.tasks is None:
            pytest.fail("the aws backend has no task store yet (h-taskstore's DynamoDB adapter)")
        seed(backend)
    list_show_cancel([*stack, "--data-dir", str(tmp_path / "unused")], Opened(settings))


def test_a_cancel_lands_although_the_runner_saves_the_task_first(tmp_path: Path) -> None:
    """The task's runner saves the record after each step; a cancel that read it before such a
    save meets StaleTask, reads it again and stores the flag over the runner's version."""
    from shared.agent import task_control
    from shared.errors import StaleTask

    with Opened(Settings(data_dir=tmp_path / "state")) as backend:
        seed(backend)
        store = backend.tasks
        assert store is not None
        saves = {"runner": 0}

        class RunnerFirst:
            """The real store; before the cancel's first save lands, the runner saves a step."""

            def get(self, workspace_id: str, task_id: str) -> Task | None:
                return store.get(workspace_id, task_id)

            def save(self, task: Task) -> Task:
                if saves["runner"] < 2:
                    current = store.get(task.workspace_id, task.id)
                    assert current is not None
                    store.save(current.model_copy(update={"steps": current.steps + 1}))
                    saves["runner"] += 1
                return store.save(task)

        task, asked = task_control.request_cancel(RunnerFirst(), WS, "tsk-running")  # type: ignore[arg-type]
        assert asked and saves["runner"] == 2
        stored = store.get(WS, "tsk-running")
        assert stored is not None
        # both writers' changes are kept: the runner's two steps and the cancel
        assert stored.cancel_requested and stored.steps == 12 and task.version == stored.version
        with pytest.raises(StaleTask):
            store.save(task.model_copy(update={"version": task.version - 1}))

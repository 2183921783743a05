"""`sigil tasks`: the delegated tasks of a workspace (docs/delegation.md#control), on the embedded
data dir, a deployed stack (--stack) or the `sigil dev --aws` running on the data dir.

    sigil tasks list [-w WS] [--session SID] [--active] [--json]
    sigil tasks show ID [-w WS] [--json]       the task, its spend and its parent turn's
    sigil tasks cancel ID [-w WS]              it stops before its next step
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from shared.cli._app import DataDir, Region, Stack, app, open_backend

if TYPE_CHECKING:
    from shared.backend import Backend
    from shared.ports import TaskStore

tasks_app = typer.Typer(
    help="Tasks the agent delegated to its researchers and workers: list them, show one, cancel one.",
    no_args_is_help=True,
)
app.add_typer(tasks_app, name="tasks")

WorkspaceOption = Annotated[str | None, typer.Option("--workspace", "-w", help="workspace id")]
AsJson = Annotated[bool, typer.Option("--json", help="JSON: one object per task")]
TaskId = Annotated[str, typer.Argument(help="the task's id, as list shows it")]


def _store(backend: Backend) -> TaskStore:
    if backend.tasks is None:
        typer.echo("delegated tasks are not set up on this backend (it has no task store)", err=True)
        raise typer.Exit(1)
    return backend.tasks


def _holds_tasks(backend: Backend, workspace: str) -> bool:
    return backend.tasks is not None and bool(backend.tasks.list_tasks(workspace, limit=1))


@tasks_app.command("list")
def tasks_list(
    workspace: WorkspaceOption = None,
    session: Annotated[str | None, typer.Option("--session", "-s", help="only this session's")] = None,
    active: Annotated[bool, typer.Option("--active", help="only tasks that have not ended")] = False,
    limit: Annotated[int, typer.Option(help="at most this many, newest first")] = 100,
    as_json: AsJson = False,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """The workspace's tasks, newest first: id, session, role, status, age, spend and brief."""
    from shared.agent import task_control
    from shared.clock import utcnow

    with open_backend(data_dir, workspace, stack, region, holds=_holds_tasks) as (backend, ws):
        found = _store(backend).list_tasks(
            ws, session_id=session, active=True if active else None, limit=limit
        )
    if as_json:
        for task in found:
            typer.echo(json.dumps(task_control.as_json(task)))
        return
    if not found:
        typer.echo(f"no tasks in workspace {ws}" + (f" for session {session}" if session else ""))
        return
    now = utcnow()
    for task in found:
        typer.echo(f"{task.session_id}  {task_control.line(task, now)}")


@tasks_app.command("show")
def tasks_show(
    task_id: TaskId,
    workspace: WorkspaceOption = None,
    as_json: AsJson = False,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """One task: status, brief, usage, result or error, and its spend beside its parent turn's
    (the delegating turn's cost, from the audit log by its turn and correlation id)."""
    from shared.agent import task_control
    from shared.clock import utcnow
    from shared.errors import NotFound

    with open_backend(data_dir, workspace, stack, region, holds=_holds_tasks) as (backend, ws):
        try:
            task = task_control.find_task(_store(backend), ws, task_id)
        except NotFound:
            typer.echo(f"no task {task_id} in workspace {ws}", err=True)
            raise typer.Exit(1) from None
        spent = task_control.spend(backend.audit, task)
    if as_json:
        typer.echo(json.dumps(task_control.as_json(task, spent)))
        return
    typer.echo(f"Session: {task.session_id}  (correlation id {task.correlation_id or '-'})")
    for text in task_control.detail(task, utcnow(), spent):
        typer.echo(text)


@tasks_app.command("cancel")
def tasks_cancel(
    task_id: TaskId,
    workspace: WorkspaceOption = None,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Ask a task to stop: it ends "cancelled" before its next step, and its session is told."""
    from shared.agent import task_control
    from shared.errors import NotFound

    with open_backend(data_dir, workspace, stack, region, holds=_holds_tasks) as (backend, ws):
        try:
            task, asked = task_control.request_cancel(_store(backend), ws, task_id)
        except NotFound:
            typer.echo(f"no task {task_id} in workspace {ws}", err=True)
            raise typer.Exit(1) from None
    if not asked:
        typer.echo(f"{task.id} has already ended ({task.status})")
        return
    typer.echo(f"cancel requested for {task.id}: it stops before its next step")

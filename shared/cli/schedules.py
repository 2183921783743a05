"""`sigil schedules`: the reminders and scheduled tasks users set (docs/schedules.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from shared.cli._app import DataDir, Region, Stack, app, open_backend

if TYPE_CHECKING:
    from shared.backend import Backend
    from shared.ports import Schedules

schedules_app = typer.Typer(
    help="Reminders and scheduled tasks the agent set for users: list them, cancel one.",
    no_args_is_help=True,
)
app.add_typer(schedules_app, name="schedules")

WorkspaceOption = Annotated[str | None, typer.Option("--workspace", "-w", help="workspace id")]


def _store(backend: Backend) -> Schedules:
    if backend.schedules is None:
        typer.echo("schedules are not set up on this stack (it has no ScheduleGroup output)", err=True)
        raise typer.Exit(1)
    return backend.schedules


@schedules_app.command("list")
def schedules_list(
    workspace: WorkspaceOption = None,
    user: Annotated[str | None, typer.Option("--user", "-u", help="only this Sigil user's")] = None,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """The workspace's live schedules: id, user, kind, when (in the user's zone) and text."""
    from shared.schedules.timing import describe

    with open_backend(data_dir, workspace, stack, region) as (backend, ws):
        found = _store(backend).list_schedules(ws, user_id=user)
    if not found:
        typer.echo(f"no schedules in workspace {ws}" + (f" for {user}" if user else ""))
        return
    for s in found:
        typer.echo(f"{s.id}  {s.user_id}  {s.kind}  {describe(s)}  {s.text[:60]}")


@schedules_app.command("cancel")
def schedules_cancel(
    schedule_id: Annotated[str, typer.Argument(help="the schedule's id (sch-...), as list shows it")],
    workspace: WorkspaceOption = None,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Stop a schedule: it fires no more."""
    with open_backend(data_dir, workspace, stack, region) as (backend, ws):
        cancelled = _store(backend).cancel(ws, schedule_id)
    if not cancelled:
        typer.echo(f"no schedule {schedule_id} in workspace {ws}", err=True)
        raise typer.Exit(1)
    typer.echo(f"cancelled {schedule_id}")

"""`sigil dlq`: the turns the lanes gave up on (docs/dead-letters.md): list, show, redrive.

Embedded by default (the data dir's queue.db); the aws backend with SIGIL_BACKEND=aws, or with
`--dlq-url`, reads the turns queue's FIFO dead-letter queue. What is printed includes the start
of each user's message: it is for the operator's terminal, and nothing here logs it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from shared.cli._app import (
    DataDir,
    Region,
    Stack,
    app,
    require_known_workspace,
    said_in_one_line,
    target_settings_and_file,
)
from shared.cli._sessions import LISTED, resolve_session

if TYPE_CHECKING:
    from shared.config import Settings
    from shared.configuration import SigilFile
    from shared.ports import DeadLetterEntry, DeadLetters, Requeue

dlq_app = typer.Typer(
    help="Dead-lettered turns: list them with their reason, show one, redrive a session's in order.",
    no_args_is_help=True,
)
app.add_typer(dlq_app, name="dlq")

QueueUrl = Annotated[
    str | None, typer.Option("--queue-url", help="aws: the turns queue (default: $SIGIL_QUEUE_URL)")
]
DlqUrl = Annotated[
    str | None,
    typer.Option(
        "--dlq-url",
        help="aws: its dead-letter queue, the stack's DeadLettersQueueUrl (default: "
        "$SIGIL_DEAD_LETTER_QUEUE_URL); implies the aws backend",
    ),
]


def dlq_settings(
    data_dir: Path | None,
    queue_url: str | None,
    dlq_url: str | None,
    stack: str | None = None,
    region: str | None = None,
) -> tuple[Settings, SigilFile | None]:
    """The one place the dlq commands get their settings: a deployed stack's (--stack, its
    DeadLettersQueueUrl output included), or the local data dir, or explicit queue URLs; and
    the configuration file read (it names workspaces the -w check knows)."""
    backend = "aws" if dlq_url else None
    return target_settings_and_file(
        data_dir, stack, region, backend=backend, queue_url=queue_url, dead_letter_queue_url=dlq_url
    )


@contextmanager
def open_dead_letters(
    settings: Settings, file: SigilFile | None = None, workspace: str | None = None
) -> Iterator[tuple[DeadLetters, Requeue]]:
    """The backend's dead letters, and the redrive policy over its session store; with
    `workspace` (a -w given), one the target knows (require_known_workspace; one holding dead
    letters counts)."""
    from shared.adapters import build_backend
    from shared.agent.redrive import requeue_policy
    from shared.errors import SigilError

    try:
        backend = build_backend(settings)
    except SigilError as exc:
        typer.echo(exc.message, err=True)
        raise typer.Exit(2) from exc
    try:
        if backend.dead_letters is None:
            typer.echo(
                "the aws backend needs the dead-letter queue: --dlq-url or SIGIL_DEAD_LETTER_QUEUE_URL "
                "(the stack's DeadLettersQueueUrl output)",
                err=True,
            )
            raise typer.Exit(2)
        dead = backend.dead_letters
        if workspace is not None:
            with said_in_one_line():
                require_known_workspace(
                    workspace,
                    settings,
                    file,
                    lambda: nullcontext(backend),
                    holds=lambda w: bool(dead.list_entries(w, limit=1)),
                )
        yield dead, requeue_policy(backend.sessions)
    finally:
        backend.close()


def _when(entry: DeadLetterEntry) -> str:
    at = entry.failed_at or entry.enqueued_at
    return at.strftime("%Y-%m-%d %H:%M:%S") if at is not None else "-"


def _one_line(text: str | None, width: int) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


@dlq_app.command("list")
def dlq_list(
    workspace: Annotated[str | None, typer.Option("--workspace", "-w", help="only this workspace")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="at most this many")] = 100,
    data_dir: DataDir = None,
    queue_url: QueueUrl = None,
    dlq_url: DlqUrl = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """The dead letters, by session, each session's in its original order."""
    settings, file = dlq_settings(data_dir, queue_url, dlq_url, stack, region)
    with open_dead_letters(settings, file, workspace) as (dead, _):
        entries = dead.list_entries(workspace, limit=limit)
    if not entries:
        typer.echo("no dead letters")
        return
    for e in entries:
        where = f"{e.workspace_id}/{e.session_id}" if e.session_id else e.group_id
        typer.echo(
            f"{e.id}  {where}  event {e.event_id or '-'}  {e.attempts} attempt(s)  {_when(e)}\n"
            f"    reason: {_one_line(e.reason, 100) or 'none recorded'}\n"
            f"    text: {_one_line(e.preview, 60)!r}"
        )
    typer.echo(f"{len(entries)} dead letter(s)")


@dlq_app.command("show")
def dlq_show(
    entry_id: Annotated[str, typer.Argument(metavar="ID", help="as `sigil dlq list` prints it")],
    data_dir: DataDir = None,
    queue_url: QueueUrl = None,
    dlq_url: DlqUrl = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """One dead letter, with its whole reason."""
    with open_dead_letters(dlq_settings(data_dir, queue_url, dlq_url, stack, region)[0]) as (dead, _):
        entry = dead.show(entry_id)
    if entry is None:
        typer.echo(f"no dead letter {entry_id!r}", err=True)
        raise typer.Exit(1)
    item = entry.item
    lines = {
        "id": entry.id,
        "lane": entry.group_id,
        "workspace": entry.workspace_id,
        "session": entry.session_id,
        "channel": entry.channel,
        "event": entry.event_id,
        "redrive of": item.redrive_of if item is not None else None,
        "attempts": entry.attempts,
        "queued at": entry.enqueued_at.isoformat() if entry.enqueued_at else None,
        "failed at": entry.failed_at.isoformat() if entry.failed_at else None,
        "reason": entry.reason or "none recorded",
        "text": f"{entry.preview!r} ({len(item.inbound.text)} characters)" if item is not None else None,
    }
    for name, value in lines.items():
        if value is not None:
            typer.echo(f"{name + ':':<11} {value}")


@dlq_app.command("redrive")
def dlq_redrive(
    ids: Annotated[
        list[str] | None, typer.Argument(metavar="[ID]...", help="dead letters to redrive")
    ] = None,
    session: Annotated[
        str | None, typer.Option("--session", "-s", help="every dead letter of this session, in order")
    ] = None,
    workspace: Annotated[
        str | None,
        typer.Option("--workspace", "-w", help="the session's workspace (default: the default one)"),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
    data_dir: DataDir = None,
    queue_url: QueueUrl = None,
    dlq_url: DlqUrl = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Put dead letters back on their lanes in original order; skip turns already committed."""
    if bool(ids) == (session is not None):
        raise typer.BadParameter("give either --session or dead-letter ids, not both and not neither")
    settings, file = dlq_settings(data_dir, queue_url, dlq_url, stack, region)
    target = (workspace or settings.default_workspace, session) if session is not None else None
    # -w names the session's workspace; with dead-letter ids it names nothing, so is not checked.
    with open_dead_letters(settings, file, workspace if session is not None else None) as (dead, requeue):
        if target is not None:
            # The name as typed (`demo` for `web.demo`), among the sessions with dead letters.
            with said_in_one_line():
                held = [e.session_id for e in dead.list_entries(target[0], limit=LISTED) if e.session_id]
                target = (target[0], resolve_session(target[1], held, target[0], missing_ok=True))
        if not yes:
            what = (
                f"every dead letter of session {target[1]} in {target[0]}"
                if target
                else f"{len(ids or [])} dead letter(s)"
            )
            if not typer.confirm(f"Redrive {what}?"):
                raise typer.Exit(1)
        report = dead.redrive(requeue, ids=ids or [], session=target)
    for o in report.outcomes:
        match o.outcome:
            case "redriven":
                typer.echo(f"redriven  {o.id}  as event {o.detail}")
            case "skipped":
                typer.echo(f"skipped   {o.id}  {o.detail}")
            case "failed":
                typer.echo(f"failed    {o.id}  {o.detail}")
            case "not_found":
                typer.echo(f"not found {o.id}")
    counts = {k: len(report.ids(k)) for k in ("redriven", "skipped", "failed", "not_found")}
    typer.echo(", ".join(f"{n} {k.replace('_', ' ')}" for k, n in counts.items()))
    if counts["failed"] or counts["not_found"]:
        raise typer.Exit(1)

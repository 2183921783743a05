"""`sigil memory`: derived memory with provenance; erase a user; roll back a run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from shared.cli._app import (
    DataDir,
    Region,
    Stack,
    app,
    open_backend,
)

if TYPE_CHECKING:
    from datetime import datetime

    from shared.backend import Backend
    from shared.models import Triple


memory_app = typer.Typer(
    help="A workspace's derived memory (facts, summaries) with provenance; erase a user; roll back a run.",
    no_args_is_help=True,
)
app.add_typer(memory_app, name="memory")

MemoryWorkspace = Annotated[
    str | None, typer.Option("--workspace", "-w", help="workspace id (default: $SIGIL_DEFAULT_WORKSPACE)")
]


def _holds_memory(backend: Backend, workspace: str) -> bool:
    """A workspace with facts or summaries is known to `sigil memory` (require_known_workspace)."""
    from shared.models import WORKSPACE_WIDE

    return bool(
        backend.memory.list_triples(workspace, scope=WORKSPACE_WIDE, limit=1)
        or backend.memory.list_summaries(workspace, scope=WORKSPACE_WIDE, limit=1)
    )


def _when(value: datetime) -> str:
    return f"{value:%Y-%m-%d %H:%M}"


@memory_app.command("list")
def memory_list(
    workspace: MemoryWorkspace = None,
    user: Annotated[
        str | None,
        typer.Option("--user", "-u", help="only this user's: their facts and their sessions' summaries"),
    ] = None,
    status: Annotated[
        str, typer.Option(help="active: facts recalled today; all: merged and pruned ones too")
    ] = "active",
    limit: Annotated[int, typer.Option(help="at most this many facts and this many summaries")] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per line")] = False,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """List facts (Tier 3) and summaries (Tier 2) with where they came from: session, messages,
    source, consolidation run, when, status and relevance."""
    from shared.memory.keys import normalize_key
    from shared.models import WORKSPACE_WIDE  # an admin's read: the whole workspace

    if status not in ("active", "all"):
        typer.echo("--status is active or all", err=True)
        raise typer.Exit(2)
    with open_backend(data_dir, workspace, stack, region, holds=_holds_memory) as (backend, ws):
        facts: list[Triple] = []
        after: str | None = None
        while len(facts) < limit and (
            page := backend.memory.list_triples(ws, scope=WORKSPACE_WIDE, after=after, limit=500)
        ):
            after = page[-1].id
            facts += [
                t
                for t in page
                if (status == "all" or t.status == "active")
                and (user is None or t.user_id == user or normalize_key(t.subject) == normalize_key(user))
            ]
        owned = (
            {s.id for s in backend.sessions.list_sessions(ws, limit=1_000_000) if s.user_id == user}
            if user is not None
            else set()
        )
        summaries = [
            s
            for s in backend.memory.list_summaries(ws, scope=WORKSPACE_WIDE, limit=1_000_000)
            if user is None or s.user_id == user or s.session_id in owned
        ]
    facts, summaries = facts[:limit], summaries[-limit:]
    if as_json:
        for t in facts:
            typer.echo(json.dumps({"tier": "fact", **t.model_dump(mode="json", exclude={"embedding"})}))
        for s in summaries:
            typer.echo(json.dumps({"tier": "summary", **s.model_dump(mode="json")}))
        return
    if not facts and not summaries:
        typer.echo(f"no memories in workspace {ws!r}" + (f" for user {user!r}" if user else ""), err=True)
        return
    for t in facts:
        lifecycle = (
            t.status + (f"->{t.merged_into}" if t.merged_into else "") + (" long-term" if t.long_term else "")
        )
        typer.echo(
            f"fact {t.id}  [{lifecycle}] relevance {t.relevance:.2f}  {t.category}  "
            f"{t.subject} | {t.predicate} | {t.object}"
        )
        typer.echo(
            f"    from {t.source}{f' run {t.run_id}' if t.run_id else ''}  session {t.session_id or '-'}  "
            f"messages {','.join(t.message_ids) or '-'}  user {t.user_id or '-'}  "
            f"created {_when(t.created_at)}  updated {_when(t.updated_at)}  used {t.access_count}x"
            + (f"  changed by {t.changes[-1].run_id} ({t.changes[-1].action})" if t.changes else "")
        )
    for s in summaries:
        typer.echo(f"summary {s.id}  [{s.kind}] session {s.session_id} messages {s.first_seq}-{s.last_seq}")
        typer.echo(
            f"    {_when(s.start_at)} .. {_when(s.end_at)}  run {s.run_id or '-'}  "
            f"created {_when(s.created_at)}  {' '.join(s.text.split())[:160]}"
        )


@memory_app.command("share")
def memory_share(
    fact: Annotated[str, typer.Argument(help="the fact's id (see `sigil memory list`)")],
    workspace: MemoryWorkspace = None,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Mark a fact shared: everyone in the workspace recalls it under the personal policy."""
    _set_shared(data_dir, workspace, fact, shared=True, stack=stack, region=region)


@memory_app.command("unshare")
def memory_unshare(
    fact: Annotated[str, typer.Argument(help="the fact's id (see `sigil memory list`)")],
    workspace: MemoryWorkspace = None,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Take a fact's sharing back: only its own people and conversation recall it again."""
    _set_shared(data_dir, workspace, fact, shared=False, stack=stack, region=region)


def _set_shared(
    data_dir: Path | None,
    workspace: str | None,
    fact_id: str,
    *,
    shared: bool,
    stack: str | None,
    region: str | None,
) -> None:
    from shared.errors import SigilError
    from shared.memory.sharing import set_shared

    with open_backend(data_dir, workspace, stack, region, holds=_holds_memory) as (backend, ws):
        try:
            triple = set_shared(backend.memory, backend.index, ws, fact_id, shared=shared)
        except SigilError as exc:
            typer.echo(exc.message, err=True)
            raise typer.Exit(1) from exc
    typer.echo(
        f"{'shared' if shared else 'unshared'} fact {triple.id}  {triple.subject} | {triple.predicate} | "
        f"{triple.object}"
    )


@memory_app.command("erase")
def memory_erase(
    user: Annotated[str, typer.Option("--user", "-u", help="the Sigil user to erase")],
    workspace: MemoryWorkspace = None,
    yes: Annotated[bool, typer.Option("--yes", help="do not ask for confirmation")] = False,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Erase a user from every store of the workspace (the right to erasure; docs/consolidation.md)."""
    from shared.memory.erasure import erase_user

    with open_backend(data_dir, workspace, stack, region, holds=_holds_memory) as (backend, ws):
        if not yes and not typer.confirm(
            f"erase everything of user {user!r} in workspace {ws!r}? This cannot be undone"
        ):
            typer.echo("nothing erased", err=True)
            raise typer.Exit(1)
        report = erase_user(backend, ws, user)
    typer.echo(json.dumps(report.model_dump(), indent=2))


@memory_app.command("rollback")
def memory_rollback(
    run: Annotated[
        str, typer.Option("--run", "-r", help="the consolidation run id (see `sigil memory list`)")
    ],
    workspace: MemoryWorkspace = None,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Undo a consolidation run: restore what it merged, pruned or promoted; delete what it wrote."""
    from shared.consolidation.rollback import rollback_run, run_exists

    with open_backend(data_dir, workspace, stack, region, holds=_holds_memory) as (backend, ws):
        if not run_exists(backend, ws, run):
            typer.echo(
                f"no consolidation run {run!r} in workspace {ws!r}: no fact or summary carries it "
                "(never run, already rolled back, or purged; see `sigil memory list`)",
                err=True,
            )
            raise typer.Exit(1)
        report = rollback_run(backend, ws, run)
    typer.echo(json.dumps(report.model_dump(), indent=2))

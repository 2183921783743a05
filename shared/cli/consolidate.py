"""`sigil consolidate`: one consolidation run, as the hourly timer does."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from shared.cli._app import (
    DataDir,
    app,
    open_backend,
    settings_for,
)
from shared.cli._sessions import stored_session

if TYPE_CHECKING:
    pass


@app.command()
def consolidate(
    workspace: Annotated[
        str | None, typer.Option("--workspace", "-w", help="only this workspace (default: every workspace)")
    ] = None,
    session: Annotated[
        str | None, typer.Option("--session", "-s", help="only this session's compaction (in --workspace)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the whole report as JSON")] = False,
    data_dir: DataDir = None,
) -> None:
    """Run consolidation once, as the gateway's hourly timer does: summarise the complete batches
    of Tier-1 messages not yet summarised, extract their facts, then maintain every workspace's
    facts (docs/consolidation.md). With --session, only that session's compaction."""
    from shared.clock import new_id
    from shared.consolidation.compaction import (
        CompactionResult,
        ConsolidationModel,
        compact_session,
        consolidation_model,
    )
    from shared.consolidation.runner import (
        HourlyReport,
        WorkspaceReport,
        consolidate_workspace,
        run_hourly,
        summary_lines,
    )
    from shared.errors import ModelNotConfigured

    run_id = new_id("cli-")
    with open_backend(data_dir, workspace) as (backend, ws):
        settings = settings_for(data_dir)

        def model() -> ConsolidationModel:
            return consolidation_model(settings)

        report: CompactionResult | WorkspaceReport | HourlyReport
        if session is not None:
            # `demo` for the `web.demo` that `sigil send --session demo` made (shared.cli._sessions).
            session = stored_session(backend.sessions, ws, session)
        try:
            if session is not None:
                report = compact_session(backend, model, ws, session, run_id=run_id)
            elif workspace is not None:
                report = consolidate_workspace(backend, model, ws, run_id=run_id, progress=_progress)
            else:
                report = run_hourly(backend, model, run_id=run_id, progress=_progress)
        except ModelNotConfigured as exc:
            typer.echo(exc.message, err=True)
            raise typer.Exit(2) from exc
    if as_json:
        typer.echo(json.dumps(report.model_dump(mode="json"), indent=2))
        return
    for line in summary_lines(report):
        typer.echo(line)


def _progress(line: str) -> None:
    # On stderr, so `--json` output stays one document on stdout.
    typer.echo(f"... {line}", err=True)

"""`sigil config`: the declarative configuration, sigil.yaml (docs/configuration.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from shared.cli._app import DataDir, Region, Stack, app, said_in_one_line, target_config

config_app = typer.Typer(
    help="Workspaces, channel routes and defaults as code (sigil.yaml): validate it, see how it "
    "differs from a backend, apply it, print its JSON Schema.",
    no_args_is_help=True,
)
app.add_typer(config_app, name="config")

ConfigFile = Annotated[
    Path | None,
    typer.Argument(help="the file (default: $SIGIL_CONFIG, else ./sigil.yaml)", show_default=False),
]


def _where(stack: str | None, data_dir: Path) -> str:
    return f"stack {stack}" if stack else f"the local data dir {data_dir}"


@config_app.command("validate")
def config_validate(file: ConfigFile = None) -> None:
    """Check the file: YAML, every field, and the rules across them (each route's workspace is
    one of the file's, no route or account twice). Errors name the file, line and field; a
    delegation role's tool that no registry offers is a warning (an MCP tool may be meant)."""
    from shared.configuration import effective_configs
    from shared.tasks.roles import role_warnings
    from shared.tasks.tools import TASK_TOOLS
    from shared.tools.builtin import agent_registry

    settings, loaded = target_config(None, None, None, file)
    workspaces = ", ".join(loaded.workspace_ids()) or "none"
    routes = ", ".join(r.key for r in loaded.channels) or "none"
    typer.echo(
        f"{settings.config_file}: valid; workspaces: {workspaces}; routes: {routes}",
    )
    # Allowed but worth a look: a delegation role's tool no built-in registry has.
    # (The task agents' own tools, skill_draft among them, are known too.)
    tools = [t.name for t in agent_registry()] + [t.name for t in TASK_TOOLS]
    for config in effective_configs(loaded).values():
        for line in role_warnings(config, tools):
            typer.echo(f"warning: {line}", err=True)


@config_app.command("diff")
def config_diff(
    file: ConfigFile = None, data_dir: DataDir = None, stack: Stack = None, region: Region = None
) -> None:
    """What `sigil config apply` would change in the target: + created, ~ updated (field: stored
    -> new), - deleted; = a stored workspace the file does not name (left alone)."""
    from shared.adapters import build_backend
    from shared.configuration import plan, skills_not_installed

    settings, loaded = target_config(data_dir, stack, region, file)
    with said_in_one_line():
        backend = build_backend(settings)
        try:
            todo = plan(loaded, backend.workspaces, backend.routes)
            missing = skills_not_installed(loaded, backend.skills)
        finally:
            backend.close()
    for line in todo.lines():
        typer.echo(line)
    for line in missing:
        typer.echo(line, err=True)


@config_app.command("apply")
def config_apply(
    file: ConfigFile = None, data_dir: DataDir = None, stack: Stack = None, region: Region = None
) -> None:
    """Write the file to the target: each of its workspaces (effective: defaults filled in), and
    its channel routes as the whole set (a stored route the file lacks is deleted). Idempotent."""
    from shared.adapters import build_backend
    from shared.configuration import Change, apply, skills_not_installed
    from shared.configuration.apply import stdio_servers

    settings, loaded = target_config(data_dir, stack, region, file)
    refused = stdio_servers(loaded) if stack is not None else []
    for line in refused:
        typer.echo(line, err=True)
    if refused:
        raise typer.Exit(1)

    def written(change: Change) -> None:
        for line in change.lines():
            typer.echo(line)

    with said_in_one_line():
        backend = build_backend(settings)
        try:
            done = apply(loaded, backend.workspaces, backend.routes, on_change=written)
            missing = skills_not_installed(loaded, backend.skills)
        finally:
            backend.close()
    # After what was written, what was not: the workspaces left alone; "no changes" if nothing was.
    for change in done.changes:
        if change.action == "left alone":
            written(change)
    if done.empty:
        typer.echo("no changes")
    for line in missing:
        typer.echo(line, err=True)
    typer.echo(
        f"applied {len(done.writes)} change{'s' if len(done.writes) != 1 else ''} to "
        f"{_where(stack, settings.data_dir)}",
        err=True,
    )


@config_app.command("schema")
def config_schema() -> None:
    """Print the file's JSON Schema (docs/sigil.schema.json is this output)."""
    from shared.configuration import json_schema

    typer.echo(json_schema(), nl=False)

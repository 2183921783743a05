"""`sigil workspace`: the workspaces a backend holds, and one's effective configuration."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer

from shared.cli._app import DataDir, Region, Stack, app, said_in_one_line, target_settings

workspace_app = typer.Typer(
    help="The workspaces of the local data dir or of a deployed stack (--stack): list them, show "
    "one's effective configuration.",
    no_args_is_help=True,
)
app.add_typer(workspace_app, name="workspace")


class Format(StrEnum):
    yaml = "yaml"
    json = "json"


@workspace_app.command("list")
def workspace_list(data_dir: DataDir = None, stack: Stack = None, region: Region = None) -> None:
    """Each stored workspace: id, model (the gateway's default when it sets none) and name."""
    from shared.adapters import build_backend

    settings = target_settings(data_dir, stack, region)
    with said_in_one_line():
        backend = build_backend(settings)
        try:
            found = backend.workspaces.list_workspaces()
        finally:
            backend.close()
    if not found:
        typer.echo(
            "no workspaces (`sigil config apply` writes them; `sigil dev` creates its default)", err=True
        )
        return
    default = settings.resolved_model() or "-"
    typer.echo(f"{'WORKSPACE':<24}  {'MODEL':<40}  NAME")
    for config in found:
        model = config.model or f"{default} (default)"
        typer.echo(f"{config.id:<24}  {model:<40}  {config.name}".rstrip())


@workspace_app.command("show")
def workspace_show(
    workspace: Annotated[str, typer.Argument(help="the workspace id (see `sigil workspace list`)")],
    output: Annotated[Format, typer.Option("--output", "-o", help="yaml or json")] = Format.yaml,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """A workspace's effective configuration: as stored, with the gateway's default model when it
    sets none."""
    import yaml

    from shared.adapters import build_backend

    settings = target_settings(data_dir, stack, region)
    with said_in_one_line():
        backend = build_backend(settings)
        try:
            config = backend.workspaces.get(workspace)
            known = [] if config is not None else [c.id for c in backend.workspaces.list_workspaces()]
        finally:
            backend.close()
    if config is None:
        typer.echo(
            f"unknown workspace {workspace!r}; the known ones are: {', '.join(known) or 'none'}", err=True
        )
        raise typer.Exit(1)
    if config.model is None:
        config = config.model_copy(update={"model": settings.resolved_model()})
    data = config.model_dump(mode="json")
    if output is Format.json:
        typer.echo(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        typer.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), nl=False)

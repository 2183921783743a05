"""`sigil workspace`: the workspaces a backend holds, and one's effective configuration."""

from __future__ import annotations

import json
from contextlib import nullcontext
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, get_args

import typer

from shared.cli._app import (
    DataDir,
    Region,
    Stack,
    app,
    require_known_workspace,
    said_in_one_line,
    target_settings,
    target_settings_and_file,
)

if TYPE_CHECKING:
    from shared.config import Settings
    from shared.models import WorkspaceConfig

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
    sets none; for a known workspace with none stored (one the cloud's agent serves on the
    defaults), the defaults its turns use. Delegation shows every role (built-in ones merged with
    the workspace's) and the model each model class resolves to."""
    import yaml

    from shared.adapters import build_backend
    from shared.models import new_workspace

    settings, file = target_settings_and_file(data_dir, stack, region)
    with said_in_one_line():
        backend = build_backend(settings)
        try:
            config = backend.workspaces.get(workspace)
            if config is None:
                require_known_workspace(
                    workspace, settings, file, lambda: nullcontext(backend), option="WORKSPACE"
                )
        finally:
            backend.close()
    if config is None:
        typer.echo(
            f"workspace {workspace!r} has no stored configuration: its turns use the defaults below "
            "(`sigil config apply` writes one)",
            err=True,
        )
        config = new_workspace(workspace)
    if config.model is None:
        config = config.model_copy(update={"model": settings.resolved_model()})
    data = config.model_dump(mode="json")
    data["delegation"] = _effective_delegation(config)
    if output is Format.json:
        typer.echo(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        typer.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), nl=False)
        # Comments, so the output stays YAML: the budget in words, and what its $ are.
        # The roles first: the budget and price notes end the output, as they always have.
        for line in [*_role_notes(config), *_spend_notes(config, settings, priced_here=stack is None)]:
            typer.echo(f"# {line}")


def _effective_delegation(config: WorkspaceConfig) -> dict[str, Any]:
    """The delegation section as tasks see it: every role (built-in ones with the workspace's merged
    over them) and the model of every class (its own mapping, else the workspace's model)."""
    from shared.errors import ModelNotConfigured
    from shared.models import ModelClass
    from shared.tasks.roles import model_for_class, roles_for

    section: dict[str, Any] = config.delegation.model_dump(mode="json")
    section["roles"] = {name: role.model_dump(mode="json") for name, role in roles_for(config).items()}
    models: dict[str, str | None] = {}
    for model_class in get_args(ModelClass):
        try:
            models[model_class] = model_for_class(config, model_class)
        except ModelNotConfigured:
            models[model_class] = None
    section["models"] = models
    return section


def _role_notes(config: WorkspaceConfig) -> list[str]:
    """Each role's model class and the model it runs on, in words."""
    from shared.errors import ModelNotConfigured
    from shared.tasks.roles import model_for, roles_for

    if not config.delegation.enabled:
        return ["delegation: off (the delegate tool refuses)"]
    lines = []
    for name, role in roles_for(config).items():
        try:
            model = model_for(config, name)
        except ModelNotConfigured:
            model = "no model configured"
        mode = "interactive" if role.interactive else "fire and forget"
        lines.append(f"role {name}: {role.model_class} -> {model}; {len(role.tools)} tools; {mode}")
    return lines


def _spend_notes(config: WorkspaceConfig, settings: Settings, *, priced_here: bool) -> list[str]:
    """The budget in words (a null limit above is no limit), and the model's price with where it
    comes from, since every $ figure is an estimate at it (docs/budgets.md#prices). The price is
    this machine's settings' (sigil.yaml defaults.model_prices, SIGIL_MODEL_PRICES, the base
    URLs), so it is left out for a stack, whose functions price by their own environment."""
    from shared.budgets import PriceTable, describe_limits

    lines = [f"budget: {describe_limits(config.budget)}"]
    if priced_here and config.model and config.budget is not None:
        quote = PriceTable.from_settings(settings).quote(config.model)
        lines.append(f"price of {config.model}: {quote.describe()}")
    return lines

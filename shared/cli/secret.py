"""`sigil secret`: bot tokens, signing secrets and API keys."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from shared.cli._app import (
    DataDir,
    Region,
    Stack,
    app,
    target_settings,
)

if TYPE_CHECKING:
    from typing import Protocol

    class AdminSecrets(Protocol):
        """What `sigil secret` does with a store: the data dir's file, or the stack's Secrets Manager."""

        def get(self, name: str) -> str | None: ...

        def set(self, name: str, value: str) -> None: ...

        def delete(self, name: str) -> None: ...

        def names(self) -> list[str]: ...


secret_app = typer.Typer(
    help="Secrets (bot tokens, signing secrets, API keys): the local gateway's in its data dir, or a "
    "deployed stack's in Secrets Manager (--stack).",
    no_args_is_help=True,
)
app.add_typer(secret_app, name="secret")


def _secrets(data_dir: Path | None, stack: str | None = None, region: str | None = None) -> AdminSecrets:
    """The target's secret store: the data dir's secrets.json, or the stack's, under its prefix
    (a deployed one, or the running `sigil dev --aws`'s on moto)."""
    settings = target_settings(data_dir, stack, region)
    if settings.backend == "aws":
        from shared.adapters.aws import clients
        from shared.adapters.aws.secrets import SecretsManagerStore

        # No cache: an operator's read must see the value just set.
        return SecretsManagerStore(
            settings.secrets_prefix, client=clients.secretsmanager(settings.aws_region), max_age_s=0
        )
    from shared.adapters.embedded import FileSecretStore, open_data_dir

    return FileSecretStore(open_data_dir(settings.data_dir) / "secrets.json")


def _known_secrets() -> list[str]:
    """The secret names something reads: channel credentials and LLM keys (web/<workspace> aside)."""
    from shared.config import CHANNEL_TOKENS, INGRESS_SECRETS, LLM_KEYS, OPTIONAL_SECRETS, TOOL_KEYS

    return sorted(
        spec.key for spec in (*INGRESS_SECRETS, *CHANNEL_TOKENS, *LLM_KEYS, *TOOL_KEYS, *OPTIONAL_SECRETS)
    )


def _known_secret(name: str, *, stored: list[str] | None = None) -> str:
    """`name`, if something reads it (or it is already stored); else a BadParameter listing the known."""
    from shared.errors import SigilError
    from shared.ingress import check_id

    web_prefix = "web/"
    if name.startswith(web_prefix):
        try:
            check_id(name.removeprefix(web_prefix), "workspace")
        except SigilError as exc:
            raise typer.BadParameter(f"{exc.message} in {name!r}", param_hint="'NAME'") from None
        return name
    if _mcp_secret(name):
        return name
    if name in _known_secrets() or _route_secret(name):
        return name
    if stored is not None and name in stored:
        return name
    known = ", ".join(
        [*_known_secrets(), "web/<workspace>", "<platform>/<route>/<key>", "mcp/<workspace>/<name>"]
    )
    raise typer.BadParameter(f"unknown secret {name!r}; the known ones are: {known}", param_hint="'NAME'")


def _mcp_secret(name: str) -> bool:
    """A workspace's MCP credential: mcp/<workspace>/<name> (shared.models.mcp.mcp_secret_name)."""
    import re

    from shared.models import ID_PATTERN
    from shared.models.mcp import MCP_SECRET_NAME_PATTERN, MCP_SECRET_PREFIX

    workspace, _, secret = name.removeprefix(MCP_SECRET_PREFIX).partition("/")
    return (
        name.startswith(MCP_SECRET_PREFIX)
        and re.match(ID_PATTERN, workspace) is not None
        and re.match(MCP_SECRET_NAME_PATTERN, secret) is not None
    )


def _route_secret(name: str) -> bool:
    """A channel route's own secret: {platform}/{route}/{key} for a known {platform}/{key}
    (telegram/family/bot-token; shared.models.ChannelRoute.secret_name)."""
    import re

    from shared.models import PLATFORMS, ROUTE_NAME_PATTERN

    platform, _, rest = name.partition("/")
    route, _, key = rest.partition("/")
    return (
        platform in PLATFORMS
        and re.match(ROUTE_NAME_PATTERN, route) is not None
        and f"{platform}/{key}" in _known_secrets()
    )


def _masked(value: str) -> str:
    # Enough to tell two values apart, never enough to use one: the last 4 characters of a long one.
    tail = value[-4:] if len(value) >= 16 else ""
    return f"****{tail} ({len(value)} characters)"


@secret_app.command("set")
def secret_set(
    name: Annotated[str, typer.Argument(help="e.g. telegram/bot-token, slack/signing-secret")],
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Store a secret's value, read from the prompt (hidden) or from standard input."""
    import sys

    _known_secret(name)
    value = typer.prompt("value", hide_input=True) if sys.stdin.isatty() else sys.stdin.read()
    value = value.strip()
    if not value:
        typer.echo("an empty value was not stored", err=True)
        raise typer.Exit(2)
    _secrets(data_dir, stack, region).set(name, value)
    typer.echo(f"stored {name}", err=True)


@secret_app.command("get")
def secret_get(
    name: Annotated[str, typer.Argument(help="the secret's name (see `sigil secret list`)")],
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Say whether a secret is set, with a masked form of it (never the value); exit 1 if not."""
    store = _secrets(data_dir, stack, region)
    stored = store.names()
    _known_secret(name, stored=stored)
    # Asked only when listed: Secrets Manager refuses to read one scheduled for deletion.
    value = store.get(name) if name in stored else None
    if value is None:
        typer.echo(f"{name} is not set", err=True)
        raise typer.Exit(1)
    typer.echo(f"{name} is set: {_masked(value)}")


@secret_app.command("delete")
def secret_delete(
    name: Annotated[str, typer.Argument(help="the secret's name (see `sigil secret list`)")],
    yes: Annotated[bool, typer.Option("--yes", help="do not ask for confirmation")] = False,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Remove a secret: from the data dir; from a stack, scheduled for deletion in 7 days."""
    store = _secrets(data_dir, stack, region)
    stored = store.names()
    _known_secret(name, stored=stored)
    if name not in stored or store.get(name) is None:
        typer.echo(f"{name} is not set", err=True)
        raise typer.Exit(1)
    if not yes and not typer.confirm(f"delete secret {name}? This cannot be undone"):
        typer.echo("nothing deleted", err=True)
        raise typer.Exit(1)
    store.delete(name)
    when = " (scheduled: Secrets Manager deletes it in 7 days; restore-secret undoes it)" if stack else ""
    typer.echo(f"deleted {name}{when}", err=True)


@secret_app.command("list")
def secret_list(data_dir: DataDir = None, stack: Stack = None, region: Region = None) -> None:
    """List the names of the stored secrets (never their values)."""
    for name in _secrets(data_dir, stack, region).names():
        typer.echo(name)

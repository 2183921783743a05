"""`sigil pairing`: senders waiting for approval under the pairing policy."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from shared.cli._app import (
    ChannelWorkspace,
    DataDir,
    Region,
    Stack,
    admin,
    app,
    describe,
    open_identities,
)

if TYPE_CHECKING:
    pass


pairing_app = typer.Typer(
    help="Senders waiting for approval under the pairing policy: list, approve, block.",
    no_args_is_help=True,
)
app.add_typer(pairing_app, name="pairing")


@pairing_app.command("list")
def pairing_list(
    workspace: ChannelWorkspace = None,
    show_all: Annotated[bool, typer.Option("--all", help="every identity, not only pending ones")] = False,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """List the senders waiting for approval, with their pairing codes."""
    with open_identities(data_dir, workspace, stack, region) as (store, ws):
        found = store.list_identities(ws, status=None if show_all else "pending")
    if not found:
        typer.echo(f"no {'identities' if show_all else 'pending senders'} in workspace {ws!r}", err=True)
        return
    for identity in found:
        code = identity.pairing_code or "-"
        typer.echo(
            f"{code:<8}  {identity.status:<8}  {identity.created_at:%Y-%m-%d %H:%M}  {describe(identity)}"
        )


@pairing_app.command("approve")
def pairing_approve(
    code: Annotated[str, typer.Argument(help="the pairing code the sender was given")],
    workspace: ChannelWorkspace = None,
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="the Sigil user they are (default: derived)")
    ] = None,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Approve a pending sender: their next message is answered, as USER."""
    from shared.identity import approve

    with open_identities(data_dir, workspace, stack, region) as (store, ws):
        approved = admin(lambda: approve(store, ws, code, user_id=user))
    typer.echo(f"approved {describe(approved)}")


@pairing_app.command("block")
def pairing_block(
    who: Annotated[str, typer.Argument(help="a pairing code, or CHANNEL:USER (e.g. telegram:12345)")],
    workspace: ChannelWorkspace = None,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Block a sender: their messages are dropped unanswered (and audited)."""
    from shared.identity import block

    with open_identities(data_dir, workspace, stack, region) as (store, ws):
        blocked = admin(lambda: block(store, ws, who))
    typer.echo(f"blocked {describe(blocked)}")

"""`sigil identity`: one person's accounts on several channels, as one Sigil user."""

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
    from shared.models import Identity


identity_app = typer.Typer(
    help="Who each channel user is: link a person's identities on several channels to one Sigil "
    "user (one memory across channels, docs/privacy.md), list them, unlink.",
    no_args_is_help=True,
)
app.add_typer(identity_app, name="identity")


@identity_app.command("link")
def identity_link(
    who: Annotated[str, typer.Argument(help="CHANNEL:USER to link, e.g. slack:U0123ABC")],
    to: Annotated[
        str,
        typer.Argument(
            help="CHANNEL:USER of an identity they already have (its Sigil user), or a Sigil user id"
        ),
    ],
    workspace: ChannelWorkspace = None,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Make WHO the Sigil user TO names: their conversations on both channels become one memory."""
    from shared.identity import link_identity, link_target

    with open_identities(data_dir, workspace, stack, region) as (store, ws):
        linked = admin(lambda: link_identity(store, ws, who, link_target(store, ws, to)))
    typer.echo(f"linked {describe(linked)}  ({linked.status})")


@identity_app.command("unlink")
def identity_unlink(
    who: Annotated[str, typer.Argument(help="CHANNEL:USER to unlink, e.g. slack:U0123ABC")],
    workspace: ChannelWorkspace = None,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Give WHO back their own Sigil user (the one derived from their channel id)."""
    from shared.identity import unlink_identity

    with open_identities(data_dir, workspace, stack, region) as (store, ws):
        unlinked = admin(lambda: unlink_identity(store, ws, who))
    typer.echo(f"unlinked {describe(unlinked)}")


@identity_app.command("list")
def identity_list(
    workspace: ChannelWorkspace = None,
    user: Annotated[str | None, typer.Option("--user", "-u", help="only this Sigil user")] = None,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Each Sigil user of the workspace with the channel identities that are them."""
    with open_identities(data_dir, workspace, stack, region) as (store, ws):
        found = store.list_identities(ws)
    by_user: dict[str, list[Identity]] = {}
    for identity in found:
        if user is None or identity.user_id == user:
            by_user.setdefault(identity.user_id, []).append(identity)
    if not by_user:
        typer.echo(f"no identities in workspace {ws!r}" + (f" for user {user!r}" if user else ""), err=True)
        return
    for user_id in sorted(by_user):
        typer.echo(user_id)
        for identity in by_user[user_id]:
            name = f"  {identity.display_name}" if identity.display_name else ""
            typer.echo(f"    {identity.channel}:{identity.channel_user_id}  {identity.status}{name}")

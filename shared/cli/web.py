"""`sigil web`: browser tokens for the chat page (shared.channels.web_tokens, docs/web-channel.md)."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from shared.cli._app import (
    DataDir,
    Region,
    Stack,
    Url,
    Workspace,
    app,
    gateway_url,
    settings_for,
    stack_outputs,
    target_settings_and_file,
)

web_app = typer.Typer(
    help="The web channel's chat page: browser tokens a page can hold instead of the web secret.",
    no_args_is_help=True,
)
app.add_typer(web_app, name="web")

User = Annotated[str, typer.Option("--user", "-u", help="the Sigil user the browser is")]
Sessions = Annotated[
    list[str] | None,
    typer.Option(
        "--session",
        "-s",
        help="a session the token may use (repeatable); 'name*' for every session that is 'name' "
        "followed by characters other than '.' (default: '<user>.*', the user's own sessions, never "
        "another user's such as '<user>.smith.main')",
    ),
]
Ttl = Annotated[str, typer.Option("--ttl", help="lifetime: 90s, 30m, 1h (default), at most 24h")]


def _token(
    data_dir: DataDir,
    workspace: str,
    user: str,
    sessions: list[str] | None,
    ttl: str,
    stack: str | None = None,
    region: str | None = None,
) -> str:
    from shared.channels import web_tokens
    from shared.cli.gateway import _secret
    from shared.errors import SigilError

    # With --stack the secret is the deployed one (Secrets Manager), read with your credentials,
    # of a workspace the stack knows (_secret checks it).
    settings, file = target_settings_and_file(data_dir, stack, region)
    try:
        ttl_s = web_tokens.parse_ttl(ttl)
        claims = web_tokens.claims_for(
            workspace, user, sessions or [f"{user}.*"], now=time.time(), ttl_s=ttl_s
        )
    except SigilError as exc:
        raise typer.BadParameter(exc.message) from None
    return web_tokens.mint(_secret(settings, file, workspace), claims)


@web_app.command("token")
def token(
    user: User,
    workspace: Workspace = "default",
    session: Sessions = None,
    ttl: Ttl = "1h",
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Print a browser token for USER (signed with a key derived from the workspace's web secret)."""
    typer.echo(_token(data_dir, workspace, user, session, ttl, stack, region))


@web_app.command("open")
def open_page(
    user: User,
    workspace: Workspace = "default",
    session: Sessions = None,
    ttl: Ttl = "1h",
    url: Url = None,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Print the chat page's URL with a fresh token in its fragment (never sent to the server).

    With --stack, the page the stack serves: its ApiUrl output, a token under its web secret."""
    if url is None and stack is not None:
        _, outputs = stack_outputs(stack, region)
        if "ApiUrl" not in outputs:
            typer.echo(f"stack {stack!r} has no ApiUrl output: is it a Sigil stack?", err=True)
            raise typer.Exit(1)
        url = outputs["ApiUrl"]
    if url is None:
        url = gateway_url(settings_for(data_dir), None)
    token = _token(data_dir, workspace, user, session, ttl, stack, region)
    typer.echo(f"{url.rstrip('/')}/#token={token}")

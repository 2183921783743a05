"""`sigil console`: the operator's web console over the local data dir or a deployed stack.

It is an admin surface (erasure, rollback, redrive): it binds to loopback unless told otherwise
with --allow-remote, answers only to its own address (plus --allow-host names) and to a browser
that opened the URL it prints, which holds a secret made at each start (shared.console.guard),
and reads with the operator's own credentials (docs/console.md).
"""

from __future__ import annotations

import ipaddress
import secrets
import shlex
import threading
import time
from typing import TYPE_CHECKING, Annotated

import typer

from shared.cli._app import DataDir, Region, Stack, app, target_settings

if TYPE_CHECKING:
    import uvicorn


def _unspecified(host: str) -> bool:
    """0.0.0.0 or ::, every address of the machine: no name a browser would send."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


@app.command()
def console(
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
    host: Annotated[
        str, typer.Option("--host", help="address to bind (loopback unless --allow-remote)")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="port (0: any free one)")] = 8790,
    allow_remote: Annotated[
        bool,
        typer.Option(
            "--allow-remote", help="bind a non-loopback address: anyone who reaches it can erase data"
        ),
    ] = False,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            help="another name the console answers to (repeatable): the machine's name or address "
            "under --allow-remote; loopback names and the bound address always are",
        ),
    ] = None,
    open_browser: Annotated[bool, typer.Option("--open", help="open the console in your browser")] = False,
) -> None:
    """Serve the console: workspaces, usage and budgets, sessions with their audit records, memory
    (search scores, facts' history, rollback, erasure), dead letters, replay."""
    from shared.console.guard import is_loopback

    if not is_loopback(host) and not allow_remote:
        typer.echo(
            f"refusing to bind {host}: the console is an admin surface; use 127.0.0.1, or pass "
            "--allow-remote if you really mean to expose it",
            err=True,
        )
        raise typer.Exit(2)

    import uvicorn

    from shared.adapters import build_backend
    from shared.console import create_app
    from shared.errors import SigilError

    settings = target_settings(data_dir, stack, region)
    try:
        backend = build_backend(settings)
    except SigilError as exc:
        typer.echo(exc.message, err=True)
        raise typer.Exit(2) from exc
    if stack:
        source = f"stack {stack} ({settings.aws_region})"
        target = f"--stack {shlex.quote(stack)} --region {shlex.quote(settings.aws_region or '')}"
    else:
        source = f"{settings.backend}: {settings.data_dir}"
        target = f"--data-dir {shlex.quote(str(settings.data_dir))}" if data_dir is not None else ""
    secret = secrets.token_urlsafe(32)
    hosts = [*([] if _unspecified(host) else [host]), *(allow_host or [])]
    app_ = create_app(backend, settings, source=source, target=target, secret=secret, hosts=hosts)
    server = uvicorn.Server(uvicorn.Config(app_, host=host, port=port, log_level="warning"))

    # Said once the socket is bound, so the URL holds the real port (with --port 0 too).
    announce = threading.Thread(target=_announce, args=(server, host, secret, open_browser), daemon=True)
    announce.start()
    try:
        server.run()
    finally:
        backend.close()


def _announce(server: uvicorn.Server, host: str, secret: str, open_browser: bool) -> None:
    while not server.started:
        if server.should_exit:
            return
        time.sleep(0.05)
    port = next(int(sock.getsockname()[1]) for s in server.servers for sock in s.sockets)
    # A wildcard bind is reached on loopback from this machine.
    shown = "127.0.0.1" if _unspecified(host) else host
    # The secret is in the URL only: opening it sets the cookie and redirects to drop it.
    url = f"http://{'[' + shown + ']' if ':' in shown else shown}:{port}/?token={secret}"
    typer.echo(f"console: {url} (Ctrl-C to stop)")
    if open_browser:
        import webbrowser

        webbrowser.open(url)

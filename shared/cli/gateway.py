"""`sigil dev`, and talking to the gateway as a signed web client: send, replies, web-secret."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Annotated

import typer

from shared.cli._app import (
    DataDir,
    Url,
    Workspace,
    app,
    gateway_url,
    require_known_workspace,
    said_in_one_line,
    settings_and_file,
)
from shared.cli._sessions import web_session_name
from shared.config import Settings

if TYPE_CHECKING:
    from shared.configuration import SigilFile


@app.command()
def dev(
    data_dir: DataDir = None,
    host: Annotated[str | None, typer.Option(help="bind address")] = None,
    port: Annotated[int | None, typer.Option(help="port")] = None,
    aws: Annotated[
        bool, typer.Option("--aws", help="run the real Lambda handlers over moto (docs/local-aws-mode.md)")
    ] = False,
) -> None:
    """Serve the local gateway on 127.0.0.1: the embedded (SQLite) backend, or with --aws the Lambda
    handlers over moto."""
    import uvicorn

    from shared.local import logs
    from shared.local.datadir_lock import DataDirInUse
    from shared.local.gateway import LocalGateway
    from shared.local.model_check import ModelCheck, model_line
    from shared.local.running import GatewayRecord, client_url, listen, remove_record, write_record

    settings, config = settings_and_file(data_dir, host=host, port=port, backend="embedded")
    # After the settings: a file with errors ends the command before it takes over the process's
    # logging (its root handlers), as nothing else of the gateway has started either.
    logs.configure()
    if aws:
        from shared.local.aws_mode import serve

        serve(settings, config)
        return
    # The look at the model's server overlaps the start (shared.local.model_check).
    check = ModelCheck(settings)
    gateway = LocalGateway(settings, config=config)
    # The data directory and the port are taken before start() puts in-flight items back on
    # their lanes: an instance that cannot serve must not run (again) another one's turns.
    try:
        gateway.lock_data_dir()
        listener = listen(settings.host, settings.port)
    except (DataDirInUse, OSError) as exc:
        gateway.stop()
        typer.echo(f"sigil dev: {exc}", err=True)
        raise typer.Exit(1) from None
    gateway.start()
    base = client_url(listener)
    # Where `sigil send`, `replies` and `web open` find this gateway (shared.local.running).
    write_record(settings.data_dir, GatewayRecord(pid=os.getpid(), url=base, mode="embedded"))
    ws = settings.default_workspace
    problem = gateway.model_status()
    typer.echo(
        "\n".join(
            [
                f"Sigil local gateway on {base}   state: {settings.data_dir.resolve()}",
                f"  model:    {model_line(settings, problem, check.problem() if problem is None else None)}",
                f"  config:   {_config_line(settings, config)}",
                f"  send:     POST {base}/webhooks/web/{ws}   JSON {{event_id, session, user, text}}",
                "            signed with X-Sigil-Timestamp and X-Sigil-Signature (see docs/web-channel.md)",
                f"  replies:  GET  {base}/sessions/{ws}/<session>/outbox?after=<seq>   (JSON)",
                f"            GET  {base}/sessions/{ws}/<session>/stream               (server-sent events)",
                '  try:      sigil send "hello" --session demo --wait',
                f"  chat:     {base}/   (a browser token: sigil web open --user <you>)",
            ]
        ),
        err=True,
    )
    if config is not None:
        # As `sigil config diff|apply` end: a skill the file names that the data dir has not
        # installed would otherwise leave the workspace's turns without it, unnoticed.
        from shared.configuration import skills_not_installed

        for line in skills_not_installed(config, gateway.backend.skills):
            typer.echo(line, err=True)
    try:
        uvicorn.Server(uvicorn.Config(gateway.app(), log_config=None)).run(sockets=[listener])
    finally:
        remove_record(settings.data_dir)
        listener.close()
        gateway.stop()


def _config_line(settings: Settings, config: SigilFile | None) -> str:
    if config is None:
        return f"none ({settings.config_file} not found: defaults, nothing applied)"
    routes = ", ".join(r.key for r in config.channels) or "none"
    return (
        f"{settings.config_file.resolve()} applied: workspaces {', '.join(config.workspace_ids()) or 'none'}"
        f"; routes {routes}"
    )


def _secret(settings: Settings, file: SigilFile | None, workspace: str) -> str:
    """The workspace's web signing secret, read from the target, for a workspace it knows
    (require_known_workspace; one holding a web secret counts): a typo in -w is named as one,
    with the known workspaces, not as a missing secret. The check is made here, client-side, for
    `send` and `replies` too: they sign with the secret this data dir holds, so without it they
    could not ask the gateway anything."""
    from shared.adapters import build_backend
    from shared.channels import web

    # `web-secret --create` makes a workspace and its secret where the store can create secrets.
    create = f"create it with `sigil web-secret -w {workspace} --create`"
    with said_in_one_line():
        backend = build_backend(settings)
        try:
            secret = backend.secrets.get(web.secret_name(workspace))
            require_known_workspace(
                workspace,
                settings,
                file,
                lambda: nullcontext(backend),
                holds=lambda _: secret is not None,
                hint=create if settings.backend == "embedded" else None,
            )
        finally:
            backend.close()
    if secret is None:
        # `sigil dev` creates only its default workspace's secret; any other is made on request.
        how = (
            "run `sigil dev` once, or `sigil web-secret --create`"
            if workspace == settings.default_workspace
            else create
        )
        typer.echo(f"no web signing secret for workspace {workspace!r}: {how}", err=True)
        raise typer.Exit(2)
    return secret


@contextmanager
def _gateway_errors(base: str) -> Iterator[None]:
    """One line, not a traceback, when the gateway is not there or refuses the request."""
    import httpx

    try:
        yield
    except httpx.ConnectError:
        typer.echo(f"no gateway at {httpx.URL(base).netloc.decode()} (start it with make dev)", err=True)
        raise typer.Exit(1) from None
    except httpx.HTTPStatusError as exc:
        typer.echo(
            f"the gateway at {base} answered {exc.response.status_code}: {exc.response.text}", err=True
        )
        raise typer.Exit(1) from None
    except httpx.TransportError as exc:
        typer.echo(f"the gateway at {base} did not answer: {type(exc).__name__} {exc}", err=True)
        raise typer.Exit(1) from None


def _signed_get(base: str, secret: str, target: str) -> dict[str, object]:
    import httpx

    from shared.channels import web

    resp = httpx.get(base + target, headers=web.signed_headers(secret, target.encode()), timeout=10)
    resp.raise_for_status()
    data: dict[str, object] = resp.json()
    return data


@app.command()
def send(
    text: Annotated[str, typer.Argument(help="the message")],
    session: Annotated[str, typer.Option("--session", "-s")] = "demo",
    user: Annotated[str, typer.Option("--user", "-u")] = "local-user",
    workspace: Workspace = "default",
    event_id: Annotated[str | None, typer.Option(help="platform event id (default: random)")] = None,
    wait: Annotated[bool, typer.Option(help="wait for the reply and print it")] = False,
    timeout: Annotated[float, typer.Option(help="seconds to wait for the reply")] = 120.0,
    url: Url = None,
    data_dir: DataDir = None,
) -> None:
    """Post a signed message to the local gateway's web channel."""
    settings, file = settings_and_file(data_dir)
    base = gateway_url(settings, url)
    secret = _secret(settings, file, workspace)
    # `web.demo`, the id the session is stored and listed under, is `demo` on the web channel.
    session = web_session_name(session)
    with _gateway_errors(base):
        _send(base, secret, workspace, session, user, text, event_id, wait=wait, timeout=timeout)


def _send(
    base: str,
    secret: str,
    workspace: str,
    session: str,
    user: str,
    text: str,
    event_id: str | None,
    *,
    wait: bool,
    timeout: float,
) -> None:
    import httpx

    from shared.channels import web

    outbox_target = f"/sessions/{workspace}/{session}/outbox"
    before = _signed_get(base, secret, outbox_target + "?after=0")
    after = before.get("next_after") or 0
    event = event_id or uuid.uuid4().hex
    body = json.dumps({"event_id": event, "session": session, "user": user, "text": text}).encode()
    resp = httpx.post(
        f"{base}/webhooks/web/{workspace}",
        content=body,
        headers={"Content-Type": "application/json", **web.signed_headers(secret, body)},
        timeout=10,
    )
    typer.echo(f"{resp.status_code} {resp.text}", err=True)
    if resp.status_code >= 300 or not wait:
        raise typer.Exit(0 if resp.status_code < 300 else 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        page = _signed_get(base, secret, f"{outbox_target}?after={after}")
        replies = page.get("replies")
        assert isinstance(replies, list)
        for reply in replies:
            after = reply["seq"]
            if reply.get("in_reply_to") == event:
                typer.echo(reply["text"])
                return
        time.sleep(0.2)
    typer.echo("no reply before the timeout", err=True)
    raise typer.Exit(1)


@app.command()
def replies(
    session: Annotated[str, typer.Option("--session", "-s")] = "demo",
    workspace: Workspace = "default",
    after: Annotated[int, typer.Option(help="only replies after this sequence number")] = 0,
    url: Url = None,
    data_dir: DataDir = None,
) -> None:
    """Print a web session's replies from the outbox."""
    settings, file = settings_and_file(data_dir)
    base = gateway_url(settings, url)
    target = f"/sessions/{workspace}/{web_session_name(session)}/outbox?after={after}"
    secret = _secret(settings, file, workspace)
    with _gateway_errors(base):
        page = _signed_get(base, secret, target)
    typer.echo(json.dumps(page, indent=2))


@app.command("web-secret")
def web_secret(
    workspace: Workspace = "default",
    create: Annotated[
        bool,
        typer.Option(
            "--create", help="create the workspace and its secret if missing, as `sigil dev` does for its own"
        ),
    ] = False,
    data_dir: DataDir = None,
) -> None:
    """Print a workspace's web signing secret (for your own web client; keep it out of logs)."""
    settings, file = settings_and_file(data_dir)
    if create:
        # The one command here that makes a workspace: any valid id, known or not.
        _create_web_secret(settings, workspace)
    typer.echo(_secret(settings, file, workspace))


def _create_web_secret(settings: Settings, workspace: str) -> None:
    """What the local gateway does for its default workspace on start (LocalGateway.ensure_workspace)."""
    from shared.adapters import build_backend
    from shared.channels import web
    from shared.errors import SigilError
    from shared.ingress import check_id
    from shared.models import new_workspace

    try:
        check_id(workspace, "workspace")
    except SigilError as exc:
        raise typer.BadParameter(f"{exc.message}: {workspace!r}", param_hint="'--workspace'") from None
    backend = build_backend(settings)
    try:
        ensure = getattr(backend.secrets, "ensure", None)
        if ensure is None:
            typer.echo(f"the {settings.backend} backend's secret store cannot create secrets", err=True)
            raise typer.Exit(1)
        if backend.workspaces.get(workspace) is None:
            backend.workspaces.put(new_workspace(workspace, name=workspace))
        ensure(web.secret_name(workspace))
    finally:
        backend.close()

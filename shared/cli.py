"""The `sigil` command line: run the local gateway, and talk to it as a signed web client."""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from shared.config import Settings

if TYPE_CHECKING:
    from datetime import datetime

    from shared.adapters.embedded import FileSecretStore
    from shared.backend import Backend
    from shared.models import Identity, Triple
    from shared.ports import IdentityStore

app = typer.Typer(help="Sigil: an event-driven AI agent gateway.", no_args_is_help=True)

DataDir = Annotated[
    Path | None, typer.Option("--data-dir", help="state directory (default: $SIGIL_DATA_DIR or .sigil)")
]
Workspace = Annotated[str, typer.Option("--workspace", "-w", help="workspace id")]
Url = Annotated[str | None, typer.Option("--url", help="gateway base URL (default: from settings)")]


def _settings(data_dir: Path | None, **overrides: object) -> Settings:
    values = {k: v for k, v in overrides.items() if v is not None}
    if data_dir is not None:
        values["data_dir"] = data_dir
    return Settings(**values)  # type: ignore[arg-type]


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

    logs.configure()
    settings = _settings(data_dir, host=host, port=port, backend="embedded")
    if aws:
        from shared.local.aws_mode import serve

        serve(settings)
        return
    gateway = LocalGateway(settings)
    # The data directory and the port are taken before start() puts in-flight items back on
    # their lanes: an instance that cannot serve must not run (again) another one's turns.
    try:
        gateway.lock_data_dir()
        listener = _listen(settings.host, settings.port)
    except (DataDirInUse, OSError) as exc:
        gateway.stop()
        typer.echo(f"sigil dev: {exc}", err=True)
        raise typer.Exit(1) from None
    gateway.start()
    base = f"http://{settings.host}:{settings.port}"
    ws = settings.default_workspace
    problem = gateway.model_status()
    model_line = settings.resolved_model() if problem is None else f"NOT CONFIGURED. {problem}"
    typer.echo(
        "\n".join(
            [
                f"Sigil local gateway on {base}   state: {settings.data_dir.resolve()}",
                f"  model:    {model_line}",
                f"  send:     POST {base}/webhooks/web/{ws}   JSON {{event_id, session, user, text}}",
                "            signed with X-Sigil-Timestamp and X-Sigil-Signature (see docs/web-channel.md)",
                f"  replies:  GET  {base}/sessions/{ws}/<session>/outbox?after=<seq>   (JSON)",
                f"            GET  {base}/sessions/{ws}/<session>/stream               (server-sent events)",
                '  try:      sigil send "hello" --session demo --wait',
            ]
        ),
        err=True,
    )
    try:
        uvicorn.Server(uvicorn.Config(gateway.app(), log_config=None)).run(sockets=[listener])
    finally:
        listener.close()
        gateway.stop()


def _listen(host: str, port: int) -> socket.socket:
    """The gateway's bound socket (uvicorn listens on it); OSError names the address if taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # As uvicorn binds: a restart may reuse the port while old connections sit in TIME_WAIT.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


def _secret(settings: Settings, workspace: str) -> str:
    from shared.adapters import build_backend
    from shared.channels import web

    backend = build_backend(settings)
    try:
        secret = backend.secrets.get(web.secret_name(workspace))
    finally:
        backend.close()
    if secret is None:
        # `sigil dev` creates only its default workspace's secret; any other is made on request.
        how = (
            "run `sigil dev` once, or `sigil web-secret --create`"
            if workspace == settings.default_workspace
            else f"create it with `sigil web-secret -w {workspace} --create`"
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
    settings = _settings(data_dir)
    base = url or f"http://{settings.host}:{settings.port}"
    secret = _secret(settings, workspace)
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
    settings = _settings(data_dir)
    base = url or f"http://{settings.host}:{settings.port}"
    target = f"/sessions/{workspace}/{session}/outbox?after={after}"
    secret = _secret(settings, workspace)
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
    settings = _settings(data_dir)
    if create:
        _create_web_secret(settings, workspace)
    typer.echo(_secret(settings, workspace))


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


# ---------------------------------------------------------------- pairing

pairing_app = typer.Typer(
    help="Senders waiting for approval under the pairing policy: list, approve, block.",
    no_args_is_help=True,
)
app.add_typer(pairing_app, name="pairing")

PairingWorkspace = Annotated[
    str | None,
    typer.Option("--workspace", "-w", help="workspace id (default: the one platform channels deliver into)"),
]


@contextmanager
def _identities(data_dir: Path | None, workspace: str | None) -> Iterator[tuple[IdentityStore, str]]:
    """The identity store SIGIL_BACKEND names (embedded: only the data dir's sigil.db is opened),
    and the workspace."""
    from shared.adapters.embedded import Database, SqliteIdentityStore, open_data_dir

    settings = _settings(data_dir)
    if settings.backend != "embedded":
        from shared.adapters import build_backend

        backend = build_backend(settings)
        try:
            yield backend.identities, workspace or settings.resolved_channel_workspace()
        finally:
            backend.close()
        return
    db = Database(open_data_dir(settings.data_dir) / "sigil.db")
    try:
        yield SqliteIdentityStore(db), workspace or settings.resolved_channel_workspace()
    finally:
        db.close()


def _describe(identity: Identity) -> str:
    name = f"  {identity.display_name}" if identity.display_name else ""
    return f"{identity.channel}:{identity.channel_user_id}  as {identity.user_id}{name}"


@pairing_app.command("list")
def pairing_list(
    workspace: PairingWorkspace = None,
    show_all: Annotated[bool, typer.Option("--all", help="every identity, not only pending ones")] = False,
    data_dir: DataDir = None,
) -> None:
    """List the senders waiting for approval, with their pairing codes."""
    with _identities(data_dir, workspace) as (store, ws):
        found = store.list_identities(ws, status=None if show_all else "pending")
    if not found:
        typer.echo(f"no {'identities' if show_all else 'pending senders'} in workspace {ws!r}", err=True)
        return
    for identity in found:
        code = identity.pairing_code or "-"
        typer.echo(
            f"{code:<8}  {identity.status:<8}  {identity.created_at:%Y-%m-%d %H:%M}  {_describe(identity)}"
        )


@pairing_app.command("approve")
def pairing_approve(
    code: Annotated[str, typer.Argument(help="the pairing code the sender was given")],
    workspace: PairingWorkspace = None,
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="the Sigil user they are (default: derived)")
    ] = None,
    data_dir: DataDir = None,
) -> None:
    """Approve a pending sender: their next message is answered, as USER."""
    from shared.identity import approve

    with _identities(data_dir, workspace) as (store, ws):
        approved = _admin(lambda: approve(store, ws, code, user_id=user))
    typer.echo(f"approved {_describe(approved)}")


@pairing_app.command("block")
def pairing_block(
    who: Annotated[str, typer.Argument(help="a pairing code, or CHANNEL:USER (e.g. telegram:12345)")],
    workspace: PairingWorkspace = None,
    data_dir: DataDir = None,
) -> None:
    """Block a sender: their messages are dropped unanswered (and audited)."""
    from shared.identity import block

    with _identities(data_dir, workspace) as (store, ws):
        blocked = _admin(lambda: block(store, ws, who))
    typer.echo(f"blocked {_describe(blocked)}")


def _admin(action: Callable[[], Identity]) -> Identity:
    from shared.errors import SigilError

    try:
        return action()
    except SigilError as exc:
        typer.echo(exc.message, err=True)
        raise typer.Exit(1) from exc


# ---------------------------------------------------------------- identities

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
    workspace: PairingWorkspace = None,
    data_dir: DataDir = None,
) -> None:
    """Make WHO the Sigil user TO names: their conversations on both channels become one memory."""
    from shared.identity import link_identity, link_target

    with _identities(data_dir, workspace) as (store, ws):
        linked = _admin(lambda: link_identity(store, ws, who, link_target(store, ws, to)))
    typer.echo(f"linked {_describe(linked)}  ({linked.status})")


@identity_app.command("unlink")
def identity_unlink(
    who: Annotated[str, typer.Argument(help="CHANNEL:USER to unlink, e.g. slack:U0123ABC")],
    workspace: PairingWorkspace = None,
    data_dir: DataDir = None,
) -> None:
    """Give WHO back their own Sigil user (the one derived from their channel id)."""
    from shared.identity import unlink_identity

    with _identities(data_dir, workspace) as (store, ws):
        unlinked = _admin(lambda: unlink_identity(store, ws, who))
    typer.echo(f"unlinked {_describe(unlinked)}")


@identity_app.command("list")
def identity_list(
    workspace: PairingWorkspace = None,
    user: Annotated[str | None, typer.Option("--user", "-u", help="only this Sigil user")] = None,
    data_dir: DataDir = None,
) -> None:
    """Each Sigil user of the workspace with the channel identities that are them."""
    with _identities(data_dir, workspace) as (store, ws):
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


secret_app = typer.Typer(
    help="The local gateway's secrets (bot tokens, signing secrets, API keys) in its data dir.",
    no_args_is_help=True,
)
app.add_typer(secret_app, name="secret")


def _local_secrets(data_dir: Path | None) -> FileSecretStore:
    from shared.adapters.embedded import FileSecretStore, open_data_dir

    return FileSecretStore(open_data_dir(_settings(data_dir).data_dir) / "secrets.json")


def _known_secrets() -> list[str]:
    """The secret names something reads: channel credentials and LLM keys (web/<workspace> aside)."""
    from shared.config import CHANNEL_TOKENS, INGRESS_SECRETS, LLM_KEYS, OPTIONAL_SECRETS

    return sorted(spec.key for spec in (*INGRESS_SECRETS, *CHANNEL_TOKENS, *LLM_KEYS, *OPTIONAL_SECRETS))


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
    if name in _known_secrets():
        return name
    if stored is not None and name in stored:
        return name
    known = ", ".join([*_known_secrets(), "web/<workspace>"])
    raise typer.BadParameter(f"unknown secret {name!r}; the known ones are: {known}", param_hint="'NAME'")


def _masked(value: str) -> str:
    # Enough to tell two values apart, never enough to use one: the last 4 characters of a long one.
    tail = value[-4:] if len(value) >= 16 else ""
    return f"****{tail} ({len(value)} characters)"


@secret_app.command("set")
def secret_set(
    name: Annotated[str, typer.Argument(help="e.g. telegram/bot-token, slack/signing-secret")],
    data_dir: DataDir = None,
) -> None:
    """Store a secret's value, read from the prompt (hidden) or from standard input."""
    import sys

    _known_secret(name)
    value = typer.prompt("value", hide_input=True) if sys.stdin.isatty() else sys.stdin.read()
    value = value.strip()
    if not value:
        typer.echo("an empty value was not stored", err=True)
        raise typer.Exit(2)
    _local_secrets(data_dir).set(name, value)
    typer.echo(f"stored {name}", err=True)


@secret_app.command("get")
def secret_get(
    name: Annotated[str, typer.Argument(help="the secret's name (see `sigil secret list`)")],
    data_dir: DataDir = None,
) -> None:
    """Say whether a secret is set, with a masked form of it (never the value); exit 1 if not."""
    store = _local_secrets(data_dir)
    _known_secret(name, stored=store.names())
    value = store.get(name)
    if value is None:
        typer.echo(f"{name} is not set", err=True)
        raise typer.Exit(1)
    typer.echo(f"{name} is set: {_masked(value)}")


@secret_app.command("delete")
def secret_delete(
    name: Annotated[str, typer.Argument(help="the secret's name (see `sigil secret list`)")],
    yes: Annotated[bool, typer.Option("--yes", help="do not ask for confirmation")] = False,
    data_dir: DataDir = None,
) -> None:
    """Remove a secret from the data dir."""
    store = _local_secrets(data_dir)
    _known_secret(name, stored=store.names())
    if store.get(name) is None:
        typer.echo(f"{name} is not set", err=True)
        raise typer.Exit(1)
    if not yes and not typer.confirm(f"delete secret {name}? This cannot be undone"):
        typer.echo("nothing deleted", err=True)
        raise typer.Exit(1)
    store.delete(name)
    typer.echo(f"deleted {name}", err=True)


@secret_app.command("list")
def secret_list(data_dir: DataDir = None) -> None:
    """List the names of the stored secrets (never their values)."""
    for name in _local_secrets(data_dir).names():
        typer.echo(name)


# ---------------------------------------------------------------- memory

memory_app = typer.Typer(
    help="A workspace's derived memory (facts, summaries) with provenance; erase a user; roll back a run.",
    no_args_is_help=True,
)
app.add_typer(memory_app, name="memory")

MemoryWorkspace = Annotated[
    str | None, typer.Option("--workspace", "-w", help="workspace id (default: $SIGIL_DEFAULT_WORKSPACE)")
]


@contextmanager
def _memory_backend(data_dir: Path | None, workspace: str | None) -> Iterator[tuple[Backend, str]]:
    """The backend the settings name (the embedded data dir by default), and the workspace."""
    from shared.adapters import build_backend

    settings = _settings(data_dir)
    backend = build_backend(settings)
    try:
        yield backend, workspace or settings.default_workspace
    finally:
        backend.close()


def _when(value: datetime) -> str:
    return f"{value:%Y-%m-%d %H:%M}"


@memory_app.command("list")
def memory_list(
    workspace: MemoryWorkspace = None,
    user: Annotated[
        str | None,
        typer.Option("--user", "-u", help="only this user's: their facts and their sessions' summaries"),
    ] = None,
    status: Annotated[
        str, typer.Option(help="active: facts recalled today; all: merged and pruned ones too")
    ] = "active",
    limit: Annotated[int, typer.Option(help="at most this many facts and this many summaries")] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per line")] = False,
    data_dir: DataDir = None,
) -> None:
    """List facts (Tier 3) and summaries (Tier 2) with where they came from: session, messages,
    source, consolidation run, when, status and relevance."""
    from shared.memory.keys import normalize_key
    from shared.models import WORKSPACE_WIDE  # an admin's read: the whole workspace

    if status not in ("active", "all"):
        typer.echo("--status is active or all", err=True)
        raise typer.Exit(2)
    with _memory_backend(data_dir, workspace) as (backend, ws):
        facts: list[Triple] = []
        after: str | None = None
        while len(facts) < limit and (
            page := backend.memory.list_triples(ws, scope=WORKSPACE_WIDE, after=after, limit=500)
        ):
            after = page[-1].id
            facts += [
                t
                for t in page
                if (status == "all" or t.status == "active")
                and (user is None or t.user_id == user or normalize_key(t.subject) == normalize_key(user))
            ]
        owned = (
            {s.id for s in backend.sessions.list_sessions(ws, limit=1_000_000) if s.user_id == user}
            if user is not None
            else set()
        )
        summaries = [
            s
            for s in backend.memory.list_summaries(ws, scope=WORKSPACE_WIDE, limit=1_000_000)
            if user is None or s.user_id == user or s.session_id in owned
        ]
    facts, summaries = facts[:limit], summaries[-limit:]
    if as_json:
        for t in facts:
            typer.echo(json.dumps({"tier": "fact", **t.model_dump(mode="json", exclude={"embedding"})}))
        for s in summaries:
            typer.echo(json.dumps({"tier": "summary", **s.model_dump(mode="json")}))
        return
    if not facts and not summaries:
        typer.echo(f"no memories in workspace {ws!r}" + (f" for user {user!r}" if user else ""), err=True)
        return
    for t in facts:
        lifecycle = (
            t.status + (f"->{t.merged_into}" if t.merged_into else "") + (" long-term" if t.long_term else "")
        )
        typer.echo(
            f"fact {t.id}  [{lifecycle}] relevance {t.relevance:.2f}  {t.category}  "
            f"{t.subject} | {t.predicate} | {t.object}"
        )
        typer.echo(
            f"    from {t.source}{f' run {t.run_id}' if t.run_id else ''}  session {t.session_id or '-'}  "
            f"messages {','.join(t.message_ids) or '-'}  user {t.user_id or '-'}  "
            f"created {_when(t.created_at)}  updated {_when(t.updated_at)}  used {t.access_count}x"
            + (f"  changed by {t.changes[-1].run_id} ({t.changes[-1].action})" if t.changes else "")
        )
    for s in summaries:
        typer.echo(f"summary {s.id}  [{s.kind}] session {s.session_id} messages {s.first_seq}-{s.last_seq}")
        typer.echo(
            f"    {_when(s.start_at)} .. {_when(s.end_at)}  run {s.run_id or '-'}  "
            f"created {_when(s.created_at)}  {' '.join(s.text.split())[:160]}"
        )


@memory_app.command("share")
def memory_share(
    fact: Annotated[str, typer.Argument(help="the fact's id (see `sigil memory list`)")],
    workspace: MemoryWorkspace = None,
    data_dir: DataDir = None,
) -> None:
    """Mark a fact shared: everyone in the workspace recalls it under the personal policy."""
    _set_shared(data_dir, workspace, fact, shared=True)


@memory_app.command("unshare")
def memory_unshare(
    fact: Annotated[str, typer.Argument(help="the fact's id (see `sigil memory list`)")],
    workspace: MemoryWorkspace = None,
    data_dir: DataDir = None,
) -> None:
    """Take a fact's sharing back: only its own people and conversation recall it again."""
    _set_shared(data_dir, workspace, fact, shared=False)


def _set_shared(data_dir: Path | None, workspace: str | None, fact_id: str, *, shared: bool) -> None:
    from shared.errors import SigilError
    from shared.memory.sharing import set_shared

    with _memory_backend(data_dir, workspace) as (backend, ws):
        try:
            triple = set_shared(backend.memory, backend.index, ws, fact_id, shared=shared)
        except SigilError as exc:
            typer.echo(exc.message, err=True)
            raise typer.Exit(1) from exc
    typer.echo(
        f"{'shared' if shared else 'unshared'} fact {triple.id}  {triple.subject} | {triple.predicate} | "
        f"{triple.object}"
    )


@memory_app.command("erase")
def memory_erase(
    user: Annotated[str, typer.Option("--user", "-u", help="the Sigil user to erase")],
    workspace: MemoryWorkspace = None,
    yes: Annotated[bool, typer.Option("--yes", help="do not ask for confirmation")] = False,
    data_dir: DataDir = None,
) -> None:
    """Erase a user from every store of the workspace (the right to erasure; docs/consolidation.md)."""
    from shared.memory.erasure import erase_user

    with _memory_backend(data_dir, workspace) as (backend, ws):
        if not yes and not typer.confirm(
            f"erase everything of user {user!r} in workspace {ws!r}? This cannot be undone"
        ):
            typer.echo("nothing erased", err=True)
            raise typer.Exit(1)
        report = erase_user(backend, ws, user)
    typer.echo(json.dumps(report.model_dump(), indent=2))


@memory_app.command("rollback")
def memory_rollback(
    run: Annotated[
        str, typer.Option("--run", "-r", help="the consolidation run id (see `sigil memory list`)")
    ],
    workspace: MemoryWorkspace = None,
    data_dir: DataDir = None,
) -> None:
    """Undo a consolidation run: restore what it merged, pruned or promoted; delete what it wrote."""
    from shared.consolidation.rollback import rollback_run, run_exists

    with _memory_backend(data_dir, workspace) as (backend, ws):
        if not run_exists(backend, ws, run):
            typer.echo(
                f"no consolidation run {run!r} in workspace {ws!r}: no fact or summary carries it "
                "(never run, already rolled back, or purged; see `sigil memory list`)",
                err=True,
            )
            raise typer.Exit(1)
        report = rollback_run(backend, ws, run)
    typer.echo(json.dumps(report.model_dump(), indent=2))


# ---------------------------------------------------------------- consolidation


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
    with _memory_backend(data_dir, workspace) as (backend, ws):
        settings = _settings(data_dir)

        def model() -> ConsolidationModel:
            return consolidation_model(settings)

        report: CompactionResult | WorkspaceReport | HourlyReport
        if session is not None and backend.sessions.get(ws, session) is None:
            web_id = f"web.{session}"  # what `sigil send --session` names, as the web channel stores it
            hint = f" (did you mean {web_id}?)" if backend.sessions.get(ws, web_id) is not None else ""
            typer.echo(f"no session {session!r} in workspace {ws!r}{hint}", err=True)
            raise typer.Exit(1)
        try:
            if session is not None:
                report = compact_session(backend, model, ws, session, run_id=run_id)
            elif workspace is not None:
                report = consolidate_workspace(backend, model, ws, run_id=run_id)
            else:
                report = run_hourly(backend, model, run_id=run_id)
        except ModelNotConfigured as exc:
            typer.echo(exc.message, err=True)
            raise typer.Exit(2) from exc
    if as_json:
        typer.echo(json.dumps(report.model_dump(mode="json"), indent=2))
        return
    for line in summary_lines(report):
        typer.echo(line)


if __name__ == "__main__":
    app()

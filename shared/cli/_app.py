"""What every `sigil` command shares: the app, the common options, the settings they read."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Protocol

if TYPE_CHECKING:
    from shared.backend import Backend
    from shared.configuration import SigilFile
    from shared.models import Identity
    from shared.ports import IdentityStore, RouteStore, SessionStore, WorkspaceStore

import typer

from shared.config import Settings
from shared.errors import SigilError

app = typer.Typer(help="Sigil: an event-driven AI agent gateway.", no_args_is_help=True)


def one_line_summaries(group: typer.Typer) -> None:
    """Each command's entry in a command list (its short help): the first paragraph of its help on
    one line. Typer's rich help keeps a docstring's hard line breaks there, so a wrapped sentence
    showed broken over rows of `sigil --help`; the command's own --help page is unchanged."""
    for info in group.registered_commands:
        doc = info.help or (info.callback.__doc__ if info.callback is not None else None)
        if info.short_help is None and doc:
            info.short_help = " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            one_line_summaries(sub.typer_instance)


DataDir = Annotated[
    Path | None, typer.Option("--data-dir", help="state directory (default: $SIGIL_DATA_DIR or .sigil)")
]
Workspace = Annotated[str, typer.Option("--workspace", "-w", help="workspace id")]
ChannelWorkspace = Annotated[
    str | None,
    typer.Option("--workspace", "-w", help="workspace id (default: the one platform channels deliver into)"),
]
Url = Annotated[
    str | None,
    typer.Option(
        "--url",
        help="gateway base URL (default: the address of the `sigil dev` running on the data dir, "
        "else http://$SIGIL_HOST:$SIGIL_PORT)",
    ),
]


Stack = Annotated[
    str | None,
    typer.Option(
        "--stack",
        help="administer this deployed stack (found from its CloudFormation outputs, with your own "
        "AWS credentials) instead of the local data dir, or the stores of the `sigil dev --aws` "
        "running on it",
    ),
]
Region = Annotated[
    str | None,
    typer.Option("--region", help="the stack's region (default: AWS_REGION or your AWS profile's)"),
]

# The stack's CloudFormation outputs (infra/stack.py) and the Settings field each one fills.
STACK_OUTPUTS = {
    "SessionsTable": "sessions_table",
    "MemoryTable": "memory_table",
    "TurnsQueueUrl": "queue_url",
    "EventBusName": "event_bus_name",
    "SearchEndpoint": "opensearch_endpoint",
}
# Optional: a stack deployed before it had the output uses the default prefix.
OPTIONAL_STACK_OUTPUTS = {
    "SecretsPrefix": "secrets_prefix",
    "DeadLettersQueueUrl": "dead_letter_queue_url",
    "SkillsBucket": "skills_bucket",
    # `sigil` erasure removes a user's files (docs/media.md).
    "MediaBucket": "media_bucket",
    # Only a stack with sharded lanes has it (docs/scale.md#sharded-lanes).
    "LaneQueueUrls": "lane_queue_urls",
    # `sigil schedules --stack` (docs/schedules.md).
    "ScheduleGroup": "schedule_group",
    "ScheduleRoleArn": "schedule_role_arn",
    "TurnsQueueArn": "queue_arn",
}


def settings_for(data_dir: Path | None, **overrides: object) -> Settings:
    """What every command reads: its flags, then SIGIL_* variables, then the configuration file's
    `defaults` (shared.configuration.file_settings); a file with errors ends the command."""
    return settings_and_file(data_dir, **overrides)[0]


def settings_and_file(data_dir: Path | None, **overrides: object) -> tuple[Settings, SigilFile | None]:
    """settings_for, and the configuration file it read (None: no file at the default path)."""
    from shared.configuration import ConfigFileError, file_settings

    values = {k: v for k, v in overrides.items() if v is not None}
    if data_dir is not None:
        values["data_dir"] = data_dir
    try:
        return file_settings(**values)
    except ConfigFileError as exc:
        typer.echo(exc.message, err=True)
        raise typer.Exit(1) from None


def target_settings(
    data_dir: Path | None, stack: str | None = None, region: str | None = None, **overrides: object
) -> Settings:
    """The settings of the backend a command administers: the local one (settings_for), or with
    `stack` the deployed stack its CloudFormation outputs name, in `region`."""
    return target_settings_and_file(data_dir, stack, region, **overrides)[0]


def target_settings_and_file(
    data_dir: Path | None, stack: str | None = None, region: str | None = None, **overrides: object
) -> tuple[Settings, SigilFile | None]:
    """target_settings, and the configuration file it read (None: no file at the default path)."""
    values = stack_settings(stack, region, data_dir)
    # A flag given on the command line wins over the stack's output of the same setting.
    values.update({k: v for k, v in overrides.items() if v is not None})
    return settings_and_file(data_dir, **values)


def target_config(
    data_dir: Path | None, stack: str | None, region: str | None, file: Path | None
) -> tuple[Settings, SigilFile]:
    """target_settings, and the configuration file (`file`, else $SIGIL_CONFIG or ./sigil.yaml),
    which must exist and be valid; else the command ends with its errors, one line each."""
    from shared.configuration import ConfigFileError, file_settings

    values = {k: v for k, v in stack_settings(stack, region, data_dir).items() if v is not None}
    if data_dir is not None:
        values["data_dir"] = data_dir
    try:
        settings = Settings(**values)
        path = file or settings.config_file
        settings, loaded = file_settings(**values, SIGIL_CONFIG=path)
    except ConfigFileError as exc:
        typer.echo(exc.message, err=True)
        raise typer.Exit(1) from None
    assert loaded is not None  # named explicitly, so file_settings loads it or raises
    return settings, loaded


def gateway_url(settings: Settings, url: str | None) -> str:
    """Where the client commands (send, replies, web open) reach the gateway: `--url`, else the
    address the `sigil dev` running on the data dir recorded (shared.local.running: whatever its
    --host/--port, SIGIL_HOST/SIGIL_PORT said), else SIGIL_HOST:SIGIL_PORT (127.0.0.1:8787)."""
    from shared.local.running import running_gateway

    if url:
        return url.rstrip("/")
    found = running_gateway(settings.data_dir)
    return found.url if found is not None else f"http://{settings.host}:{settings.port}"


def stack_settings(stack: str | None, region: str | None, data_dir: Path | None = None) -> dict[str, object]:
    """The Settings values that point at a deployed stack; without `stack`, at the stores of the
    `sigil dev --aws` running on the data dir (local_stack_settings), else none."""
    if stack is None:
        if region is not None:
            raise typer.BadParameter("--region goes with --stack", param_hint="'--region'")
        return local_stack_settings(data_dir)
    resolved_region, outputs = stack_outputs(stack, region)
    values: dict[str, object] = {"backend": "aws", "AWS_REGION": resolved_region}
    for output, field in (STACK_OUTPUTS | OPTIONAL_STACK_OUTPUTS).items():
        if output in outputs:
            values[field] = outputs[output]
    missing = sorted(set(STACK_OUTPUTS) - outputs.keys())
    if missing:
        typer.echo(
            f"stack {stack!r} in {resolved_region} has no output {', '.join(missing)}: is it a Sigil "
            "stack, deployed by this version (make deploy)?",
            err=True,
        )
        raise typer.Exit(1)
    return values


def local_stack_settings(data_dir: Path | None) -> dict[str, object]:
    """The Settings values of the `sigil dev --aws` running on the data dir (its record in
    shared.local.running), with this process's AWS clients pointed at its moto server; none when
    no such gateway runs there. Its stores hold the mode's state, not the data dir: a pairing
    code the mode's agent gave is pending there, and only there."""
    import os

    from shared.local.running import local_stack_environment, running_gateway

    found = running_gateway(data_dir if data_dir is not None else Settings().data_dir)
    if found is None or found.aws is None:
        return {}
    # moto's dummy credentials, not the operator's: a profile or session token in the environment
    # would win over them in boto3's chain.
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
        os.environ.pop(name, None)
    os.environ.update(local_stack_environment(found.aws))
    return {"backend": "aws", "AWS_REGION": found.aws.region, **found.aws.settings}


def stack_outputs(stack: str, region: str | None) -> tuple[str, dict[str, str]]:
    """The region used and the stack's outputs by key (DescribeStacks, the operator's credentials)."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

    region = region or boto3.session.Session().region_name
    if not region:
        typer.echo("no AWS region: pass --region or set AWS_REGION", err=True)
        raise typer.Exit(2)
    try:
        client = boto3.client("cloudformation", region_name=region)
        found = client.describe_stacks(StackName=stack)["Stacks"]
    except NoCredentialsError:
        typer.echo("no AWS credentials: configure a profile (aws configure) or set AWS_PROFILE", err=True)
        raise typer.Exit(1) from None
    except NoRegionError:
        typer.echo("no AWS region: pass --region or set AWS_REGION", err=True)
        raise typer.Exit(2) from None
    except ClientError as exc:
        message = exc.response.get("Error", {}).get("Message", str(exc))
        typer.echo(f"cannot read stack {stack!r} in {region}: {message}", err=True)
        raise typer.Exit(1) from None
    except BotoCoreError as exc:
        typer.echo(f"cannot reach CloudFormation in {region}: {exc}", err=True)
        raise typer.Exit(1) from None
    if not found:
        typer.echo(f"no stack {stack!r} in {region}", err=True)
        raise typer.Exit(1)
    outputs = {o["OutputKey"]: o["OutputValue"] for o in found[0].get("Outputs", []) if "OutputKey" in o}
    return region, outputs


@contextmanager
def open_identities(
    data_dir: Path | None, workspace: str | None, stack: str | None = None, region: str | None = None
) -> Iterator[tuple[IdentityStore, str]]:
    """The identity store of the target (target_settings; embedded: only the data dir's sigil.db
    is opened), and the workspace: a known one (require_known_workspace; its identities count)."""
    from shared.adapters.embedded import (
        Database,
        SqliteIdentityStore,
        SqliteRouteStore,
        SqliteSessionStore,
        SqliteWorkspaceStore,
        open_data_dir,
    )

    settings, file = target_settings_and_file(data_dir, stack, region)
    ws = workspace or settings.resolved_channel_workspace()
    if settings.backend != "embedded":
        from shared.adapters import build_backend

        with said_in_one_line():
            backend = build_backend(settings)
            try:
                yield _known(backend.identities, ws, settings, file, backend)
            finally:
                backend.close()
        return
    db = Database(open_data_dir(settings.data_dir) / "sigil.db")
    try:
        sources = _Sources(SqliteWorkspaceStore(db), SqliteRouteStore(db), SqliteSessionStore(db))
        yield _known(SqliteIdentityStore(db), ws, settings, file, sources)
    finally:
        db.close()


def _known(
    identities: IdentityStore, ws: str, settings: Settings, file: SigilFile | None, sources: WorkspaceSources
) -> tuple[IdentityStore, str]:
    """(identities, ws) once `ws` is a known workspace; its identities count."""
    require_known_workspace(
        ws, settings, file, lambda: nullcontext(sources), holds=lambda w: bool(identities.list_identities(w))
    )
    return identities, ws


def describe(identity: Identity) -> str:
    name = f"  {identity.display_name}" if identity.display_name else ""
    return f"{identity.channel}:{identity.channel_user_id}  as {identity.user_id}{name}"


def admin(action: Callable[[], Identity]) -> Identity:
    try:
        return action()
    except SigilError as exc:
        typer.echo(exc.message, err=True)
        raise typer.Exit(1) from exc


@contextmanager
def open_backend(
    data_dir: Path | None,
    workspace: str | None,
    stack: str | None = None,
    region: str | None = None,
    *,
    holds: Callable[[Backend, str], bool] | None = None,
) -> Iterator[tuple[Backend, str]]:
    """The backend of the target (target_settings: the embedded data dir by default, or a
    deployed stack), and the workspace: a known one (require_known_workspace; what `holds` finds
    in it counts)."""
    from shared.adapters import build_backend

    settings, file = target_settings_and_file(data_dir, stack, region)
    ws = workspace or settings.default_workspace
    with said_in_one_line():
        backend = build_backend(settings)
        try:
            require_known_workspace(
                ws,
                settings,
                file,
                lambda: nullcontext(backend),
                holds=None if holds is None else (lambda w: holds(backend, w)),
            )
            yield backend, ws
        finally:
            backend.close()


class WorkspaceSources(Protocol):
    """The stores that say a workspace exists (a Backend has them all)."""

    @property
    def workspaces(self) -> WorkspaceStore: ...

    @property
    def routes(self) -> RouteStore: ...

    @property
    def sessions(self) -> SessionStore: ...


class _Sources:
    def __init__(self, workspaces: WorkspaceStore, routes: RouteStore, sessions: SessionStore) -> None:
        self.workspaces, self.routes, self.sessions = workspaces, routes, sessions


def require_known_workspace(
    workspace: str,
    settings: Settings,
    file: SigilFile | None,
    sources: Callable[[], AbstractContextManager[WorkspaceSources]],
    *,
    holds: Callable[[str], bool] | None = None,
    option: str = "--workspace",
    hint: str | None = None,
) -> None:
    """End the command (exit 2, a usage error listing the known ones) when `workspace` is none
    the target knows; a typo would otherwise read as an empty workspace ("no memories").

    Known (docs/configuration.md): the settings' default and channel workspaces (where messages
    land with no configuration at all); one the configuration file names; one with a stored
    WorkspaceConfig or a stored route into it; one holding a session (a workspace the cloud's
    agent served needs no stored configuration); one holding what the command reads (`holds`:
    its facts, identities, skills, dead letters, web secret). The stores are opened (`sources`)
    only when the cheap checks do not decide. The list names the ones that can be listed:
    sessions and data are found per workspace, not listed. `hint` ends the message: how to make
    the workspace, where the command can.
    """
    configured = _configured_workspaces(settings, file)
    if workspace in configured or (holds is not None and holds(workspace)):
        return
    with sources() as found:
        if found.workspaces.get(workspace) is not None or found.sessions.list_sessions(workspace, limit=1):
            return
        routes = found.routes.list_routes()
        routed = {r.workspace for r in routes} | {
            o.workspace for r in routes for o in r.chats.values() if o.workspace
        }
        if workspace in routed:
            return
        known = configured | routed | {c.id for c in found.workspaces.list_workspaces()}
    message = f"no workspace {workspace!r}; the known ones are: {', '.join(sorted(known))}"
    raise typer.BadParameter(message + (f"; {hint}" if hint else ""), param_hint=f"'{option}'")


def _configured_workspaces(settings: Settings, file: SigilFile | None) -> set[str]:
    named = {settings.default_workspace, settings.resolved_channel_workspace()}
    return named | set(file.workspaces if file is not None else ())


@contextmanager
def said_in_one_line() -> Iterator[None]:
    """End the command in one line, exit status 1, when the backend refuses or cannot be reached:
    a SigilError (a stack's search endpoint out of this machine's reach, say) with its message,
    an AWS service's refusal (AccessDenied, a table the stack's output names but that is not
    there) as AWS words it. Anything else is a bug and keeps its traceback."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except SigilError as exc:
        typer.echo(exc.message, err=True)
        raise typer.Exit(1) from None
    except (ClientError, BotoCoreError) as exc:
        typer.echo(f"AWS: {exc}", err=True)
        raise typer.Exit(1) from None

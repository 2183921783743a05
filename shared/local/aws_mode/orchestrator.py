"""The whole mode: the stand-ins started in order, wired to the functions' containers, and stopped.

`serve` is the `sigil dev --aws` command. The mode's child processes (the containers and
osmem-server) end with it: on Ctrl-C or SIGTERM it stops them itself, and if it is killed
outright each of them notices that its parent is gone and exits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from types import FrameType
from typing import TYPE_CHECKING, Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from starlette.applications import Starlette

from shared.config import Settings
from shared.local.aws_mode.event_source import FifoPoller, PollerThread
from shared.local.aws_mode.http_front import HttpFront
from shared.local.aws_mode.management_api import ManagementApi
from shared.local.aws_mode.resources import (
    DEFAULT_REGION,
    NAME_PREFIX,
    TURNS_DLQ,
    TURNS_QUEUE,
    LocalResources,
    aws_client,
    container_environment,
    function_env,
    provision,
)
from shared.local.aws_mode.schedule import ConsolidationFeed
from shared.local.aws_mode.scheduler import SchedulerStandIn
from shared.local.aws_mode.servers import fifo_redelivery_in_order, start_moto, start_osmem
from shared.local.aws_mode.ws_front import WsFront
from shared.local.datadir_lock import DataDirInUse, DataDirLock
from shared.local.lambda_runtime import FunctionPool, FunctionSpec, watch_parent
from shared.local.model_check import PROBE_TIMEOUT_S, model_line
from shared.local.running import (
    GatewayRecord,
    LocalStack,
    client_url,
    listen,
    remove_record,
    write_record,
)

if TYPE_CHECKING:
    from shared.configuration import SigilFile

log = logging.getLogger("sigil.aws_mode")


class AwsModeOptions(BaseSettings):
    """The stand-ins' own knobs (SIGIL_AWS_MODE_*); the functions read the usual SIGIL_* settings."""

    model_config = SettingsConfigDict(env_prefix="SIGIL_AWS_MODE_", extra="ignore")

    # Short, so a failed turn is retried within seconds. One poller handles one batch at a time,
    # so a batch that outlasts it is never received twice (see FifoPoller).
    visibility_timeout_s: int = Field(default=2, ge=1, le=43_200)
    # EventBridge's rate(1 hour) by default; the first tick comes one interval after start, as a
    # new scheduled rule's does.
    schedule_interval_s: float = Field(default=3600.0, gt=0)
    batch_size: int = Field(default=10, ge=1, le=10)
    # How many agent batches run at once, each in its own agent container, as the event source's
    # maximum concurrency lets Lambda (the stage's cap; docs/scale.md). One by default: above one,
    # the visibility timeout must outlast a batch, or a batch still running is received again.
    agent_batches: int = Field(default=1, ge=1, le=10)
    # How many webhook containers concurrent requests may scale out to (each is a process).
    webhook_containers: int = Field(default=2, ge=1, le=16)
    # The pollers' pause after an empty receive. Short polling: moto handles one request at a
    # time here (see _Serialised), so a long poll would hold every other caller up.
    idle_poll_s: float = Field(default=0.05, gt=0, le=5)


class AwsModeGateway:
    """moto, osmem-server, the three functions' containers, the HTTP front and the pollers."""

    def __init__(
        self, settings: Settings, options: AwsModeOptions | None = None, *, config: SigilFile | None = None
    ) -> None:
        self.settings = settings
        # sigil.yaml, applied to moto's stores at start as `sigil dev` applies it to the data dir.
        self.config = config
        self.options = options if options is not None else AwsModeOptions()
        self.region = settings.aws_region or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
        self._stack = contextlib.ExitStack()
        self._pollers: list[PollerThread] = []
        self._pools: list[FunctionPool] = []
        self.resources: LocalResources | None = None
        self.web_secret: str | None = None
        self.model_problem: str | None = None
        # What is wrong with the model's server (shared.providers.probe), asked once at start.
        self.model_unreachable: str | None = None
        self.webhook: FunctionPool | None = None
        self.ws: FunctionPool | None = None
        self.management: ManagementApi | None = None

    # -- lifecycle

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        try:
            from moto.sqs.models import SQSBackend  # noqa: F401 - only to fail early with a clear message
        except ImportError:
            raise SystemExit(
                "sigil dev --aws needs moto[server] (a dev dependency): run `make dev`"
            ) from None
        self._stack.enter_context(fifo_redelivery_in_order())
        # Loopback whatever --host says: moto accepts any credentials, so it must not be reachable
        # from the network even when the gateway's front is.
        moto = start_moto("127.0.0.1")
        self._stack.callback(moto.stop)
        host, port = moto.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        osmem = start_osmem()
        self._stack.callback(osmem.close)
        # The WebSocket API's management endpoint, where the agent and the ws function post frames.
        self.management = management = ManagementApi(stage="local").start()
        self._stack.callback(management.stop)

        self.resources = resources = provision(
            endpoint,
            self.region,
            opensearch_endpoint=osmem.url,
            secrets_prefix=self.settings.secrets_prefix,
            max_receive_count=self.settings.lane_max_attempts,
            visibility_timeout_s=self.options.visibility_timeout_s,
        )

        specs = {
            # Timeouts and memory sizes of infra/constructs (ingress, agent, consolidation).
            "webhook": (
                "functions.webhook.handler.lambda_handler",
                10.0,
                512,
                self.options.webhook_containers,
            ),
            "agent": ("functions.agent.handler.lambda_handler", 600.0, 1024, self.options.agent_batches),
            "consolidate": ("functions.consolidate.handler.lambda_handler", 900.0, 1024, 1),
            "ws": ("functions.ws.handler.lambda_handler", 15.0, 512, self.options.webhook_containers),
        }
        # As infra/stack.py: the agent and the ws function are told the management endpoint.
        ws_env = {"SIGIL_WS_ENDPOINT": management.endpoint}
        pools: dict[str, FunctionPool] = {}
        for function, (handler, timeout_s, memory_mb, containers) in specs.items():
            spec = FunctionSpec(
                name=f"{NAME_PREFIX}-{function}",
                handler=handler,
                timeout_s=timeout_s,
                memory_mb=memory_mb,
                env=container_environment(
                    function_env(resources, function, self.settings)
                    | (ws_env if function in ("agent", "ws") else {})
                ),
                region=self.region,
            )
            pools[function] = FunctionPool(spec, max_containers=containers)
        self._pools = list(pools.values())
        self._stack.callback(self._stop_pools)
        # Started together so the three imports overlap with each other and with the rest of the
        # setup, then awaited: a handler that cannot be imported stops the gateway here rather
        # than failing its first request.
        for pool in self._pools:
            pool.start()
        self.web_secret = self._ensure_workspace(resources)
        # Imports the model's SDK (~0.5 s) and looks at its server while the containers import.
        self._check_model()
        for pool in self._pools:
            pool.wait_ready()
        self.webhook = pools["webhook"]
        self.ws = pools["ws"]

        sqs = aws_client("sqs", endpoint, self.region)
        turns = FifoPoller(
            sqs,
            queue_url=resources.queue_url,
            queue_arn=resources.queue_arn,
            region=self.region,
            invoke=pools["agent"].invoke,
            batch_size=self.options.batch_size,
        )
        feed = ConsolidationFeed(
            sqs,
            queue_url=resources.events_queue_url,
            region=self.region,
            invoke=pools["consolidate"].invoke,
            interval_s=self.options.schedule_interval_s,
        )
        # The consolidate function's SQS event source on the extraction queue (per-turn
        # extraction): the same receive, invoke, delete-what-succeeded as the agent's; SQS itself
        # holds each message for its DelaySeconds.
        extraction = FifoPoller(
            sqs,
            queue_url=resources.extraction_queue_url,
            queue_arn=resources.extraction_queue_arn,
            region=self.region,
            invoke=pools["consolidate"].invoke,
        )
        # EventBridge Scheduler: the agent's schedules (moto's, of the group) fired into their
        # target queue once a second, as Scheduler would (docs/schedules.md).
        scheduler = SchedulerStandIn(
            aws_client("scheduler", endpoint, self.region), sqs, group=resources.schedule_group
        )
        self._pollers = [
            *(
                # SQS keeps a message group out of every other receive while a batch holds it.
                PollerThread(f"sqs-esm:agent:{n}", lambda: turns.poll_once() > 0, self.options.idle_poll_s)
                for n in range(self.options.agent_batches)
            ),
            PollerThread("events:consolidate", feed.poll_once, self.options.idle_poll_s),
            PollerThread("sqs-esm:extraction", lambda: extraction.poll_once() > 0, self.options.idle_poll_s),
            PollerThread("scheduler", scheduler.poll_once, self.options.idle_poll_s),
        ]
        for poller in self._pollers:
            poller.start()

    def stop(self) -> None:
        # Pollers first, each given time to finish its batch; then the containers and servers.
        for poller in self._pollers:
            poller.stop(timeout_s=5.0)
        self._pollers = []
        self._stack.close()

    def _stop_pools(self) -> None:
        for pool in self._pools:
            pool.kill()  # a batch still running after the pollers' grace is abandoned, as on shutdown
            pool.stop(timeout_s=2.0)
        self._pools = []

    # -- setup helpers

    def _ensure_workspace(self, resources: LocalResources) -> str:
        """The workspace's config and web signing secret, in moto and in the local secret file.

        The secret is kept in the data directory, so it survives restarts (moto does not) and
        `sigil send` / `sigil replies` find it where the embedded gateway keeps it.
        """
        from shared.adapters.aws.dynamodb import DynamoWorkspaceStore
        from shared.adapters.embedded import FileSecretStore
        from shared.adapters.embedded import open_data_dir as _open_data_dir
        from shared.channels import web
        from shared.models import new_workspace

        workspace = self.settings.default_workspace
        data_dir = _open_data_dir(self.settings.data_dir)
        store = FileSecretStore(data_dir / "secrets.json")
        secret = store.ensure(web.secret_name(workspace))
        secretsmanager = aws_client("secretsmanager", resources.endpoint, resources.region)
        # Every workspace's web secret the data directory holds (`sigil web-secret -w W --create`),
        # so browser tokens and signed requests for another workspace verify here as they do there.
        for name in store.names():
            value = store.get(name)
            if name.startswith(web.secret_name("")) and value is not None:
                secretsmanager.create_secret(Name=resources.secrets_prefix + name, SecretString=value)
        dynamodb = aws_client("dynamodb", resources.endpoint, resources.region)
        workspaces = DynamoWorkspaceStore(resources.memory_table, client=dynamodb)
        workspaces.put(new_workspace(workspace, name=workspace))
        if self.config is not None:
            from shared.adapters.aws.dynamodb import DynamoRouteStore
            from shared.configuration import apply

            apply(self.config, workspaces, DynamoRouteStore(resources.sessions_table, client=dynamodb))
        return secret

    def _check_model(self) -> None:
        """Sets `model_problem`: None when a model is usable, else what every reply will say."""
        from shared.errors import ModelNotConfigured
        from shared.providers import build_provider, probe_model

        try:
            build_provider(self.settings, self.settings.resolved_model())
        except ModelNotConfigured as exc:
            self.model_problem = exc.message
            return
        self.model_unreachable = probe_model(self.settings, timeout_s=PROBE_TIMEOUT_S)

    # -- HTTP

    def app(self) -> Starlette:
        assert self.webhook is not None and self.ws is not None, "start() the gateway first"
        assert self.management is not None
        app = HttpFront(self.webhook, health=self._health).app()
        # The WebSocket API's stand-in on the same port, at the path the local gateway uses.
        app.router.routes.append(WsFront(self.ws, self.management).route("/ws"))
        return app

    def _health(self) -> dict[str, Any]:
        return {"status": "ok", "model_configured": self.model_problem is None, "mode": "aws"}

    def local_stack(self) -> LocalStack:
        """Where the stores are, as a deployed stack's outputs would say (shared.local.running):
        what the admin commands (`--stack`) reach while the mode runs."""
        assert self.resources is not None  # started
        r = self.resources
        values = {
            "sessions_table": r.sessions_table,
            "memory_table": r.memory_table,
            "queue_url": r.queue_url,
            "dead_letter_queue_url": r.dlq_url,
            "event_bus_name": r.event_bus_name,
            "opensearch_endpoint": r.opensearch_endpoint,
            "secrets_prefix": r.secrets_prefix,
            "skills_bucket": r.skills_bucket,
            # `sigil erase` removes a user's files from moto's media bucket.
            "media_bucket": r.media_bucket,
            # `sigil schedules` lists and cancels the agent's schedules in moto's scheduler.
            "schedule_group": r.schedule_group,
            "schedule_role_arn": r.schedule_role_arn,
            "queue_arn": r.queue_arn,
        }
        return LocalStack(endpoint=r.endpoint, region=r.region, settings=values)

    def banner(self, base: str | None = None) -> str:
        """`base`: where clients reach the front (the bound socket's address)."""
        assert self.resources is not None  # started
        s, r = self.settings, self.resources
        base = base or f"http://{s.host}:{s.port}"
        ws = s.default_workspace
        line = model_line(s, self.model_problem, self.model_unreachable)
        socket_base = base.replace("http://", "ws://", 1)
        return "\n".join(
            [
                f"Sigil local gateway on {base}   state: {s.data_dir.resolve()} (the signing secret only)",
                "  mode:     AWS handlers over moto (webhook, agent, consolidate; docs/local-aws-mode.md)",
                f"  model:    {line}",
                f"  send:     POST {base}/webhooks/web/{ws}   JSON {{event_id, session, user, text}}",
                "            signed with X-Sigil-Timestamp and X-Sigil-Signature (see docs/web-channel.md)",
                f"  replies:  GET  {base}/sessions/{ws}/<session>/outbox?after=<seq>   (JSON)",
                f"  browser:  {socket_base}/ws?token=<browser token>   (WebSocket API stand-in)",
                f"  aws:      moto on {r.endpoint} (region {r.region}): queue {TURNS_QUEUE}, "
                f"DLQ {TURNS_DLQ}, bus {r.event_bus_name}, tables {r.sessions_table} {r.memory_table}",
                f"  index:    osmem-server on {r.opensearch_endpoint} (BM25 only, no k-NN)",
                "  state:    in memory: a restart starts from empty tables and queues",
                "  admin:    sigil pairing|identity|memory|secret|skill|dlq|workspace|config reach these "
                "stores while this runs",
                '  try:      sigil send "hello" --session demo --wait',
            ]
        )


def serve(settings: Settings, config: SigilFile | None = None) -> None:
    """Run the mode until interrupted (the `sigil dev --aws` command), `config` applied at start."""
    import uvicorn

    # Left at its default, SIGTERM would end the process on the spot (uvicorn re-raises it once it
    # has shut down), skipping the `finally` that stops the containers and osmem-server.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    # A parent that dies without signalling (a killed test run, a closed terminal's supervisor)
    # ends the mode as SIGTERM would, rather than leaving it serving with no one to stop it.
    watch_parent(lambda: os.kill(os.getpid(), signal.SIGTERM))
    from shared.adapters.embedded import open_data_dir

    # One gateway per data directory, as the embedded one: its record (shared.local.running) is
    # what the other commands read, and two would overwrite each other's.
    lock = DataDirLock(open_data_dir(settings.data_dir))
    try:
        lock.acquire()
        listener = listen(settings.host, settings.port)
    except (DataDirInUse, OSError) as exc:
        lock.release()
        print(f"sigil dev: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    gateway = AwsModeGateway(settings, config=config)
    try:
        gateway.start()
        base = client_url(listener)
        record = GatewayRecord(pid=os.getpid(), url=base, mode="aws", aws=gateway.local_stack())
        write_record(settings.data_dir, record)
        print(gateway.banner(base), file=sys.stderr, flush=True)
        uvicorn.Server(uvicorn.Config(gateway.app(), log_config=None)).run(sockets=[listener])
    finally:
        # Once stopping has begun, a second SIGTERM must not cut it short and orphan what is left.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        remove_record(settings.data_dir)
        listener.close()
        gateway.stop()
        lock.release()


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)

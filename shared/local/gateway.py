"""The local gateway (`sigil dev`): the embedded backend behind a small HTTP front on 127.0.0.1.

The same ingress and turn code as the Lambda functions; lanes are durable SQLite queues run by
in-process workers (one turn at a time per session, sessions in parallel), so a restart loses
nothing that was accepted.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from shared import correlation
from shared.adapters.embedded import (
    EmbeddedLaneRunner,
    FileMediaStore,
    LocalScheduler,
    SqliteEventBus,
    SqliteLanes,
    SqliteSchedules,
    build_embedded_backend,
)
from shared.agent.turn import TurnDeps, give_up_turn, run_turn
from shared.backend import Backend
from shared.budgets import PriceTable
from shared.channels import web
from shared.channels.out import build_senders
from shared.clock import utcnow
from shared.config import Settings
from shared.configuration import SigilFile, apply
from shared.consolidation.compaction import consolidation_model
from shared.deadline import deadline
from shared.errors import BadRequest, MediaRefused, ModelNotConfigured, SigilError
from shared.ingress import Ingress, WebhookRequest, check_id, parse_after
from shared.ingress.admission import Admission
from shared.ingress.browser import BrowserIngress
from shared.ingress.http import HttpAnswer, WebhookFront, page, refusal
from shared.local.consolidation import register_consolidation
from shared.local.datadir_lock import DataDirLock
from shared.local.logs import RequestIds
from shared.local.mcp_stdio import stdio_transport
from shared.local.sse import session_events
from shared.local.web_socket import Connection, CorsMiddleware, DeltaHub, preflight
from shared.media.upload import Uploads
from shared.memory.personality import LearnedPersonality
from shared.memory.tacit import TacitFacts
from shared.models import LaneItem, OutboxEntry, new_workspace
from shared.providers import build_provider, cached_provider_factory
from shared.providers.transcription import transcriber_from_settings
from shared.tasks.runner import TaskRunner
from shared.tasks.tools import ORCHESTRATOR_TOOLS
from shared.tools.builtin import agent_registry
from shared.tools.mcp import McpToolbox
from shared.workspace_cache import with_workspace_cache

log = logging.getLogger("sigil.gateway")

# The local scheduler's job that fires due schedules (shared.adapters.embedded.schedules).
SCHEDULES_JOB = "schedules"
# The job that deletes attached files past their workspace's retention, and how often it runs.
MEDIA_SWEEP_JOB = "media-sweep"
MEDIA_SWEEP_S = 3600.0


@dataclass
class LocalGateway:
    settings: Settings
    # sigil.yaml, applied to the data dir at start (shared.configuration); None: no file.
    config: SigilFile | None = None
    backend: Backend = field(init=False)
    ingress: Ingress = field(init=False)
    front: WebhookFront = field(init=False)
    runner: EmbeddedLaneRunner = field(init=False)
    scheduler: LocalScheduler = field(init=False)
    data_dir_lock: DataDirLock = field(init=False)
    # The web replies' live deltas, for the chat page's WebSockets (shared.local.web_socket).
    deltas: DeltaHub = field(init=False, default_factory=DeltaHub)

    def __post_init__(self) -> None:
        self.backend = with_workspace_cache(build_embedded_backend(self.settings))
        self.data_dir_lock = DataDirLock(Path(self.settings.data_dir).expanduser())
        lanes, events = self.backend.lanes, self.backend.events
        # The embedded backend always builds these; the runner needs their consumer side.
        assert isinstance(lanes, SqliteLanes) and isinstance(events, SqliteEventBus)
        self.ingress = Ingress(
            lanes=self.backend.lanes,
            outbox=self.backend.outbox,
            secrets=self.backend.secrets,
            signature_window_s=self.settings.signature_window_s,
            max_body_bytes=self.settings.max_body_bytes,
            # Read on every request: a route `sigil config apply` writes applies at once, and the
            # SQLite read is cheap.
            routes=self.backend.routes.get,
        )
        self.front = WebhookFront(self.ingress, self.settings.resolved_channel_workspace())
        senders = build_senders(
            self.backend.secrets,
            self.backend.outbox,
            ledger=self.backend.send_ledger,
            base_urls=self.settings.platform_base_urls or None,
            deltas=self.deltas,
        )
        self.deps = TurnDeps(
            backend=self.backend,
            settings=self.settings,
            senders=senders,
            provider_factory=cached_provider_factory(self.settings),
            prices=PriceTable.from_settings(self.settings),
            facts=TacitFacts(self.backend.memory),
            personality=LearnedPersonality(self.backend.memory),
            # The workspaces' MCP servers; stdio ones too, here only (shared.local.mcp_stdio).
            workspace_tools=McpToolbox(self.backend.secrets, stdio=stdio_transport),
            transcriber=transcriber_from_settings(self.settings),
            # Delegation (shared.tasks): the delegate tool, and the runner of the tasks' steps.
            tools=agent_registry().extended(*ORCHESTRATOR_TOOLS),
            task_steps=TaskRunner(),
        )
        self.browser = BrowserIngress(self.ingress, self.backend, self.deps.prices)
        # The chat page's uploads: the bytes come to this gateway and go to the data dir's store.
        self.uploads = Uploads(
            self.ingress,
            self.backend.media,
            self.backend.workspaces,
            self.backend.identities,
            Admission(
                self.backend.workspaces, self.backend.identities, self.backend.budgets, self.deps.prices
            ),
            usage=self.backend.media_usage,
        )
        self.runner = EmbeddedLaneRunner(
            lanes,
            self._handle,
            workers=self.settings.lane_workers,
            max_attempts=self.settings.lane_max_attempts,
            on_dead_letter=self._give_up,
        )
        self.scheduler = LocalScheduler(events)
        # CompactionDue from the turns, and the hourly catch-up and maintenance (as EventBridge
        # and the schedule drive the consolidate function in the cloud).
        register_consolidation(self.scheduler, self.backend, lambda: consolidation_model(self.settings))
        # Things done later (shared.schedules): due occurrences go on their lanes, checked each
        # second, as EventBridge Scheduler sends them to the turns queue in the cloud.
        schedules = self.backend.schedules
        assert isinstance(schedules, SqliteSchedules)

        def fire_schedules() -> None:
            schedules.fire_due(lanes)

        self.scheduler.every(SCHEDULES_JOB, 1.0, fire_schedules)
        # Attached files past their workspace's retention (docs/media.md), as the media bucket's
        # lifecycle rule expires them in the cloud.
        media = self.backend.media
        if isinstance(media, FileMediaStore):
            workspaces = self.backend.workspaces

            def sweep_media() -> None:
                media.sweep_expired(workspaces.list_workspaces(), utcnow())

            self.scheduler.every(MEDIA_SWEEP_JOB, MEDIA_SWEEP_S, sweep_media)

    def _handle(self, item: LaneItem) -> None:
        # A hung model call is cut at the turn's deadline and fails the attempt, freeing the worker.
        # Its log lines carry the id of the request that queued it (shared.correlation).
        until = time.monotonic() + self.settings.turn_timeout_s
        with correlation.correlated(item.correlation_id), deadline(until):
            run_turn(self.deps, item)

    def _give_up(self, item: LaneItem) -> None:
        with correlation.correlated(item.correlation_id):
            give_up_turn(self.deps, item)

    def ensure_workspace(self, workspace_id: str) -> str:
        """Create the workspace and its web signing secret on first start; return the secret."""
        if self.backend.workspaces.get(workspace_id) is None:
            self.backend.workspaces.put(new_workspace(workspace_id, name=workspace_id))
        secrets = self.backend.secrets
        ensure = getattr(secrets, "ensure", None)
        if ensure is None:
            raise SigilError("the local gateway needs a secret store that can create secrets")
        secret: str = ensure(web.secret_name(workspace_id))
        return secret

    def model_status(self) -> str | None:
        """None when a model is usable; otherwise the message every reply will carry."""
        try:
            build_provider(self.settings, self.settings.resolved_model())
        except ModelNotConfigured as exc:
            return exc.message
        return None

    def lock_data_dir(self) -> None:
        """Make this the data directory's only gateway; raises DataDirInUse naming the other.

        start() takes it too; `sigil dev` takes it first, so a second instance says so before
        it tries the port.
        """
        self.data_dir_lock.acquire()

    def start(self) -> None:
        # Before anything is recovered: the in-flight items may be another gateway's running turns.
        self.lock_data_dir()
        if self.config is not None:
            apply(self.config, self.backend.workspaces, self.backend.routes)
        self.ensure_workspace(self.settings.default_workspace)
        self.scheduler.start()
        self.runner.start()

    def stop(self) -> None:
        self.runner.stop()
        self.scheduler.stop()
        self.backend.close()
        self.data_dir_lock.release()

    # ------------------------------------------------------------------ HTTP

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/health", self._health, methods=["GET"]),
                Route("/webhooks/web/{workspace}", self._post_web, methods=["POST"]),
                Route("/webhooks/{channel}", self._post_platform, methods=["POST"]),
                Route("/webhooks/whatsapp", self._get_whatsapp, methods=["GET"]),
                # A named route's bot (ChannelRoute): after the web channel's, which it would shadow.
                Route("/webhooks/{channel}/{name}", self._post_platform, methods=["POST"]),
                Route("/webhooks/whatsapp/{name}", self._get_whatsapp, methods=["GET"]),
                Route("/sessions/{workspace}/{session}/outbox", self._get_outbox, methods=["GET"]),
                # The chat page's uploads (shared.media.upload): a slot, then the bytes here.
                Route("/media/{workspace}/uploads", self._post_upload_slot, methods=["POST"]),
                Route("/media/{workspace}/files", self._post_upload_file, methods=["POST"]),
                Route("/sessions/{workspace}/{session}/stream", self._get_stream, methods=["GET"]),
                Route("/webhooks/web/{workspace}", self._preflight, methods=["OPTIONS"]),
                Route("/sessions/{workspace}/{session}/{what}", self._preflight, methods=["OPTIONS"]),
                WebSocketRoute("/ws", self._ws),
                # The chat page (plain HTML, CSS and JS: no build step) as the webhook Lambda
                # serves it (shared.ingress.http.page): the same files, config.json and headers.
                Route("/", self._page, methods=["GET"]),
                Route("/config.json", self._page, methods=["GET"]),
                Route("/assets/{name}", self._page, methods=["GET"]),
            ],
            exception_handlers={SigilError: _error_response},  # type: ignore[dict-item]
            middleware=[Middleware(RequestIds), Middleware(CorsMiddleware, origins=self.web_origins)],
        )

    def web_origins(self) -> list[str]:
        """Where the chat page may be served from: Settings.web_origins, else this gateway."""
        if self.settings.web_origins:
            return [o.rstrip("/") for o in self.settings.web_origins]
        host, port = self.settings.host, self.settings.port
        own = [f"http://{host}:{port}"]
        if host in ("127.0.0.1", "localhost", "::1"):
            own += [f"http://localhost:{port}", f"http://127.0.0.1:{port}", f"http://[::1]:{port}"]
        return sorted(set(own))

    async def _preflight(self, request: Request) -> Response:
        return preflight(request, self.web_origins())

    async def _ws(self, websocket: WebSocket) -> None:
        """The chat page's WebSocket (shared.ingress.browser's protocol, docs/web-channel.md)."""
        await Connection(websocket, self.browser, self.deltas).run(self.web_origins())

    async def _page(self, request: Request) -> Response:
        # No socket URL: the page connects to its own origin's /ws, this gateway's.
        return _response(page(request.url.path, None))

    async def _health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "model_configured": self.model_status() is None})

    # The webhook's routes answer through shared.ingress.http, as the Lambda webhook does.

    async def _post_web(self, request: Request) -> Response:
        req = await _to_webhook_request(request, await request.body())
        workspace = request.path_params["workspace"]
        return _response(await run_in_threadpool(self.front.post_web, workspace, req))

    async def _post_platform(self, request: Request) -> Response:
        req = await _to_webhook_request(request, await request.body())
        channel, route = request.path_params["channel"], request.path_params.get("name")
        return _response(await run_in_threadpool(self.front.platform, channel, req, route))

    async def _get_whatsapp(self, request: Request) -> Response:
        # Meta's subscription handshake (hub.challenge), answered by the same channel.
        req = await _to_webhook_request(request, await request.body())
        route = request.path_params.get("name")
        return _response(await run_in_threadpool(self.front.platform, "whatsapp", req, route))

    async def _post_upload_slot(self, request: Request) -> Response:
        req = await _to_webhook_request(request, await request.body())
        return _response(await run_in_threadpool(self.uploads.slot, request.path_params["workspace"], req))

    async def _post_upload_file(self, request: Request) -> Response:
        workspace = request.path_params["workspace"]
        head = await _to_webhook_request(request, b"")
        limit = await run_in_threadpool(self.uploads.max_bytes, workspace, head)
        req = replace(head, body=await _bounded_body(request, limit))
        return _response(await run_in_threadpool(self.uploads.receive, workspace, req))

    async def _get_outbox(self, request: Request) -> Response:
        req = await _to_webhook_request(request, b"")
        p = request.path_params
        return _response(await run_in_threadpool(self.front.outbox, p["workspace"], p["session"], req))

    async def _get_stream(self, request: Request) -> Response:
        """Server-sent events: a `reply` event per outbox entry, resumable with Last-Event-ID, and
        the session's live `delta` events (shared.local.sse)."""
        req = await _to_webhook_request(request, b"")
        workspace, session = request.path_params["workspace"], request.path_params["session"]
        await run_in_threadpool(self.ingress.authorise_read, workspace, req)
        check_id(session, "session")
        after = _resume_after(
            parse_after(request.query_params.get("after")), request.headers.get("last-event-id")
        )
        timeout = _parse_timeout(request.query_params.get("timeout"))
        session_id = web.session_id_for(session)

        def read(after_seq: int) -> list[OutboxEntry]:
            return self.backend.outbox.read(workspace, session_id, after_seq=after_seq)

        events = session_events(
            request, read=read, hub=self.deltas, key=(workspace, session_id), after=after, timeout=timeout
        )
        return StreamingResponse(
            events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )


async def _to_webhook_request(request: Request, body: bytes) -> WebhookRequest:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return WebhookRequest(
        method=request.method,
        target=target,
        headers={k.lower(): v for k, v in request.headers.items()},
        body=body,
        path_params=dict(request.path_params),
        query=dict(request.query_params),
    )


async def _bounded_body(request: Request, limit: int) -> bytes:
    """The request's body, read only up to `limit` bytes: a larger one (declared, or found while
    reading) is refused without keeping the rest."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise MediaRefused(f"the file is larger than the {limit / 1e6:g} MB this workspace takes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise MediaRefused(f"the file is larger than the {limit / 1e6:g} MB this workspace takes")
        chunks.append(chunk)
    return b"".join(chunks)


def _resume_after(signed_after: int, last_event_id: str | None) -> int:
    """Where a stream starts: the signed `after`, or the client's Last-Event-ID when it is later.

    Last-Event-ID is not covered by the signature (EventSource sends it by itself on reconnect),
    so it may only move the start forward: a request signed for `after=N` never reads at or
    below N. It is parsed as `after` is (BadRequest unless a seq): EventSource only ever sends
    back an id this stream gave it.
    """
    if last_event_id is None:
        return signed_after
    return max(signed_after, parse_after(last_event_id.strip()))


def _parse_timeout(raw: str | None) -> float:
    if raw is None:
        return 30.0
    try:
        value = float(raw)
    except ValueError:
        raise BadRequest("'timeout' must be a number of seconds") from None
    if not 0 < value <= 300:
        raise BadRequest("'timeout' must be between 0 and 300 seconds")
    return value


async def _error_response(request: Request, exc: SigilError) -> Response:
    # The reason is ours (never the request body), so it is safe to log.
    log.info(
        "request refused",
        extra={"path": request.url.path, "status": exc.http_status, "code": exc.code, "reason": exc.message},
    )
    return _response(refusal(exc))


def _response(answer: HttpAnswer) -> Response:
    if isinstance(answer.body, str):
        return Response(
            answer.body, status_code=answer.status, media_type=answer.content_type, headers=answer.headers
        )
    return JSONResponse(answer.body, status_code=answer.status, headers=answer.headers)

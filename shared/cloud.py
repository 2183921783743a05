"""The Lambda functions' runtime objects: built once per container, on first use, never at import.

A warm container reuses them (boto3 clients, connection pools, the secret cache, SDK clients), and
each function builds only what it uses: `ingress()` wires the webhook's three adapters directly
(and `webhook()` its routes over them), so the webhook never imports opensearchpy or an LLM SDK,
while `turn_deps()` builds the whole backend for the agent. Tests start from a clean slate with
`reset()`, optionally seeding the settings and the clock the factories use instead of the
environment and `time.time`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from pydantic import SecretStr

from shared.adapters.aws import clients
from shared.config import KEY_PROVIDERS, PROVIDER_KEY_SECRETS, Settings
from shared.errors import SigilError
from shared.ports import MediaStore, SecretStore

if TYPE_CHECKING:
    from shared.agent.turn import TurnDeps
    from shared.backend import Backend
    from shared.channels.web_socket import SessionSockets
    from shared.consolidation.compaction import ConsolidationModel
    from shared.ingress import Ingress
    from shared.ingress.admission import Admission
    from shared.ingress.http import WebhookFront
    from shared.ingress.ws import SocketFront
    from shared.media.upload import Uploads

Clock = Callable[[], float]


@dataclass
class _Seed:
    """What `reset` was given; the factories read it when they next build."""

    settings: Settings | None = None
    clock: Clock = time.time


_seed = _Seed()


@cache
def settings() -> Settings:
    # Validated once per container: a missing or malformed SIGIL_* variable fails the first
    # invocation loudly rather than every call site on its own.
    return _seed.settings if _seed.settings is not None else Settings()


@cache
def ingress() -> Ingress:
    """The webhook's logic over SQS (lanes), DynamoDB (outbox) and Secrets Manager (signing secrets)."""
    # Imported here, not at the top: the agent and consolidator import this module too and never
    # build an Ingress.
    from shared.adapters.aws.dynamodb import DynamoOutbox, DynamoRouteStore
    from shared.adapters.aws.secrets import SecretsManagerStore
    from shared.adapters.aws.sqs import SqsLanes
    from shared.ingress import Ingress
    from shared.ingress.routes import cached_routes

    s = settings()
    required = {"SIGIL_QUEUE_URL": s.queue_url, "SIGIL_SESSIONS_TABLE": s.sessions_table}
    missing = sorted(name for name, value in required.items() if not value)
    if missing:
        raise SigilError(f"the webhook needs {', '.join(missing)}", code="misconfigured")
    # Checked just above; the assert narrows the Optional types for mypy.
    assert s.queue_url and s.sessions_table
    return Ingress(
        lanes=SqsLanes(s.lane_queues(), region=s.aws_region),
        outbox=DynamoOutbox(s.sessions_table, region=s.aws_region),
        secrets=SecretsManagerStore(s.secrets_prefix, region=s.aws_region),
        signature_window_s=s.signature_window_s,
        max_body_bytes=s.max_body_bytes,
        clock=_seed.clock,
        # A workspace whose secret can't be read (unknown, or outside the function's policy) costs
        # one Secrets Manager call a minute however often it is probed; found secrets are cached
        # by the store for its own max age.
        secret_miss_ttl_s=60.0,
        # A route is read once a minute at most per name, found or not (shared.ingress.routes).
        # The route store `sigil config apply` writes: the sessions table's routes partition,
        # which the webhook may read by key (infra: Memory.grant_route_read).
        routes=cached_routes(DynamoRouteStore(s.sessions_table, region=s.aws_region).get),
    )


@cache
def webhook() -> WebhookFront:
    """The webhook's routes over `ingress()`, recording metrics and log lines for each answer."""
    from shared.ingress.http import WebhookFront
    from shared.ingress.metered import Metered

    return WebhookFront(ingress(), settings().resolved_channel_workspace(), observer=Metered())


@cache
def sockets() -> SessionSockets:
    """The WebSocket API's connections (sessions table) and its management API (SIGIL_WS_ENDPOINT)."""
    from shared.adapters.aws.dynamodb import DynamoConnections
    from shared.adapters.aws.websocket import ManagementApiPoster
    from shared.channels.web_socket import SessionSockets

    s = settings()
    if not s.ws_endpoint or not s.sessions_table:
        raise SigilError(
            "the WebSocket API needs SIGIL_WS_ENDPOINT and SIGIL_SESSIONS_TABLE", code="misconfigured"
        )
    return SessionSockets(
        DynamoConnections(s.sessions_table, region=s.aws_region),
        ManagementApiPoster(s.ws_endpoint, region=s.aws_region),
        clock=_seed.clock,
    )


@cache
def ws_front() -> SocketFront:
    """The ws function's logic: browser tokens checked as the webhook checks signatures, frames
    queued through the webhook's own Ingress, answers posted through the management API."""
    from shared.ingress.ws import SocketFront

    return SocketFront(
        ingress(),
        sockets().connections,
        sockets(),
        clock=_seed.clock,
        admission=admission(),
        origins=tuple(o.rstrip("/") for o in settings().web_origins),
        media=media_store(),
    )


@cache
def uploads() -> Uploads:
    """The chat page's uploads in the webhook (shared.media.upload): presigned POSTs to the media
    bucket, and their confirmation into its store; the sender and the limits checked with the
    memory table's workspace configs and identities (SIGIL_MEMORY_TABLE)."""
    from shared.adapters.aws.dynamodb.media_usage import DynamoMediaUsage
    from shared.adapters.aws.media import S3MediaStore
    from shared.adapters.aws.media_uploads import S3MediaUploads
    from shared.media.upload import Uploads

    s = settings()
    check = admission()
    store = media_store()
    return Uploads(
        ingress(),
        store,
        check.workspaces if check is not None else None,
        check.identities if check is not None else None,
        check,
        # The day's total the agent's fetches count too, in the sessions table.
        usage=DynamoMediaUsage(s.sessions_table, region=s.aws_region) if s.sessions_table else None,
        staging=S3MediaUploads(store) if isinstance(store, S3MediaStore) else None,
        clock=_seed.clock,
    )


@cache
def uploads_url() -> str | None:
    """Where the chat page posts files (the media bucket's presigned POST URL), for the page's
    Content-Security-Policy: a POST signed here (no call to AWS) for a placeholder id says it,
    whatever the region's or an endpoint's addressing. None without the bucket."""
    from shared.adapters.aws.media import S3MediaStore
    from shared.adapters.aws.media_uploads import S3MediaUploads

    s = settings()
    if not s.media_bucket:
        return None
    staging = S3MediaUploads(S3MediaStore(s.media_bucket, region=s.aws_region))
    return staging.presign("probe", "m-probe", max_bytes=1, metadata={}, expires_s=1).url


@cache
def media_store() -> MediaStore | None:
    """The media bucket's store (SIGIL_MEDIA_BUCKET) for the chat page's uploads: the webhook
    records them, the ws function checks a `send`'s files against it. None without the bucket."""
    from shared.adapters.aws.media import S3MediaStore

    s = settings()
    return S3MediaStore(s.media_bucket, region=s.aws_region) if s.media_bucket else None


def admission() -> Admission | None:
    """The ws function's check of the sender and the budget before queueing: with the memory table
    (workspace configs, identities) only; without it the turn alone checks."""
    from shared.adapters.aws.dynamodb import DynamoBudgetStore, DynamoIdentityStore, DynamoWorkspaceStore
    from shared.budgets import PriceTable
    from shared.ingress.admission import Admission

    s = settings()
    if not s.memory_table or not s.sessions_table:
        return None
    return Admission(
        DynamoWorkspaceStore(s.memory_table, region=s.aws_region),
        DynamoIdentityStore(s.memory_table, region=s.aws_region),
        DynamoBudgetStore(s.sessions_table, region=s.aws_region),
        PriceTable.from_settings(s),
    )


@cache
def turn_deps() -> TurnDeps:
    """Everything a turn needs: the full AWS backend, the channel senders and the model providers."""
    from shared.adapters.aws import build_aws_backend
    from shared.agent.turn import TurnDeps
    from shared.budgets import PriceTable
    from shared.channels.out import build_senders
    from shared.memory.personality import LearnedPersonality
    from shared.memory.tacit import TacitFacts
    from shared.providers import cached_provider_factory
    from shared.providers.transcription import transcriber_from_settings
    from shared.skills import with_skill_cache
    from shared.tasks.runner import TaskRunner
    from shared.tasks.tools import ORCHESTRATOR_TOOLS
    from shared.tools.builtin import agent_registry
    from shared.tools.mcp import McpToolbox
    from shared.workspace_cache import with_workspace_cache

    # Workspace configs are cached for a minute, so a warm turn reads none: a change made through
    # another container takes up to that long to apply here (shared.workspace_cache). Skills too
    # (shared.skills.CachedSkills): a warm turn reads nothing from the skills bucket.
    backend = with_skill_cache(with_workspace_cache(build_aws_backend(settings())))
    use_sandbox_cache()
    s = with_provider_keys(settings(), backend.secrets)
    senders = build_senders(
        backend.secrets, backend.outbox, ledger=backend.send_ledger, base_urls=s.platform_base_urls or None
    )
    if s.ws_endpoint:
        # With the WebSocket API deployed, web replies also stream to the session's open sockets.
        from shared.channels.web_socket import WebSocketSender

        senders.register("web", WebSocketSender(backend.outbox, sockets()))
    return TurnDeps(
        backend=backend,
        settings=s,
        senders=senders,
        # One SDK client per model reference for the container's life; the SDK is imported on the
        # first turn that needs it, not when the agent starts.
        provider_factory=cached_provider_factory(s),
        prices=PriceTable.from_settings(s),
        facts=TacitFacts(backend.memory),
        personality=LearnedPersonality(backend.memory),
        # The workspaces' remote MCP servers; no stdio connector: a Lambda starts no program.
        workspace_tools=McpToolbox(backend.secrets),
        # Voice notes: the SDK is imported on the first one (docs/media.md, "Transcription").
        transcriber=transcriber_from_settings(s),
        # Delegation (shared.tasks): the delegate tool, and the runner of the tasks' steps.
        tools=agent_registry().extended(*ORCHESTRATOR_TOOLS),
        task_steps=TaskRunner(),
    )


def use_sandbox_cache() -> None:
    """run_python's compiled runtime from the stack's cache bucket (read only), and a request to
    the precompile function when it is empty (docs/sandbox.md#the-compile-and-its-cache)."""
    from shared.adapters.aws.sandbox_cache import PrecompileRequest, S3CompiledCache
    from shared.sandbox import compiled

    s = settings()
    if not s.sandbox_cache_bucket:
        return
    fill = s.sandbox_precompile_function
    compiled.use_remote(
        S3CompiledCache(s.sandbox_cache_bucket, region=s.aws_region),
        on_miss=PrecompileRequest(fill, region=s.aws_region) if fill else None,
    )


def precompile_sandbox() -> dict[str, object]:
    """The precompile function's work: the compiled runtime for this architecture in the cache
    bucket, compiled here unless a copy is there already. What it did, for the log."""
    from shared.adapters.aws.sandbox_cache import S3CompiledCache
    from shared.sandbox.wasm import load_module

    s = settings()
    if not s.sandbox_cache_bucket:
        raise SigilError("the precompile function needs SIGIL_SANDBOX_CACHE_BUCKET", code="misconfigured")
    _, loaded = load_module(S3CompiledCache(s.sandbox_cache_bucket, region=s.aws_region), publish=True)
    return {"sha256": loaded.sha256, "source": loaded.source, "seconds": round(loaded.seconds, 2)}


@cache
def consolidator() -> tuple[Backend, Callable[[], ConsolidationModel]]:
    """The consolidate function's backend, and its model: built on the first batch that needs it
    (SIGIL_CONSOLIDATION_MODEL, else SIGIL_MODEL), then kept for the container's life."""
    from shared.adapters.aws import build_aws_backend
    from shared.consolidation.compaction import consolidation_model

    backend = build_aws_backend(settings(), persistent_embedding_cache=True)
    s = with_provider_keys(settings(), backend.secrets)
    built: list[ConsolidationModel] = []

    def model() -> ConsolidationModel:
        if not built:  # a failure (no model configured) is not kept: the next run asks again
            built.append(consolidation_model(s))
        return built[0]

    return backend, model


def with_provider_keys(s: Settings, secrets: SecretStore) -> Settings:
    """Settings with the LLM API keys from Secrets Manager: in the cloud keys never sit in env vars.

    Only the keys of `s.key_providers()` are read: the stack grants a function exactly those
    secrets, and Secrets Manager answers any other with AccessDenied, which the store raises.
    A key already set (e.g. by a local run's environment) wins; a secret that is absent is skipped.
    """
    found: dict[str, SecretStr] = {}
    for provider in sorted(s.key_providers()):
        field = KEY_PROVIDERS[provider]
        if getattr(s, field) is None and (key := secrets.get(PROVIDER_KEY_SECRETS[field])):
            found[field] = SecretStr(key)
    return s.model_copy(update=found) if found else s


def reset(*, config: Settings | None = None, clock: Clock = time.time) -> None:
    """Forget everything built so far, including the boto3 clients the adapters held.

    `config` replaces the settings read from the environment and `clock` replaces `time.time` in
    the next objects built (tests pin the clock to a sample event's signing time this way).
    """
    from shared.sandbox import compiled

    _seed.settings = config
    _seed.clock = clock
    compiled.use_remote(None)
    settings.cache_clear()
    ingress.cache_clear()
    webhook.cache_clear()
    turn_deps.cache_clear()
    sockets.cache_clear()
    ws_front.cache_clear()
    media_store.cache_clear()
    uploads_url.cache_clear()
    uploads.cache_clear()
    consolidator.cache_clear()
    clients.reset()

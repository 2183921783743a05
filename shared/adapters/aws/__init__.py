"""The cloud adapters: DynamoDB, SQS FIFO, EventBridge, Secrets Manager and OpenSearch.

`build_aws_backend` is the only name here; the adapter modules are imported when it runs, so that
importing this package costs nothing a handler does not use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.errors import SigilError

if TYPE_CHECKING:
    from collections.abc import Callable

    from shared.backend import Backend
    from shared.config import Settings

__all__ = ["build_aws_backend"]


def build_aws_backend(settings: Settings, *, persistent_embedding_cache: bool = False) -> Backend:
    """Wire every port to its AWS adapter from the stack's settings (SIGIL_* variables).

    No AWS call is made here: building a boto3 client sends no request.

    Identities are read through a per-process cache (shared.identity.CachedIdentities) so that a
    warm turn reads none: a block or rename made elsewhere takes up to a minute to apply in a warm
    container, while a pending sender's approval applies at once (pending answers are not kept).
    """
    # Deferred on purpose (see the module docstring).
    from shared.adapters.aws.dynamodb import (
        DynamoAuditLog,
        DynamoBudgetStore,
        DynamoConsolidationState,
        DynamoEmbeddingCache,
        DynamoIdentityStore,
        DynamoMemoryStore,
        DynamoOutbox,
        DynamoRouteStore,
        DynamoSendLedger,
        DynamoSessionStore,
        DynamoWorkspaceStore,
    )
    from shared.adapters.aws.events import EventBridgeBus
    from shared.adapters.aws.opensearch import OpenSearchIndex
    from shared.adapters.aws.secrets import SecretsManagerStore
    from shared.adapters.aws.skills import NoSkillsBucket, S3SkillStore
    from shared.adapters.aws.sqs import SqsLanes
    from shared.backend import Backend
    from shared.identity import CachedIdentities

    required = {
        "SIGIL_SESSIONS_TABLE": settings.sessions_table,
        "SIGIL_MEMORY_TABLE": settings.memory_table,
        "SIGIL_QUEUE_URL": settings.queue_url,
        "SIGIL_EVENT_BUS_NAME": settings.event_bus_name,
        "SIGIL_OPENSEARCH_ENDPOINT": settings.opensearch_endpoint,
    }
    missing = sorted(name for name, value in required.items() if not value)
    if missing:
        raise SigilError(f"the aws backend needs {', '.join(missing)}", code="misconfigured")
    # Checked just above; the asserts narrow the Optional types for mypy.
    assert settings.sessions_table and settings.memory_table
    assert settings.queue_url and settings.event_bus_name

    from shared.memory.embeddings import build_embedder
    from shared.memory.embeddings.cache import CachedEmbedder, InProcessEmbeddingCache

    region = settings.aws_region
    secrets = SecretsManagerStore(settings.secrets_prefix, region=region)
    # Building it makes no AWS call: an OpenAI key is read from Secrets Manager, and a Bedrock
    # client built, on the first embedding.
    embedder = build_embedder(settings, secrets)
    backend = Backend(
        # The memory table too: a turn's commit writes its Tier-1 records and audit record in the
        # session's transaction.
        sessions=DynamoSessionStore(
            settings.sessions_table, memory_table=settings.memory_table, region=region
        ),
        memory=DynamoMemoryStore(settings.memory_table, region=region),
        index=OpenSearchIndex.from_settings(settings),
        lanes=SqsLanes(settings.lane_queues(), region=region),
        outbox=DynamoOutbox(settings.sessions_table, region=region),
        events=EventBridgeBus(
            settings.event_bus_name, region=region, delay_queue_url=settings.extraction_queue_url
        ),
        workspaces=DynamoWorkspaceStore(settings.memory_table, region=region),
        audit=DynamoAuditLog(settings.memory_table, region=region),
        secrets=secrets,
        identities=CachedIdentities(DynamoIdentityStore(settings.memory_table, region=region)),
        send_ledger=DynamoSendLedger(settings.sessions_table, region=region),
        # The sessions table: conditional counter writes on the turn path, like the outbox.
        budgets=DynamoBudgetStore(settings.sessions_table, region=region),
        # The sessions table too: leases are conditional writes, like the budget counters.
        consolidation=DynamoConsolidationState(settings.sessions_table, region=region),
        # The sessions table: the webhook reads a route per request and already reaches it.
        routes=DynamoRouteStore(settings.sessions_table, region=region),
        skills=S3SkillStore(settings.skills_bucket, region=region)
        if settings.skills_bucket
        else NoSkillsBucket(),
        # The turn caches in its process only, so embedding adds no DynamoDB round trip to it;
        # bulk embedding (consolidation, backfill) shares entries in the memory table
        # (docs/dynamodb.md), expiring by its TTL.
        embedder=(
            CachedEmbedder(
                embedder,
                DynamoEmbeddingCache(settings.memory_table, region=region)
                if persistent_embedding_cache
                else InProcessEmbeddingCache(),
            )
            if embedder
            else None
        ),
    )
    if settings.schedule_group and settings.schedule_role_arn and settings.queue_arn:
        from shared.adapters.aws.schedules import EventBridgeSchedules

        backend.schedules = EventBridgeSchedules(
            settings.schedule_group,
            role_arn=settings.schedule_role_arn,
            queue_arn=_lane_queue_arns(settings.queue_arn, settings.lane_queues()),
            # The record beside the sessions (pk WS#{ws}#SCHEDULE), read and written by the turn.
            table_name=settings.sessions_table,
            region=region,
        )
    if settings.media_bucket:
        from shared.adapters.aws.dynamodb.media_usage import DynamoMediaUsage
        from shared.adapters.aws.media import S3MediaStore

        backend.media = S3MediaStore(settings.media_bucket, region=region)
        # The sessions table, which the agent already writes: one ADD per fetched file.
        backend.media_usage = DynamoMediaUsage(settings.sessions_table, region=region)
    if settings.dead_letter_queue_url:
        # `sigil dlq` only: the functions' environment has no SIGIL_DEAD_LETTER_QUEUE_URL.
        from shared.adapters.aws.dead_letters import SqsDeadLetters

        backend.dead_letters = SqsDeadLetters(
            settings.dead_letter_queue_url,
            settings.queue_url,
            audit=backend.audit,
            region=region,
            lane_queue_urls=settings.lane_queues(),
        )
    return backend


def _lane_queue_arns(first_arn: str, urls: tuple[str, ...]) -> str | Callable[[str], str]:
    """The ARN a fired schedule of a session is sent to: the session's own lane queue, so it
    queues behind that session's messages (one queue: its ARN). The queues share an account and
    region with the first, whose ARN the stack gives; the rest differ by name, the URL's last part."""
    from shared.adapters.aws.sqs import fifo_id, lane_queue

    if len(urls) <= 1:
        return first_arn
    prefix = first_arn.rsplit(":", 1)[0]
    arns = [f"{prefix}:{url.rstrip('/').rsplit('/', 1)[1]}" for url in urls]
    return lambda group_id: arns[lane_queue(fifo_id(group_id), len(arns))]

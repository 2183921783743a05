"""DynamoDB adapters: sessions, memory tiers 1-3, the web outbox, the send ledger, workspaces,
audit, identities, budget counters, consolidation leases, the embedding cache, and delegated
tasks with their scratchpads and durable steps.

Two tables, one per concern (docs/dynamodb.md has the whole key design):

- the sessions table (pk, sk; no index) holds what a turn reads and writes under a condition:
  sessions (optimistic concurrency on `version`), the outbox, the send ledger, budget counters,
  consolidation leases, the channel routes, delegated tasks (their caps as counters moved in the
  task's transaction), scratchpads and durable steps (expiring by TTL);
- the memory table (pk, sk, GSI1, GSI2, TTL on `ttl`) holds what has secondary access paths or
  expires: Tier-1 messages, Tier-2 summaries, Tier-3 triples, workspace configs, audit records,
  identities (a pending one's pairing code is its GSI1 key), cached embeddings.

One module per port; `table` holds the key schema, the key and item helpers and the paging
shared by all of them, and `retry` the retry policy for what botocore does not retry itself.
"""

from __future__ import annotations

from shared.adapters.aws.dynamodb.audit import DynamoAuditLog
from shared.adapters.aws.dynamodb.budgets import DynamoBudgetStore
from shared.adapters.aws.dynamodb.connections import DynamoConnections
from shared.adapters.aws.dynamodb.consolidation_state import DynamoConsolidationState
from shared.adapters.aws.dynamodb.embedding_cache import DynamoEmbeddingCache
from shared.adapters.aws.dynamodb.identities import DynamoIdentityStore
from shared.adapters.aws.dynamodb.memory import DynamoMemoryStore
from shared.adapters.aws.dynamodb.outbox import DynamoOutbox
from shared.adapters.aws.dynamodb.routes import DynamoRouteStore
from shared.adapters.aws.dynamodb.scratchpad import DynamoScratchpad
from shared.adapters.aws.dynamodb.send_ledger import DynamoSendLedger
from shared.adapters.aws.dynamodb.sessions import DynamoSessionStore
from shared.adapters.aws.dynamodb.steps import DynamoStepLog
from shared.adapters.aws.dynamodb.table import (
    AUDIT_RETENTION_DAYS,
    GSI1,
    GSI2,
    MAX_DOC_BYTES,
    TABLE_SCHEMAS,
    TABLE_TTL,
    TTL_ATTRIBUTE,
    create_tables,
)
from shared.adapters.aws.dynamodb.tasks import DynamoTaskStore
from shared.adapters.aws.dynamodb.workspaces import DynamoWorkspaceStore

__all__ = [
    "AUDIT_RETENTION_DAYS",
    "GSI1",
    "GSI2",
    "MAX_DOC_BYTES",
    "TABLE_SCHEMAS",
    "TABLE_TTL",
    "TTL_ATTRIBUTE",
    "DynamoAuditLog",
    "DynamoBudgetStore",
    "DynamoConnections",
    "DynamoConsolidationState",
    "DynamoEmbeddingCache",
    "DynamoIdentityStore",
    "DynamoMemoryStore",
    "DynamoOutbox",
    "DynamoRouteStore",
    "DynamoScratchpad",
    "DynamoSendLedger",
    "DynamoSessionStore",
    "DynamoStepLog",
    "DynamoTaskStore",
    "DynamoWorkspaceStore",
    "create_tables",
]

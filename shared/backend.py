"""The set of ports a runtime works with. The composition roots build it from Settings with
`shared.adapters.build_backend`; everything below them only reads it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from shared.ports import (
    AuditLog,
    BudgetStore,
    ConsolidationState,
    Embedder,
    EventBus,
    IdentityStore,
    Lanes,
    MemoryIndex,
    MemoryStore,
    Outbox,
    RouteStore,
    SecretStore,
    SendLedger,
    SessionStore,
    WorkspaceStore,
)


@dataclass
class Backend:
    sessions: SessionStore
    memory: MemoryStore
    index: MemoryIndex
    lanes: Lanes
    outbox: Outbox
    events: EventBus
    workspaces: WorkspaceStore
    audit: AuditLog
    secrets: SecretStore
    identities: IdentityStore
    send_ledger: SendLedger
    budgets: BudgetStore
    # Leases and checkpoints of the consolidation runs (shared.consolidation).
    consolidation: ConsolidationState
    # The channel routes (which bot feeds which workspace; `sigil config apply` writes them).
    routes: RouteStore
    # Text to vectors for Tier 4 (already wrapped in the embedding cache); None when embeddings
    # are off, and memory search is then BM25 only.
    embedder: Embedder | None = None
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        for close in reversed(self.closers):
            close()

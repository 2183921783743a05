"""The set of ports a runtime works with. The composition roots build it from Settings with
`shared.adapters.build_backend`; everything below them only reads it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from shared.ports import (
    AuditLog,
    BudgetStore,
    ConsolidationState,
    DeadLetters,
    Embedder,
    EventBus,
    IdentityStore,
    Lanes,
    MediaStore,
    MediaUsage,
    MemoryIndex,
    MemoryStore,
    Outbox,
    RouteStore,
    Schedules,
    Scratchpad,
    SecretStore,
    SendLedger,
    SessionStore,
    SkillStore,
    StepLog,
    TaskStore,
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
    # Installed skills, per workspace (shared.skills, docs/skills.md).
    skills: SkillStore
    # Text to vectors for Tier 4 (already wrapped in the embedding cache); None when embeddings
    # are off, and memory search is then BM25 only.
    embedder: Embedder | None = None
    # The lanes' dead letters, for `sigil dlq` (docs/dead-letters.md); None on the aws backend
    # unless SIGIL_DEAD_LETTER_QUEUE_URL names the queue (the functions never need it).
    dead_letters: DeadLetters | None = None
    # Things done later (shared.schedules); None on the aws backend unless the stack names its
    # schedule group (SIGIL_SCHEDULE_GROUP), and the schedule tool then says so.
    schedules: Schedules | None = None
    # Delegation (shared.tasks, docs/delegation.md) and durable steps; None until the backend
    # provides them, and the delegate tool then says so.
    tasks: TaskStore | None = None
    scratchpad: Scratchpad | None = None
    steps: StepLog | None = None
    # Files senders attached (shared.media, docs/media.md); None: attachments are not fetched.
    media: MediaStore | None = None
    # The day's fetched bytes per workspace, beside the media store (None with it).
    media_usage: MediaUsage | None = None
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        for close in reversed(self.closers):
            close()

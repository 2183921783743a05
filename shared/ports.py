"""Ports: the small interfaces every adapter implements, embedded (SQLite) and cloud (AWS).

Every call takes the workspace id, explicitly or inside the model it writes: an adapter scopes
each read and write by it, and the contract suites in tests/contract prove a workspace never sees
another's data. One contract suite per port runs against every adapter.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel

from shared.models import (
    AuditRecord,
    DomainEvent,
    IndexDoc,
    IndexQuery,
    IndexResult,
    LaneItem,
    MemoryRecord,
    OutboundMessage,
    OutboxEntry,
    Session,
    Summary,
    Triple,
    WorkspaceConfig,
)


@runtime_checkable
class SessionStore(Protocol):
    def get(self, workspace_id: str, session_id: str) -> Session | None: ...

    def save(self, session: Session, *, expected_version: int) -> Session:
        """Write `session` if the stored version is `expected_version` (0: must not exist yet).

        Returns the session as stored, with `version` = expected_version + 1. Raises
        ConcurrencyConflict when another writer got there first.
        """
        ...

    def list_sessions(self, workspace_id: str, *, limit: int = 100) -> list[Session]: ...

    def delete(self, workspace_id: str, session_id: str) -> None: ...


@runtime_checkable
class MemoryStore(Protocol):
    """Tier 1 (rolled-out messages), Tier 2 (summaries) and Tier 3 (triples)."""

    def append_messages(self, workspace_id: str, records: Sequence[MemoryRecord]) -> None:
        """Idempotent by record id: appending the same record twice stores it once."""
        ...

    def get_messages(
        self, workspace_id: str, session_id: str, *, after_seq: int = -1, limit: int = 100
    ) -> list[MemoryRecord]:
        """A session's Tier-1 messages with seq > after_seq, oldest first."""
        ...

    def recent_messages(self, workspace_id: str, session_id: str, *, limit: int = 20) -> list[MemoryRecord]:
        """The session's newest Tier-1 messages, oldest first (the last rung of the search fallback)."""
        ...

    def count_messages(self, workspace_id: str, session_id: str) -> int: ...

    def put_summary(self, summary: Summary) -> None: ...

    def list_summaries(
        self,
        workspace_id: str,
        *,
        session_id: str | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        limit: int = 50,
    ) -> list[Summary]:
        """Summaries overlapping [start, end], oldest first."""
        ...

    def put_triple(self, triple: Triple) -> None:
        """Upsert by triple id."""
        ...

    def triples_by_subject(self, workspace_id: str, subject: str, *, limit: int = 50) -> list[Triple]: ...

    def triples_by_object(self, workspace_id: str, obj: str, *, limit: int = 50) -> list[Triple]: ...

    def delete_triple(self, workspace_id: str, triple_id: str) -> None: ...


@runtime_checkable
class MemoryIndex(Protocol):
    """BM25 text and k-NN vectors over memory documents. Fusion is NOT done here (shared.memory.fusion)."""

    def upsert(self, workspace_id: str, docs: Sequence[IndexDoc]) -> None: ...

    def delete(self, workspace_id: str, ids: Sequence[str]) -> None: ...

    def search(self, workspace_id: str, query: IndexQuery) -> IndexResult:
        """Both rankings in one round trip: BM25 for query.text, k-NN for query.vector."""
        # Either part may be None: a text-only or vector-only query returns just that ranking.
        ...

    def count(self, workspace_id: str) -> int: ...


class SubmitResult(BaseModel):
    # SQS FIFO accepts a duplicate silently, so a cloud lane can only ever say "queued".
    status: Literal["queued", "duplicate"]


@runtime_checkable
class Lanes(Protocol):
    """The producer side of the per-session FIFO: one lane (message group) per session."""

    def submit(self, item: LaneItem) -> SubmitResult:
        """Queue `item` on its session's lane; an item whose dedup id was seen is not queued again."""
        ...


@runtime_checkable
class Outbox(Protocol):
    """Replies of the web channel, readable in order. Keyed by (turn_id, part): the send ledger."""

    def append(self, message: OutboundMessage) -> OutboxEntry | None:
        """Store a reply part; None when that (turn_id, part) was already stored (a retried turn)."""
        ...

    def read(
        self, workspace_id: str, session_id: str, *, after_seq: int = 0, limit: int = 100
    ) -> list[OutboxEntry]: ...


@runtime_checkable
class EventBus(Protocol):
    """EventBridge in the cloud; the local gateway's scheduler embedded."""

    def publish(self, event: DomainEvent) -> None: ...


@runtime_checkable
class WorkspaceStore(Protocol):
    def get(self, workspace_id: str) -> WorkspaceConfig | None: ...

    def put(self, config: WorkspaceConfig) -> None: ...

    def list_workspaces(self) -> list[WorkspaceConfig]: ...


@runtime_checkable
class AuditLog(Protocol):
    def append(self, record: AuditRecord) -> None: ...

    def list_records(self, workspace_id: str, *, limit: int = 100) -> list[AuditRecord]:
        """Newest first."""
        ...


@runtime_checkable
class SecretStore(Protocol):
    """Signing secrets, bot tokens and API keys: Secrets Manager in the cloud, a 0600 file locally."""

    def get(self, name: str) -> str | None: ...


@runtime_checkable
class ChannelSender(Protocol):
    """Delivers one reply part on its channel (web: the outbox; others: the platform's API)."""

    def send(self, message: OutboundMessage) -> None: ...

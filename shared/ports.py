"""Ports: the small interfaces every adapter implements, embedded (SQLite) and cloud (AWS).

Every call takes the workspace id, explicitly or inside the model it writes: an adapter scopes
each read and write by it, and the contract suites in tests/contract prove a workspace never sees
another's data. One contract suite per port runs against every adapter.
"""

# Annotations are not postponed here: pydantic makes this module's models at import, and would
# evaluate each field's annotation from its text (shared/models/__init__.py).

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from shared.models import (
    AuditRecord,
    BudgetLimits,
    ChannelRoute,
    DomainEvent,
    Identity,
    IdentityStatus,
    IndexDoc,
    IndexQuery,
    IndexResult,
    LaneItem,
    MemoryRecord,
    MemoryScope,
    MemoryTier,
    Message,
    OutboundMessage,
    OutboxEntry,
    RecallScope,
    SandboxConfig,
    SandboxRun,
    Schedule,
    Session,
    Summary,
    Triple,
    WorkspaceConfig,
)
from shared.models.budgets import BudgetCharge, BudgetDecision, BudgetUsage, Counters
from shared.models.media import MediaItem, Transcript
from shared.models.tasks import Task


@runtime_checkable
class SessionStore(Protocol):
    def get(self, workspace_id: str, session_id: str) -> Session | None: ...

    def get_with_budget(
        self, workspace_id: str, session_id: str, counters: Sequence[str]
    ) -> tuple[Session | None, dict[str, Counters]]:
        """`get`, and the workspace's budget counters named `counters` (bucket keys of
        shared.budgets; BudgetStore's counters) read with it: the turn's one read at its start, a
        single request where `get` is one (DynamoDB: one consistent BatchGetItem). A counter never
        written is missing from the dict."""
        ...

    def save(
        self,
        session: Session,
        *,
        expected_version: int,
        archive: Sequence[MemoryRecord] = (),
        audit: AuditRecord | None = None,
        charge: BudgetCharge | None = None,
    ) -> Session:
        """Write `session` if the stored version is `expected_version` (0: must not exist yet).

        Returns the session as stored, with `version` = expected_version + 1. Raises
        ConcurrencyConflict when another writer got there first.

        `archive` (the Tier-1 records of the messages this save rolls out of the window) and
        `audit` (the turn's record) are written in the same atomic write as the session: all of
        it lands, or, on a conflict, none of it. They keep the rules of MemoryStore.append_messages
        and AuditLog.append (the first write of a record wins; a record of another workspace is a
        ValueError), so a turn commits with one call instead of three. `charge` (what the turn
        spent) is added to its budget counters in that same write, as BudgetStore.charge adds it
        (atomically, whatever the limits); a charge of another workspace is a ValueError.

        One exception, for stores whose transactions are bounded (DynamoDB: 100 items, 4 MB): an
        archive too large to fit is appended first, on its own, and the session and audit record
        then saved together. That is the order the turn used before the single write existed: a
        crash or conflict in between leaves records that the retry finds already stored.
        """
        ...

    def list_sessions(self, workspace_id: str, *, limit: int = 100) -> list[Session]: ...

    def delete(self, workspace_id: str, session_id: str) -> None: ...


@runtime_checkable
class MemoryStore(Protocol):
    """Tier 1 (rolled-out messages), Tier 2 (summaries) and Tier 3 (triples).

    Reads across sessions take a RecallScope as well as the workspace id, and the adapter applies
    it in its own query (shared.memory.scope.visible states the rule). A session's own reads
    (get_messages, recent_messages, count_messages) are inside every scope of that session.
    """

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
        scope: RecallScope,
        session_id: str | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        limit: int = 50,
    ) -> list[Summary]:
        """The summaries visible under `scope` overlapping [start, end], oldest first."""
        ...

    def delete_summaries(self, workspace_id: str, ids: Sequence[str]) -> None:
        """Delete summaries by id (rollback of a consolidation run, erasure); unknown ids are ignored."""
        ...

    def delete_messages(self, workspace_id: str, session_id: str, ids: Sequence[str] | None = None) -> int:
        """Delete a session's Tier-1 messages (those in `ids`, or all of them); returns how many.

        For the right to erasure only: consolidation never deletes raw messages.
        """
        ...

    def put_triple(self, triple: Triple) -> None:
        """Upsert by triple id."""
        ...

    def replace_triple(self, expected: Triple, new: Triple) -> bool:
        """Write `new` in place of `expected` only if the stored triple is still exactly
        `expected` (same id, same serialised document); False, writing nothing, when it changed
        or is gone. For read-modify-write updates that must not undo a concurrent change, such as
        a recall's access count against maintenance merging the fact."""
        ...

    def put_triples(self, workspace_id: str, triples: Sequence[Triple]) -> None:
        """Upsert many by id, in as few round trips as the store allows (not atomic as a whole).

        A triple of another workspace is a ValueError, and then none of them is written.
        """
        ...

    def list_triples(
        self, workspace_id: str, *, scope: RecallScope, after: str | None = None, limit: int = 500
    ) -> list[Triple]:
        """Every triple visible under `scope`, whatever its status, in id order, ids > `after`.

        Stable paging for maintenance, erasure and `sigil memory list`: pass the last id of a
        page as `after` to get the next one.
        """
        ...

    def triples_by_subject(
        self, workspace_id: str, subject: str, *, scope: RecallScope, limit: int = 50
    ) -> list[Triple]:
        """The ACTIVE triples with this subject (normalised key) visible under `scope`, newest first.

        `limit` counts visible triples: an adapter whose store filters after reading (a DynamoDB
        FilterExpression) reads on until it has `limit` or the key is exhausted.

        Merged and pruned triples stay in the store for provenance and rollback but are never
        recalled; `list_triples` is the way to see them.
        """
        ...

    def triples_by_object(
        self, workspace_id: str, obj: str, *, scope: RecallScope, limit: int = 50
    ) -> list[Triple]:
        """The ACTIVE triples with this object (normalised key) visible under `scope`, newest first."""
        ...

    def delete_triple(self, workspace_id: str, triple_id: str) -> None: ...

    def delete_triples(self, workspace_id: str, ids: Sequence[str]) -> None:
        """Delete many by id; unknown ids are ignored."""
        ...

    def unscoped(self, workspace_id: str, *, limit: int = 200) -> list[MemoryRecord | Summary | Triple]:
        """Records of any tier written before scopes existed (scope None): what maintenance's
        backfill stamps (shared.memory.scope.legacy_scope), a page at a time."""
        ...

    def stamp_scopes(self, workspace_id: str, scopes: Mapping[str, tuple[MemoryTier, MemoryScope]]) -> int:
        """Set the scope of records by id (record id -> its tier and scope); unknown ids are
        ignored. Returns how many were stamped."""
        ...


@runtime_checkable
class MemoryIndex(Protocol):
    """BM25 text and k-NN vectors over memory documents. Fusion is NOT done here (shared.memory.fusion)."""

    def upsert(self, workspace_id: str, docs: Sequence[IndexDoc]) -> None: ...

    def delete(self, workspace_id: str, ids: Sequence[str]) -> None: ...

    def search(self, workspace_id: str, query: IndexQuery) -> IndexResult:
        """Both rankings in one round trip: BM25 for query.text, k-NN for query.vector, each over
        the documents visible under query.scope only (a filter inside the query, so k hits come
        back even when most of the workspace is out of scope)."""
        # Either part may be None: a text-only or vector-only query returns just that ranking.
        ...

    def count(self, workspace_id: str) -> int: ...

    def stamp_scopes(self, workspace_id: str, scopes: Mapping[str, MemoryScope]) -> int:
        """Set the scope of every document of these records (record id -> scope): the document
        with that id and its chunks (metadata "record_id"). Returns how many documents changed."""
        ...


@runtime_checkable
class FindsMissingVectors(Protocol):
    """Optional on a MemoryIndex: the documents of a tier stored without a vector (the memory
    writer's text-only fallback when the embedder failed), oldest first, for re-embedding."""

    def missing_vectors(
        self, workspace_id: str, *, tier: MemoryTier = "message", limit: int = 50
    ) -> list[IndexDoc]: ...


@runtime_checkable
class ReadsDocs(Protocol):
    """Optional on a MemoryIndex: the stored documents of some records (each record's own and its
    chunks', with their vectors), for rewriting them with the facts extracted from them
    (shared.memory.fact_keys)."""

    def get_docs(self, workspace_id: str, record_ids: Sequence[str]) -> list[IndexDoc]: ...


@runtime_checkable
class Embedder(Protocol):
    """Text to unit-length vectors (OpenAI, Bedrock Titan, or the offline MiniLM).

    `model_id` names the model and its version (for the local model, a hash of its weights):
    vectors made under different ids are never compared, and a changed id schedules re-embedding.
    """

    model_id: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order. Raises EmbeddingError when the model can't answer."""
        ...


@runtime_checkable
class EmbeddingCache(Protocol):
    """Vectors by (model id, SHA-256 of the text): the same text is embedded once per model.

    Content-addressed and holding no text, so it is shared by every workspace.
    """

    def get_many(self, model_id: str, hashes: Sequence[str]) -> dict[str, list[float]]: ...

    def put_many(self, model_id: str, vectors: Mapping[str, Sequence[float]]) -> None: ...


class SubmitResult(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built when first used, not at import

    # SQS FIFO accepts a duplicate silently, so a cloud lane can only ever say "queued".
    status: Literal["queued", "duplicate"]


@runtime_checkable
class Lanes(Protocol):
    """The producer side of the per-session FIFO: one lane (message group) per session."""

    def submit(self, item: LaneItem) -> SubmitResult:
        """Queue `item` on its session's lane; an item whose dedup id was seen is not queued again."""
        ...


class DeadLetterEntry(BaseModel):
    """A lane item the lane gave up on, as an operator sees it (`sigil dlq`; docs/dead-letters.md).

    `preview` is the start of the user's text: the CLI shows it to the operator, and nothing logs
    it. `item` is the whole item (None when its body no longer decodes, which may be why it died).
    `reason` is what the backend kept of the failure: the last error (embedded), or the turn's
    audit record of it (SQS keeps none). `attempts` is how often the lane tried it.
    """

    model_config = ConfigDict(defer_build=True)  # built when first used, not at import

    id: str  # embedded: the item's queue position; SQS: the dead-letter message's id
    group_id: str  # the lane (workspace.session): SQS's MessageGroupId
    workspace_id: str | None
    session_id: str | None
    channel: str | None
    event_id: str | None
    preview: str = Field(default="", repr=False)
    attempts: int
    enqueued_at: datetime | None  # when it was first queued: its place in its session's order
    failed_at: datetime | None
    reason: str | None
    item: LaneItem | None = Field(default=None, repr=False, exclude=True)


PREVIEW_CHARS = 60


class RedriveOutcome(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built when first used, not at import

    id: str
    group_id: str
    outcome: Literal["redriven", "skipped", "failed", "not_found"]
    # redriven: the event id it went back under; skipped: why; failed: what went wrong.
    detail: str = ""


class RedriveReport(BaseModel):
    """What a redrive did with each entry, in the order it did it (per session: original order)."""

    model_config = ConfigDict(defer_build=True)  # built when first used, not at import

    outcomes: list[RedriveOutcome] = Field(default_factory=list)

    def ids(self, outcome: str) -> list[str]:
        return [o.id for o in self.outcomes if o.outcome == outcome]


# What a redrive puts back for a dead-lettered item: the item to queue, or None to skip it (its
# turn already committed). shared.agent.redrive.requeue_policy is the one the CLI uses.
Requeue = Callable[[LaneItem], LaneItem | None]


@runtime_checkable
class DeadLetters(Protocol):
    """The lanes' dead letters: the embedded lanes' table, or the SQS FIFO dead-letter queue.

    A redrive puts a session's items back on its lane in their original order (LaneItem.enqueued_at,
    then the order the lane held them), behind whatever the lane holds now, and removes each from
    the dead letters only once it is queued again (or skipped), so nothing is lost between the two.
    A session whose item cannot be queued keeps that item and those after it, in order.
    """

    def list_entries(self, workspace_id: str | None = None, *, limit: int = 100) -> list[DeadLetterEntry]:
        """The dead letters (of `workspace_id`, or all), by session, oldest first."""
        ...

    def show(self, entry_id: str) -> DeadLetterEntry | None: ...

    def redrive(
        self,
        requeue: Requeue,
        *,
        ids: Sequence[str] = (),
        session: tuple[str, str] | None = None,
    ) -> RedriveReport:
        """Put back the entries `ids`, or every entry of `session` (workspace id, session id)."""
        ...


@runtime_checkable
class Outbox(Protocol):
    """Replies of the web channel, readable in order of seq. Also the send ledger.

    A message carries its own position, `message.seq`, which the turn derives from the session's
    message count and the part (shared.agent.reply.reply_seq): the same on every retry of a turn,
    larger for every later turn. So the outbox needs no counter: a part is stored at its seq by
    one conditional write, and finding its own (turn_id, part) there means a retried turn.

    Seqs increase but are not contiguous (a turn's parts take 100 positions): readers page with
    `after_seq` and never assume seq + 1 is next.
    """

    def append(self, message: OutboundMessage) -> OutboxEntry | None:
        """Store a reply part at `message.seq`; None when that (turn_id, part) is already stored.

        When the seq holds another turn's part (a turn that sent and then never committed, so the
        next turn started from the same message count), the part is stored at the first free seq
        after it instead of being dropped; a retry walks the same way and finds itself. The entry
        returned has the seq it was stored at.
        """
        ...

    def read(
        self, workspace_id: str, session_id: str, *, after_seq: int = 0, limit: int = 100
    ) -> list[OutboxEntry]:
        """The session's entries with seq > after_seq, in seq order."""
        ...

    def delete_session(self, workspace_id: str, session_id: str) -> int:
        """Delete every entry of the session (the right to erasure); returns how many."""
        ...


@runtime_checkable
class EventBus(Protocol):
    """EventBridge in the cloud; the local gateway's scheduler embedded."""

    def publish(self, event: DomainEvent) -> None: ...

    def publish_after(self, event: DomainEvent, delay_s: float) -> None:
        """Deliver `event` no sooner than `delay_s` seconds from now, nobody waiting meanwhile:
        an SQS delay queue in the cloud, an available-at time on the local bus (the per-turn
        extraction's debounce, shared.consolidation.turn_extraction)."""
        ...

    def forget_session(self, workspace_id: str, session_id: str) -> int:
        """Delete the events the bus still holds for the session (the right to erasure: an event
        names its session, whose id names the person in a direct chat); returns how many."""
        ...


@runtime_checkable
class WorkspaceStore(Protocol):
    def get(self, workspace_id: str) -> WorkspaceConfig | None: ...

    def put(self, config: WorkspaceConfig) -> None: ...

    def list_workspaces(self) -> list[WorkspaceConfig]: ...


@runtime_checkable
class RouteStore(Protocol):
    """The channel routes a deployment serves (`sigil config apply` writes them; the webhook reads
    one per request, cached). Keyed by (platform, name)."""

    def get(self, platform: str, name: str) -> ChannelRoute | None: ...

    def put(self, route: ChannelRoute) -> None: ...

    def delete(self, platform: str, name: str) -> bool: ...

    def list_routes(self) -> list[ChannelRoute]: ...


@dataclass(frozen=True)
class SkillLink:
    """Where a linked skill's one stored copy lives: (workspace, skill name)."""

    workspace_id: str
    name: str


@runtime_checkable
class SkillStore(Protocol):
    """A workspace's installed skills as files (docs/skills.md): `<name>/SKILL.md`, and whatever
    `scripts/`, `references/` and `assets/` hold, by relative POSIX path. Bytes in, bytes out:
    what a SKILL.md must say is shared.skills' concern. A name may be a link to another
    workspace's skill: reads follow it to that one stored copy, so an edit there shows here.

    Refused (shared.errors): a bad name or path (BadRequest); `put_skill` over a link, `link_skill`
    over an installed name, `remove_skill` of a skill other workspaces link to (ConcurrencyConflict,
    naming them); `link_skill` to a skill that does not exist (NotFound).
    """

    def list_skills(self, workspace_id: str) -> list[str]:
        """Installed names, links included, sorted."""
        ...

    def list_files(self, workspace_id: str, name: str) -> list[str]:
        """The skill's file paths, sorted, links followed; [] when it is not installed."""
        ...

    def read_file(self, workspace_id: str, name: str, path: str) -> bytes | None: ...

    def put_skill(self, workspace_id: str, name: str, files: Mapping[str, bytes]) -> None:
        """Install or replace the skill: afterwards it holds exactly `files`."""
        ...

    def link_skill(self, workspace_id: str, name: str, source: SkillLink) -> None:
        """`name` here reads `source`'s copy (a link to a link is stored as a link to its source)."""
        ...

    def link_of(self, workspace_id: str, name: str) -> SkillLink | None: ...

    def links_to(self, workspace_id: str, name: str) -> list[SkillLink]:
        """The links (workspace, name) that read this skill's copy."""
        ...

    def remove_skill(self, workspace_id: str, name: str) -> bool:
        """Remove the skill or the link; False when there was none."""
        ...


@runtime_checkable
class IdentityStore(Protocol):
    """Who a channel user is in a workspace: one Identity per (workspace, channel, channel user).

    The agent reads it on every turn (shared.identity.resolve_sender) and admins change it
    (`sigil pairing ...`). A pairing code is looked up without a scan.
    """

    def get(self, workspace_id: str, channel: str, channel_user_id: str) -> Identity | None: ...

    def put(self, identity: Identity) -> None:
        """Store `identity`, replacing the one with its key; a code it no longer has stops finding it."""
        ...

    def create(self, identity: Identity) -> Identity:
        """Store `identity` unless its key holds one already; returns the identity stored.

        The first write wins, so two first messages of one sender racing in two lanes (a DM and a
        group) end up with one identity, and one pairing code, between them.
        """
        ...

    def list_identities(self, workspace_id: str, *, status: IdentityStatus | None = None) -> list[Identity]:
        """The workspace's identities (those with `status`, when given), by channel, then channel user."""
        ...

    def find_by_pairing_code(self, workspace_id: str, code: str) -> Identity | None: ...

    def delete(self, workspace_id: str, channel: str, channel_user_id: str) -> None: ...


@runtime_checkable
class AuditLog(Protocol):
    def append(self, record: AuditRecord) -> None: ...

    def list_records(self, workspace_id: str, *, limit: int = 100) -> list[AuditRecord]:
        """Newest first."""
        ...

    def anonymise(self, workspace_id: str, *, user_id: str, session_ids: Sequence[str] = ()) -> int:
        """Take a person out of the audit log (the right to erasure); returns how many records changed.

        Records of `user_id`, or of one of `session_ids`, keep what the workspace accounts with
        (time, model, tools, tokens, cost, outcome) and lose who and where: user and event id
        cleared, session "erased", error text cleared (it may quote the user).
        """
        ...


@runtime_checkable
class BudgetStore(Protocol):
    """Counters of tokens, tool calls and estimated USD per workspace and per user, per UTC day and
    calendar month (shared.budgets; docs/budgets.md). `limits` None: nothing is limited.

    A model call's usage is known only after the call, so a call that starts under the limit may
    end over it, and the next check denies. Every charge is recorded (the tokens were spent) and
    added atomically to all its buckets: two writers charging at once never lose an update. The
    turn itself reads the counters with its session and adds its spending in its commit
    (SessionStore.get_with_budget and save's `charge`), checking in between on what it read plus
    what it spent (shared.budgets.TurnBudget); `check` and `charge` serve everything else.
    """

    def check(
        self, workspace_id: str, user_id: str | None, limits: BudgetLimits | None, now: datetime
    ) -> BudgetDecision:
        """Denied when a counter of a bucket of `now` (workspace/day, workspace/month, and with a
        user user/day, user/month) is at or over its limit. Reads only; no reads when no limit."""
        ...

    def totals(self, workspace_id: str, counters: Sequence[str]) -> dict[str, Counters]:
        """The counters named `counters` (bucket keys), in one consistent read; a counter never
        written is missing. What a turn reads when the session store did not read it (TurnBudget)."""
        ...

    def charge(
        self,
        workspace_id: str,
        user_id: str | None,
        usage: BudgetUsage,
        limits: BudgetLimits | None,
        now: datetime,
    ) -> BudgetDecision:
        """Add `usage` to every bucket of `now`, all or none, whatever the limits; the decision is
        the state after the charge (denied when this or an earlier charge used a limit up)."""
        ...


@runtime_checkable
class SecretStore(Protocol):
    """Signing secrets, bot tokens and API keys: Secrets Manager in the cloud, a 0600 file locally."""

    def get(self, name: str) -> str | None: ...


@runtime_checkable
class ChannelSender(Protocol):
    """Delivers one reply part on its channel (web: the outbox; others: the platform's API)."""

    def send(self, message: OutboundMessage) -> None: ...


@runtime_checkable
class ConsolidationState(Protocol):
    """Leases and checkpoints of the consolidation runs (shared.consolidation; docs/consolidation.md).

    A lease keeps two runs off the same work (one session's compaction, the hourly catch-up): it
    is taken by one conditional write, so of two owners racing for it exactly one wins, and it
    ends by itself after `ttl_s`, so a run killed by its timeout never blocks the next one for
    longer than that. A checkpoint is a run's resume point (the last summarised seq of a session,
    the workspace where the catch-up stopped): a run cut off by its deadline leaves it, and the
    next run continues from it.
    """

    def acquire_lease(self, workspace_id: str, name: str, owner: str, ttl_s: float) -> bool:
        """Take (or extend) lease `name` for `owner` for `ttl_s` seconds from now.

        True when the lease was absent, expired, or already `owner`'s; False while another owner
        holds it unexpired. Atomic: one write decides.
        """
        ...

    def release_lease(self, workspace_id: str, name: str, owner: str) -> None:
        """End lease `name` if `owner` holds it; a lease another owner took meanwhile is left alone."""
        ...

    def get_checkpoint(self, workspace_id: str, name: str) -> str | None: ...

    def put_checkpoint(self, workspace_id: str, name: str, value: str) -> None: ...


# ---------------------------------------------------------------- WebSocket connections (web channel, cloud)


class WebConnection(BaseModel):
    """An open browser WebSocket of the cloud's WebSocket API, as its browser token allows it.

    `sessions` are the token's session patterns (shared.channels.web_tokens.BrowserClaims), kept so
    each frame is checked without the token; `expires_at` is the token's `exp` (unix seconds): a
    connection is never used past it. `subscribed` are the web sessions whose replies it gets.
    """

    model_config = ConfigDict(defer_build=True)  # built when first used, not at import

    connection_id: str = Field(min_length=1, max_length=128)
    workspace_id: str
    user: str
    sessions: list[str]
    expires_at: int
    # When the record is forgotten by itself: the token's expiry or API Gateway's two-hour limit
    # on a connection, whichever comes first.
    ttl_at: int
    subscribed: list[str] = Field(default_factory=list)


@runtime_checkable
class Connections(Protocol):
    """Who listens to which web session: the WebSocket API's connections (docs/web-streaming-cloud.md).

    API Gateway holds the sockets; this holds what Sigil knows of each (its token's workspace,
    user and sessions) and which connections a turn posts a session's deltas and replies to.
    """

    def open(self, connection: WebConnection) -> None:
        """Record a connection that passed $connect; forgotten by itself after its `ttl_at`."""
        ...

    def get(self, connection_id: str) -> WebConnection | None:
        """The connection, unless it was closed (or its record expired)."""
        ...

    def subscribe(self, connection: WebConnection, session: str) -> WebConnection:
        """Add web session `session` (its name, e.g. "s1") to what the connection listens to."""
        ...

    def listeners(self, workspace_id: str, session: str, *, now: int) -> list[str]:
        """The ids of the unexpired connections listening to web session `session`."""
        ...

    def close(self, connection_id: str) -> None:
        """Forget the connection and its subscriptions ($disconnect, or a post that found it gone)."""
        ...


@runtime_checkable
class ConnectionPoster(Protocol):
    """Sends one frame to an open WebSocket (API Gateway's management API in the cloud)."""

    def post(self, connection_id: str, data: bytes) -> bool:
        """True once sent; False when the connection is gone (closed, or never existed)."""
        ...

    def hang_up(self, connection_id: str) -> None:
        """Close the connection from the server's side; one already gone is no error."""
        ...


# ---------------------------------------------------------------- send ledger (shared.channels.ledger)


@dataclass(frozen=True)
class SentPiece:
    """A posted piece: the platform's message id and a digest of the text it now shows."""

    message_id: str
    digest: str


@runtime_checkable
class SendLedger(Protocol):
    def get(self, workspace_id: str, turn_id: str, part: int, chunk: int = 0) -> SentPiece | None:
        """The piece recorded for (turn_id, part, chunk), unless there is none or it expired."""
        ...

    def record(
        self, workspace_id: str, turn_id: str, part: int, chunk: int, *, message_id: str, text_digest: str
    ) -> SentPiece:
        """Record a posted piece; the first record wins. Returns what is stored, which is another
        writer's piece when a concurrent attempt recorded first."""
        ...

    def update_digest(
        self, workspace_id: str, turn_id: str, part: int, chunk: int, *, text_digest: str
    ) -> None:
        """After an edit: the recorded message now shows text with this digest."""
        ...


@runtime_checkable
class Schedules(Protocol):
    """Things done later (shared.schedules, docs/schedules.md): one EventBridge Scheduler schedule
    per item in the cloud, a table the local scheduler reads on the embedded backend. A schedule
    fires by putting its lane item (LaneItem.fired) on its session's lane, nothing else."""

    def create(self, schedule: Schedule, item: LaneItem, first_at: datetime) -> None:
        """Store `schedule`, which fires `item` first at `first_at` (UTC), then per its recurrence."""
        ...

    def get(self, workspace_id: str, schedule_id: str) -> Schedule | None: ...

    def list_schedules(self, workspace_id: str, *, user_id: str | None = None) -> list[Schedule]:
        """The live schedules of the workspace (or of one of its users), oldest first."""
        ...

    def count(self, workspace_id: str, *, user_id: str | None = None) -> int: ...

    def cancel(self, workspace_id: str, schedule_id: str) -> bool:
        """Stop the schedule; False when the workspace has no such live schedule."""
        ...


# What a sandboxed script's `sigil` calls reach: (op, JSON args) -> a JSON-able answer.
HostHandler = Callable[[str, dict[str, Any]], Any]


class CodeExecutor(Protocol):
    """Runs untrusted Python in a sandbox under a call's limits (docs/sandbox.md): the adapter is
    shared.sandbox.wasm.WasmExecutor (CPython for WASI on Wasmtime)."""

    def prewarm(self) -> None:
        """Start an instance for the next run now, e.g. while the model call is in flight."""
        ...

    def run(
        self,
        script: str,
        *,
        inputs: Mapping[str, str],
        limits: SandboxConfig,
        host: HostHandler,
        argv: Sequence[str] = (),
        stdin: str = "",
    ) -> SandboxRun:
        """Run `script` (its sys.argv `argv`, its stdin `stdin`: a skill's script reads them); raise
        SandboxError (its `limit` says which) when it is stopped or fails."""
        ...


class CompiledCodeStore(Protocol):
    """Write-once bytes by key: where the sandbox's compiled runtime is kept between execution
    environments (shared.sandbox.compiled; docs/sandbox.md). What it holds is native code, so an
    adapter must be writable only by the one trusted writer."""

    def get(self, key: str) -> bytes | None:
        """The bytes under `key`, or None."""
        ...

    def put_once(self, key: str, data: bytes) -> bool:
        """Store `data` under `key` unless something is there already; False when it was."""
        ...


class StepLog(Protocol):
    """Durable steps (docs/delegation.md): each model call's and tool call's message, saved as it
    completes, so an invocation cut by the deadline, a crash or a redelivery continues from the
    last saved step instead of repeating it. Keyed by a turn's id or a task's id."""

    def append(self, workspace_id: str, key: str, seq: int, message: Message) -> bool:
        """Save step `seq` (0, 1, ...); False when that step is already saved (a retry)."""
        ...

    def load(self, workspace_id: str, key: str) -> list[Message]:
        """The saved steps in order (none: [])."""
        ...

    def clear(self, workspace_id: str, key: str) -> int: ...


class TaskStore(Protocol):
    """Delegated tasks (shared.models.tasks.Task), per workspace."""

    def create(self, task: Task, *, max_per_session: int, max_per_workspace: int) -> Task:
        """Store a new task unless the session or the workspace already has that many tasks that
        are not terminal: raise TaskCapReached (shared.errors) then."""
        ...

    def get(self, workspace_id: str, task_id: str) -> Task | None: ...

    def save(self, task: Task) -> Task:
        """Write `task` if the stored version is still task.version; return it with the version
        moved on. Raise StaleTask (shared.errors) when another writer got there first."""
        ...

    def list_tasks(
        self,
        workspace_id: str,
        *,
        session_id: str | None = None,
        active: bool | None = None,
        limit: int = 100,
    ) -> list[Task]:
        """Newest first; `active` True: not terminal, False: terminal, None: both."""
        ...

    def delete_session(self, workspace_id: str, session_id: str) -> int: ...


class Scratchpad(Protocol):
    """A session's scratchpad: a task's full output, read through a tool, never the conversation."""

    def put(self, workspace_id: str, session_id: str, key: str, text: str) -> None: ...

    def get(self, workspace_id: str, session_id: str, key: str) -> str | None: ...

    def list_keys(self, workspace_id: str, session_id: str, *, prefix: str = "") -> list[str]: ...

    def delete_session(self, workspace_id: str, session_id: str) -> int: ...


class MediaStore(Protocol):
    """Files senders attached (docs/media.md): S3 in the cloud, the data dir embedded."""

    def put(self, item: MediaItem, data: bytes) -> None: ...

    def get(self, workspace_id: str, media_id: str) -> MediaItem | None: ...

    def read(self, workspace_id: str, media_id: str) -> bytes | None: ...

    def update(self, item: MediaItem) -> None:
        """Rewrite an item's record (its transcript or extracted text), never its bytes."""
        ...

    def list_media(
        self, workspace_id: str, *, user_id: str | None = None, session_id: str | None = None
    ) -> list[MediaItem]: ...

    def delete_user(self, workspace_id: str, user_id: str) -> int:
        """Erase a user's files (record and bytes); how many."""
        ...


class Transcriber(Protocol):
    """Speech to text for voice notes (docs/media.md, "Transcription"): an OpenAI-compatible
    `/audio/transcriptions` endpoint (shared.providers.transcription)."""

    model_ref: str  # "provider/model", priced per minute (shared.providers.transcription.USD_PER_MIN)

    def transcribe(self, audio: bytes, *, mime_type: str, filename: str) -> Transcript:
        """The audio's text; raise ProviderError (shared.errors) when the provider fails."""
        ...


class MediaUsage(Protocol):
    """Bytes of attached files a workspace fetched per UTC day (MediaLimits.max_bytes_per_day):
    added atomically, so two turns fetching at once never lose an update. `day` is "YYYY-MM-DD"."""

    def add(self, workspace_id: str, day: str, size: int) -> int:
        """Add `size` to the day's total; the total after."""
        ...

    def total(self, workspace_id: str, day: str) -> int: ...


@dataclass(frozen=True)
class PresignedUpload:
    """Where and how a browser posts one file straight to the media bucket: an HTML form POST to
    `url` with `fields` (the signed policy) and then the file."""

    url: str
    fields: dict[str, str]


@dataclass(frozen=True)
class StagedUpload:
    """A file a browser posted to the bucket, not yet recorded: its size and the slot's metadata."""

    size: int
    metadata: dict[str, str]


class MediaUploads(Protocol):
    """The chat page's uploads in the cloud (shared.media.upload): a presigned POST per file, to
    the file's own place under the workspace's prefix, then read back once to be recorded."""

    def presign(
        self,
        workspace_id: str,
        media_id: str,
        *,
        max_bytes: int,
        metadata: dict[str, str],
        expires_s: int,
    ) -> PresignedUpload:
        """A POST accepting 1 to `max_bytes` bytes, carrying exactly `metadata`, until `expires_s`."""
        ...

    def staged(self, workspace_id: str, media_id: str) -> StagedUpload | None: ...

    def read_staged(self, workspace_id: str, media_id: str) -> bytes | None: ...

    def discard(self, workspace_id: str, media_id: str) -> None: ...

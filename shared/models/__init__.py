"""Domain models: every model that crosses a boundary (HTTP, queue, store, provider) is here.

Messages are a discriminated union on `kind` (user / assistant / tool), serialised by the one
codec in `shared.serde`, so the SQLite and DynamoDB stores write byte-identical documents.

The budget values that cross the ports (usage, counters, buckets, decisions) are in
`shared.models.budgets`; the limits a workspace configures are here, beside WorkspaceConfig.
"""

# No `from __future__ import annotations` here: pydantic would evaluate every field's annotation
# from its text when each class is made, a fifth of this module's import on every cold start.
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shared.clock import new_id, utcnow
from shared.models.mcp import McpConfig

# Ids that become parts of keys (SQLite rows, DynamoDB partition keys, SQS group ids) are kept to
# a conservative alphabet so they can never smuggle a separator into another workspace's key.
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@+=\-]{0,127}$"
WorkspaceId = Annotated[str, Field(pattern=ID_PATTERN)]
Identifier = Annotated[str, Field(pattern=ID_PATTERN)]


class Model(BaseModel):
    """Base: strict about unknown fields so a typo in a payload is an error, not a silent drop."""

    model_config = ConfigDict(extra="forbid", frozen=False, validate_assignment=False, defer_build=True)


# ---------------------------------------------------------------- conversation messages


class ToolCall(Model):
    id: str
    name: str
    arguments: str = "{}"  # JSON text exactly as the model produced it


class ImageRef(Model):
    """A photo the sender attached, by its MediaItem id (shared.media.content): the bytes are read
    from the MediaStore for the request that shows it, never kept in the session."""

    media_id: Identifier
    mime_type: str
    width: int | None = Field(default=None, ge=1)
    height: int | None = Field(default=None, ge=1)
    name: str | None = None


class UserMessage(Model):
    kind: Literal["user"] = "user"
    id: str = Field(default_factory=lambda: new_id("m_"))
    content: str
    # The photos of this message (docs/media.md); a model that cannot see images gets a note.
    images: list[ImageRef] = Field(default_factory=list)
    sender_id: str | None = None  # the channel's id of the sender
    # The Sigil user the sender resolved to: whose words these are when the message rolls into
    # Tier 1 (the right to erasure finds them by it, in group sessions too).
    user_id: str | None = None
    # The sender's display name as the channel gave it: the record's author once it rolls into
    # Tier 1, which memory search matches against the people a query names.
    sender_name: str | None = None
    event_id: str | None = None
    created_at: datetime = Field(default_factory=utcnow)


class AssistantMessage(Model):
    kind: Literal["assistant"] = "assistant"
    id: str = Field(default_factory=lambda: new_id("m_"))
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    model: str | None = None
    created_at: datetime = Field(default_factory=utcnow)


class ToolResultMessage(Model):
    kind: Literal["tool"] = "tool"
    id: str = Field(default_factory=lambda: new_id("m_"))
    tool_call_id: str
    name: str
    content: str
    is_error: bool = False
    created_at: datetime = Field(default_factory=utcnow)


Message = Annotated[UserMessage | AssistantMessage | ToolResultMessage, Field(discriminator="kind")]


# ---------------------------------------------------------------- sessions (spec 000)


class ToolBudget(Model):
    max_calls_per_turn: int = Field(default=20, ge=1)


class TokenBudget(Model):
    max_tokens_per_turn: int | None = Field(default=None, ge=1)


class Session(Model):
    """Spec 000's Session. `version` drives optimistic concurrency in every session store."""

    id: Identifier
    workspace_id: WorkspaceId
    user_id: str | None = None
    channel: str = "web"
    active_messages: list[Message] = Field(default_factory=list)
    summary: str = ""
    last_compaction: datetime | None = None
    model_override: str | None = None
    # What the conversation is working on, pinned by the model (the pin_task tool) and shown in
    # every later turn's system prompt until it is changed or cleared.
    active_task: str | None = Field(default=None, max_length=500)
    # A delegated task of this session asked the user a question and may still wait for the
    # answer (shared.tasks): the turns look its question up while this is set, and only then.
    tasks_waiting: bool = False
    # The Orientation Document of the conversation (shared.agent.orientation) and when it was
    # written: reused byte for byte by every later turn (it is part of the cached prefix).
    orientation: str = ""
    orientation_at: datetime | None = None
    tool_budget: ToolBudget = Field(default_factory=ToolBudget)
    token_budget: TokenBudget = Field(default_factory=TokenBudget)
    status: Literal["active", "paused", "archived"] = "active"
    # Messages ever appended, and how many have rolled out of the window into Tier 1.
    message_count: int = 0
    rolled_out_count: int = 0
    # Platform event ids of the turns committed lately, oldest first, and when each committed
    # (epoch seconds, same order). The turn keeps a day of them (shared.agent.commit.EVENT_ID_TTL),
    # so a redelivered event that already ran is skipped however late the platform retries.
    recent_event_ids: list[str] = Field(default_factory=list)
    recent_event_times: list[int] = Field(default_factory=list)
    version: int = 0
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)

    @model_validator(mode="after")
    def _a_time_for_every_event_id(self) -> Self:
        # Documents written before the times were kept carry ids only: those count as seen at the
        # session's last update, so they expire a day after it, neither at once nor never.
        missing = len(self.recent_event_ids) - len(self.recent_event_times)
        if missing < 0:
            raise ValueError("recent_event_times has more entries than recent_event_ids")
        if missing:
            seen = int(self.updated_at.timestamp())
            self.recent_event_times = [seen] * missing + self.recent_event_times
        return self


# ---------------------------------------------------------------- channels


class Sender(Model):
    id: str
    name: str | None = None
    is_bot: bool = False


class Attachment(Model):
    """A file referenced by the platform: where it is and what the platform declares of it. The
    webhook never downloads it; the agent turn fetches it into the MediaStore (shared.media.fetch)
    and sets `media_id`."""

    kind: str
    id: str | None = None
    url: str | None = None
    name: str | None = None
    mime_type: str | None = None
    size: int | None = None
    # Set once the turn has fetched and stored the file (shared.media): the MediaItem's id.
    media_id: Identifier | None = None


Channel = Literal["web", "telegram", "slack", "discord", "whatsapp"]


class ChatCommand(Model):
    """A chat command (docs/commands.md), as the channel recognised it: `/status`, `/model ref`.

    Set only where the platform says the message is a command (Telegram's bot_command entity at
    offset 0, a Slack slash command, a Discord application command) or, on WhatsApp and the web,
    where the text opens with `/name`, so "/status" inside a sentence stays ordinary text.
    """

    name: str = Field(pattern=r"^[a-z0-9_]{1,32}$")  # lower-case, without the "/" or "@bot"
    args: str = Field(default="", max_length=4096)


class InboundMessage(Model):
    """A user's message, normalised from any channel, as it travels through the lane."""

    event_id: Identifier
    channel: Channel
    workspace_id: WorkspaceId
    session_id: Identifier
    sender: Sender
    chat_id: str
    chat_type: Literal["dm", "group", "channel"] = "dm"
    thread_id: str | None = None
    reply_to: str | None = None
    text: str
    # A chat command: answered by the turn without the model (shared.agent.commands).
    command: ChatCommand | None = None
    attachments: list[Attachment] = Field(default_factory=list)
    received_at: datetime = Field(default_factory=utcnow)
    # Channel-specific routing data the outbound client needs (e.g. Discord's interaction token).
    reply_context: dict[str, str] = Field(default_factory=dict)
    # A coalesced burst's original event ids (shared.agent.coalesce): the turn remembers each, so
    # a late redelivery of any one of them on its own is still recognised as already handled.
    merged_event_ids: list[Identifier] = Field(default_factory=list)
    # The model its chat's route names (ChannelRoute.chats[chat].model): the turn uses it unless
    # the session has its own override (shared.agent.preflight.admit). None: the workspace's.
    model: str | None = None

    @property
    def lane_key(self) -> str:
        """The session's lane: SQS MessageGroupId in the cloud, the in-process lane locally."""
        return f"{self.workspace_id}.{self.session_id}"


class OutboundMessage(Model):
    """One part of a reply, and its position in the session's outbox.

    The sender sets `seq` from the turn (shared.agent.reply.reply_seq), so every retry of a turn
    asks for the same position: the outbox stores a part at its seq once, which makes (turn_id,
    part) ↔ seq the send ledger without a counter to read. Seqs increase from turn to turn but
    are not contiguous.
    """

    workspace_id: WorkspaceId
    session_id: Identifier
    channel: str
    chat_id: str
    thread_id: str | None = None
    turn_id: str
    part: int = Field(default=0, ge=0)
    seq: int = Field(ge=1)  # from 1, so that reading after seq 0 returns everything
    text: str
    in_reply_to: str | None = None  # the inbound event id
    # The inbound's routing data (Discord's interaction token, WhatsApp's phone-number id, ...).
    reply_context: dict[str, str] = Field(default_factory=dict)
    final: bool = True
    created_at: datetime = Field(default_factory=utcnow)


class OutboxEntry(Model):
    """An outbound message as stored in a session's outbox, with its position for readers.

    `seq` is where the message landed, and `message.seq` always equals it: usually the position
    the message asked for, later when another turn's part held that one (see ports.Outbox).
    """

    seq: int = Field(ge=1)
    message: OutboundMessage

    @model_validator(mode="before")
    @classmethod
    def _position_of_older_documents(cls, data: Any) -> Any:
        # Entries stored before messages carried their position have none in `message`: the
        # entry's seq is that position. Without this, reading an older outbox would fail.
        if isinstance(data, dict) and isinstance(data.get("message"), dict) and "seq" not in data["message"]:
            return {**data, "message": {**data["message"], "seq": data.get("seq")}}
        return data

    @model_validator(mode="after")
    def _one_position(self) -> Self:
        # Readers see both (the web API's reply JSON spreads the message next to the entry's
        # seq), so the two must never disagree.
        if self.message.seq != self.seq:
            raise ValueError(f"entry seq {self.seq} differs from its message's seq {self.message.seq}")
        return self


# ---------------------------------------------------------------- schedules (docs/schedules.md)


Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS: Final[tuple[Weekday, ...]] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
SCHEDULE_ID_PATTERN = r"^sch-[a-z0-9]{12}$"


class Recurrence(Model):
    """When a recurring schedule fires, in its time zone: a small set that both engines express
    exactly (EventBridge Scheduler's cron() and dateutil's rrule, shared.schedules.timing)."""

    every: Literal["hour", "day", "weekday", "week", "month"]
    time: str = "09:00"  # HH:MM, 24-hour; every hour: its minute
    days: list[Weekday] = Field(default_factory=list, max_length=7)  # every week: which days
    day_of_month: int | None = Field(default=None, ge=1, le=28)  # every month: which day

    @field_validator("time")
    @classmethod
    def _time_of_day(cls, value: str) -> str:
        # A validator, not a pattern: the error says what is allowed in words.
        hour, _, minute = value.partition(":")
        if not (len(hour) == len(minute) == 2 and hour.isdigit() and minute.isdigit()):
            raise ValueError(f"{value[:10]!r} is not a time of day: HH:MM on a 24-hour clock, e.g. 09:00")
        if int(hour) > 23 or int(minute) > 59:
            raise ValueError(f"{value[:10]!r} is not a time of day: HH:MM on a 24-hour clock, e.g. 09:00")
        return value

    @model_validator(mode="after")
    def _complete(self) -> Self:
        if self.every == "week" and not self.days:
            raise ValueError("a weekly schedule needs its days (e.g. ['mon'])")
        if self.every == "month" and self.day_of_month is None:
            raise ValueError("a monthly schedule needs its day_of_month (1 to 28)")
        return self


class Schedule(Model):
    """Something the agent does later, for the user whose turn set it (shared.schedules)."""

    id: str = Field(pattern=SCHEDULE_ID_PATTERN)
    workspace_id: WorkspaceId
    session_id: Identifier
    user_id: str = Field(min_length=1, max_length=300)
    # message: a fixed reminder, sent without the model; task: a turn the model answers.
    kind: Literal["message", "task"] = "message"
    text: str = Field(min_length=1, max_length=1000)
    at: datetime | None = None  # a one-time schedule's moment (aware)
    recurrence: Recurrence | None = None
    timezone: str = Field(default="UTC", max_length=64)
    created_at: datetime = Field(default_factory=utcnow)
    heartbeat: bool = False  # the workspace's heartbeat (WorkspaceConfig.heartbeat), not a user's

    @model_validator(mode="after")
    def _one_when(self) -> Self:
        if (self.at is None) == (self.recurrence is None):
            raise ValueError("a schedule has either `at` or `recurrence`, not both")
        if self.at is not None and self.at.tzinfo is None:
            raise ValueError("`at` must carry its UTC offset")
        return self


class Fired(Model):
    """A schedule's occurrence, riding on the lane item it became (LaneItem.fired)."""

    schedule: Schedule
    at: datetime  # the occurrence (EventBridge Scheduler's <aws.scheduler.scheduled-time>)


class ScheduleLimits(Model):
    """How many live schedules a user and a whole workspace may hold."""

    per_user: int = Field(default=20, ge=0, le=1000)
    per_workspace: int = Field(default=500, ge=0, le=100_000)


class HeartbeatConfig(Model):
    """Spec 003's heartbeat: a recurring turn that checks the workspace's proactive tasks (the
    HEARTBEAT.md of spec 003, here `tasks`) and says what needs attention, in the conversation
    where `/heartbeat on` was sent (shared.schedules.heartbeat_on). Off by default."""

    enabled: bool = False
    recurrence: Recurrence = Field(default_factory=lambda: Recurrence(every="day", time="09:00"))
    tasks: str = Field(default="", max_length=900)


# ---------------------------------------------------------------- workspaces


class ScopeLimits(Model):
    """One scope's budget per UTC day and per calendar month (UTC). None: unlimited.

    Tokens count input and output together. USD is the estimate from the price table
    (shared.budgets.PriceTable), not the provider's invoice. A limit of 0 denies every call.
    """

    tokens_per_day: int | None = Field(default=None, ge=0)
    tokens_per_month: int | None = Field(default=None, ge=0)
    tool_calls_per_day: int | None = Field(default=None, ge=0)
    tool_calls_per_month: int | None = Field(default=None, ge=0)
    # Decimal, so that "5.00" in a config is exactly five dollars when it becomes a counter limit.
    usd_per_day: Decimal | None = Field(default=None, ge=0)
    usd_per_month: Decimal | None = Field(default=None, ge=0)


class BudgetLimits(Model):
    """A workspace's budgets (shared.budgets): `workspace` for all its users together, `user` for each."""

    workspace: ScopeLimits = Field(default_factory=ScopeLimits)
    user: ScopeLimits = Field(default_factory=ScopeLimits)

    def over(self, base: "BudgetLimits") -> "BudgetLimits":
        """These limits where they were given, `base`'s wherever they were not: a limit given as
        null stays null (that limit off). What a sigil.yaml workspace's partial `budget` means
        (shared.configuration.effective): `{workspace: {usd_per_day: "5.00"}}` keeps the
        default's token caps and every per-user cap, rather than dropping them (issue 26)."""
        merged: dict[str, ScopeLimits] = {}
        for scope in ("workspace", "user"):
            mine: ScopeLimits = getattr(self, scope)
            given = {name: getattr(mine, name) for name in mine.model_fields_set}
            merged[scope] = getattr(base, scope).model_copy(
                update=given if scope in self.model_fields_set else {}
            )
        return BudgetLimits(**merged)


# How far a turn's memory reads reach (WorkspaceConfig.memory.recall, docs/privacy.md):
# "personal" (the default): in a direct conversation the asker's own conversations on every
# channel plus shared facts; in a group, the group's own conversation plus shared facts.
# "workspace": everything in the workspace (a team knowledge base). "conversation": the current
# conversation only.
RecallPolicy = Literal["personal", "workspace", "conversation"]
# Spec 001's four scopes, narrowest first: what a memory's decay rate is chosen by
# (shared.memory.scope.scope_level).
ScopeLevel = Literal["conversation", "channel", "workspace", "account"]


class MemoryConfig(Model):
    """A workspace's memory policy (docs/privacy.md): who recalls what, and how fast facts fade."""

    recall: RecallPolicy = "personal"
    # Spec 001's DecayConfig: a factor on a fact's lifetime for each scope (2.0 fades half as
    # fast). A scope not listed keeps factor 1.0, today's rates.
    decay: dict[ScopeLevel, Annotated[float, Field(gt=0, le=1000)]] = Field(default_factory=dict)


# The web tools (shared/tools/web.py, docs/tools.md "Web tools"): both off unless a workspace
# turns them on, since a fetched page or a search result is untrusted text from anyone, and a
# fetch is a request from inside the deployment's network.
WebSearchProviderName = Literal["brave", "searxng"]
HTTP_URL_PATTERN = r"^https?://"


class WebSearchConfig(Model):
    """`web_search`'s provider: Brave's Search API (a key in the secret store) or a SearXNG
    instance the operator runs (its JSON API, no key)."""

    provider: WebSearchProviderName
    # Brave: None means https://api.search.brave.com/res/v1/web/search. SearXNG: its /search URL,
    # required. The operator's own choice, so it is not held to web_fetch's address rules (a
    # self-hosted engine is usually on a private network).
    endpoint: str | None = Field(default=None, pattern=HTTP_URL_PATTERN)
    # The secret holding the API key (Brave); read from the secret store at each search.
    api_key_secret: str = Field(default="web-search/brave-api-key", min_length=1, max_length=256)
    max_results: int = Field(default=5, ge=1, le=20)

    @model_validator(mode="after")
    def _endpoint_for_searxng(self) -> Self:
        if self.provider == "searxng" and self.endpoint is None:
            raise ValueError(
                "a searxng provider needs its endpoint, e.g. http://searxng.internal:8080/search"
            )
        return self


class WebConfig(Model):
    """What a workspace lets its turns reach on the web. Off by default."""

    fetch: bool = False
    # None: web_search is off.
    search: WebSearchConfig | None = None
    # Bytes read of one page (the body is cut there) and seconds one fetch or search may take,
    # within the turn's own deadline.
    max_bytes: int = Field(default=2_000_000, ge=1024, le=20_000_000)
    timeout_s: float = Field(default=15.0, gt=0, le=120)


# run_python (shared/sandbox/, docs/sandbox.md): off unless a workspace turns it on. Spec 001's
# executor numbers, with one reading made explicit: its 1,000,000 fuel units meter the script, not
# CPython's start (which costs ~250 million wasm instructions and happens before the script, in a
# pre-warmed instance), and the default here is larger because 1,000,000 units is ~10,000 Python
# bytecodes, too few to read 1,000 facts; the spec's figure remains a valid setting.
SPEC_001_FUEL = 1_000_000


class SandboxConfig(Model):
    """What one run_python call may use (each call gets a fresh WebAssembly instance)."""

    enabled: bool = False
    # Wasm instructions (Wasmtime fuel) the script may execute after the interpreter has started.
    # At most 10^12: Wasmtime burns fuel at some 10-20 billion units a second of CPU on this
    # project's build machine, so 20 billion (the cap before) let a script run ~1 s and wall_s
    # never bound; 10^12 is about a minute, past wall_s's 300 s cap on a slower core only.
    fuel: int = Field(default=400_000_000, ge=SPEC_001_FUEL // 10, le=1_000_000_000_000)
    memory_mb: int = Field(default=64, ge=16, le=1024)
    # Wall-clock seconds, enforced by epoch interruption (a loop in wasm cannot hold the thread).
    wall_s: float = Field(default=10.0, gt=0, le=300)
    # Bytes the script may write to stdout and stderr together; past it the run is stopped.
    max_output_bytes: int = Field(default=64_000, ge=1024, le=10_000_000)
    # Calls the script may make to the `sigil` host module in one run, and rows one call returns.
    max_host_calls: int = Field(default=50, ge=0, le=1000)
    max_host_rows: int = Field(default=2000, ge=1, le=10_000)


class SandboxUsage(Model):
    """One run_python call as the turn's audit record keeps it: what it used and why it stopped."""

    tool: str = "run_python"
    fuel: int
    memory_bytes: int
    wall_s: float
    output_bytes: int
    host_calls: int
    prewarmed: bool = False
    stopped: str | None = None  # SandboxError.limit when it did not end on its own


class SandboxRun(Model):
    """What one run_python call did: its output and what it used (the audit record carries it)."""

    stdout: str
    stderr: str
    fuel_used: int
    memory_bytes: int  # the wasm linear memory's size at its largest
    wall_s: float
    prewarmed: bool = False  # the instance had started before the call (while the model ran)
    # Each `sigil` call: op, args, rows returned or error, milliseconds.
    host_calls: list[dict[str, Any]] = Field(default_factory=list)


ContextMode = Literal["off", "pointers", "inject"]


class ContextConfig(Model):
    """The context pipeline of a workspace's turns (docs/context.md, "The context pipeline"):
    before the first model call, memory, skills and the task pin are selected for the message,
    deterministically and with no model call. `off`: the tools alone (spec 000); `pointers`: one
    line per memory (its id, tier, date and opening words), for the model to fetch with the memory
    tools; `inject`: the memories' text, ranked, within `budget_tokens` (spec 004's InjectMemory)."""

    mode: ContextMode = "inject"
    budget_tokens: int = Field(default=1000, ge=100, le=8000)
    max_items: int = Field(default=10, ge=1, le=50)
    # The Refinement Gate (specs 001/002, shared.agent.gate): one call to the workspace's cheap
    # model that keeps or trims the selection, within `gate_timeout_s`; on a timeout, an error, an
    # answer it cannot use or a spent budget the deterministic selection stands.
    gate: bool = False
    gate_timeout_s: float = Field(default=2.0, gt=0, le=30)
    # The Orientation Document (shared.agent.orientation): written at a conversation's start, and
    # again after `orientation_gap_s` without a turn, then kept on the session; with the pipeline
    # on only (`off` is spec 000's: nothing retrieved for the model).
    orientation: bool = True
    orientation_gap_s: int = Field(default=6 * 3600, ge=60, le=30 * 86_400)
    orientation_tokens: int = Field(default=400, ge=100, le=2000)


class ContextPick(Model):
    """One thing the pipeline selected for a turn, as its audit record keeps it: never the text."""

    kind: Literal["memory", "skill", "task"]
    id: str
    score: float
    tokens: int = 0  # what it added to the prompt (0: selected, but not shown in this mode)


GateVerdict = Literal["kept", "trimmed", "fell_back", "skipped"]


class ContextGate(Model):
    """What the Refinement Gate did on a turn (shared.agent.gate), as its audit record keeps it:
    `kept` the selection whole, `trimmed` it (`dropped`: the ids it left out), `fell_back` to the
    deterministic selection (`reason`: timeout, error, invalid answer, budget), or `skipped` the
    call (nothing selected to judge)."""

    verdict: GateVerdict
    reason: str | None = None
    model: str | None = None
    dropped: list[str] = Field(default_factory=list)
    ms: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0


# ---------------------------------------------------------------- media (docs/media.md)

MediaKind = Literal["image", "audio", "document", "video", "other"]


class MediaKindLimits(Model):
    """How large one file of a kind may be, checked from the platform's declared size before the
    download and again while streaming it."""

    max_bytes: int = Field(ge=1, le=500_000_000)


def _default_media_kinds() -> dict[MediaKind, MediaKindLimits]:
    return {
        "image": MediaKindLimits(max_bytes=10_000_000),
        "audio": MediaKindLimits(max_bytes=25_000_000),
        "document": MediaKindLimits(max_bytes=20_000_000),
        "video": MediaKindLimits(max_bytes=1),
        "other": MediaKindLimits(max_bytes=1),
    }


class MediaLimits(Model):
    """What a workspace's senders may send the agent (files it fetches, stores and reads)."""

    enabled: bool = True
    kinds: dict[MediaKind, MediaKindLimits] = Field(default_factory=_default_media_kinds)
    max_files_per_message: int = Field(default=5, ge=0, le=50)
    max_bytes_per_day: int = Field(default=200_000_000, ge=0)  # per workspace, UTC day
    # Days a stored file is kept (the S3 lifecycle in the cloud, the local sweep embedded).
    retention_days: int = Field(default=30, ge=1, le=3650)
    # A document's extracted text is cut at these bounds before anything reads or stores it.
    max_pages: int = Field(default=50, ge=1, le=2000)
    max_chars: int = Field(default=100_000, ge=1000, le=2_000_000)


# ---------------------------------------------------------------- delegation (spec 001, docs/delegation.md)

# A workspace maps each class to a model (DelegationConfig.models); a class left unmapped uses the
# workspace's own model.
ModelClass = Literal["frontier", "fast", "cheap"]


class RoleLimits(Model):
    """What one task of a role may use before it is stopped (checked before each step)."""

    max_tool_calls: int = Field(default=50, ge=1, le=1000)
    max_tokens: int = Field(default=200_000, ge=1000, le=10_000_000)
    # Wall time from the task's creation to its end, across every invocation it takes.
    max_wall_s: int = Field(default=3600, ge=10, le=86_400)


class RoleConfig(Model):
    """A task agent's role: the built-in researcher, worker and skill_composer, or an operator's."""

    description: str = Field(default="", max_length=500)
    instructions: str = Field(default="", max_length=20_000)
    model_class: ModelClass = "fast"
    # The tools the role's tasks may call (names as the registry gives them), enforced by the same
    # permission check as the workspace's tools_allow / tools_deny; delegate is never among them.
    tools: list[str] = Field(default_factory=list)
    # An interactive task may ask the user a question through the agent and wait for the answer.
    interactive: bool = False
    limits: RoleLimits = Field(default_factory=RoleLimits)


class DelegationConfig(Model):
    """The delegate tool and its task agents (docs/delegation.md)."""

    enabled: bool = True
    # Operator roles, merged over the built-in ones by name (shared.tasks.roles).
    roles: dict[str, RoleConfig] = Field(default_factory=dict)
    models: dict[ModelClass, str] = Field(default_factory=dict)
    max_active_per_session: int = Field(default=3, ge=0, le=50)
    max_active_per_workspace: int = Field(default=20, ge=0, le=1000)
    # The Skill Composer saves a draft an operator installs, unless this lets it install.
    skill_composer_installs: bool = False


class WorkspaceConfig(Model):
    id: WorkspaceId
    name: str = ""
    system_prompt: str = "You are Sigil, a helpful assistant. Answer concisely."
    model: str | None = None  # "openai/gpt-4.1-mini"; None falls back to the gateway default
    active_window: int = Field(default=20, ge=2, le=500)
    summary_batch: int = Field(default=50, ge=1)
    max_tool_calls_per_turn: int = Field(default=20, ge=1)
    tools_allow: list[str] | None = None  # None: every registered tool
    tools_deny: list[str] = Field(default_factory=list)
    pii_redaction: bool = False
    unknown_sender_policy: Literal["allow", "allow_list", "pairing"] = "allow"
    allowed_senders: list[str] = Field(default_factory=list)
    # None: budgets off, nothing counted (no request on the turn path). An empty BudgetLimits()
    # counts usage without limiting it, so limits set later apply to the period so far. A
    # workspace Sigil creates itself starts with DEFAULT_BUDGET (new_workspace).
    budget: BudgetLimits | None = None
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    # The installed skills this workspace's turns may use (shared.skills); None: every one.
    skills: list[str] | None = None
    # The models a session may switch to with `/model <ref>` (a chat command); empty: the
    # command is refused and the workspace's model is the only one.
    model_choices: list[str] = Field(default_factory=list)
    # Things done later (docs/schedules.md): the zone of a user who has not named theirs, the caps
    # on live schedules, and the heartbeat (off unless enabled).
    timezone: str = Field(default="UTC", max_length=64)
    schedules: ScheduleLimits = Field(default_factory=ScheduleLimits)
    heartbeat: HeartbeatConfig = Field(default_factory=HeartbeatConfig)
    # Per-turn fact extraction (spec 003, docs/consolidation.md): after this many seconds without
    # another turn in a session, its last messages are extracted into Tier-3 facts; off, facts
    # come from compaction alone (every summary_batch messages rolled out).
    turn_extraction: bool = True
    extraction_debounce_s: float = Field(default=5.0, ge=0, le=900)
    # web_fetch and web_search (docs/tools.md): both off unless turned on here.
    web: WebConfig = Field(default_factory=WebConfig)
    # Remote MCP servers whose tools this workspace's turns may call (docs/mcp.md).
    mcp: McpConfig = Field(default_factory=McpConfig)
    # run_python (docs/sandbox.md): off unless turned on here.
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    delegation: DelegationConfig = Field(default_factory=DelegationConfig)
    media: MediaLimits = Field(default_factory=MediaLimits)


# What a workspace Sigil creates may spend per UTC day, so that a fresh deployment is capped
# (issue 14): the first `sigil dev`'s workspace, and in the cloud every workspace with no stored
# config. A stored config's own `budget` wins, `null` (budgets off) included. docs/budgets.md
# and docs/deploy.md give what it comes to.
DEFAULT_BUDGET = BudgetLimits(
    workspace=ScopeLimits(tokens_per_day=5_000_000, usd_per_day=Decimal("10.00")),
    user=ScopeLimits(tokens_per_day=1_000_000, usd_per_day=Decimal("2.00")),
)


def new_workspace(workspace_id: str, name: str = "") -> WorkspaceConfig:
    """The config of a workspace nobody has configured: the defaults, with DEFAULT_BUDGET."""
    return WorkspaceConfig(id=workspace_id, name=name, budget=DEFAULT_BUDGET.model_copy(deep=True))


# ---------------------------------------------------------------- identities


IdentityStatus = Literal["approved", "pending", "blocked"]
# Eight characters of an alphabet without 0/O and 1/I (shared.identity.PAIRING_ALPHABET): short
# enough to read out or type on a phone, 32^8 (about 10^12) codes.
PAIRING_CODE_PATTERN = r"^[A-HJ-NP-Z2-9]{8}$"


class Identity(Model):
    """A channel user known to a workspace, and the Sigil user they are (spec 000, RECEIVE).

    One per (workspace, channel, channel user). `pairing_code` is set while the identity is
    pending under the "pairing" policy and cleared when an admin approves or blocks it.
    """

    workspace_id: WorkspaceId
    channel: Channel
    # The platform's own id (Telegram's may be negative); bounded so it fits in a key.
    channel_user_id: str = Field(min_length=1, max_length=256)
    # The Sigil user, e.g. "alice"; room for a derived "{channel}:{channel_user_id}".
    user_id: str = Field(min_length=1, max_length=300)
    display_name: str | None = None
    status: IdentityStatus = "pending"
    pairing_code: str | None = Field(default=None, pattern=PAIRING_CODE_PATTERN)
    created_at: datetime = Field(default_factory=utcnow)
    approved_at: datetime | None = None
    # The person's IANA time zone (the schedule tool sets it); None: the workspace's.
    timezone: str | None = Field(default=None, max_length=64)


# ---------------------------------------------------------------- memory


MemoryTier = Literal["message", "summary", "fact"]


class MemoryScope(Model):
    """Who a memory belongs to: stamped on every record, summary, fact and index document when it
    is written, and matched by every adapter's query against the reader's RecallScope.

    None in place of a MemoryScope marks a record written before scopes existed: it is visible in
    its own session and under the workspace-wide policy only, until maintenance backfills it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    # The channel conversation it came from, without the thread: identifier(f"{channel}.{chat_id}")
    # (a Slack channel, a Telegram group, a Discord channel, a DM). See shared.memory.scope.
    conversation: str | None = None
    # The Sigil users it belongs to: its writer, and in a direct conversation the person the reply
    # answered. Sorted and distinct.
    users: tuple[str, ...] = ()
    # Said in a group conversation (several people), not a direct one.
    group: bool = False
    # Marked by the workspace as shared: visible to everyone under the personal policy.
    shared: bool = False


class RecallScope(Model):
    """What a reader may recall: built from the turn (shared.memory.scope.recall_scope), never
    from a model's arguments, and passed to every memory read beside the workspace id.

    A record is visible when any clause holds (shared.memory.scope.visible is the reference that
    each adapter's own query reproduces): `workspace_wide`; its session is `session_id`; its
    conversation is `conversation`; one of its users is in `users`; `shared` and it is shared.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    workspace_wide: bool = False
    session_id: str | None = None
    conversation: str | None = None
    users: tuple[str, ...] = ()
    shared: bool = False


# Internal reads (maintenance, consolidation, export, erasure) that work on the whole workspace
# say so explicitly with this scope.
WORKSPACE_WIDE: Final = RecallScope(workspace_wide=True)


class MemoryRecord(Model):
    """A Tier-1 message: full text of a message that rolled out of a session's window."""

    id: str
    workspace_id: WorkspaceId
    session_id: Identifier
    role: Literal["user", "assistant", "tool"]
    text: str
    seq: int = Field(ge=0)  # position of the message in its session, from 0
    created_at: datetime
    message: Message | None = None  # the original structured message, when there is one
    # The Sigil user who wrote it (user messages) or was answered (assistant and tool): what the
    # right to erasure finds a person's messages by.
    user_id: str | None = None
    # The name the writer of a user message goes by (their display name): a query that names them
    # ranks their own words higher (shared.memory.search, AUTHOR_BOOST).
    author: str | None = None
    scope: MemoryScope | None = None  # None: written before scopes existed


class Summary(Model):
    """A Tier-2 summary of a run of Tier-1 messages."""

    id: str
    workspace_id: WorkspaceId
    session_id: Identifier
    text: str
    first_seq: int
    last_seq: int
    start_at: datetime
    end_at: datetime
    created_at: datetime = Field(default_factory=utcnow)
    # "batch" summarises Tier-1 messages first_seq..last_seq; "rolling" is the session's cumulative
    # summary, rewritten by each compaction.
    kind: Literal["batch", "rolling"] = "batch"
    user_id: str | None = None
    scope: MemoryScope | None = None  # the union of its messages' users; None: before scopes
    # The consolidation run that wrote it: provenance that lets a run be rolled back.
    run_id: str | None = None


FactCategory = Literal["preference", "entity", "decision", "style", "artifact", "fact"]
FactStatus = Literal["active", "merged", "pruned"]


class TripleChange(Model):
    """A lifecycle change one maintenance run made to a triple, and the values it replaced.

    Provenance that lets a run be rolled back (spec 001; shared.consolidation.rollback): the
    run's id, what it did, and the triple's lifecycle fields as they were before.
    """

    run_id: str
    at: datetime
    action: Literal["promoted", "pruned", "merged", "absorbed"]
    status: FactStatus
    merged_into: str | None = None
    long_term: bool = False
    access_count: int = 0
    reinforced_count: int = 1
    last_accessed_at: datetime | None = None
    updated_at: datetime
    message_ids: list[str] = Field(default_factory=list)


class Triple(Model):
    """A Tier-3 fact with provenance: where it was learnt and how sure we are."""

    id: str
    workspace_id: WorkspaceId
    subject: str = Field(min_length=1, max_length=256)
    predicate: str = Field(min_length=1, max_length=256)
    object: str = Field(min_length=1, max_length=2048)
    session_id: str | None = None
    message_ids: list[str] = Field(default_factory=list)
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    # Whose fact it is (for the right to erasure); None for workspace-wide knowledge.
    user_id: str | None = None
    scope: MemoryScope | None = None  # None: written before scopes existed
    # Spec 003's five extraction categories, or "fact" for anything stored by hand.
    category: FactCategory = "fact"
    # Who wrote it: the memory_store tool, a consolidation run (run_id says which), or an import.
    source: Literal["tool", "consolidation", "import"] = "tool"
    run_id: str | None = None
    # Lifecycle (spec 001): maintenance scores relevance with decay, promotes what is relevant
    # and used, prunes what has faded, and merges near-duplicates into the survivor. Only
    # "active" facts are recalled; the others stay for provenance until they are dropped.
    status: FactStatus = "active"
    merged_into: str | None = None
    long_term: bool = False
    relevance: float = Field(default=1.0, ge=0.0, le=1.0)
    access_count: int = Field(default=0, ge=0)
    last_accessed_at: datetime | None = None
    # Style observations are reinforced rather than duplicated (spec 003).
    reinforced_count: int = Field(default=1, ge=1)
    # The fact's embedding and the model that made it: near-duplicate dedup compares these, and a
    # model change is noticed by the name.
    embedding_model: str | None = None
    embedding: list[float] | None = Field(default=None, repr=False)
    # What maintenance runs changed (promote, prune, merge, absorb), oldest first, the last few
    # kept: rolling back a run restores the values its entry holds.
    changes: list[TripleChange] = Field(default_factory=list)

    @field_validator("subject", "predicate", "object")
    @classmethod
    def _strip(cls, v: str) -> str:
        return v.strip()


class IndexDoc(Model):
    """What the memory index holds: text for BM25, a vector for k-NN, and where it came from."""

    id: str
    workspace_id: WorkspaceId
    session_id: str | None = None
    tier: MemoryTier
    text: str
    vector: list[float] | None = None
    created_at: datetime = Field(default_factory=utcnow)
    metadata: dict[str, str] = Field(default_factory=dict)
    # The scope of the record it indexes (a message, summary or fact): what each adapter's search
    # filters on. None: written before scopes existed.
    scope: MemoryScope | None = None


class IndexQuery(Model):
    text: str | None = None
    vector: list[float] | None = None
    k: int = Field(default=10, ge=1, le=1000)
    tiers: list[MemoryTier] | None = None
    session_id: str | None = None
    # Required: every search says whose memory it may reach (WORKSPACE_WIDE for internal reads).
    scope: RecallScope
    # False: the hits' documents may come back without their vectors (vector None), which an
    # adapter can then skip reading. Memory search only ranks; it never looks at them.
    with_vectors: bool = True
    # A window on when the documents' memories were said (IndexDoc.created_at): from (inclusive)
    # and before (exclusive); None: open. Time-aware search (shared.memory.when) sets it.
    created_from: datetime | None = None
    created_before: datetime | None = None


class IndexHit(Model):
    doc: IndexDoc
    score: float


class IndexResult(Model):
    """Both rankings from one round trip; fusing them is the shared code's job, not the adapter's."""

    text_hits: list[IndexHit] = Field(default_factory=list)
    vector_hits: list[IndexHit] = Field(default_factory=list)


# ---------------------------------------------------------------- lanes, events, audit


def occurrence_event_id(schedule_id: str, at: datetime) -> str:
    """The event id of a schedule's occurrence: the same for every delivery of it."""
    return f"{schedule_id}.{int(at.timestamp())}"


class TaskEvent(Model):
    """A delegated task on a lane (docs/delegation.md).

    - "step": run the task's next steps; on the task's own lane (group `<workspace>.task.<id>`),
      never the parent session's, so neither waits for the other; `seq` numbers the
      continuations, so each has its own dedup id and a redelivery of one is dropped;
    - "outcome": the task ended; on the parent session's lane, after whatever the user sent
      meanwhile, so the agent gets a turn to tell the user, once;
    - "question": an interactive task asks the user something through the agent.
    """

    task_id: Identifier
    kind: Literal["step", "outcome", "question"]
    seq: int = Field(default=0, ge=0)


class LaneItem(Model):
    """One unit of work in a session's lane (one SQS FIFO message)."""

    inbound: InboundMessage
    enqueued_at: datetime = Field(default_factory=utcnow)
    # The webhook request's id (shared.correlation); None on items queued before it existed.
    correlation_id: str | None = None
    # Put back from the dead letters (`sigil dlq redrive`; shared.agent.redrive): the event id the
    # item first had, and how many redrives it has been through. Its inbound then carries a new
    # event id (so the turn, its dedup id and its replies are its own), and the turn answers the
    # message the give-up kept instead of keeping it a second time.
    redrive_of: Identifier | None = None
    redrives: int = Field(default=0, ge=0)
    # A schedule's occurrence (shared.schedules): its inbound is the creating turn's, so the turn
    # has the same sender, conversation and memory scope, with an event id of the occurrence.
    fired: Fired | None = None
    # A delegated task's item (shared.tasks): a step runs on the task's own lane, an outcome on
    # the parent session's.
    task: TaskEvent | None = None

    @model_validator(mode="after")
    def _occurrence_event_id(self) -> Self:
        # EventBridge Scheduler fills in only the occurrence's time (the target's Input is fixed
        # when the schedule is made): the event id, one per occurrence, is derived here, so a
        # redelivered occurrence has the same one and the lane and the turn drop it.
        if self.fired is not None and self.inbound.event_id == self.fired.schedule.id:
            self.inbound.event_id = occurrence_event_id(self.fired.schedule.id, self.fired.at)
        return self

    @property
    def group_id(self) -> str:
        # A task's steps run on the task's own lane, so the session and the task never wait for
        # each other; its outcome and questions go on the session's (TaskEvent).
        if self.task is not None and self.task.kind == "step":
            return f"{self.inbound.workspace_id}.task.{self.task.task_id}"
        return self.inbound.lane_key

    @property
    def dedup_id(self) -> str:
        if self.task is not None and self.task.kind == "step":
            # One per continuation: a redelivered step is dropped, the next one is not.
            return f"{self.inbound.workspace_id}.task.{self.task.task_id}.{self.task.seq}"
        return f"{self.inbound.workspace_id}.{self.inbound.channel}.{self.inbound.event_id}"


class DomainEvent(Model):
    """An event on the bus (EventBridge in the cloud, the local scheduler embedded)."""

    type: Literal["CompactionDue", "MaintenanceDue", "TurnCommitted"]
    workspace_id: WorkspaceId
    session_id: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)
    at: datetime = Field(default_factory=utcnow)
    # The id of the turn that emitted it (shared.correlation), bound by the consolidation run.
    correlation_id: str | None = None


# The source every DomainEvent carries on EventBridge; the consolidate function accepts no other.
EVENT_SOURCE: Final = "sigil"


class TurnTrace(Model):
    """Where a turn's messages are and what it was answering: what a replay (shared.replay,
    docs/replay.md) needs to find a recorded turn and run it again, and the console shows.
    Never the text itself: the messages hold it (redacted), at first_seq..last_seq of the session.
    """

    # The session positions (UserMessage first) of the messages the turn committed; None when it
    # committed none (a command, a sender turned away, a failed attempt).
    first_seq: int | None = Field(default=None, ge=0)
    last_seq: int | None = Field(default=None, ge=0)
    # The inbound as the channel gave it: when, and the conversation (its recall scope).
    received_at: datetime | None = None
    channel: str | None = None
    chat_id: str | None = None
    chat_type: Literal["dm", "group", "channel"] | None = None
    thread_id: str | None = None
    # The tool calls the model made, in order, as the transcript stores them (arguments redacted):
    # the first TRACE_TOOL_CALLS, each cut at TRACE_ARGUMENT_CHARS, so that the record stays far
    # below DynamoDB's 400 KB item (at most 80 KB of arguments) whatever the tool-call limit.
    tool_calls: list[ToolCall] = Field(default_factory=list)


TRACE_TOOL_CALLS: Final = 40
TRACE_ARGUMENT_CHARS: Final = 2000


class AuditRecord(Model):
    id: str = Field(default_factory=lambda: new_id("a_"))
    workspace_id: WorkspaceId
    session_id: str
    user_id: str | None = None
    event_id: str | None = None
    turn_id: str
    model: str | None = None
    tools_used: list[str] = Field(default_factory=list)
    tokens_in: int = 0
    tokens_out: int = 0
    # The parts of tokens_in the provider read from its prompt cache and wrote to it (summed over
    # the turn's calls; docs/context.md, "Prompt caching"); cost_usd prices them at those rates.
    tokens_cached: int = 0
    tokens_cache_write: int = 0
    duration_ms: float = 0.0
    cost_usd: float = 0.0
    outcome: Literal[
        "ok",
        "error",
        "skipped_duplicate",
        "model_not_configured",
        "budget_denied",
        "limited",
        "pairing_required",  # an unknown sender under the pairing policy was given a code
        "sender_refused",  # not on the allow list, blocked, or a bot: no model call, nothing kept
        "refused",  # the model, or its provider's safety filter, declined to answer
        "given_up",  # dead-lettered after its last attempt: the user was sent an apology
        "command",  # a chat command, answered without the model (shared.agent.commands)
        "scheduled",  # a fired reminder, sent without the model (shared.schedules)
    ]
    error: str | None = None
    # What the safety filters found (docs/safety.md), as names only, never the text: the sources
    # that went to the model quoted as untrusted data ("the user", "tool fetch_page"), and per
    # source the injection rules that fired. Empty by default, so records stored before these
    # fields existed still load.
    quoted: list[str] = Field(default_factory=list)
    injection_rules: dict[str, list[str]] = Field(default_factory=dict)
    # The context pipeline's selection (shared.agent.pipeline): its mode, what it picked with the
    # scores, and how long it took; empty and None where it did not run.
    context_mode: str | None = None
    context: list[ContextPick] = Field(default_factory=list)
    context_ms: float | None = None
    context_gate: ContextGate | None = None
    # The turn wrote (or rewrote) the conversation's Orientation Document: its tokens.
    orientation_tokens: int | None = None
    # The webhook request the turn answered (shared.correlation): its log lines carry the same id.
    correlation_id: str | None = None
    # Media the turn read (docs/media.md): the photos' estimated prompt tokens (in tokens_in
    # too, as the provider counted them), and the seconds of audio transcribed (in cost_usd).
    image_tokens: int = 0
    audio_seconds: float = 0.0
    # A delegated task's invocation (shared.tasks): its task, and the turn that delegated it (the
    # correlation id is that turn's too).
    task_id: str | None = None
    parent_turn_id: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    # What a replay needs of the turn (TurnTrace); None on records written before it existed.
    trace: TurnTrace | None = None
    # Each sandboxed script the turn ran (run_python, docs/sandbox.md): its resource use; the
    # script and inputs are the call's arguments (trace.tool_calls), its output the transcript's.
    sandbox: list[SandboxUsage] = Field(default_factory=list)

    def anonymised(self) -> Self:
        """The record without the person (AuditLog.anonymise): the accounting stays."""
        return self.model_copy(
            update={
                "user_id": None,
                "session_id": "erased",
                "event_id": None,
                "error": None,
                # It finds the turn's log lines, which name the session.
                "correlation_id": None,
                # Its chat id and tool arguments may name the person.
                "trace": None,
            }
        )


# ---------------------------------------------------------------- channel routes

Platform = Literal["telegram", "slack", "discord", "whatsapp"]
PLATFORMS: Final[tuple[Platform, ...]] = ("telegram", "slack", "discord", "whatsapp")
# A route's name is a path segment (/webhooks/{platform}/{name}) and a secret-name segment
# ({platform}/{name}/bot-token): lowercase, short, no separators.
ROUTE_NAME_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?$"
RouteName = Annotated[str, Field(pattern=ROUTE_NAME_PATTERN)]


class ChatOverride(Model):
    """One chat of a route handled differently: another workspace, or another model."""

    workspace: WorkspaceId | None = None
    model: str | None = None


class ChannelRoute(Model):
    """Which platform account feeds which workspace (issue 15, docs/configuration.md).

    One per bot: a Telegram bot, a Slack app (or team), a Discord application, a WhatsApp phone
    number id. Its webhook is /webhooks/{platform}/{name} and its secrets are the platform's
    names under {platform}/{name}/ (telegram/family/bot-token). The unnamed route of today,
    /webhooks/{platform} with the platform's plain secret names, still delivers into
    SIGIL_CHANNEL_WORKSPACE.
    """

    platform: Platform
    name: RouteName
    workspace: WorkspaceId
    # The platform's id of the account (bot id, Slack team or api_app_id, Discord application
    # id, WhatsApp phone number id). When set, a payload naming another account is refused.
    account: str | None = None
    # Per chat (the platform's chat / channel id): another workspace or model.
    chats: dict[str, ChatOverride] = Field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.platform}/{self.name}"

    def secret_name(self, key: str) -> str:
        """This route's secret `key` ("bot-token"), e.g. telegram/family/bot-token."""
        return f"{self.platform}/{self.name}/{key}"

"""The built-in tools every workspace starts with: small, read-only, and useful to any assistant.

A model knows neither the date nor where it is talking: `current_time` answers the first (models
get relative dates wrong without it), `session_info` the second.
"""

# Annotations are not postponed here: pydantic makes this module's models at import, and would
# evaluate each field's annotation from its text (shared/models/__init__.py).

from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shared.tools.core import ToolContext, tool
from shared.tools.registry import ToolRegistry


class CurrentTimeArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    timezone: str = Field(
        default="UTC",
        description="An IANA timezone name, e.g. 'Europe/Paris' or 'America/New_York'.",
        max_length=64,
    )

    @field_validator("timezone")
    @classmethod
    def _known(cls, value: str) -> str:
        _zone(value)
        return value


class CurrentTime(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built when first used, not at import

    timezone: str
    iso: str  # local time with its UTC offset, to the second
    weekday: str
    utc_offset: str


@tool
def current_time(args: CurrentTimeArgs, ctx: ToolContext) -> CurrentTime:
    """The current date and time in a timezone (UTC unless one is given). Use it for anything that
    depends on today's date or the time of day."""
    now = ctx.now().astimezone(_zone(args.timezone)).replace(microsecond=0)
    offset = now.strftime("%z")
    return CurrentTime(
        timezone=args.timezone,
        iso=now.isoformat(),
        weekday=now.strftime("%A"),
        utc_offset=f"{offset[:3]}:{offset[3:]}",
    )


def _zone(name: str) -> tzinfo:
    if name.upper() in {"UTC", "Z", "ETC/UTC"}:
        return UTC  # needs no tz database
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown timezone {name!r}; use an IANA name such as 'Europe/Paris'") from None


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SessionInfo(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built when first used, not at import

    workspace_id: str
    session_id: str
    channel: str | None  # None until the conversation's first turn is stored
    user_id: str
    started_at: datetime | None  # None: this is the conversation's first turn
    earlier_messages: int  # before this turn, in the window and in memory
    in_memory_only: int  # rolled out of the window into long-term memory


@tool
def session_info(args: NoArgs, ctx: ToolContext) -> SessionInfo:
    """Facts about this conversation: the channel it is on, who is talking, when it started and how
    many messages came before this one (older ones are in long-term memory, not in your context)."""
    session = ctx.backend.sessions.get(ctx.workspace_id, ctx.session_id)
    return SessionInfo(
        workspace_id=ctx.workspace_id,
        session_id=ctx.session_id,
        channel=session.channel if session else None,
        user_id=ctx.user_id,
        started_at=session.created_at if session else None,
        earlier_messages=session.message_count if session else 0,
        in_memory_only=session.rolled_out_count if session else 0,
    )


class PinTaskArgs(BaseModel):
    task: str | None = Field(
        default=None,
        max_length=500,
        description="What this conversation is working on, in one sentence; empty or null clears the pin.",
    )


@tool
def pin_task(args: PinTaskArgs, ctx: ToolContext) -> str:
    """Pin the task this conversation is working on, so it stays in view in every later message
    (or clear the pin when the task is done). Use it for multi-step work that spans messages."""
    task = (args.task or "").strip() or None
    ctx.session_updates["active_task"] = task
    return f"Pinned: {task}" if task else "The pin is cleared."


BUILTIN_TOOLS = (current_time, session_info, pin_task)


def default_registry() -> ToolRegistry:
    """A new registry holding the built-in tools, for a runtime to extend with its own."""
    return ToolRegistry(BUILTIN_TOOLS)


def agent_registry() -> ToolRegistry:
    """The built-ins, the memory tools (shared.tools.memory), the skill tool (shared.tools.skill)
    the web tools (shared.tools.web) and run_python (shared.tools.python), both off unless the
    workspace's config turns them on, and scratchpad_read (shared.tools.scratchpad): what a
    turn offers by default."""
    # Imported here: shared.tools.memory imports shared.tools, so a top-level import would be a cycle.
    from shared.tools.memory import MEMORY_TOOLS
    from shared.tools.python import PYTHON_TOOLS
    from shared.tools.schedule import SCHEDULE_TOOLS
    from shared.tools.scratchpad import SCRATCHPAD_TOOLS
    from shared.tools.skill import SKILL_TOOLS
    from shared.tools.web import WEB_TOOLS

    return default_registry().extended(
        *MEMORY_TOOLS, *SKILL_TOOLS, *WEB_TOOLS, *SCHEDULE_TOOLS, *PYTHON_TOOLS, *SCRATCHPAD_TOOLS
    )

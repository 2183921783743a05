"""The schedule tools (docs/schedules.md): things done later, for the person talking.

`schedule` sets a reminder (kind "message": sent as written, without the model) or a task (kind
"task": a turn the model answers when it is due) for a moment or on a recurrence, in the user's
time zone. `schedules` lists theirs and `schedule_cancel` stops one. Whose schedule it is, and
where it fires, come from the turn (ToolContext), never from the model: a schedule fires into
the conversation that set it, under that turn's sender and memory scope (shared.schedules).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.errors import BadRequest
from shared.models import Recurrence, new_workspace
from shared.schedules import cancel, create, listing, remember_timezone, user_timezone
from shared.schedules.timing import describe, local_moment, zone
from shared.tools.core import Tool, ToolContext, tool


class ScheduleArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(
        min_length=1,
        max_length=1000,
        description="What to remind the user of (kind message), or what to do when it is due (kind task).",
    )
    kind: Literal["message", "task"] = Field(
        default="message",
        description="message: send the text as a reminder; task: you will be asked to do the text then "
        "(e.g. 'send me the week's plan').",
    )
    at: str | None = Field(
        default=None,
        max_length=40,
        description="Once, at this local date and time in the user's zone, e.g. '2026-11-30T09:00'.",
    )
    every: Recurrence | None = Field(
        default=None,
        description="Or on a recurrence: every hour/day/weekday/week (with days)/month (with day_of_month).",
    )
    timezone: str | None = Field(
        default=None,
        max_length=64,
        description="The user's IANA zone if they told you (e.g. 'Europe/Paris'); it is remembered for them.",
    )


class ScheduleSet(BaseModel):
    id: str
    when: str
    first_occurrence: str  # in the user's zone, with its offset
    timezone: str


@tool
def schedule(args: ScheduleArgs, ctx: ToolContext) -> ScheduleSet:
    """Schedule a reminder or a task for the user, once ('remind me at 9') or on a recurrence ('every
    Monday send me the week's plan'), in their time zone. It arrives in this conversation. Call
    current_time first if you need today's date."""
    if ctx.inbound is None:
        raise BadRequest("schedules can only be set in a conversation")
    if (args.at is None) == (args.every is None):
        raise BadRequest("give either `at` (once) or `every` (a recurrence)")
    backend = ctx.backend
    workspace = backend.workspaces.get(ctx.workspace_id) or new_workspace(ctx.workspace_id)
    if args.timezone:
        zone(args.timezone)
        remember_timezone(backend.identities, ctx.inbound, args.timezone)
    tz_name = args.timezone or user_timezone(backend.identities, workspace, ctx.inbound)
    made, first = create(
        backend.schedules,
        workspace,
        ctx.inbound,
        user_id=ctx.user_id,
        kind=args.kind,
        text=args.text,
        at=local_moment(args.at, tz_name) if args.at else None,
        recurrence=args.every,
        tz_name=tz_name,
        now=ctx.now(),
    )
    return ScheduleSet(
        id=made.id,
        when=describe(made),
        first_occurrence=first.astimezone(zone(tz_name)).isoformat(),
        timezone=tz_name,
    )


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


@tool
def schedules(args: NoArgs, ctx: ToolContext) -> str:
    """The user's live reminders and scheduled tasks, with their ids."""
    return listing(ctx.backend.schedules, ctx.workspace_id, ctx.user_id)


class CancelArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(max_length=40, description="The schedule's id, as `schedules` lists it (sch-...).")


@tool
def schedule_cancel(args: CancelArgs, ctx: ToolContext) -> str:
    """Cancel one of the user's reminders or scheduled tasks."""
    if cancel(ctx.backend.schedules, ctx.workspace_id, ctx.user_id, args.id):
        return f"Cancelled {args.id}."
    return f"The user has no schedule {args.id[:40]}."


SCHEDULE_TOOLS: tuple[Tool[Any], ...] = (
    schedule,
    schedules,
    schedule_cancel,
)

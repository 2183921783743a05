"""Things done later (docs/schedules.md): reminders and tasks for a time or on a recurrence.

A schedule is made in a turn (the `schedule` tool) and fires as a lane item on the session's lane
(LaneItem.fired), carrying the creating turn's inbound: the same sender, channel, conversation
and so the same memory scope, budgets and audit as the turn that set it. No second path to the
user: the turn the item starts answers on the channel through the outbox, like any other.

- kind "message": a fixed reminder ("Reminder: ..."), sent without the model;
- kind "task": a turn the model answers, the task's text as the user's message, marked as due.

Each occurrence's event id is the schedule's id and the occurrence's time
(shared.models.occurrence_event_id), so the lane's dedup and the session's recent event ids drop
a repeated delivery: a reminder arrives once across restarts and redeliveries.

The engines are the Schedules port's adapters: EventBridge Scheduler in the cloud (one schedule
per item, its target the lane's SQS FIFO queue), the embedded backend's table read by the local
scheduler (shared.adapters.embedded.schedules).
"""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Final, Literal

from shared.errors import BadRequest, SigilError
from shared.models import (
    Fired,
    InboundMessage,
    LaneItem,
    Recurrence,
    Schedule,
    WorkspaceConfig,
)
from shared.ports import IdentityStore, Schedules
from shared.schedules.timing import describe, first_occurrence, zone

REMINDER_PREFIX: Final = "Reminder: "


class ScheduleCapReached(SigilError):
    """The user (or the workspace) holds as many live schedules as its config allows."""

    code = "schedule_cap"
    http_status = 429


class SchedulesOff(SigilError):
    """No schedule engine: the aws backend without SIGIL_SCHEDULE_GROUP."""

    code = "schedules_off"
    http_status = 501


def new_schedule_id() -> str:
    return f"sch-{secrets.token_hex(6)}"


def user_timezone(identities: IdentityStore, workspace: WorkspaceConfig, inbound: InboundMessage) -> str:
    """The sender's own zone when they named one, else the workspace's."""
    identity = identities.get(inbound.workspace_id, inbound.channel, inbound.sender.id)
    return identity.timezone if identity is not None and identity.timezone else workspace.timezone


def remember_timezone(identities: IdentityStore, inbound: InboundMessage, tz_name: str) -> bool:
    """Keep `tz_name` on the sender's identity (a known sender only); True when it was stored."""
    zone(tz_name)
    identity = identities.get(inbound.workspace_id, inbound.channel, inbound.sender.id)
    if identity is None or identity.timezone == tz_name:
        return False
    identities.put(identity.model_copy(update={"timezone": tz_name}))
    return True


def fired_text(schedule: Schedule) -> str:
    """The text of an occurrence's inbound: the reminder itself, or the task marked as due."""
    if schedule.kind == "message":
        return schedule.text
    return (
        f"[A scheduled task is due now: {describe(schedule)}, set on "
        f"{schedule.created_at.astimezone(zone(schedule.timezone)):%Y-%m-%d}. Do it now.]\n{schedule.text}"
    )


def occurrence(schedule: Schedule, origin: InboundMessage, at: datetime) -> LaneItem:
    """The lane item of `schedule`'s occurrence at `at`: the creating turn's inbound, with the
    occurrence's event id and time (LaneItem derives the event id from `fired`)."""
    inbound = origin.model_copy(
        update={
            "event_id": schedule.id,
            "text": fired_text(schedule),
            "command": None,
            "attachments": [],
            "merged_event_ids": [],
            "reply_to": None,
            "received_at": at,
        }
    )
    return LaneItem(inbound=inbound, enqueued_at=at, fired=Fired(schedule=schedule, at=at))


def create(
    store: Schedules | None,
    workspace: WorkspaceConfig,
    origin: InboundMessage,
    *,
    user_id: str,
    kind: Literal["message", "task"],
    text: str,
    at: datetime | None,
    recurrence: Recurrence | None,
    tz_name: str,
    now: datetime,
    heartbeat: bool = False,
) -> tuple[Schedule, datetime]:
    """Make a schedule for `user_id` in `origin`'s session; returns it and its first occurrence.
    ScheduleCapReached at the user's or the workspace's cap, BadRequest for a time passed."""
    if store is None:
        raise SchedulesOff("schedules are not set up on this deployment (no SIGIL_SCHEDULE_GROUP)")
    zone(tz_name)
    limits = workspace.schedules
    held = store.count(workspace.id, user_id=user_id)
    if held >= limits.per_user:
        raise ScheduleCapReached(
            f"You already have {held} schedules, the most this workspace allows ({limits.per_user}). "
            "Cancel one first (/schedules lists them)."
        )
    if store.count(workspace.id) >= limits.per_workspace:
        raise ScheduleCapReached(
            f"This workspace holds the most schedules it allows ({limits.per_workspace}); none can be added."
        )
    schedule = Schedule(
        id=new_schedule_id(),
        workspace_id=workspace.id,
        session_id=origin.session_id,
        user_id=user_id,
        kind=kind,
        text=text,
        at=at,
        recurrence=recurrence,
        timezone=tz_name,
        created_at=now,
        heartbeat=heartbeat,
    )
    first = first_occurrence(schedule, now)
    if first <= now:
        raise BadRequest(f"{describe(schedule)} has already passed; pick a time in the future")
    store.create(schedule, occurrence(schedule, origin, first), first)
    return schedule, first


def cancel(store: Schedules | None, workspace_id: str, user_id: str, schedule_id: str) -> bool:
    """Cancel one of `user_id`'s own schedules; False when they have none by that id."""
    if store is None:
        return False
    found = store.get(workspace_id, schedule_id.strip())
    if found is None or found.user_id != user_id:
        return False
    return store.cancel(workspace_id, found.id)


def listing(store: Schedules | None, workspace_id: str, user_id: str) -> str:
    """The user's live schedules as a chat answer (/schedules)."""
    if store is None:
        return "Schedules are not set up on this deployment."
    mine = store.list_schedules(workspace_id, user_id=user_id)
    if not mine:
        return "You have no schedules. Ask me to remind you of something, once or on a recurrence."
    lines = [f"- {s.id}: {s.kind} {describe(s)}: {s.text[:80]}" for s in mine]
    return "Your schedules:\n" + "\n".join(lines) + "\nCancel one with /schedules cancel <id>."


# ---------------------------------------------------------------- the heartbeat (spec 003)

HEARTBEAT_PROMPT: Final = (
    "Heartbeat: check these proactive tasks of the workspace and tell me only what needs "
    "attention now; if nothing does, say so in one line."
)


def heartbeat_schedules(store: Schedules, workspace_id: str) -> list[Schedule]:
    return [s for s in store.list_schedules(workspace_id) if s.heartbeat]


def heartbeat_on(
    store: Schedules | None,
    workspace: WorkspaceConfig,
    origin: InboundMessage,
    *,
    user_id: str,
    tz_name: str,
    now: datetime,
) -> tuple[Schedule, datetime]:
    """The workspace's heartbeat (WorkspaceConfig.heartbeat), answering in `origin`'s conversation
    from now on: a recurring task with the workspace's proactive tasks. One per workspace: turning
    it on again moves it here (and takes up the tasks as the config now has them)."""
    config = workspace.heartbeat
    if not config.enabled:
        raise BadRequest("the heartbeat is off in this workspace's configuration (heartbeat.enabled)")
    if not config.tasks.strip():
        raise BadRequest("the workspace's heartbeat has no tasks to check (heartbeat.tasks)")
    heartbeat_off(store, workspace.id)
    return create(
        store,
        workspace,
        origin,
        user_id=user_id,
        kind="task",
        text=f"{HEARTBEAT_PROMPT}\n{config.tasks.strip()}",
        at=None,
        recurrence=config.recurrence,
        tz_name=tz_name,
        now=now,
        heartbeat=True,
    )


def heartbeat_off(store: Schedules | None, workspace_id: str) -> int:
    """Stop the workspace's heartbeat; how many schedules that cancelled."""
    if store is None:
        return 0
    return sum(store.cancel(workspace_id, s.id) for s in heartbeat_schedules(store, workspace_id))

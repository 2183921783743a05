"""Chat commands (docs/commands.md): answered in the turn, without the model.

The channel marks a message as a command (shared.channels.commands, InboundMessage.command) and
the pre-flight hands an admitted sender's command here (shared.agent.preflight.Command), after the
duplicate and admission checks and before the model and budget ones: a sender not admitted gets
what they got before (a pairing code, a refusal, nothing), and `/status` and `/model` still work
when the budget is used up or the model is misconfigured, which is when they are wanted.

A command calls no model and spends no budget. Its answer is sent like a reply and audited
("command"), and the turn commits no message: neither the command nor its answer joins the
window, which is the conversation with the model (a `/status` table in it would only cost tokens
and could mislead the model about its own configuration). The commit still records the event id,
so a redelivered command is skipped, and carries what the command changes in the session:

- `/status`: the model in effect, the sender's and the workspace's budget left and when each
  period resets (UTC days and months, docs/budgets.md), the workspace's skills, its memory policy;
- `/new`: a fresh window; the whole old window rolls into Tier 1 and the index as the commit rolls
  out any message (shared.agent.commit, `fresh`), with a CompactionDue when a batch completes, so
  memory search still finds it. The pinned task goes too; the rolling summary stays (memory);
- `/model [ref|default]`: shows the model and the workspace's `model_choices`, sets
  Session.model_override to one of them, or clears it;
- `/skills`: the skills available to the workspace, name and description;
- `/schedules`: the sender's reminders and scheduled tasks; `/schedules cancel <id>` stops one
  (shared.schedules, docs/schedules.md);
- `/tasks`: the session's delegated tasks (id, role, status, age, spend); `/tasks show <id>`,
  `/tasks cancel <id>` (shared.agent.task_control, docs/delegation.md#control); only this
  session's own tasks;
- `/heartbeat [on|off]`: the workspace's heartbeat (spec 003: a recurring check of its proactive
  tasks, WorkspaceConfig.heartbeat, off unless the config enables it), answered in this
  conversation once on;
- `/help`, and any other `/name`: the one-line list of commands.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from shared.agent import task_control
from shared.agent.preflight import Turn
from shared.budgets import Bucket, Counters, Metric, Period, as_utc
from shared.errors import SigilError
from shared.models import ChatCommand, RecallPolicy
from shared.models.budgets import format_amount, format_date, format_duration
from shared.ports import AuditLog, Schedules, TaskStore
from shared.schedules import cancel, heartbeat_off, heartbeat_on, heartbeat_schedules, listing
from shared.schedules.timing import describe
from shared.skills import Skill

HELP: Final = (
    "Commands: /status (model, budget, skills, memory), /new (start a fresh conversation), "
    "/model [name|default] (switch model), /skills (list skills), "
    "/schedules [cancel <id>] (your reminders), /tasks [show|cancel <id>] (delegated tasks), "
    "/heartbeat [on|off], /help."
)
# What each memory policy lets a turn recall (docs/privacy.md), as /status tells the user.
RECALL: Final[dict[RecallPolicy, str]] = {
    "personal": (
        "in a direct conversation, what you said on any channel plus shared facts; in a group, "
        "the group's conversation plus shared facts"
    ),
    "workspace": "everything said in this workspace",
    "conversation": "this conversation only",
}
_METRIC_NAMES: Final[dict[Metric, str]] = {"tokens": "tokens", "tool_calls": "tool calls", "usd": ""}


@dataclass(frozen=True)
class Answer:
    """A command's reply, and what the turn commits for it (no message: see the module)."""

    text: str
    updates: dict[str, Any] = field(default_factory=dict)  # Session fields the command changes
    fresh: bool = False  # roll the whole window into memory (/new)
    error: str | None = None  # why a command was refused, for the audit record


def answer_command(
    turn: Turn,
    command: ChatCommand,
    *,
    skills: list[Skill],
    default_model: str | None,
    now: datetime,
    schedules: Schedules | None = None,
    tasks: TaskStore | None = None,
    audit: AuditLog | None = None,
) -> Answer:
    """The answer to `command` in `turn`; `skills` are the workspace's (shared.agent.turn.skills_of),
    `default_model` the gateway's, used when neither the session nor the workspace names one."""
    if command.name == "status":
        return Answer(_status(turn, skills, default_model, now))
    if command.name == "new":
        return _new(turn)
    if command.name == "model":
        return _model(turn, command.args, default_model)
    if command.name == "skills":
        return Answer(_skills(skills))
    if command.name == "schedules":
        return _schedules(turn, command.args, schedules)
    if command.name == "tasks":
        return _tasks(turn, command.args, tasks, audit, now)
    if command.name == "heartbeat":
        return _heartbeat(turn, command.args, schedules, now)
    if command.name == "help":
        return Answer(HELP)
    return Answer(f"Unknown command /{command.name}. {HELP}", error=f"unknown command /{command.name}")


# ---------------------------------------------------------------- the commands


def _status(turn: Turn, skills: list[Skill], default_model: str | None, now: datetime) -> str:
    lines = [f"Model: {_model_line(turn, default_model)}"]
    lines += _budget_lines(turn, now, _model_in_effect(turn, default_model))
    names = ", ".join(s.name for s in skills) if skills else "none"
    lines.append(f"Skills: {names}")
    policy = turn.workspace.memory.recall
    lines.append(f"Memory: {policy} ({RECALL[policy]})")
    return "\n".join(lines)


def _new(turn: Turn) -> Answer:
    count = len(turn.session.active_messages)
    text = "Started a fresh conversation."
    if count:
        text += f" The previous {count} message{'s' if count != 1 else ''} are kept in memory."
    # The pinned task was this conversation's; the rolling summary is memory, and stays.
    return Answer(text, updates={"active_task": None}, fresh=True)


def _model(turn: Turn, args: str, default_model: str | None) -> Answer:
    choices = turn.workspace.model_choices
    ref = args.strip()
    workspace_model = turn.workspace.model or default_model or "none configured"
    if not ref:
        current = f"Model: {_model_line(turn, default_model)}."
        if not choices:
            return Answer(f"{current} This workspace offers no other models.")
        return Answer(
            f"{current} Choices: {', '.join(choices)}. "
            "Switch with /model <name>, go back with /model default."
        )
    if ref == "default":
        return Answer(f"Back to the workspace's model, {workspace_model}.", updates={"model_override": None})
    if not choices:
        return Answer(
            "Switching models is not enabled in this workspace (it lists no model_choices).",
            error="model_choices is empty",
        )
    if ref not in choices:
        return Answer(
            # Cut: the user's own text, repeated where a group may read it.
            f"{ref[:100]} is not one of this workspace's models: {', '.join(choices)}.",
            error="model not in model_choices",
        )
    return Answer(f"This conversation now uses {ref}.", updates={"model_override": ref})


def _schedules(turn: Turn, args: str, store: Schedules | None) -> Answer:
    user = turn.sender.user_id
    words = args.split()
    if not words:
        return Answer(listing(store, turn.inbound.workspace_id, user))
    if words[0] == "cancel" and len(words) == 2:
        if cancel(store, turn.inbound.workspace_id, user, words[1]):
            return Answer(f"Cancelled {words[1]}.")
        return Answer(f"You have no schedule {words[1][:40]}.", error="no such schedule")
    return Answer("Use /schedules, or /schedules cancel <id>.", error="bad /schedules arguments")


def _tasks(turn: Turn, args: str, store: TaskStore | None, audit: AuditLog | None, now: datetime) -> Answer:
    """This session's delegated tasks only: another session's id is answered as unknown."""
    if store is None:
        return Answer("Delegated tasks are not set up on this gateway.", error="no task store")
    ws, session_id = turn.inbound.workspace_id, turn.session.id
    words = args.split()
    if not words:
        found = task_control.session_tasks(store, ws, session_id)
        if not found:
            return Answer("No delegated tasks in this conversation.")
        return Answer(
            "Tasks (id, role, status, age, spend):\n"
            + "\n".join(f"- {task_control.line(t, now)}" for t in found)
        )
    if len(words) != 2 or words[0] not in ("show", "cancel"):
        return Answer("Use /tasks, /tasks show <id> or /tasks cancel <id>.", error="bad /tasks arguments")
    action, task_id = words
    try:
        if action == "show":
            task = task_control.find_task(store, ws, task_id, session_id=session_id)
            spent = task_control.spend(audit, task) if audit is not None else None
            return Answer("\n".join(task_control.detail(task, now, spent)))
        task, asked = task_control.request_cancel(store, ws, task_id, session_id=session_id)
    except SigilError as exc:
        return Answer(f"{exc.message}.", error=exc.code)
    if not asked:
        return Answer(f"Task {task.id} has already ended ({task.status}).")
    return Answer(f"Cancelling {task.id}: it stops before its next step, and you will be told here.")


def _heartbeat(turn: Turn, args: str, store: Schedules | None, now: datetime) -> Answer:
    ws, config = turn.inbound.workspace_id, turn.workspace.heartbeat
    match args.strip():
        case "":
            running = heartbeat_schedules(store, ws) if store is not None else []
            if not running:
                state = "off" if not config.enabled else "enabled but not running (/heartbeat on)"
                return Answer(f"Heartbeat: {state}.")
            return Answer(f"Heartbeat: on, {describe(running[0])}, in session {running[0].session_id}.")
        case "on":
            try:
                made, _ = heartbeat_on(
                    store,
                    turn.workspace,
                    turn.inbound,
                    user_id=turn.sender.user_id,
                    tz_name=turn.workspace.timezone,
                    now=now,
                )
            except SigilError as exc:
                return Answer(f"The heartbeat cannot start: {exc.message}", error=exc.code)
            return Answer(f"Heartbeat on: {describe(made)}, answered here.")
        case "off":
            stopped = heartbeat_off(store, ws)
            return Answer("Heartbeat off." if stopped else "The heartbeat was not running.")
    return Answer("Use /heartbeat, /heartbeat on or /heartbeat off.", error="bad /heartbeat arguments")


def _skills(skills: list[Skill]) -> str:
    if not skills:
        return "No skills are available in this workspace."
    return "Skills:\n" + "\n".join(f"- {s.name}: {s.description}" for s in skills)


# ---------------------------------------------------------------- status lines


def _model_in_effect(turn: Turn, default_model: str | None) -> str | None:
    return turn.session.model_override or turn.inbound.model or turn.workspace.model or default_model


def _model_line(turn: Turn, default_model: str | None) -> str:
    override = turn.session.model_override
    workspace_model = turn.workspace.model or default_model
    if override:
        return f"{override} (chosen for this conversation; the workspace's is {workspace_model or 'none'})"
    if turn.inbound.model:
        # The chat's own model, from its channel route (shared.channels.routes).
        return f"{turn.inbound.model} (this chat's; the workspace's is {workspace_model or 'none'})"
    return workspace_model or "none configured"


def _budget_lines(turn: Turn, now: datetime, model_ref: str | None) -> list[str]:
    if turn.workspace.budget is None:
        return ["Budget: none (budgets are off in this workspace)"]
    readings = turn.budget.readings()
    lines = []
    for scope, label in (("user", "Your budget"), ("workspace", "Workspace budget")):
        mine = [(b, c) for b, c in readings if b.scope == scope]
        if scope == "user" and not turn.budget.user_id:
            continue
        parts = [_period_left(b, c, now) for b, c in mine]
        lines.append(f"{label}: {'; '.join(parts) if parts else 'no limit'}")
    if model_ref and any("usd" in b.limits for b, _ in readings):
        # The $ figures are estimates at this price: say which, and where it came from (a model
        # no table prices is estimated dear, and a local one is free: docs/budgets.md#prices).
        lines.append(
            f"Price of {model_ref}: {turn.budget.prices.quote(model_ref).describe()}; $ amounts are estimates"
        )
    return lines


def _period_left(bucket: Bucket, totals: Counters, now: datetime) -> str:
    """ "998,765 of 1,000,000 tokens, an estimated $1.99 of $2.00 left today (resets at 00:00 UTC,
    in 3 h)" """
    left = []
    for metric, limit in bucket.limits.items():
        remaining = max(0, limit - totals.get(metric))
        unit = _METRIC_NAMES[metric]
        estimated = "an estimated " if metric == "usd" else ""
        amounts = f"{estimated}{format_amount(metric, remaining, limit)} of {format_amount(metric, limit)}"
        left.append(f"{amounts} {unit}".rstrip())
    return f"{', '.join(left)} left {_period_name(bucket.period)} ({_resets(bucket, now)})"


def _period_name(period: Period) -> str:
    return "today" if period == "day" else "this month"


def _resets(bucket: Bucket, now: datetime) -> str:
    when = "at 00:00 UTC" if bucket.period == "day" else f"on {format_date(bucket.resets_at)} at 00:00 UTC"
    return f"resets {when}, in {format_duration(as_utc(bucket.resets_at) - as_utc(now))}"

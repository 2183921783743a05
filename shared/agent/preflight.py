"""A turn's pre-flight: what it loads, and whether it calls the model at all.

`open_turn` loads what every turn needs (the workspace, the sender's resolution, the budget and
the session, whose counters are read in the same request). `admit` then decides, in this order:

- a redelivered event whose turn already committed: Stop, "skipped_duplicate";
- a sender the workspace does not admit: Stop with the policy's reply if it has one (a pairing
  code, a refusal; nothing to a blocked sender or a bot), "pairing_required" or "sender_refused",
  nothing kept: theirs is not an admitted conversation;
- a chat command (InboundMessage.command, docs/commands.md): Command, answered by
  shared.agent.commands without the model, whatever the model's configuration or the budget;
- no model configured: Stop with the text that says how to configure one, the user's message
  kept, "model_not_configured";
- a budget already run out: Stop saying what and when it resets, the user's message kept (it was
  said), the denial not (it is the gateway's, not the model's), "budget_denied";
- otherwise Proceed, with the provider and the user's message as the model sees it.

Nothing here sends, commits or audits: the turn does that once, whatever the decision.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from shared.agent.audit import Outcome
from shared.agent.loop import Safety
from shared.backend import Backend
from shared.budgets import PriceTable, TurnBudget
from shared.errors import ModelNotConfigured
from shared.identity import Resolution, resolve_sender
from shared.models import (
    ChatCommand,
    InboundMessage,
    LaneItem,
    Session,
    UserMessage,
    WorkspaceConfig,
    new_workspace,
)
from shared.models.media import MediaItem
from shared.ports import SessionStore
from shared.providers.base import Provider
from shared.schedules import REMINDER_PREFIX

ProviderFactory = Callable[[str | None], tuple[Provider, str]]


@dataclass
class Turn:
    """What a turn knows before it decides anything. `safety` collects what the filters find
    over the whole turn, for its log line."""

    item: LaneItem
    id: str
    workspace: WorkspaceConfig
    sender: Resolution
    budget: TurnBudget
    session: Session
    safety: Safety
    # The message's files as stored (shared.agent.media.fetch_media, before the model call), and
    # what the user is told about those that were not opened.
    media: list[MediaItem] = field(default_factory=list)
    media_notes: list[str] = field(default_factory=list)

    @property
    def inbound(self) -> InboundMessage:
        return self.item.inbound


@dataclass(frozen=True)
class Proceed:
    """Call the model: through `provider` as `model`, about `user`."""

    provider: Provider
    model: str
    user: UserMessage
    # A redrive's turn answering the message its given-up original kept (kept_message): `user`
    # is that stored message, answered where it stands, and not committed again.
    kept: bool = False
    kind: Literal["proceed"] = field(default="proceed", init=False)

    @property
    def model_ref(self) -> str:
        return f"{self.provider.name}/{self.model}"


@dataclass(frozen=True)
class Stop:
    """End the turn without the model: send `reply` (if any), audit `outcome` (with `error`), and
    commit `keep_user`, the user's message, with the audit record; with no message to keep the
    record is appended alone and nothing is committed."""

    reply: str | None
    outcome: Outcome
    keep_user: UserMessage | None = None
    error: str | None = None
    # Commit the event id even with no message to keep (a fired reminder), so a redelivery of it
    # is skipped as a duplicate however much later it comes.
    remember: bool = False
    kind: Literal["stop"] = field(default="stop", init=False)


@dataclass(frozen=True)
class Command:
    """Answer a chat command without the model (shared.agent.commands): nothing is spent, and
    neither the command nor its answer joins the window."""

    command: ChatCommand
    kind: Literal["command"] = field(default="command", init=False)


def turn_id_for(item: LaneItem) -> str:
    """Deterministic per event, so every retry of a turn writes to the same send-ledger keys."""
    i = item.inbound
    key = f"{i.workspace_id}\n{i.session_id}\n{i.channel}\n{i.event_id}"
    return "t_" + hashlib.sha256(key.encode()).hexdigest()[:32]


def resolve(backend: Backend, inbound: InboundMessage, now: datetime) -> tuple[WorkspaceConfig, Resolution]:
    """The inbound's workspace (its defaults when none is stored) and who its sender is there."""
    workspace = backend.workspaces.get(inbound.workspace_id) or new_workspace(inbound.workspace_id)
    return workspace, resolve_sender(backend.identities, workspace, inbound, now=now)


def open_turn(backend: Backend, item: LaneItem, *, prices: PriceTable, clock: Callable[[], datetime]) -> Turn:
    inbound = item.inbound
    workspace, sender = resolve(backend, inbound, clock())
    budget = TurnBudget(
        backend.budgets, inbound.workspace_id, sender.user_id, workspace.budget, prices, clock
    )
    # An admitted sender's budget counters are read with the session, in the same request.
    session = load_session(
        backend.sessions, inbound, sender.user_id, budget=budget if sender.admitted else None
    )
    return Turn(
        item=item,
        id=turn_id_for(item),
        workspace=workspace,
        sender=sender,
        budget=budget,
        session=session,
        safety=Safety(pii=workspace.pii_redaction),
    )


def admit(turn: Turn, provider_factory: ProviderFactory) -> Proceed | Stop | Command:
    inbound, sender = turn.inbound, turn.sender
    if inbound.event_id in turn.session.recent_event_ids:
        return Stop(reply=None, outcome="skipped_duplicate")
    if not sender.admitted:
        outcome: Outcome = "pairing_required" if sender.admission == "pairing_required" else "sender_refused"
        return Stop(reply=sender.reply, outcome=outcome, error=sender.reason)
    if inbound.command is not None:
        return Command(inbound.command)
    if (fired := turn.item.fired) is not None:
        if fired.schedule.heartbeat and not turn.workspace.heartbeat.enabled:
            # Turned off in the config since: the heartbeat in flight does nothing.
            return Stop(reply=None, outcome="scheduled", error="the heartbeat is off")
        if fired.schedule.kind == "message":
            # A reminder is sent as it was set, without the model; like a command's answer it
            # joins no window, and its event id is remembered (shared.schedules).
            return Stop(reply=f"{REMINDER_PREFIX}{fired.schedule.text}", outcome="scheduled", remember=True)
    kept = kept_message(turn.session, turn.item)
    user = kept or user_message(inbound, turn.id, turn.safety, sender.user_id)
    keep_user = None if kept is not None else user
    try:
        # The session's own override, else the model its chat's route names, else the workspace's.
        ref = turn.session.model_override or inbound.model or turn.workspace.model
        provider, model = provider_factory(ref)
    except ModelNotConfigured as exc:
        # Retrying can't help, so the turn ends here rather than failing.
        return Stop(reply=exc.message, outcome="model_not_configured", keep_user=keep_user, error=exc.message)
    if (denied := turn.budget.check()).exhausted is not None:
        spent = denied.exhausted
        return Stop(
            reply=spent.message(denied.at), outcome="budget_denied", keep_user=keep_user, error=spent.summary
        )
    return Proceed(provider=provider, model=model, user=user, kept=kept is not None)


def kept_message(session: Session, item: LaneItem) -> UserMessage | None:
    """For an item put back from the dead letters (shared.agent.redrive), the user's message its
    given-up original committed, while it is still in the session's window; None otherwise, and
    the turn then keeps the message as any turn does."""
    if item.redrive_of is None:
        return None
    for message in session.active_messages:
        if isinstance(message, UserMessage) and message.event_id == item.redrive_of:
            return message
    return None


def load_session(
    store: SessionStore, inbound: InboundMessage, user_id: str, *, budget: TurnBudget | None = None
) -> Session:
    """The stored session, or a new one belonging to `user_id` (the Sigil user who opened it).
    With a `budget` that limits something, its counters are read in the same request and seeded."""
    counters = budget.counters_to_read if budget is not None else []
    if budget is not None and counters:
        found, totals = store.get_with_budget(inbound.workspace_id, inbound.session_id, counters)
        budget.seed(totals)
    else:
        found = store.get(inbound.workspace_id, inbound.session_id)
    if found is not None:
        return found
    return Session(
        id=inbound.session_id,
        workspace_id=inbound.workspace_id,
        user_id=user_id,
        channel=inbound.channel,
    )


def user_message(inbound: InboundMessage, turn: str, safety: Safety, user_id: str | None) -> UserMessage:
    """The user's message as the model sees it and the session keeps it: redacted, and quoted as
    data if the scan flags it. The same on every path and retry (the quoting is deterministic)."""
    # Ids derived from the turn: a retried turn writes the same message, never a second copy.
    content = safety.guard(inbound.text, source="the user")
    return UserMessage(
        id=f"{turn}.u",
        content=content,
        sender_id=inbound.sender.id,
        user_id=user_id,
        sender_name=inbound.sender.name,
        event_id=inbound.event_id,
        # When it was said (the channel's arrival time), not when the lane got to it: what the
        # Tier-1 record and its index document keep, and time-aware search filters on.
        created_at=inbound.received_at,
    )

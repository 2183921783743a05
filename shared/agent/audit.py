"""A turn's audit record and its log line.

A turn that commits writes its record in the commit (shared.agent.commit); one that commits
nothing (a skipped duplicate, a sender turned away, a failed attempt) appends it on its own.
Either way the turn logs one line, on "sigil.turn", never with the message text.
"""

from __future__ import annotations

import logging
import time
from typing import Literal

from shared import correlation
from shared.agent.loop import LoopResult, Safety
from shared.budgets import TurnBudget
from shared.models import (
    TRACE_ARGUMENT_CHARS,
    TRACE_TOOL_CALLS,
    AssistantMessage,
    AuditRecord,
    InboundMessage,
    Message,
    Session,
    TurnTrace,
)
from shared.ports import AuditLog
from shared.providers.base import Usage

log = logging.getLogger("sigil.turn")

Outcome = Literal[
    "ok",
    "error",
    "limited",  # the workspace's tool-call limit ended the turn
    "skipped_duplicate",
    "model_not_configured",
    "pairing_required",
    "sender_refused",
    "budget_denied",  # a workspace or user budget ran out (before the turn, or between its calls)
    "refused",  # the model, or its provider's safety filter, declined to answer (Done.refused)
    "given_up",  # dead-lettered after the last attempt: the apology, delivered or not (give_up_turn)
    "command",  # a chat command answered without the model (shared.agent.commands)
    "scheduled",  # a fired reminder sent without the model (shared.schedules)
]


def audit_record(
    inbound: InboundMessage,
    turn_id: str,
    started: float,
    outcome: Outcome,
    *,
    user_id: str,
    model: str | None = None,
    loop: LoopResult | None = None,
    budget: TurnBudget | None = None,
    safety: Safety | None = None,
    error: str | None = None,
) -> AuditRecord:
    # A committing turn's record travels in its commit, so its duration stops short of the save.
    # `user_id` is the Sigil user the sender resolved to (for a refused sender, who they claim to be).
    # `safety` (the loop's, when not given) puts the filters' findings on the record: names only.
    usage = loop.usage if loop else Usage()
    safety = safety if safety is not None else (loop.safety if loop else None)
    if loop and loop.stopped:
        error = loop.stopped.message
    if loop and loop.budget_denied:
        error = loop.budget_denied
    return AuditRecord(
        workspace_id=inbound.workspace_id,
        session_id=inbound.session_id,
        user_id=user_id,
        event_id=inbound.event_id,
        turn_id=turn_id,
        model=model,
        tools_used=loop.tools_used if loop else [],
        tokens_in=usage.input_tokens,
        tokens_out=usage.output_tokens,
        tokens_cached=usage.cache_read_tokens,
        tokens_cache_write=usage.cache_write_tokens,
        duration_ms=round((time.monotonic() - started) * 1000, 3),
        cost_usd=float(budget.spent.usd) if budget else 0.0,
        outcome=outcome,
        error=error,
        quoted=list(safety.quoted) if safety else [],
        injection_rules={source: list(rules) for source, rules in safety.findings.items()} if safety else {},
        correlation_id=correlation.current(),
        sandbox=list(loop.sandbox) if loop else [],
    )


def with_trace(
    record: AuditRecord, inbound: InboundMessage, session: Session, new: list[Message] | None
) -> AuditRecord:
    """`record` with its TurnTrace: where the `new` messages land in `session` (committed after
    its message_count) and the inbound's time and conversation, for a replay (shared.replay)."""
    new = new or []
    first = session.message_count if new else None
    calls = [call for m in new if isinstance(m, AssistantMessage) for call in m.tool_calls][:TRACE_TOOL_CALLS]
    calls = [c.model_copy(update={"arguments": c.arguments[:TRACE_ARGUMENT_CHARS]}) for c in calls]
    trace = TurnTrace(
        first_seq=first,
        last_seq=first + len(new) - 1 if first is not None else None,
        received_at=inbound.received_at,
        channel=inbound.channel,
        chat_id=inbound.chat_id,
        chat_type=inbound.chat_type,
        thread_id=inbound.thread_id,
        tool_calls=calls,
    )
    return record.model_copy(update={"trace": trace})


def audit_alone(audit: AuditLog, record: AuditRecord) -> AuditRecord:
    """Audit a turn that commits nothing on its own. Its log line carries no safety findings: the
    findings describe what a commit stored, and nothing was."""
    audit.append(record)
    return log_turn(record)


def log_turn(record: AuditRecord, safety: Safety | None = None) -> AuditRecord:
    # One line per turn, never the message text: logs outlive the memory retention rules. The
    # safety findings ride on it as on the record, with the redaction counts the record leaves out:
    # rule and kind names, counts.
    findings = {
        "injection_rules": safety.findings if safety else {},
        "quoted": safety.quoted if safety else [],
        "redacted": dict(safety.redacted) if safety else {},
    }
    log.log(
        # A limited turn is worth a look too: a model that loops on tools, or a limit set too low.
        logging.WARNING if record.outcome in {"error", "limited", "given_up"} else logging.INFO,
        "turn",
        extra={
            "workspace_id": record.workspace_id,
            "session_id": record.session_id,
            "event_id": record.event_id,
            "turn_id": record.turn_id,
            "outcome": record.outcome,
            "model": record.model,
            "tokens_in": record.tokens_in,
            "tokens_out": record.tokens_out,
            "tokens_cached": record.tokens_cached,
            "tool_calls": len(record.tools_used),
            "duration_ms": record.duration_ms,
            # A failed attempt's cause (our own words: shared.providers keep the provider's out).
            **({"error": record.error} if record.outcome == "error" and record.error else {}),
            **findings,
        },
    )
    return record

"""The TurnCommitted event that starts per-turn extraction (shared.consolidation.turn_extraction).

Apart from the extraction it starts: the agent publishes it on every commit, and importing it
should not import compaction and the extraction prompts, which the agent never runs (a cold
start pays for every module the agent's handler imports).
"""

from __future__ import annotations

from shared.models import DomainEvent, Session


def turn_committed(
    session: Session,
    *,
    conversation: str,
    group: bool,
    correlation_id: str | None,
) -> DomainEvent:
    """The event a committed turn publishes: its session, its last seq, and where its messages
    were said (their Tier-1 records' scope). Ids and seqs only, never text."""
    return DomainEvent(
        type="TurnCommitted",
        workspace_id=session.workspace_id,
        session_id=session.id,
        detail={"seq": session.message_count - 1, "conversation": conversation, "group": group},
        correlation_id=correlation_id,
    )

"""What a redrive of a dead-lettered lane item puts back, and what it must skip (docs/dead-letters.md).

A dead-lettered turn was given up: `give_up_turn` apologised and committed the user's message with
the event id, so the session already counts that event as handled, and the item itself, put back
unchanged, would be skipped as a redelivery. So a redrive puts back a new item (`redriven`): the
same message under a derived event id (`<event id>.r<n>`, a new turn id, dedup id and reply
positions), which names the original (`redrive_of`). Its turn answers the message the give-up kept,
where it stands in the window, instead of keeping it again (`kept_message`); its commit remembers
the original id as well (merged_event_ids), so a platform's late retry of the original is still
recognised.

`answered` is the skip rule: an item whose turn committed an answer (the session holds the
reply of the original's turn or of one of its redrives), or whose event committed while its
message is no longer in the window to be answered in place, is not put back.
"""

from __future__ import annotations

import hashlib

from shared.agent.preflight import kept_message, turn_id_for
from shared.models import LaneItem, Session, UserMessage
from shared.ports import DeadLetterEntry, RedriveOutcome, Requeue, SessionStore

__all__ = [
    "answered",
    "kept_message",
    "original_event_id",
    "redriven",
    "redriven_event_id",
    "requeue_policy",
    "turn_ids",
]

_MAX_ID = 128  # ID_PATTERN's length bound (its alphabet has '.', '-' and the digest's hex)


def original_event_id(item: LaneItem) -> str:
    return item.redrive_of or item.inbound.event_id


def redriven_event_id(original: str, n: int) -> str:
    """`<original>.r<n>`; an original too long for that keeps a prefix and a digest of itself."""
    suffix = f".r{n}"
    if len(original) + len(suffix) <= _MAX_ID:
        return original + suffix
    digest = hashlib.sha256(original.encode()).hexdigest()[:16]
    return f"{original[: _MAX_ID - len(suffix) - len(digest) - 1]}-{digest}{suffix}"


def redriven(item: LaneItem) -> LaneItem:
    """The item a redrive queues for `item`: deterministic, so a redrive repeated after a crash
    between its send and its delete queues the same event, which the lane or the turn drops."""
    original = original_event_id(item)
    n = item.redrives + 1
    inbound = item.inbound.model_copy(
        update={
            "event_id": redriven_event_id(original, n),
            "merged_event_ids": sorted({*item.inbound.merged_event_ids, original}),
        }
    )
    # enqueued_at is kept: it is the item's place in its session's order, for later redrives too.
    return item.model_copy(update={"inbound": inbound, "redrive_of": original, "redrives": n})


def turn_ids(item: LaneItem) -> set[str]:
    """The turn ids of the original event and of every redrive of it up to this item."""
    original = original_event_id(item)
    ids = {turn_id_for(_with_event(item, original))}
    for n in range(1, item.redrives + 1):
        ids.add(turn_id_for(_with_event(item, redriven_event_id(original, n))))
    return ids


def _with_event(item: LaneItem, event_id: str) -> LaneItem:
    return item.model_copy(update={"inbound": item.inbound.model_copy(update={"event_id": event_id})})


def answered(session: Session | None, item: LaneItem) -> bool:
    """True when a redrive of `item` must be skipped: the session holds the reply of its turn (or
    of a redrive's), or its event committed and its message has left the window (nothing to answer
    in place). A given-up event whose message is still in the window is not answered."""
    if session is None:
        return False
    # A reply in the window settles it, however long ago its event id expired from the session.
    replies = {f"{turn}.a" for turn in turn_ids(item)}
    if any(m.id in replies for m in session.active_messages):
        return True
    original = original_event_id(item)
    if not {original, item.inbound.event_id} & set(session.recent_event_ids):
        return False
    kept = any(isinstance(m, UserMessage) and m.event_id == original for m in session.active_messages)
    return not kept


def requeue_policy(sessions: SessionStore) -> Requeue:
    """The Requeue a redrive runs with (DeadLetters.redrive): skip what `answered` says, put the
    rest back as `redriven` items. The session is read per item, at the time of the redrive."""

    def requeue(item: LaneItem) -> LaneItem | None:
        session = sessions.get(item.inbound.workspace_id, item.inbound.session_id)
        return None if answered(session, item) else redriven(item)

    return requeue


def held_back(entry: DeadLetterEntry) -> RedriveOutcome:
    """What a redrive reports for an item it leaves in the dead letters because an earlier item
    of its session could not be put back: redriving it alone would answer it out of order."""
    return RedriveOutcome(
        id=entry.id,
        group_id=entry.group_id,
        outcome="failed",
        detail="held back behind an earlier item of its session that could not be redriven",
    )

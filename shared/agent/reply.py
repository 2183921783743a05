"""Where a turn's reply goes: its outbox position, the outbound message, and the streamed text.

The reply is sent before the commit: a crash in between re-runs the turn, which asks for the same
outbox position (reply_seq: the session's message count is unchanged until the commit), and the
outbox, for which that position is the send ledger, drops the second post.
"""

from __future__ import annotations

from collections.abc import Callable

from shared.agent.loop import Safety
from shared.channels.out import Reply
from shared.channels.senders import SenderRegistry
from shared.models import InboundMessage, OutboundMessage, Session
from shared.safety.redact import StreamRedactor

PARTS_PER_TURN = 100  # outbox positions a turn's reply may take (see reply_seq)


def reply_seq(message_count: int, part: int = 0) -> int:
    """The outbox position of a reply part, from the session's message count at the turn's start.

    The count is the same on every retry of a turn (it moves only when the turn commits) and
    larger for each later turn of the session (every commit appends at least the user's message,
    and the lane runs a session's turns one at a time). So a turn's parts have positions no other
    turn asks for, in order, and a retry asks for the same ones: the outbox needs no counter.
    Positions are not contiguous; readers page with `after`.
    """
    if not 0 <= part < PARTS_PER_TURN:
        raise ValueError(f"a reply has at most {PARTS_PER_TURN} parts, not part {part}")
    return message_count * PARTS_PER_TURN + part + 1


def send(senders: SenderRegistry, inbound: InboundMessage, session: Session, turn: str, text: str) -> None:
    senders.get(inbound.channel).send(outbound(inbound, session, turn, text))


def outbound(inbound: InboundMessage, session: Session, turn: str, text: str) -> OutboundMessage:
    return OutboundMessage(
        workspace_id=inbound.workspace_id,
        session_id=inbound.session_id,
        channel=inbound.channel,
        chat_id=inbound.chat_id,
        thread_id=inbound.thread_id,
        turn_id=turn,
        part=0,
        # `session` is as loaded at the turn's start, so a retry computes the same seq.
        seq=reply_seq(session.message_count, 0),
        text=text,
        in_reply_to=inbound.event_id,
        reply_context=inbound.reply_context,
    )


def redacted(shown: Reply, safety: Safety) -> Callable[[str], None]:
    """The stream's text for the channel: redacted, less a tail that could be half a secret.
    The redactor starts over when the loop's next model call streams from the beginning."""
    visible = StreamRedactor(pii=safety.pii)

    def update(text_so_far: str) -> None:
        if text := visible(text_so_far):
            shown.update(text)

    return update

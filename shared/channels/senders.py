"""Channel senders: how a turn's reply leaves Sigil, one ChannelSender per channel."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from shared.channels.web import DeltaSink, StreamedDeltas
from shared.errors import SigilError
from shared.models import OutboundMessage
from shared.ports import ChannelSender, Outbox

log = logging.getLogger("sigil.senders")


class OutboxSender:
    """The web channel's sender: replies go to the session's outbox, where clients read them.

    One outbox write per part (a DynamoDB PutItem in the cloud): the message already carries its
    position, `seq`, which the turn derived from the session (shared.agent.reply.reply_seq).
    """

    def __init__(self, outbox: Outbox, deltas: DeltaSink | None = None) -> None:
        self.outbox = outbox
        # Where the reply's deltas stream as the model writes (the local gateway's WebSockets);
        # None: the outbox only, as before.
        self.deltas = deltas

    def progressive(
        self, message: OutboundMessage, *, context: Mapping[str, str] | None = None
    ) -> OutboxReply:
        """A reply part streamed to the sink as it grows, written to the outbox once, at finish."""
        return OutboxReply(self, message)

    def send(self, message: OutboundMessage) -> None:
        self._append(message)
        if self.deltas is not None:
            StreamedDeltas(self.deltas, message).finished()

    def _append(self, message: OutboundMessage) -> None:
        entry = self.outbox.append(message)
        if entry is not None:
            # The web channel's post, under the turn's correlation id (docs/observability.md).
            log.info(
                "reply posted",
                extra={
                    "platform": "web",
                    "turn_id": message.turn_id,
                    "part": message.part,
                    "seq": message.seq,
                },
            )
        else:
            # The outbox is the send ledger: a retried turn reaches here with the same
            # (turn_id, part) and so the same seq, and the user must see the reply once.
            log.debug(
                "reply part already sent",
                extra={"turn_id": message.turn_id, "part": message.part, "seq": message.seq},
            )


class OutboxReply:
    """A web reply part: deltas to the sink while it streams (if there is one), the outbox at finish."""

    def __init__(self, sender: OutboxSender, message: OutboundMessage) -> None:
        self._sender = sender
        self._message = message
        self._deltas = None if sender.deltas is None else StreamedDeltas(sender.deltas, message)

    def update(self, text_so_far: str) -> None:
        if self._deltas is not None:
            self._deltas.update(text_so_far)

    def finish(self, final_text: str) -> None:
        # The outbox first: a reader told "final" must find the reply there.
        self._sender._append(self._message.model_copy(update={"text": final_text}))
        if self._deltas is not None:
            self._deltas.finished()


class SenderRegistry:
    """Channel name → sender. Platform senders (Telegram, Slack, ...) register here as they land."""

    def __init__(self, senders: Mapping[str, ChannelSender] | None = None) -> None:
        self._senders: dict[str, ChannelSender] = dict(senders or {})

    def register(self, channel: str, sender: ChannelSender) -> None:
        self._senders[channel] = sender

    def get(self, channel: str) -> ChannelSender:
        sender = self._senders.get(channel)
        if sender is None:
            raise SigilError(
                f"no sender is registered for channel {channel!r}", code="channel_not_configured"
            )
        return sender

    def __contains__(self, channel: object) -> bool:
        return channel in self._senders

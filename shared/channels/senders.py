"""Channel senders: how a turn's reply leaves Sigil, one ChannelSender per channel."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from shared.errors import SigilError
from shared.models import OutboundMessage
from shared.ports import ChannelSender, Outbox

log = logging.getLogger("sigil.senders")


class OutboxSender:
    """The web channel's sender: replies go to the session's outbox, where clients read them.

    One outbox write per part (a DynamoDB PutItem in the cloud): the message already carries its
    position, `seq`, which the turn derived from the session (shared.agent.reply.reply_seq).
    """

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    def send(self, message: OutboundMessage) -> None:
        if self.outbox.append(message) is None:
            # The outbox is the send ledger: a retried turn reaches here with the same
            # (turn_id, part) and so the same seq, and the user must see the reply once.
            log.debug(
                "reply part already sent",
                extra={"turn_id": message.turn_id, "part": message.part, "seq": message.seq},
            )


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

"""Channels: each platform's inbound webhook (verify, parse) and outbound sender.

`channel_for` lives here, above the platforms, so that shared.channels.inbound (the protocol and
the helpers every platform uses) imports none of them.
"""

from __future__ import annotations

from shared.channels.inbound import InboundChannel
from shared.errors import NotFound


def channel_for(name: str, workspace_id: str) -> InboundChannel:
    """The channel behind /webhooks/{name}, delivering into `workspace_id`.

    Imported on first use so a cold webhook loads only the platform it is serving.
    """
    if name == "telegram":
        from shared.channels.telegram import TelegramChannel

        return TelegramChannel(workspace_id)
    if name == "slack":
        from shared.channels.slack import SlackChannel

        return SlackChannel(workspace_id)
    if name == "discord":
        from shared.channels.discord import DiscordChannel

        return DiscordChannel(workspace_id)
    if name == "whatsapp":
        from shared.channels.whatsapp import WhatsAppChannel

        return WhatsAppChannel(workspace_id)
    raise NotFound("no such channel")

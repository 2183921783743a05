"""Channels: each platform's inbound webhook (verify, parse) and outbound sender.

`channel_for` lives here, above the platforms, so that shared.channels.inbound (the protocol and
the helpers every platform uses) imports none of them.
"""

from __future__ import annotations

from shared.channels.inbound import InboundChannel
from shared.errors import NotFound
from shared.models import ChannelRoute


def channel_for(name: str, workspace_id: str, route: ChannelRoute | None = None) -> InboundChannel:
    """The channel behind /webhooks/{name}, delivering into `workspace_id`; with a `route`, the
    one behind /webhooks/{name}/{route.name}, verified with the route's secrets.

    Imported on first use so a cold webhook loads only the platform it is serving.
    """
    if name == "telegram":
        from shared.channels.telegram import TelegramChannel

        return TelegramChannel(workspace_id, route)
    if name == "slack":
        from shared.channels.slack import SlackChannel

        return SlackChannel(workspace_id, route)
    if name == "discord":
        from shared.channels.discord import DiscordChannel

        return DiscordChannel(workspace_id, route)
    if name == "whatsapp":
        from shared.channels.whatsapp import WhatsAppChannel

        return WhatsAppChannel(workspace_id, route)
    raise NotFound("no such channel")

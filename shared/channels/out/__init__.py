"""Outbound channels: replies posted to Telegram, Slack, Discord and WhatsApp (docs/channels-outbound.md).

`build_senders` wires one sender per channel into a SenderRegistry: the web channel keeps its
outbox sender, each platform gets a PlatformSender over its API client. Nothing is contacted
and no secret is read here; tokens are read from the SecretStore (which caches them) at send.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from shared.channels.ledger import MemorySendLedger
from shared.channels.out import discord, slack, telegram, whatsapp
from shared.channels.out.base import (
    BufferedReply,
    Clock,
    PlatformApi,
    PlatformSender,
    ProgressiveReply,
    Reply,
    Sleep,
    Slot,
    Target,
    Throttle,
    progressive_reply,
)
from shared.channels.out.http import (
    ApiClient,
    ChannelError,
    ChannelNotConfigured,
    ChannelRateLimited,
    RateLimited,
    RetryAfter,
    RetryPolicy,
    is_429,
    retry_after_header,
)
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.channels.web import DeltaSink
from shared.lazy import once
from shared.ports import Outbox, SecretStore, SendLedger
from shared.tls import tls_context

if TYPE_CHECKING:
    import httpx

__all__ = [
    "DEFAULT_BASE_URLS",
    "BufferedReply",
    "ChannelError",
    "ChannelNotConfigured",
    "ChannelRateLimited",
    "PlatformApi",
    "PlatformSender",
    "ProgressiveReply",
    "Reply",
    "RetryPolicy",
    "Slot",
    "Target",
    "Throttle",
    "build_senders",
    "progressive_reply",
]

DEFAULT_BASE_URLS: Final[Mapping[str, str]] = {
    "telegram": "https://api.telegram.org",
    "slack": "https://slack.com/api",
    "discord": "https://discord.com/api/v10",
    "whatsapp": "https://graph.facebook.com/v23.0",
}
# Model replies are small; a platform that has not answered in 15 s will not answer usefully.
TIMEOUT_S: Final = 15.0
CONNECT_TIMEOUT_S: Final = 5.0


def _new_client() -> httpx.Client:
    """The platforms' one HTTP client, made at the first platform call (build_senders): a turn that
    answers on the web page alone never loads httpx nor reads the CA bundle (a cold start's 8 and
    15 ms)."""
    import httpx

    timeout = httpx.Timeout(TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    return httpx.Client(timeout=timeout, verify=tls_context())


def build_senders(
    secrets: SecretStore,
    outbox: Outbox,
    *,
    base_urls: Mapping[str, str] | None = None,
    ledger: SendLedger | None = None,
    http: httpx.Client | None = None,
    policy: RetryPolicy | None = None,
    clock: Clock = time.monotonic,
    sleep: Sleep = time.sleep,
    deltas: DeltaSink | None = None,
) -> SenderRegistry:
    """Senders for web and every platform.

    `base_urls` overrides a platform's API root (tests point them at local servers). `ledger`
    should be the backend's persistent one (SqliteSendLedger / DynamoSendLedger): the in-memory
    default only dedupes retries inside one process. `clock` and `sleep` drive the throttles
    and 429 waits, so tests run without real waiting. `deltas` receives the web replies' streamed
    text (the local gateway's WebSockets); without it a web reply is only written to the outbox.
    """
    urls = {**DEFAULT_BASE_URLS, **(base_urls or {})}
    client = http or once(_new_client)
    ledger = ledger or MemorySendLedger()
    policy = policy or RetryPolicy()

    def api_client(platform: str, retry_after: RetryAfter, rate_limited: RateLimited = is_429) -> ApiClient:
        return ApiClient(
            platform,
            urls[platform],
            http=client,
            retry_after=retry_after,
            rate_limited=rate_limited,
            policy=policy,
            sleep=sleep,
        )

    apis: list[PlatformApi] = [
        telegram.TelegramApi(api_client("telegram", telegram.retry_after), secrets),
        slack.SlackApi(api_client("slack", retry_after_header), secrets),
        discord.DiscordApi(api_client("discord", discord.retry_after)),
        whatsapp.WhatsAppApi(api_client("whatsapp", whatsapp.retry_after, whatsapp.rate_limited), secrets),
    ]
    registry = SenderRegistry({"web": OutboxSender(outbox, deltas)})
    for api in apis:
        registry.register(api.platform, PlatformSender(api, ledger, clock=clock, sleep=sleep))
    return registry

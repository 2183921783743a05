"""Where each platform keeps an attached file, and what it takes to download it (docs/media.md).

One function per platform turns an Attachment into a `Located` download: the URL, the headers
(the bot token where the platform wants it), and the size the file API declares. Each uses only
the credentials of the route the inbound came through (shared.channels.out.base.route_secret):
a file id from another bot's chat is unknown to this bot, and its file API says so.

- Telegram: `getFile` (GET {base}/bot<token>/getFile?file_id=...) answers the file's path and
  size; the bytes are at {base}/file/bot<token>/<file_path>. The Bot API serves files up to 20 MB.
- Slack: the event's `url_private_download` (or `url_private`), fetched with the bot token as a
  Bearer header; only files.slack.com is ever sent the token.
- Discord: the attachment's CDN URL (cdn.discordapp.com, signed and expiring), no token.
- WhatsApp: GET {base}/<media-id>?phone_number_id=<the business number> with the access token
  answers a URL valid for five minutes and the file's size; the bytes need the token too.

`base_urls` (Settings.platform_base_urls) points the file APIs at a stand-in as it does the
senders: "telegram" and "whatsapp" are the APIs' roots, "slack_files" and "discord_cdn" replace
the scheme and host of Slack's and Discord's file URLs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import quote, urlsplit

import httpx

from shared.channels.out import DEFAULT_BASE_URLS
from shared.channels.out.base import Target, route_secret
from shared.channels.out.http import ChannelError, ChannelNotConfigured, json_body, redact
from shared.deadline import current, cut_by, out_of_time, passed
from shared.errors import MediaRefused
from shared.models import Attachment, InboundMessage
from shared.ports import SecretStore

TELEGRAM_TOKEN: Final = "telegram/bot-token"  # noqa: S105 -- the secret's name, not its value
SLACK_TOKEN: Final = "slack/bot-token"  # noqa: S105 -- the secret's name, not its value
WHATSAPP_TOKEN: Final = "whatsapp/access-token"  # noqa: S105 -- the secret's name, not its value
SLACK_FILE_HOSTS: Final = frozenset({"files.slack.com"})
DISCORD_CDN_HOSTS: Final = frozenset({"cdn.discordapp.com", "media.discordapp.net"})


@dataclass(frozen=True)
class Located:
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    size: int | None = None  # what the file API declares, when it does
    secrets: tuple[str, ...] = ()  # values to mask in any error


@dataclass(frozen=True)
class FileApi:
    """What a platform function needs: the HTTP client, the secrets, the stand-in URLs."""

    http: httpx.Client
    secrets: SecretStore
    base_urls: Mapping[str, str]
    timeout: Callable[[], httpx.Timeout]

    def base(self, platform: str) -> str:
        return (self.base_urls.get(platform) or DEFAULT_BASE_URLS[platform]).rstrip("/")

    def token(self, inbound: InboundMessage, name: str) -> str:
        platform = name.split("/", 1)[0]
        secret = route_secret(Target(inbound.chat_id, inbound.thread_id, inbound.reply_context), name)
        value = self.secrets.get(secret)
        if not value:
            raise ChannelNotConfigured(f"secret {secret} is not set", platform=platform)
        return value

    def get_json(
        self, platform: str, url: str, *, headers: Mapping[str, str] | None = None, token: str
    ) -> httpx.Response:
        at = current()
        if passed(at):
            raise out_of_time(f"{platform} file lookup")
        try:
            return self.http.get(url, headers=headers, timeout=self.timeout())
        except httpx.TransportError as exc:
            if isinstance(exc, httpx.TimeoutException) and cut_by(at):
                raise out_of_time(f"{platform} file lookup") from None
            raise ChannelError(
                redact(f"{platform} file lookup: {type(exc).__name__}: {exc}", [token]),
                platform=platform,
                code="channel_unavailable",
                retryable=True,
            ) from None


def _unavailable(platform: str, response: httpx.Response, detail: str, token: str) -> ChannelError:
    status = response.status_code
    return ChannelError(
        redact(f"{platform} file lookup failed: HTTP {status}: {detail}", [token]),
        platform=platform,
        status=status,
        code="channel_unavailable",
        retryable=True,
    )


def telegram(api: FileApi, inbound: InboundMessage, attachment: Attachment) -> Located:
    if not attachment.id:
        raise MediaRefused("Telegram sent no file id")
    token = api.token(inbound, TELEGRAM_TOKEN)
    base = api.base("telegram")
    url = f"{base}/bot{token}/getFile?file_id={quote(attachment.id, safe='')}"
    response = api.get_json("telegram", url, token=token)
    answer = json_body(response)
    if response.status_code >= 500:
        raise _unavailable("telegram", response, str(answer.get("description", "")), token)
    result = answer.get("result")
    if not answer.get("ok") or not isinstance(result, dict) or not isinstance(result.get("file_path"), str):
        # "wrong file_id": not this bot's file (another workspace's chat), or gone; "file is too
        # big": over the Bot API's 20 MB.
        description = redact(str(answer.get("description", "no file path")), [token])
        raise MediaRefused(f"Telegram would not give this bot the file ({description})")
    size = result.get("file_size")
    path = quote(result["file_path"], safe="/")
    return Located(
        url=f"{base}/file/bot{token}/{path}",
        size=size if isinstance(size, int) else attachment.size,
        secrets=(token,),
    )


def _rehost(url: str, hosts: frozenset[str], override: str | None, platform: str) -> str:
    parts = urlsplit(url)
    if parts.scheme != "https" or parts.hostname not in hosts:
        # Never a token, nor a request, to a host the platform's own files don't live on.
        raise MediaRefused(f"the {platform} file is not on {platform}'s file host")
    if override is None:
        return url
    rest = parts.path + (f"?{parts.query}" if parts.query else "")
    return override.rstrip("/") + rest


def slack(api: FileApi, inbound: InboundMessage, attachment: Attachment) -> Located:
    if not attachment.url:
        raise MediaRefused("Slack sent no file URL")
    url = _rehost(attachment.url, SLACK_FILE_HOSTS, api.base_urls.get("slack_files"), "slack")
    token = api.token(inbound, SLACK_TOKEN)
    return Located(
        url=url, headers={"Authorization": f"Bearer {token}"}, size=attachment.size, secrets=(token,)
    )


def discord(api: FileApi, inbound: InboundMessage, attachment: Attachment) -> Located:
    if not attachment.url:
        raise MediaRefused("Discord sent no attachment URL")
    url = _rehost(attachment.url, DISCORD_CDN_HOSTS, api.base_urls.get("discord_cdn"), "discord")
    return Located(url=url, size=attachment.size)


def whatsapp(api: FileApi, inbound: InboundMessage, attachment: Attachment) -> Located:
    if not attachment.id or not attachment.id.isdigit():
        raise MediaRefused("WhatsApp sent no media id")
    token = api.token(inbound, WHATSAPP_TOKEN)
    headers = {"Authorization": f"Bearer {token}"}
    url = f"{api.base('whatsapp')}/{attachment.id}"
    number = inbound.reply_context.get("phone_number_id")
    if number and number.isdigit():
        # Meta answers only if the media belongs to the business number the message came to.
        url += f"?phone_number_id={number}"
    response = api.get_json("whatsapp", url, headers=headers, token=token)
    answer = json_body(response)
    if response.status_code >= 500:
        raise _unavailable("whatsapp", response, str(answer.get("error", "")), token)
    where = answer.get("url")
    # https only, as Meta answers; a stand-in (base_urls["whatsapp"]) may serve plain http.
    schemes = {"https", "http"} if "whatsapp" in api.base_urls else {"https"}
    if response.status_code != 200 or not isinstance(where, str) or urlsplit(where).scheme not in schemes:
        error = answer.get("error")
        detail = error.get("message") if isinstance(error, dict) else "no media URL"
        raise MediaRefused(f"WhatsApp would not give this number the file ({redact(str(detail), [token])})")
    size = answer.get("file_size")
    declared = int(size) if isinstance(size, int | str) and str(size).isdigit() else attachment.size
    return Located(url=where, headers=headers, size=declared, secrets=(token,))


LOCATORS: Final[Mapping[str, Callable[[FileApi, InboundMessage, Attachment], Located]]] = {
    "telegram": telegram,
    "slack": slack,
    "discord": discord,
    "whatsapp": whatsapp,
}

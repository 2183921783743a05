"""Every platform fixture in tests/fixtures through the real webhook handler, on in-process moto.

Each request is an API Gateway v2 event built from events/webhook_web.json's shape and signed as
its platform signs: Slack with the published vector's secret under a clock pinned at the
vector's timestamp, Discord with a key pair generated here (its public key stored as the secret),
WhatsApp with the published vector's app secret, Telegram with a secret token. What the webhook
queued is read back from the FIFO queue.

The expected outcome of each delivery is written once, in CASES; the same rows, rendered, are
the fixture table in docs/channels.md (test_the_docs_table_is_the_outcome_table keeps them equal).
Variants of a fixture (fields Discord always sends but the fixture lacks, a forum-topic message)
are copies of the loaded fixture, changed, and marked "variant".
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from moto import mock_aws

from functions.webhook import handler as webhook
from shared import cloud, serde
from shared.adapters.aws import clients
from shared.models import LaneItem
from shared.observability import metrics
from tests.support.lambda_context import context_for
from tests.support.moto_aws import REGION, AwsResources, moto_like_aws, provision

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
DOCS = ROOT / "docs" / "channels.md"

SLACK_VECTOR: dict[str, Any] = json.loads((FIXTURES / "slack" / "signature_vectors.json").read_text())
WHATSAPP_VECTOR: dict[str, Any] = json.loads((FIXTURES / "whatsapp" / "signature_vectors.json").read_text())
SIGNED_AT = int(SLACK_VECTOR["timestamp"])  # every request is signed at, and the clock pinned to, this
SLACK_SECRET: str = SLACK_VECTOR["signing_secret"]
WHATSAPP_SECRET: str = WHATSAPP_VECTOR["app_secret"]
TELEGRAM_TOKEN = "telegram-secret-token-for-tests_0123456789"
VERIFY_TOKEN = "whatsapp-verify-token-for-tests"
DISCORD_KEY = Ed25519PrivateKey.generate()  # no static Ed25519 vector exists (fixtures/SOURCES.md)
DISCORD_PUBLIC_HEX = DISCORD_KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
SECRETS = {
    "slack/signing-secret": SLACK_SECRET,
    "telegram/webhook-secret": TELEGRAM_TOKEN,
    "discord/public-key": DISCORD_PUBLIC_HEX,
    "whatsapp/app-secret": WHATSAPP_SECRET,
    "whatsapp/verify-token": VERIFY_TOKEN,
}


CONTEXT: Any = context_for("sigil-webhook")


# ---------------------------------------------------------------- signing, as each platform does


def slack_headers(body: bytes, *, ts: int = SIGNED_AT, secret: str = SLACK_SECRET) -> dict[str, str]:
    mac = hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return {"x-slack-request-timestamp": str(ts), "x-slack-signature": f"v0={mac}"}


def telegram_headers(body: bytes, *, token: str = TELEGRAM_TOKEN) -> dict[str, str]:
    return {"x-telegram-bot-api-secret-token": token}


def discord_headers(
    body: bytes, *, ts: int = SIGNED_AT, key: Ed25519PrivateKey = DISCORD_KEY
) -> dict[str, str]:
    signature = key.sign(str(ts).encode() + body).hex()
    return {"x-signature-ed25519": signature, "x-signature-timestamp": str(ts)}


def whatsapp_headers(body: bytes, *, secret: str = WHATSAPP_SECRET) -> dict[str, str]:
    mac = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"x-hub-signature-256": f"sha256={mac}"}


SIGNERS: dict[str, Callable[[bytes], dict[str, str]]] = {
    "slack": slack_headers,
    "telegram": telegram_headers,
    "discord": discord_headers,
    "whatsapp": whatsapp_headers,
}


def api_event(
    channel: str,
    body: bytes,
    headers: dict[str, str],
    *,
    method: str = "POST",
    query: dict[str, str] | None = None,
    content_type: str = "application/json",
) -> dict[str, Any]:
    """The sample webhook event (events/webhook_web.json) turned into a delivery to /webhooks/{channel}."""
    event: dict[str, Any] = copy.deepcopy(_SAMPLE)
    path = f"/webhooks/{channel}"
    event["routeKey"] = event["requestContext"]["routeKey"] = f"{method} {path}"
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["requestContext"]["http"]["method"] = method
    del event["pathParameters"]
    kept = {k: v for k, v in event["headers"].items() if not k.startswith("x-sigil-")}
    kept["user-agent"] = event["requestContext"]["http"]["userAgent"] = f"{channel}-test"
    if method == "GET":
        del kept["content-type"], kept["content-length"]
        del event["body"]
    else:
        kept["content-type"] = content_type
        kept["content-length"] = str(len(body))
        try:
            event["body"], event["isBase64Encoded"] = body.decode("utf-8"), False
        except UnicodeDecodeError:
            # API Gateway hands over a body that isn't text base64-encoded.
            event["body"], event["isBase64Encoded"] = base64.b64encode(body).decode(), True
    event["headers"] = {**kept, **{k.lower(): v for k, v in headers.items()}}
    if query:
        event["rawQueryString"] = urlencode(query, errors="surrogatepass")
        event["queryStringParameters"] = dict(query)
    return event


_SAMPLE: dict[str, Any] = json.loads((ROOT / "events" / "webhook_web.json").read_text())


def fixture_bytes(path: str) -> bytes:
    return (FIXTURES / path).read_bytes()


def fixture_json(path: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(fixture_bytes(path))
    return data


def compact(data: dict[str, Any]) -> bytes:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()


# ---------------------------------------------------------------- the cases

# The photo each platform's photo fixture carries: its file id (Slack's, Discord's attachment id).
PHOTO_IDS = {
    "telegram": "AgACAgIAAxkBAAIBZ2VhS3m0AAH4Xw2Q1uQeAAGkXCvhAAIq0DEbw5oISV2xw1Cq8ChxAQADAgADeQADMwQ",
    "slack": "F0123ABCDEF",
    "discord": "1173364834476638208",
    "whatsapp": "1013859600285441",
}


@dataclass(frozen=True)
class Case:
    """One delivery and what must come of it. `queued` lists the InboundMessage fields to check."""

    fixture: str
    delivery: str
    channel: str
    body: bytes
    outcome: str  # as rendered in the docs table
    headers: Callable[[bytes], dict[str, str]] | None = None  # None: the channel's own signer
    method: str = "POST"
    query: dict[str, str] | None = None
    content_type: str = "application/json"
    clock: Callable[[], float] | None = None  # None: pinned at SIGNED_AT
    queued: dict[str, Any] | None = None

    @property
    def id(self) -> str:
        return f"{self.fixture}[{self.delivery}]"

    def event(self) -> dict[str, Any]:
        sign = self.headers or SIGNERS[self.channel]
        return api_event(
            self.channel,
            self.body,
            sign(self.body),
            method=self.method,
            query=self.query,
            content_type=self.content_type,
        )


def discord_command_variant() -> bytes:
    # The fixture is discord-interactions-js's signing stub; a real command also carries the
    # fields below (Discord's interaction object), and options when the command has some.
    data = fixture_json("discord/interaction_application_command.json")
    data.update(
        application_id="787053080478613500",
        guild_id="787053080478613501",
        channel_id="787053080478613502",
        member={"user": {"id": "787053080478613503", "username": "ada", "global_name": "Ada"}},
    )
    data["data"]["options"] = [{"name": "question", "type": 3, "value": "what is a lane?"}]
    return compact(data)


def telegram_topic_variant() -> bytes:
    # The third-party forum capture's update, as a person's text in that topic (the capture itself
    # is the bot's own topic-created service message).
    update = fixture_json("telegram/updates_channel_post_and_forum_topic_thirdparty.json")[
        "forum_topic_created"
    ]
    msg = update["message"]
    msg["from"] = {"id": 6129457866, "is_bot": False, "first_name": "Ada"}
    del msg["forum_topic_created"]
    msg.update(message_id=2392, text="hello in the topic", reply_to_message={"message_id": 2391, "date": 1})
    update["update_id"] += 1
    return compact(update)


def slack_file_variant() -> bytes:
    data = fixture_json("slack/event_message_channels_no_thread.json")
    data["event"].update(
        subtype="file_share",
        files=[
            {
                "id": "F111",
                "name": "notes.txt",
                "mimetype": "text/plain",
                "size": 42,
                "url_private": "https://files.slack.com/files-pri/T111-F111/notes.txt",
            }
        ],
    )
    return compact(data)


def _thirdparty(key: str) -> bytes:
    return compact(fixture_json("telegram/updates_channel_post_and_forum_topic_thirdparty.json")[key])


CASES: list[Case] = [
    # ---- Slack
    Case(
        "slack/signature_vectors.json",
        "vector headers",
        "slack",
        SLACK_VECTOR["body"].encode(),
        "200 queued slack.G8PSS9T3V: '/webhook-collect' from U2CERLKJA",
        headers=lambda _body: {k.lower(): v for k, v in SLACK_VECTOR["headers"].items()},
        content_type="application/x-www-form-urlencoded",
        queued={
            "event_id": "398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c",
            "text": "/webhook-collect",
            "sender": {"id": "U2CERLKJA", "name": "roadrunner", "is_bot": False},
            "chat_id": "G8PSS9T3V",
            "chat_type": "group",
            "thread_id": None,
            "reply_to": None,
            "attachments": [],
        },
    ),
    Case(
        "slack/signature_vectors.json",
        "negative: body with '------' appended",
        "slack",
        SLACK_VECTOR["negative_cases"][0]["body"].encode(),
        "401 unauthorized: signature mismatch",
        headers=lambda _body: {k.lower(): v for k, v in SLACK_VECTOR["headers"].items()},
        content_type="application/x-www-form-urlencoded",
    ),
    Case(
        "slack/signature_vectors.json",
        "negative: the real clock",
        "slack",
        SLACK_VECTOR["body"].encode(),
        "401 unauthorized: timestamp more than 300 seconds from the gateway's clock",
        headers=lambda _body: {k.lower(): v for k, v in SLACK_VECTOR["headers"].items()},
        content_type="application/x-www-form-urlencoded",
        clock=time.time,
    ),
    Case(
        "slack/event_url_verification.json",
        "signed",
        "slack",
        fixture_bytes("slack/event_url_verification.json"),
        "200 handshake: 3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
    ),
    Case(
        "slack/event_url_verification.json",
        "unsigned",
        "slack",
        fixture_bytes("slack/event_url_verification.json"),
        "401 unauthorized: missing X-Slack-Request-Timestamp header",
        headers=lambda _body: {},
    ),
    Case(
        "slack/event_app_mention.json",
        "signed",
        "slack",
        fixture_bytes("slack/event_app_mention.json"),
        "200 queued slack.C111: 'Hi there!' from W222",
        queued={
            "event_id": "Ev111",
            "text": "Hi there!",
            "sender": {"id": "W222", "name": None, "is_bot": False},
            "chat_id": "C111",
            "chat_type": "channel",
            "thread_id": None,
            "reply_to": None,
            "attachments": [],
            "reply_context": {"message_ts": "1595926230.009600", "team_id": "T111"},
        },
    ),
    Case(
        "slack/event_message_channels_no_thread.json",
        "signed",
        "slack",
        fixture_bytes("slack/event_message_channels_no_thread.json"),
        "200 queued slack.C111: 'Hello World!' from W111",
        queued={
            "text": "Hello World!",
            "sender": {"id": "W111", "name": None, "is_bot": False},
            "chat_id": "C111",
            "thread_id": None,
        },
    ),
    Case(
        "slack/event_message_channels_no_thread.json",
        "variant: file_share with a file",
        "slack",
        slack_file_variant(),
        "200 queued slack.C111: 'Hello World!' from W111 +1 attachment",
        queued={
            "attachments": [
                {
                    "kind": "file",
                    "id": "F111",
                    "url": "https://files.slack.com/files-pri/T111-F111/notes.txt",
                    "name": "notes.txt",
                    "mime_type": "text/plain",
                    "size": 42,
                    "media_id": None,
                }
            ],
        },
    ),
    Case(
        "slack/event_message_channels_in_thread.json",
        "signed",
        "slack",
        fixture_bytes("slack/event_message_channels_in_thread.json"),
        "200 queued slack.C111.1726133698.626339: 'When Slack was released?' from W222 in thread",
        queued={
            "text": "When Slack was released?",
            "chat_id": "C111",
            "chat_type": "channel",
            "thread_id": "1726133698.626339",
        },
    ),
    Case(
        "slack/event_message_im_in_thread.json",
        "signed",
        "slack",
        fixture_bytes("slack/event_message_im_in_thread.json"),
        "200 queued slack.D111.1726133698.626339: 'When Slack was released?' from W222 in thread",
        queued={"chat_id": "D111", "chat_type": "dm", "thread_id": "1726133698.626339"},
    ),
    Case(
        "slack/event_message_thread_broadcast.json",
        "signed",
        "slack",
        fixture_bytes("slack/event_message_thread_broadcast.json"),
        "200 queued slack.C111.1633663824.000500: 'Hi there!' from U111 in thread",
        queued={"text": "Hi there!", "thread_id": "1633663824.000500"},
    ),
    Case(
        "slack/event_message_bot_new_style.json",
        "signed",
        "slack",
        fixture_bytes("slack/event_message_bot_new_style.json"),
        "200 ignored: bot message",
    ),
    Case(
        "slack/event_message_bot_message_subtype.json",
        "signed",
        "slack",
        fixture_bytes("slack/event_message_bot_message_subtype.json"),
        "200 ignored: bot message",
    ),
    Case(
        "slack/event_message_changed.json",
        "signed",
        "slack",
        fixture_bytes("slack/event_message_changed.json"),
        "200 ignored: edit",
    ),
    # ---- Telegram
    Case(
        "telegram/update_message_text.json",
        "secret token",
        "telegram",
        fixture_bytes("telegram/update_message_text.json"),
        "200 queued telegram.1111111: '/start' from 1111111",
        queued={
            "event_id": "tg10000",
            "text": "/start",
            "sender": {"id": "1111111", "name": "Test Firstname Test Lastname", "is_bot": False},
            "chat_id": "1111111",
            "chat_type": "dm",
            "thread_id": None,
            "reply_to": None,
            "attachments": [],
            "reply_context": {"message_id": "1365"},
        },
    ),
    Case(
        "telegram/update_message_text.json",
        "wrong secret token",
        "telegram",
        fixture_bytes("telegram/update_message_text.json"),
        "401 unauthorized: signature mismatch",
        headers=lambda body: telegram_headers(body, token="not-the-token"),
    ),
    Case(
        "telegram/update_message_text.json",
        "no secret token",
        "telegram",
        fixture_bytes("telegram/update_message_text.json"),
        "401 unauthorized: missing X-Telegram-Bot-Api-Secret-Token header",
        headers=lambda _body: {},
    ),
    Case(
        "telegram/update_message_reply.json",
        "secret token",
        "telegram",
        fixture_bytes("telegram/update_message_reply.json"),
        "200 queued telegram.1111111: '/start' from 1111111 replying to 1334",
        queued={"text": "/start", "reply_to": "1334", "thread_id": None},
    ),
    Case(
        "telegram/update_message_entities.json",
        "secret token",
        "telegram",
        fixture_bytes("telegram/update_message_entities.json"),
        "200 queued telegram.1111111: 'Bold and italics' from 1111111",
        queued={"text": "Bold and italics"},
    ),
    Case(
        "telegram/update_message_document.json",
        "secret token",
        "telegram",
        fixture_bytes("telegram/update_message_document.json"),
        "200 queued telegram.1111111: '' from 1111111 +1 attachment",
        queued={
            "text": "",
            "attachments": [
                {
                    "kind": "document",
                    "id": "AwADBAADbXXXXXXXXXXXGBdhD2l6_XX",
                    "url": None,
                    "name": "Testfile.pdf",
                    "mime_type": "application/pdf",
                    "size": 536392,
                    "media_id": None,
                }
            ],
        },
    ),
    Case(
        "telegram/update_edited_message.json",
        "secret token",
        "telegram",
        fixture_bytes("telegram/update_edited_message.json"),
        "200 ignored: edit",
    ),
    Case(
        "telegram/update_callback_query.json",
        "secret token",
        "telegram",
        fixture_bytes("telegram/update_callback_query.json"),
        "200 ignored: button press",
    ),
    Case(
        "telegram/updates_channel_post_and_forum_topic_thirdparty.json",
        "channel_post",
        "telegram",
        _thirdparty("channel_post"),
        "200 ignored: channel post",
    ),
    Case(
        "telegram/updates_channel_post_and_forum_topic_thirdparty.json",
        "forum_topic_created",
        "telegram",
        _thirdparty("forum_topic_created"),
        "200 ignored: bot message",
    ),
    Case(
        "telegram/updates_channel_post_and_forum_topic_thirdparty.json",
        "variant: a person's text in the topic",
        "telegram",
        telegram_topic_variant(),
        "200 queued telegram.-1001971186208.2391: 'hello in the topic' from 6129457866 in thread",
        queued={
            "event_id": "tg291365947",
            "chat_id": "-1001971186208",
            "chat_type": "group",
            "thread_id": "2391",
            "reply_to": None,
            "sender": {"id": "6129457866", "name": "Ada", "is_bot": False},
        },
    ),
    # ---- Discord
    Case(
        "discord/interaction_ping.json",
        "signed",
        "discord",
        fixture_bytes("discord/interaction_ping.json"),
        '200 handshake: {"type":1}',
    ),
    Case(
        "discord/interaction_ping.json",
        "signed by another key",
        "discord",
        fixture_bytes("discord/interaction_ping.json"),
        "401 unauthorized: signature mismatch",
        headers=lambda body: discord_headers(body, key=Ed25519PrivateKey.generate()),
    ),
    Case(
        "discord/interaction_application_command.json",
        "signed",
        "discord",
        fixture_bytes("discord/interaction_application_command.json"),
        "400 bad_request: interaction without application_id or token",
    ),
    Case(
        "discord/interaction_application_command.json",
        "variant: with the fields Discord always sends",
        "discord",
        discord_command_variant(),
        "200 queued discord.787053080478613502: '/test question: what is a lane?' from 787053080478613503"
        ' → {"type":5}',
        queued={
            "event_id": "787053080478613556",
            "text": "/test question: what is a lane?",
            "sender": {"id": "787053080478613503", "name": "Ada", "is_bot": False},
            "chat_id": "787053080478613502",
            "chat_type": "channel",
            "thread_id": None,
            "reply_to": None,
            "attachments": [],
            "reply_context": {
                "application_id": "787053080478613500",
                "interaction_token": "ThisIsATokenFromDiscordThatIsVeryLong",
                "interaction_id": "787053080478613556",
            },
        },
    ),
    Case(
        "discord/interaction_message_component.json",
        "signed",
        "discord",
        fixture_bytes("discord/interaction_message_component.json"),
        '200 ignored: message component → {"type":6}',
    ),
    # ---- WhatsApp
    Case(
        "whatsapp/messages_text_notification.json",
        "signed",
        "whatsapp",
        fixture_bytes("whatsapp/messages_text_notification.json"),
        "200 queued whatsapp.16505551234: 'Does it come in another color?' from 16505551234",
        queued={
            "event_id": "wamid.HBgLMTY1MDM4Nzk0MzkVAgASGBQzQTRBNjU5OUFFRTAzODEwMTQ0RgA=",
            "text": "Does it come in another color?",
            "sender": {"id": "16505551234", "name": "Sheena Nelson", "is_bot": False},
            "chat_id": "16505551234",
            "chat_type": "dm",
            "thread_id": None,
            "reply_to": None,
            "attachments": [],
            "reply_context": {"phone_number_id": "106540352242922"},
        },
    ),
    # A photo with its caption, per platform (docs/media.md): queued with what the turn needs to
    # fetch it (the file id or URL, the declared size and type); the webhook downloads nothing.
    Case(
        "telegram/update_message_photo_caption.json",
        "secret token",
        "telegram",
        fixture_bytes("telegram/update_message_photo_caption.json"),
        "200 queued telegram.1111111: 'What is this plant?' from 1111111 +1 attachment",
        queued={
            "text": "What is this plant?",
            "attachments": [
                {
                    "kind": "photo",
                    "id": PHOTO_IDS["telegram"],
                    "url": None,
                    "name": None,
                    "mime_type": None,
                    "size": 48213,
                    "media_id": None,
                }
            ],
        },
    ),
    Case(
        "slack/event_message_file_share.json",
        "signed",
        "slack",
        fixture_bytes("slack/event_message_file_share.json"),
        "200 queued slack.D111: 'What is this plant?' from W222 +1 attachment",
        queued={
            "text": "What is this plant?",
            "attachments": [
                {
                    "kind": "file",
                    "id": PHOTO_IDS["slack"],
                    "url": "https://files.slack.com/files-pri/T111-F0123ABCDEF/download/plant.png",
                    "name": "plant.png",
                    "mime_type": "image/png",
                    "size": 48213,
                    "media_id": None,
                }
            ],
        },
    ),
    Case(
        "discord/interaction_command_attachment.json",
        "signed",
        "discord",
        fixture_bytes("discord/interaction_command_attachment.json"),
        "200 queued discord.787053080478613502: '/ask question: What is this plant? file: plant.png' "
        'from 787053080478613503 +1 attachment → {"type":5}',
        queued={
            "text": "/ask question: What is this plant? file: plant.png",
            "attachments": [
                {
                    "kind": "file",
                    "id": PHOTO_IDS["discord"],
                    "url": fixture_json("discord/interaction_command_attachment.json")["data"]["resolved"][
                        "attachments"
                    ][PHOTO_IDS["discord"]]["url"],
                    "name": "plant.png",
                    "mime_type": "image/png",
                    "size": 48213,
                    "media_id": None,
                }
            ],
        },
    ),
    Case(
        "whatsapp/messages_image_notification.json",
        "signed",
        "whatsapp",
        fixture_bytes("whatsapp/messages_image_notification.json"),
        "200 queued whatsapp.16505551234: 'The best succulent ever?' from 16505551234 +1 attachment",
        queued={
            "text": "The best succulent ever?",
            "attachments": [
                {
                    "kind": "image",
                    "id": PHOTO_IDS["whatsapp"],
                    "url": None,
                    "name": None,
                    "mime_type": "image/jpeg",
                    "size": None,
                    "media_id": None,
                }
            ],
        },
    ),
    Case(
        "whatsapp/signature_vectors.json",
        "vector body and header",
        "whatsapp",
        WHATSAPP_VECTOR["body"].encode(),
        "400 bad_request: body is not valid JSON",
        headers=lambda _body: {k.lower(): v for k, v in WHATSAPP_VECTOR["expected_header"].items()},
        content_type="text/plain",
    ),
    Case(
        "whatsapp/signature_vectors.json",
        "vector header, body changed",
        "whatsapp",
        WHATSAPP_VECTOR["body"].encode() + b"!",
        "401 unauthorized: signature mismatch",
        headers=lambda _body: {k.lower(): v for k, v in WHATSAPP_VECTOR["expected_header"].items()},
        content_type="text/plain",
    ),
    Case(
        "whatsapp/webhook_verification_get.json",
        "GET, the verify token",
        "whatsapp",
        b"",
        "200 handshake: 1158201444",
        headers=lambda _body: {},
        method="GET",
        query={"hub.mode": "subscribe", "hub.verify_token": VERIFY_TOKEN, "hub.challenge": "1158201444"},
    ),
    Case(
        "whatsapp/webhook_verification_get.json",
        "GET, another token",
        "whatsapp",
        b"",
        "401 unauthorized: verify token mismatch",
        headers=lambda _body: {},
        method="GET",
        query={"hub.mode": "subscribe", "hub.verify_token": "guess", "hub.challenge": "1158201444"},
    ),
]


# ---------------------------------------------------------------- running a delivery


@pytest.fixture
def aws() -> Iterator[AwsResources]:
    """moto with the channel secrets stored, and the webhook's clock pinned at SIGNED_AT."""
    with mock_aws():
        clients.reset()
        resources = provision("channels")
        store = clients.secretsmanager(REGION)
        for name, value in SECRETS.items():
            store.create_secret(Name=f"sigil/{name}", SecretString=value)
        cloud.reset(config=resources.settings(secrets_prefix="sigil/"), clock=lambda: float(SIGNED_AT))
        yield resources
        cloud.reset()


@pytest.fixture
def sigil_logs() -> Iterator[list[logging.LogRecord]]:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep(level=logging.DEBUG)
    logging.getLogger("sigil").addHandler(keep)
    yield records
    logging.getLogger("sigil").removeHandler(keep)


@dataclass
class Delivered:
    status: int
    body: str
    content_type: str | None
    queued: list[tuple[LaneItem, dict[str, str]]] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)


def deliver(event: dict[str, Any], aws: AwsResources, logs: list[logging.LogRecord]) -> Delivered:
    before = len(logs)
    response = webhook.lambda_handler(event, CONTEXT)
    raw = response.get("body") or ""
    body = base64.b64decode(raw).decode() if response.get("isBase64Encoded") else raw
    headers = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
    ignored = [getattr(r, "reason", "") for r in logs[before:] if r.getMessage() == "event ignored"]
    return Delivered(response["statusCode"], body, headers.get("content-type"), queue(aws), ignored)


def queue(aws: AwsResources) -> list[tuple[LaneItem, dict[str, str]]]:
    """Everything on the lanes, left in place (read, then made visible again)."""
    sqs = clients.sqs(REGION)
    messages = sqs.receive_message(
        QueueUrl=aws.queue_url,
        MaxNumberOfMessages=10,
        VisibilityTimeout=0,
        MessageSystemAttributeNames=["MessageGroupId", "MessageDeduplicationId"],
    ).get("Messages", [])
    return [
        (serde.loads(LaneItem, m["Body"]), {str(k): v for k, v in m.get("Attributes", {}).items()})
        for m in messages
    ]


def render(result: Delivered) -> str:
    """One outcome as a line of the docs table."""
    if result.status != 200:
        error = json.loads(result.body)
        return f"{result.status} {error['error']}: {error['message']}"
    if result.queued:
        parts = []
        for item, _attributes in result.queued:
            m = item.inbound
            line = f"{result.status} queued {m.session_id}: {m.text!r} from {m.sender.id}"
            if m.thread_id:
                line += " in thread"
            if m.reply_to:
                line += f" replying to {m.reply_to}"
            if m.attachments:
                line += f" +{len(m.attachments)} attachment" + ("s" if len(m.attachments) > 1 else "")
            parts.append(line)
        line = "; ".join(parts)
        return line + (f" → {result.body}" if result.body else "")
    if result.ignored:
        return f"200 ignored: {result.ignored[0]}" + (f" → {result.body}" if result.body else "")
    return f"200 handshake: {result.body}"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_fixture_through_the_webhook(
    case: Case, aws: AwsResources, sigil_logs: list[logging.LogRecord]
) -> None:
    # Given the fixture delivered as its platform sends it, to the real handler on moto
    if case.clock is not None:
        cloud.reset(config=aws.settings(secrets_prefix="sigil/"), clock=case.clock)
    # When the webhook handles it
    result = deliver(case.event(), aws, sigil_logs)
    # Then the outcome is the one in the table
    assert render(result) == case.outcome
    if result.status != 200:
        assert result.queued == []
    if case.queued is not None:
        # And the queued message has the normalised fields, on its session's lane
        [(item, attributes)] = result.queued
        dumped = serde.to_jsonable(item.inbound)
        assert {k: dumped[k] for k in case.queued} == case.queued
        assert item.inbound.channel == case.channel
        assert item.inbound.workspace_id == "default"
        assert attributes["MessageGroupId"] == item.group_id == f"default.{item.inbound.session_id}"
        assert attributes["MessageDeduplicationId"] == item.dedup_id
    # And no log record holds the delivered body's text
    if case.queued and case.queued.get("text"):
        assert not [r for r in sigil_logs if case.queued["text"] in repr(r.__dict__)]


def test_the_docs_table_is_the_outcome_table() -> None:
    # The table in docs/channels.md is this module's CASES, rendered (each row is asserted above).
    table = outcome_table()
    print("\n" + table)
    text = DOCS.read_text()
    begin, end = "<!-- fixture-outcomes:begin -->\n", "<!-- fixture-outcomes:end -->"
    assert begin in text and end in text, "docs/channels.md lost its fixture-outcomes markers"
    current = text.split(begin, 1)[1].split(end, 1)[0]
    assert current.strip() == table.strip(), "docs/channels.md is stale; paste the table printed above"


def outcome_table() -> str:
    rows = ["| fixture | delivery | outcome |", "|---|---|---|"]
    for case in CASES:
        outcome = case.outcome.replace("|", "\\|")
        rows.append(f"| {case.fixture} | {case.delivery} | `{outcome}` |")
    return "\n".join(rows) + "\n"


# ---------------------------------------------------------------- retries and concurrency


def test_the_slack_vector_signature_is_the_one_computed_here() -> None:
    # The signer used for every Slack delivery reproduces Slack's published example.
    headers = slack_headers(SLACK_VECTOR["body"].encode())
    assert headers["x-slack-signature"] == SLACK_VECTOR["expected_signature"]
    assert (
        whatsapp_headers(WHATSAPP_VECTOR["body"].encode())["x-hub-signature-256"]
        == (WHATSAPP_VECTOR["expected_header"]["X-Hub-Signature-256"])
    )


@pytest.mark.parametrize(
    ("channel", "fixture", "retry_headers"),
    [
        # fixtures/slack/retry_headers_semantics.json: the headers of the second attempt
        (
            "slack",
            "slack/event_app_mention.json",
            {"x-slack-retry-num": "2", "x-slack-retry-reason": "http_timeout"},
        ),
        # Telegram re-delivers the same update (same update_id) until it gets a 2xx
        ("telegram", "telegram/update_message_text.json", {}),
        ("whatsapp", "whatsapp/messages_text_notification.json", {}),
    ],
)
def test_a_retry_after_the_first_was_consumed_is_acknowledged_and_not_queued_again(
    aws: AwsResources,
    sigil_logs: list[logging.LogRecord],
    channel: str,
    fixture: str,
    retry_headers: dict[str, str],
) -> None:
    body = fixture_bytes(fixture)
    with moto_like_aws():
        # Given a delivery that was queued and already taken off the lane by the agent
        first = deliver(api_event(channel, body, SIGNERS[channel](body)), aws, sigil_logs)
        assert first.status == 200 and len(first.queued) == 1
        _consume(aws)
        # When the platform retries it
        headers = {**SIGNERS[channel](body), **retry_headers}
        retry = deliver(api_event(channel, body, headers), aws, sigil_logs)
        # Then the retry is acknowledged like the first, and the lane stays empty
        assert retry.status == 200
        assert retry.queued == []


def _consume(aws: AwsResources) -> None:
    sqs = clients.sqs(REGION)
    for message in sqs.receive_message(QueueUrl=aws.queue_url, MaxNumberOfMessages=10).get("Messages", []):
        sqs.delete_message(QueueUrl=aws.queue_url, ReceiptHandle=message["ReceiptHandle"])


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_three_concurrent_deliveries_queue_one_message(
    case: Case, aws: AwsResources, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    # Lambda runs one request per container at a time; these threads share one process, whose
    # powertools Metrics object would flush its one metric set from three threads at once. While
    # disabled, it keeps what was added: cleared at the end, so no later test flushes it.
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    request.addfinalizer(metrics.clear_metrics)
    if case.clock is not None:
        cloud.reset(config=aws.settings(secrets_prefix="sigil/"), clock=case.clock)
    event = case.event()
    with moto_like_aws():
        # Given a warm webhook (clients built once, as each container's first request does)
        webhook.lambda_handler(api_event(case.channel, b"{}", {}), CONTEXT)
        # When the same delivery arrives three times at once
        statuses: list[int] = []
        barrier = threading.Barrier(3)

        def send() -> None:
            barrier.wait()
            statuses.append(webhook.lambda_handler(copy.deepcopy(event), CONTEXT)["statusCode"])

        threads = [threading.Thread(target=send) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        # Then each is answered alike, and one message is on the lane if the fixture is queued
        assert len(statuses) == 3 and len(set(statuses)) == 1
        expected = 1 if case.queued is not None else 0
        assert len(queue(aws)) == expected


# ---------------------------------------------------------------- imports


def test_the_platform_routes_import_no_llm_sdk_and_their_verifiers_lazily() -> None:
    # In a fresh interpreter: import the handler, then run each platform's verify and parse (as a
    # first request does) against an in-memory secret store.
    script = """
import json, sys
import functions.webhook.handler
at_import = sorted(m for m in sys.modules if m.split(".")[0] in {"slack_sdk", "cryptography"})
from shared.channels import channel_for
from shared.channels.inbound import WebhookRequest
from shared.errors import SigilError
class Secrets:
    def get(self, name):
        return {"discord/public-key": "00" * 32}.get(name, "secret")
for name in ("telegram", "slack", "discord", "whatsapp"):
    channel = channel_for(name, "default")
    request = WebhookRequest("POST", "/", {
        "x-slack-request-timestamp": "100", "x-slack-signature": "v0=00",
        "x-signature-timestamp": "100", "x-signature-ed25519": "00" * 64,
        "x-telegram-bot-api-secret-token": "secret", "x-hub-signature-256": "sha256=00"}, b"{}")
    for step in (lambda: channel.verify(request, Secrets(), now=100.0, window_s=300),
                 lambda: channel.parse(request)):
        try:
            step()
        except SigilError:
            pass
print(json.dumps({"at_import": at_import, "modules": sorted(sys.modules)}))
"""
    env = {"PATH": "/usr/bin:/bin", "AWS_REGION": REGION}
    run = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**env, "PYTHONPATH": os.fspath(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(run.stdout.strip().splitlines()[-1])
    roots = {name.split(".")[0] for name in report["modules"]}
    # The verifiers are loaded by the first request of their platform, not by the handler's import
    assert report["at_import"] == []
    assert {"slack_sdk", "cryptography"} <= roots
    assert not roots & {"openai", "anthropic", "opensearchpy"}


# ---------------------------------------------------------------- the local gateway


def test_the_local_gateway_serves_the_same_routes(tmp_path: Path) -> None:
    # Given `sigil dev`'s gateway (not started: nothing consumes its lanes) with the channel secrets
    from starlette.testclient import TestClient

    from shared.adapters.embedded import SqliteLanes
    from shared.config import Settings
    from shared.local.gateway import LocalGateway

    gateway = LocalGateway(Settings(data_dir=tmp_path / "sigil"))
    try:
        store: Any = gateway.backend.secrets
        for name, value in SECRETS.items():
            store.set(name, value)
        lanes = gateway.backend.lanes
        assert isinstance(lanes, SqliteLanes)
        client = TestClient(gateway.app())
        text = fixture_bytes("telegram/update_message_text.json")
        ping = fixture_bytes("discord/interaction_ping.json")
        now = int(time.time())  # the local gateway runs on the real clock
        # When each platform delivers to it, then it answers as the Lambda webhook does
        answer = client.post("/webhooks/telegram", content=text, headers=telegram_headers(text))
        assert (answer.status_code, answer.text) == (200, "")
        assert lanes.pending_count() == 1
        again = client.post("/webhooks/telegram", content=text, headers=telegram_headers(text))
        assert again.status_code == 200 and lanes.pending_count() == 1  # a re-delivery is one item
        pong = client.post("/webhooks/discord", content=ping, headers=discord_headers(ping, ts=now))
        assert (pong.status_code, pong.json()) == (200, {"type": 1})
        query = {"hub.mode": "subscribe", "hub.verify_token": VERIFY_TOKEN, "hub.challenge": "42"}
        challenge = client.get("/webhooks/whatsapp", params=query)
        assert (challenge.status_code, challenge.text) == (200, "42")
        refused = client.post("/webhooks/slack", content=b"{}")
        assert refused.status_code == 401
        assert refused.json()["error"] == "unauthorized"
    finally:
        gateway.backend.close()

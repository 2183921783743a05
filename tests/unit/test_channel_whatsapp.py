"""WhatsApp: X-Hub-Signature-256 (the published vector), the GET handshake, what starts a turn."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from shared.channels import whatsapp
from shared.channels.inbound import Accepted, Handshake, Ignored, WebhookRequest
from shared.errors import BadRequest, Unauthorized
from shared.models import Attachment

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "whatsapp"
VECTOR: dict[str, Any] = json.loads((FIXTURES / "signature_vectors.json").read_text())
NOTIFICATION: dict[str, Any] = json.loads((FIXTURES / "messages_text_notification.json").read_text())
TOKEN = "verify-token-0123"
CHANNEL = whatsapp.WhatsAppChannel("default")


class Secrets:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, name: str) -> str | None:
        return self.values.get(name)


SECRETS = Secrets({whatsapp.APP_SECRET: VECTOR["app_secret"], whatsapp.VERIFY_TOKEN: TOKEN})


def post(body: bytes, headers: dict[str, str] | None = None) -> WebhookRequest:
    return WebhookRequest(method="POST", target="/webhooks/whatsapp", headers=headers or {}, body=body)


def get(query: dict[str, str]) -> WebhookRequest:
    return WebhookRequest(method="GET", target="/webhooks/whatsapp", headers={}, body=b"", query=query)


def with_messages(*messages: dict[str, Any], **value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(NOTIFICATION)
    change = doc["entry"][0]["changes"][0]["value"]
    change["messages"] = list(messages)
    change.update(value)
    return doc


def parse(document: dict[str, Any]) -> Any:
    return CHANNEL.parse(post(json.dumps(document).encode()))


def test_the_published_vector_verifies() -> None:
    header = {k.lower(): v for k, v in VECTOR["expected_header"].items()}
    CHANNEL.verify(post(VECTOR["body"].encode(), header), SECRETS, now=0, window_s=300)


@pytest.mark.parametrize(
    ("body", "headers", "reason"),
    [
        (
            b"test!",
            {"x-hub-signature-256": VECTOR["expected_header"]["X-Hub-Signature-256"]},
            "signature mismatch",
        ),
        (b"test", {"x-hub-signature-256": "sha256=" + VECTOR["expected_hex"].upper()}, "signature mismatch"),
        (b"test", {"x-hub-signature-256": VECTOR["expected_hex"]}, "signature mismatch"),
        (b"test", {}, "missing X-Hub-Signature-256"),
    ],
)
def test_a_wrong_or_missing_signature_is_refused(body: bytes, headers: dict[str, str], reason: str) -> None:
    with pytest.raises(Unauthorized, match=reason):
        CHANNEL.verify(post(body, headers), SECRETS, now=0, window_s=300)


def test_the_handshake_echoes_the_challenge_only_for_the_verify_token() -> None:
    query = {"hub.mode": "subscribe", "hub.verify_token": TOKEN, "hub.challenge": "1158201444"}
    assert CHANNEL.handshake(get(query), SECRETS) == Handshake(200, "1158201444", "text/plain")
    assert CHANNEL.handshake(post(b"{}"), SECRETS) is None  # a POST goes on to verify
    for bad, error, reason in [
        ({**query, "hub.verify_token": TOKEN + "x"}, Unauthorized, "verify token mismatch"),
        ({**query, "hub.mode": "unsubscribe"}, BadRequest, "must be 'subscribe'"),
        ({"hub.mode": "subscribe", "hub.verify_token": TOKEN}, BadRequest, "are required"),
        ({**query, "hub.challenge": "9" * 2000}, BadRequest, "longer than"),
    ]:
        with pytest.raises(error, match=reason):
            CHANNEL.handshake(get(bad), SECRETS)
    with pytest.raises(Unauthorized):
        CHANNEL.handshake(get(query), Secrets({}))


def test_one_notification_with_two_messages_is_two_turns() -> None:
    text = NOTIFICATION["entry"][0]["changes"][0]["value"]["messages"][0]
    second = {
        **text,
        "id": "wamid.second/+=",
        "text": {"body": "And in blue?"},
        "context": {"id": "wamid.prev"},
    }
    outcome = parse(with_messages(text, second))
    assert isinstance(outcome, Accepted)
    first, other = outcome.messages
    assert (first.text, other.text, other.reply_to) == (
        "Does it come in another color?",
        "And in blue?",
        "wamid.prev",
    )
    assert other.event_id.startswith("wamid.second_") and other.event_id != first.event_id  # "/" mapped


def test_media_is_referenced_by_id_with_its_caption_as_text() -> None:
    image = {
        "from": "16505551234",
        "id": "wamid.img",
        "timestamp": "1749416383",
        "type": "image",
        "image": {"id": "media-1", "mime_type": "image/jpeg", "caption": "this one", "sha256": "x"},
    }
    [msg] = parse(with_messages(image)).messages
    assert msg.text == "this one"
    assert msg.attachments == [Attachment(kind="image", id="media-1", mime_type="image/jpeg")]


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        (with_messages(statuses=[{"id": "wamid.out", "status": "read"}]), whatsapp.STATUS),
        (with_messages({"type": "reaction", "reaction": {"emoji": "👍"}}), whatsapp.REACTION),
        (with_messages({"type": "interactive", "interactive": {}}), whatsapp.BUTTON_REPLY),
        (with_messages({"type": "unsupported", "errors": [{"code": 131051}]}), whatsapp.UNSUPPORTED),
        (with_messages({"type": ["odd"]}), whatsapp.UNSUPPORTED),
        ({**NOTIFICATION, "object": "page"}, whatsapp.NOT_WHATSAPP),
        (
            {"object": "whatsapp_business_account", "entry": [{"changes": [{"field": "account_update"}]}]},
            whatsapp.ACCOUNT_CHANGE,
        ),
        ({"object": "whatsapp_business_account", "entry": []}, whatsapp.NOTHING),
    ],
)
def test_notifications_that_start_no_turn_are_ignored_with_their_reason(
    document: dict[str, Any], reason: str
) -> None:
    assert parse(document) == Ignored(reason)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ({"type": "text", "id": "wamid.1", "from": "1"}, "text message without text"),
        ({"type": "image", "id": "wamid.1", "from": "1"}, "media message without its media object"),
        ({"type": "text", "text": {"body": "hi"}}, "invalid WhatsApp message"),
    ],
)
def test_an_unreadable_message_is_a_bad_request(message: dict[str, Any], reason: str) -> None:
    with pytest.raises(BadRequest, match=reason):
        parse(with_messages(message))

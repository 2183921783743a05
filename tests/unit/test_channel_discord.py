"""Discord: Ed25519 over timestamp + body (keys generated here), PING, deferred commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from shared.channels import discord
from shared.channels.inbound import Accepted, Handshake, Ignored, WebhookRequest
from shared.errors import BadRequest, Unauthorized
from shared.models import Attachment

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "discord"
NOW = 1_700_000_000
KEY = Ed25519PrivateKey.generate()
PUBLIC_HEX = KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
CHANNEL = discord.DiscordChannel("default")


class Secrets:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, name: str) -> str | None:
        return self.values.get(name)


SECRETS = Secrets({discord.SECRET: PUBLIC_HEX})


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def signed(body: bytes, *, ts: int = NOW, key: Ed25519PrivateKey = KEY) -> WebhookRequest:
    headers = {
        discord.SIGNATURE_HEADER: key.sign(str(ts).encode() + body).hex(),
        discord.TIMESTAMP_HEADER: str(ts),
    }
    return WebhookRequest(method="POST", target="/webhooks/discord", headers=headers, body=body)


def verify(request: WebhookRequest, secrets: Secrets = SECRETS) -> None:
    CHANNEL.verify(request, secrets, now=NOW, window_s=300)


def command(**changes: Any) -> dict[str, Any]:
    doc = fixture("interaction_application_command.json")
    doc.update(application_id="900", channel_id="901", user={"id": "902", "username": "ada"})
    doc.update(changes)
    return doc


def parse(document: dict[str, Any]) -> Any:
    return CHANNEL.parse(signed(json.dumps(document).encode()))


def test_a_body_signed_with_the_application_key_verifies() -> None:
    verify(signed((FIXTURES / "interaction_ping.json").read_bytes()))


def test_bad_signatures_are_refused_as_discord_s_endpoint_check_expects() -> None:
    body = (FIXTURES / "interaction_ping.json").read_bytes()
    good = signed(body)
    cases = [
        (signed(body, key=Ed25519PrivateKey.generate()), "signature mismatch"),
        (WebhookRequest("POST", "/", good.headers, body + b" "), "signature mismatch"),
        (signed(body, ts=NOW - 301), "seconds from"),
        (
            WebhookRequest("POST", "/", {**good.headers, discord.SIGNATURE_HEADER: "zz"}, body),
            "signature mismatch",
        ),
        (
            WebhookRequest("POST", "/", {**good.headers, discord.SIGNATURE_HEADER: "00"}, body),
            "signature mismatch",
        ),
        (
            WebhookRequest("POST", "/", {discord.TIMESTAMP_HEADER: str(NOW)}, body),
            "missing X-Signature-Ed25519",
        ),
        (WebhookRequest("POST", "/", {}, body), "missing X-Signature-Timestamp"),
    ]
    for request, reason in cases:
        with pytest.raises(Unauthorized, match=reason):
            verify(request)


@pytest.mark.parametrize("stored", [None, "not-hex-placeholder-from-the-stack", "00" * 31])
def test_a_key_that_is_not_a_32_byte_hex_key_fails_like_a_mismatch(stored: str | None) -> None:
    secrets = Secrets({} if stored is None else {discord.SECRET: stored})
    with pytest.raises(Unauthorized, match=r"^signature mismatch$"):
        verify(signed(b"{}"), secrets)


def test_a_ping_is_answered_with_a_pong() -> None:
    assert parse(fixture("interaction_ping.json")) == Handshake(200, '{"type":1}', "application/json")


def test_a_command_is_deferred_and_carries_what_the_follow_up_needs() -> None:
    outcome = parse(command())
    assert isinstance(outcome, Accepted)
    assert (outcome.body, outcome.content_type) == ('{"type":5}', "application/json")
    [msg] = outcome.messages
    assert (msg.text, msg.chat_id, msg.chat_type, msg.sender.id) == ("/test", "901", "dm", "902")
    assert msg.reply_context == {
        "application_id": "900",
        "interaction_token": "ThisIsATokenFromDiscordThatIsVeryLong",
        "interaction_id": "787053080478613556",
    }


def test_options_subcommands_and_attachments_read_as_typed() -> None:
    data = {
        "id": "1",
        "name": "sigil",
        "options": [
            {
                "name": "ask",
                "type": 1,
                "options": [
                    {"name": "question", "type": 3, "value": "why?"},
                    {"name": "depth", "type": 4, "value": 2},
                    {"name": "file", "type": 11, "value": "att1"},
                ],
            }
        ],
        "resolved": {
            "attachments": {
                "att1": {
                    "id": "att1",
                    "filename": "a.png",
                    "content_type": "image/png",
                    "size": 5,
                    "url": "https://cdn.discordapp.com/a.png",
                }
            }
        },
    }
    member = {"user": {"id": "902", "username": "ada", "global_name": "Ada"}, "nick": "A"}
    [msg] = parse(command(data=data, guild_id="7", member=member, user=None)).messages
    assert msg.text == "/sigil ask question: why? depth: 2 file: a.png"
    assert (msg.chat_type, msg.sender.name) == ("channel", "Ada")
    assert msg.attachments == [
        Attachment(
            kind="file",
            id="att1",
            url="https://cdn.discordapp.com/a.png",
            name="a.png",
            mime_type="image/png",
            size=5,
        )
    ]


def test_a_message_command_replies_to_its_target() -> None:
    [msg] = parse(command(data={"id": "1", "name": "Explain", "type": 3, "target_id": "555"})).messages
    assert (msg.text, msg.reply_to) == ("/Explain", "555")


@pytest.mark.parametrize(
    ("document", "reason", "body"),
    [
        (fixture("interaction_message_component.json"), discord.COMPONENT, '{"type":6}'),
        ({**command(), "type": 4}, discord.AUTOCOMPLETE_REQUEST, '{"type":8,"data":{"choices":[]}}'),
        ({**command(), "type": 5}, discord.MODAL, '{"type":6}'),
        (command(user={"id": "9", "bot": True}), discord.BOT, '{"type":6}'),
    ],
)
def test_other_interactions_are_acknowledged_without_a_turn(
    document: dict[str, Any], reason: str, body: str
) -> None:
    assert parse(document) == Ignored(reason, body, "application/json")


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        (fixture("interaction_application_command.json"), "without application_id or token"),
        (command(user=None), "without a user"),
        (command(channel_id=None), "without a channel"),
        (command(data=None), "without data"),
        (command(data={"id": "1"}), "invalid Discord application command: name: Field required"),
        ({**command(), "type": 99}, "unsupported interaction type"),
        ({"type": 2}, "id: Field required"),
    ],
)
def test_an_unusable_interaction_is_a_bad_request(document: dict[str, Any], reason: str) -> None:
    with pytest.raises(BadRequest, match=reason):
        parse(document)

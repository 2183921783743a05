"""Slack: the signature (the published vector, slack_sdk's verifier) and which events start a turn."""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from shared.channels import slack
from shared.channels.inbound import Accepted, Handshake, Ignored, WebhookRequest
from shared.errors import BadRequest, Unauthorized

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slack"
VECTOR: dict[str, Any] = json.loads((FIXTURES / "signature_vectors.json").read_text())
NOW = float(VECTOR["sdk_clock_now_for_valid"])


class Secrets:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, name: str) -> str | None:
        return self.values.get(name)


SECRETS = Secrets({slack.SECRET: VECTOR["signing_secret"]})
CHANNEL = slack.SlackChannel("default")


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def request(body: bytes, headers: dict[str, str] | None = None) -> WebhookRequest:
    return WebhookRequest(method="POST", target="/webhooks/slack", headers=headers or {}, body=body)


def signed(body: bytes, *, ts: int | None = None) -> WebhookRequest:
    stamp = int(NOW) if ts is None else ts
    mac = hmac.new(VECTOR["signing_secret"].encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256)
    return request(
        body, {slack.TIMESTAMP_HEADER: str(stamp), slack.SIGNATURE_HEADER: f"v0={mac.hexdigest()}"}
    )


def vector_headers() -> dict[str, str]:
    return {k.lower(): v for k, v in VECTOR["headers"].items()}


def parse(document: dict[str, Any]) -> Any:
    return CHANNEL.parse(request(json.dumps(document).encode()))


# ---------------------------------------------------------------- verification


def test_the_published_vector_verifies_under_a_clock_pinned_at_its_timestamp() -> None:
    CHANNEL.verify(request(VECTOR["body"].encode(), vector_headers()), SECRETS, now=NOW, window_s=300)


@pytest.mark.parametrize(
    ("body", "headers", "now", "reason"),
    [
        (VECTOR["negative_cases"][0]["body"], vector_headers(), NOW, "signature mismatch"),
        (VECTOR["body"], vector_headers(), NOW + 301, "seconds from"),  # the real clock, years later
        (VECTOR["body"], vector_headers(), NOW - 301, "seconds from"),
        (VECTOR["body"], {}, NOW, "missing X-Slack-Request-Timestamp"),
        (VECTOR["body"], {**vector_headers(), "x-slack-signature": ""}, NOW, "missing X-Slack-Signature"),
        (VECTOR["body"], {**vector_headers(), "x-slack-request-timestamp": "1.5e9"}, NOW, "not a unix"),
        (VECTOR["body"], {**vector_headers(), "x-slack-signature": "v0=ü"}, NOW, "signature mismatch"),
    ],
)
def test_a_wrong_stale_or_missing_signature_is_refused(
    body: str, headers: dict[str, str], now: float, reason: str
) -> None:
    with pytest.raises(Unauthorized, match=reason) as err:
        CHANNEL.verify(request(body.encode(), headers), SECRETS, now=now, window_s=300)
    assert "webhook-collect" not in err.value.message


def test_the_window_is_slack_s_five_minutes_even_if_the_gateway_allows_more() -> None:
    with pytest.raises(Unauthorized, match="seconds from"):
        CHANNEL.verify(
            request(VECTOR["body"].encode(), vector_headers()),
            SECRETS,
            now=NOW + 600,
            window_s=3600,
        )


def test_an_unconfigured_secret_and_a_body_that_is_not_utf8() -> None:
    with pytest.raises(Unauthorized, match=r"^signature mismatch$"):
        CHANNEL.verify(request(VECTOR["body"].encode(), vector_headers()), Secrets({}), now=NOW, window_s=300)
    with pytest.raises(BadRequest, match="UTF-8"):
        CHANNEL.verify(signed(b"\xff\xfe"), SECRETS, now=NOW, window_s=300)


# ---------------------------------------------------------------- which events start a turn


def _event(**changes: Any) -> dict[str, Any]:
    doc = fixture("event_message_channels_in_thread.json")
    doc["event"].update(changes)
    return doc


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        (fixture("event_message_bot_new_style.json"), slack.BOT),
        (fixture("event_message_bot_message_subtype.json"), slack.BOT),
        (fixture("event_message_changed.json"), slack.EDIT),
        (_event(subtype="message_deleted"), slack.DELETION),
        (_event(subtype="message_replied"), slack.THREAD_UPDATE),
        (_event(subtype="channel_join"), slack.SYSTEM),
        (_event(subtype={"not": "a string"}), slack.SYSTEM),
        (_event(hidden=True), slack.SYSTEM),
        (_event(user="W111"), slack.OWN),  # authorizations[0] is the bot user W111
        (_event(text="<@W111> when?"), slack.MENTION_TWICE),
        (_event(text="   "), slack.EMPTY),
        ({**_event(), "event": {"type": "reaction_added", "user": {"id": "W1"}}}, slack.OTHER_EVENT),
        ({**_event(), "event": {"type": "channel_created", "channel": {"id": "C9"}}}, slack.OTHER_EVENT),
        ({"type": "app_rate_limited", "minute_rate_limited": 1518467820}, slack.RATE_LIMITED),
        ({"type": "block_suggestion"}, slack.OTHER_ENVELOPE),
    ],
)
def test_events_that_start_no_turn_are_ignored_with_their_reason(
    document: dict[str, Any], reason: str
) -> None:
    assert parse(document) == Ignored(reason)


def test_a_mention_in_a_dm_is_a_message_there_is_no_app_mention_twin() -> None:
    doc = fixture("event_message_im_in_thread.json")
    doc["event"]["text"] = "<@W111> when?"
    outcome = parse(doc)
    assert isinstance(outcome, Accepted)
    assert outcome.messages[0].text == "<@W111> when?"


def test_an_app_mention_loses_only_the_leading_mention_of_the_app() -> None:
    doc = fixture("event_app_mention.json")
    assert parse(doc).messages[0].text == "Hi there!"
    other = copy.deepcopy(doc)
    other["event"]["text"] = "<@W999> ask <@W111>"
    assert parse(other).messages[0].text == "<@W999> ask <@W111>"


def test_the_thread_root_itself_is_not_in_a_thread() -> None:
    doc = _event(thread_ts="1726133700.887259")  # == ts: the parent message
    assert parse(doc).messages[0].thread_id is None


def test_url_verification_answers_the_challenge_and_needs_one() -> None:
    assert parse(fixture("event_url_verification.json")) == Handshake(
        200, "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "text/plain"
    )
    with pytest.raises(BadRequest, match="without a challenge"):
        parse({"type": "url_verification"})


def test_an_event_callback_without_an_event_id_is_a_bad_request() -> None:
    doc = fixture("event_app_mention.json")
    del doc["event_id"]
    with pytest.raises(BadRequest, match="event_id"):
        parse(doc)


def test_a_slash_command_is_a_message_with_its_response_url() -> None:
    outcome = CHANNEL.parse(request(VECTOR["body"].encode()))
    assert isinstance(outcome, Accepted)
    [msg] = outcome.messages
    assert (msg.text, msg.chat_type, msg.event_id) == (
        "/webhook-collect",
        "group",
        "398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c",
    )
    assert msg.reply_context["response_url"].startswith("https://hooks.slack.com/commands/")
    form = dict(item.split("=", 1) for item in VECTOR["body"].split("&"))
    form.update(text="what+now", channel_name="directmessage", channel_id="D1")
    dm = CHANNEL.parse(request("&".join(f"{k}={v}" for k, v in form.items()).encode()))
    assert isinstance(dm, Accepted)
    assert (dm.messages[0].text, dm.messages[0].chat_type) == ("/webhook-collect what now", "dm")


@pytest.mark.parametrize(
    ("form", "reason"),
    [
        ({"ssl_check": "1", "token": "x"}, slack.SSL_CHECK),
        ({"payload": '{"type":"block_actions"}'}, slack.INTERACTIVE),
    ],
)
def test_ssl_checks_and_interactive_payloads_are_acknowledged(form: dict[str, str], reason: str) -> None:
    assert CHANNEL.parse(request(urlencode(form).encode())) == Ignored(reason)


def test_a_form_that_is_not_a_command_is_a_bad_request_naming_fields_only() -> None:
    with pytest.raises(BadRequest, match=r"^invalid Slack slash command: command: Field required"):
        CHANNEL.parse(request(b"hello=world"))

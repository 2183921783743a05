"""What the platform channels share: safe ids, lane-safe text, error reasons, Ingress.accept's order."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import cast

import pytest
from pydantic import Field

from shared.channels import channel_for, inbound
from shared.channels.inbound import (
    Accepted,
    ChannelName,
    Handshake,
    Ignored,
    IngressOutcome,
    Payload,
    WebhookRequest,
    identifier,
    session_id,
)
from shared.errors import BadRequest, NotFound, Unauthorized
from shared.ingress import Ingress
from shared.models import ID_PATTERN, LaneItem, Sender
from shared.ports import Outbox, SecretStore, SubmitResult

ID = re.compile(ID_PATTERN)


@pytest.mark.parametrize("raw", ["Ev111", "tg10000", "wamid.HBgLMTY1=", "787053080478613556"])
def test_an_id_that_is_already_an_identifier_is_kept(raw: str) -> None:
    assert identifier(raw) == raw


@pytest.mark.parametrize(
    "raw",
    ["wamid.abc/def+g==", "-100123", "", "ü", "a b", "x" * 300, "/" * 200, "\ud800", "ab\x00"],
)
def test_any_other_id_becomes_a_readable_identifier_deterministically(raw: str) -> None:
    mapped = identifier(raw)
    assert ID.match(mapped), mapped
    assert identifier(raw) == mapped  # a retry lands on the same session and event id


def test_ids_that_differ_only_in_characters_mapped_away_stay_distinct() -> None:
    assert identifier("a/b") != identifier("a+b/") != identifier("a b")
    assert identifier("x" * 200 + "1") != identifier("x" * 200 + "2")  # cut, but digested whole


def test_a_dm_a_group_and_its_threads_are_different_sessions() -> None:
    sessions = {
        session_id("telegram", "1111111", None),
        session_id("telegram", "-1001971186208", None),
        session_id("telegram", "-1001971186208", "2391"),
        session_id("slack", "C111", "1726133698.626339"),
        session_id("slack", "C111", None),
    }
    assert len(sessions) == 5
    assert session_id("slack", "C111", "1726133698.626339") == "slack.C111.1726133698.626339"


def test_text_a_lane_cannot_carry_is_replaced_and_the_rest_kept() -> None:
    # SQS refuses NUL, most C0 controls, U+FFFE/U+FFFF and lone surrogates in a message body.
    assert inbound.clean("a\x00b\x1f\uffff\ud800") == "a\ufffdb\ufffd\ufffd\ufffd"
    assert inbound.clean("tab\there\nnew 🙂 ü") == "tab\there\nnew 🙂 ü"


def test_a_built_message_is_identifier_safe_and_clean() -> None:
    msg = inbound.message(
        channel="whatsapp",
        workspace_id="default",
        event_id="wamid.a/b",
        chat_id="155\x00",
        chat_type="dm",
        sender=Sender(id="155", name="N\uffff"),
        text="hi\x00",
    )
    assert ID.match(msg.event_id) and ID.match(msg.session_id)
    assert (msg.text, msg.chat_id, msg.sender.name) == ("hi\ufffd", "155\ufffd", "N\ufffd")
    with pytest.raises(BadRequest, match="longer than 40000"):
        inbound.message(
            channel="slack",
            workspace_id="default",
            event_id="Ev1",
            chat_id="C1",
            chat_type="channel",
            sender=Sender(id="U1"),
            text="x" * 40_001,
        )


class _Doc(Payload):
    files: dict[str, int] = Field(default_factory=dict)


def test_an_invalid_payload_names_our_fields_never_the_body_s_keys_or_values() -> None:
    with pytest.raises(BadRequest) as err:
        inbound.parse_json(_Doc, b'{"files": {"secret-key-from-body": "secret-value"}}', "doc")
    assert err.value.message.startswith("invalid doc: files.*: ")
    assert "secret" not in err.value.message
    with pytest.raises(BadRequest, match=r"^body is not valid JSON$"):
        inbound.parse_json(_Doc, b'{"files": "unterminated', "doc")


def test_timestamps_must_be_unix_seconds_inside_the_window() -> None:
    check = inbound.fresh_timestamp
    assert check("1000", now=1300, window_s=300, header="T") == "1000"
    for raw, reason in [
        (None, "missing T"),
        ("", "missing T"),
        ("1e3", "not a unix timestamp"),
        ("１０００", "not a unix timestamp"),  # noqa: RUF001 -- full-width digits, which int() accepts
        ("999", "seconds from"),
    ]:
        with pytest.raises(Unauthorized, match=reason):
            check(raw, now=1300, window_s=300, header="T")


def test_a_missing_or_blank_secret_fails_like_a_wrong_signature() -> None:
    for values in ({}, {"s": "  "}):
        with pytest.raises(Unauthorized, match=r"^signature mismatch$"):
            inbound.configured(Secrets(values), "s")


def test_an_unknown_channel_is_not_found() -> None:
    with pytest.raises(NotFound):
        channel_for("irc", "default")


# ---------------------------------------------------------------- Ingress.accept


class Secrets:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, name: str) -> str | None:
        return self.values.get(name)


@dataclass
class Lanes:
    items: list[LaneItem] = field(default_factory=list)

    def submit(self, item: LaneItem) -> SubmitResult:
        self.items.append(item)
        return SubmitResult(status="queued")


@dataclass
class Scripted:
    """A channel whose steps are scripted, recording the order they ran in."""

    answer: Handshake | None = None
    refuse: bool = False
    outcome: IngressOutcome = field(default_factory=lambda: Ignored("nothing"))
    steps: list[str] = field(default_factory=list)
    name: ChannelName = "slack"
    route: None = None  # the unnamed route

    def handshake(self, request: WebhookRequest, secrets: SecretStore) -> Handshake | None:
        self.steps.append("handshake")
        return self.answer

    def verify(self, request: WebhookRequest, secrets: SecretStore, *, now: float, window_s: int) -> None:
        self.steps.append("verify")
        if self.refuse:
            raise Unauthorized("signature mismatch")

    def parse(self, request: WebhookRequest) -> IngressOutcome:
        self.steps.append("parse")
        return self.outcome


def _ingress(lanes: Lanes) -> Ingress:
    # accept() never reads the outbox: that is the web channel's read side.
    return Ingress(lanes=lanes, outbox=cast(Outbox, None), secrets=Secrets({}), max_body_bytes=10)


REQUEST = WebhookRequest(method="POST", target="/webhooks/slack", headers={}, body=b"{}")


def test_a_handshake_is_answered_before_any_signature_check() -> None:
    channel = Scripted(answer=Handshake(200, "challenge"))
    assert _ingress(Lanes()).accept(channel, REQUEST) == Handshake(200, "challenge")
    assert channel.steps == ["handshake"]


def test_an_unverified_request_is_never_parsed_nor_queued() -> None:
    lanes, channel = Lanes(), Scripted(refuse=True)
    with pytest.raises(Unauthorized):
        _ingress(lanes).accept(channel, REQUEST)
    assert channel.steps == ["handshake", "verify"] and lanes.items == []


def test_every_accepted_message_is_on_its_lane_before_the_answer() -> None:
    msgs = [
        inbound.message(
            channel="whatsapp",
            workspace_id="default",
            event_id=f"wamid.{i}",
            chat_id="155",
            chat_type="dm",
            sender=Sender(id="155"),
            text=f"m{i}",
        )
        for i in range(2)
    ]
    lanes = Lanes()
    outcome = _ingress(lanes).accept(Scripted(outcome=Accepted(msgs)), REQUEST)
    assert outcome == Accepted(msgs)
    assert [i.inbound for i in lanes.items] == msgs
    assert [i.dedup_id for i in lanes.items] == ["default.whatsapp.wamid.0", "default.whatsapp.wamid.1"]


def test_an_oversized_body_is_refused_before_anything_else() -> None:
    channel = Scripted(answer=Handshake(200, "x"))
    big = WebhookRequest(method="POST", target="/", headers={}, body=b"x" * 11)
    with pytest.raises(BadRequest, match="larger than 10 bytes"):
        _ingress(Lanes()).accept(channel, big)
    assert channel.steps == []


def test_the_characters_sqs_refuses_are_exactly_the_complement_of_what_it_allows() -> None:
    # SQS message bodies allow #x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD #x10000-#x10FFFF.
    def allowed(c: int) -> bool:
        return (
            c in (0x9, 0xA, 0xD) or 0x20 <= c <= 0xD7FF or 0xE000 <= c <= 0xFFFD or 0x10000 <= c <= 0x10FFFF
        )

    refused = inbound._NOT_SQS_CHAR
    assert [c for c in range(0x110000) if bool(refused.match(chr(c))) == allowed(c)] == []

"""Telegram: the secret-token header and which updates start a turn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shared.channels import telegram
from shared.channels.inbound import Accepted, Ignored, WebhookRequest
from shared.errors import BadRequest, Unauthorized
from shared.models import Attachment

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "telegram"
TOKEN = "A-secret_token-0123456789"
CHANNEL = telegram.TelegramChannel("default")


class Secrets:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, name: str) -> str | None:
        return self.values.get(name)


SECRETS = Secrets({telegram.SECRET: TOKEN})


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def request(body: bytes, headers: dict[str, str] | None = None) -> WebhookRequest:
    return WebhookRequest(method="POST", target="/webhooks/telegram", headers=headers or {}, body=body)


def parse(update: dict[str, Any]) -> Any:
    return CHANNEL.parse(request(json.dumps(update).encode()))


def text_update(**message: Any) -> dict[str, Any]:
    update = fixture("update_message_text.json")
    update["message"].update(message)
    return update


def test_the_secret_token_header_must_be_the_stored_token() -> None:
    CHANNEL.verify(request(b"{}", {telegram.HEADER: TOKEN}), SECRETS, now=0, window_s=300)
    for headers, reason in [
        ({}, "missing X-Telegram-Bot-Api-Secret-Token"),
        ({telegram.HEADER: TOKEN + "x"}, "signature mismatch"),
        ({telegram.HEADER: TOKEN[:-1]}, "signature mismatch"),
        ({telegram.HEADER: "\ud800"}, "signature mismatch"),
    ]:
        with pytest.raises(Unauthorized, match=reason):
            CHANNEL.verify(request(b"{}", headers), SECRETS, now=0, window_s=300)
    with pytest.raises(Unauthorized, match="signature mismatch"):
        CHANNEL.verify(request(b"{}", {telegram.HEADER: TOKEN}), Secrets({}), now=0, window_s=300)


@pytest.mark.parametrize(
    ("update", "reason"),
    [
        (fixture("update_edited_message.json"), telegram.EDIT),
        (fixture("update_callback_query.json"), telegram.BUTTON),
        ({"update_id": 1, "edited_channel_post": {}}, telegram.EDIT),
        ({"update_id": 1, "my_chat_member": {}}, telegram.MEMBERSHIP),
        ({"update_id": 1, "message_reaction": {}}, telegram.REACTION),
        ({"update_id": 1, "inline_query": {}}, telegram.INLINE),
        ({"update_id": 1, "poll_answer": {}}, telegram.POLL),
        ({"update_id": 1, "deleted_business_messages": {}}, telegram.DELETION),
        ({"update_id": 1, "something_new": {}}, telegram.OTHER_UPDATE),
        ({"update_id": 1}, telegram.OTHER_UPDATE),
        (text_update(**{"from": {"id": 5, "is_bot": True, "first_name": "b"}}), telegram.BOT),
        (text_update(is_automatic_forward=True), telegram.FORWARD),
        (text_update(text=None, pinned_message={"message_id": 1}), telegram.NO_CONTENT),
        (text_update(text=None, location={"latitude": 1.0, "longitude": 2.0}), telegram.NO_CONTENT),
    ],
)
def test_updates_that_start_no_turn_are_ignored_with_their_reason(
    update: dict[str, Any], reason: str
) -> None:
    assert parse(update) == Ignored(reason)


def test_an_anonymous_admin_speaks_as_the_group_not_as_a_bot() -> None:
    update = text_update(
        **{
            "from": {
                "id": 1087968824,
                "is_bot": True,
                "first_name": "Group",
                "username": "GroupAnonymousBot",
            },
            "sender_chat": {"id": -100200, "type": "supergroup", "title": "Team"},
            "chat": {"id": -100200, "type": "supergroup", "title": "Team"},
        }
    )
    [msg] = parse(update).messages
    assert (msg.sender.id, msg.sender.name, msg.chat_type) == ("-100200", "Team", "group")


def test_a_photo_is_referenced_at_its_largest_size_with_its_caption_as_text() -> None:
    update = text_update(
        text=None,
        caption="look",
        photo=[{"file_id": "small", "file_size": 10}, {"file_id": "large", "file_size": 999}],
    )
    [msg] = parse(update).messages
    assert msg.text == "look"
    assert msg.attachments == [Attachment(kind="photo", id="large", size=999)]


def test_a_forum_topic_is_a_thread_and_its_root_is_not_a_reply() -> None:
    topic = {"chat": {"id": -100300, "type": "supergroup", "is_forum": True}, "is_topic_message": True}
    [msg] = parse(text_update(**topic, message_thread_id=77, reply_to_message={"message_id": 77})).messages
    assert (msg.thread_id, msg.reply_to, msg.session_id) == ("77", None, "telegram.-100300.77")
    [reply] = parse(text_update(**topic, message_thread_id=77, reply_to_message={"message_id": 80})).messages
    assert reply.reply_to == "80"


def test_a_reply_chain_in_an_ordinary_group_stays_in_the_group_s_session() -> None:
    group = {"chat": {"id": -100400, "type": "supergroup"}}
    [msg] = parse(text_update(**group, message_thread_id=12, reply_to_message={"message_id": 12})).messages
    assert (msg.thread_id, msg.reply_to, msg.session_id) == (None, "12", "telegram.-100400")


def test_a_redelivered_update_has_the_same_event_id() -> None:
    first, again = parse(fixture("update_message_text.json")), parse(fixture("update_message_text.json"))
    assert isinstance(first, Accepted) and isinstance(again, Accepted)
    assert first.messages[0].event_id == again.messages[0].event_id == "tg10000"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"[]", "invalid Telegram update"),
        (b'{"message": {}}', "update_id: Field required"),
        (b'{"update_id": -1}', "update_id: Input should be greater than or equal to 0"),
        (b'{"update_id": 1' + b"0" * 30 + b"}", "update_id"),
        (b'{"update_id": 1, "message": {"message_id": 1, "chat": {"id": 1, "type": "private"}}}', "sender"),
    ],
)
def test_an_unreadable_update_is_a_bad_request(body: bytes, reason: str) -> None:
    with pytest.raises(BadRequest, match=reason):
        CHANNEL.parse(request(body))

"""What each platform client sends: method, path, JSON fields, auth, threading, formatting.

The senders talk HTTP to tests/support/fake_platforms.py, which records every request.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from shared.channels.ledger import MemorySendLedger
from shared.channels.out import PlatformSender, build_senders, progressive_reply
from shared.channels.senders import OutboxReply, OutboxSender, SenderRegistry
from shared.models import OutboundMessage, OutboxEntry
from tests.support.fake_platforms import DISCORD_APPLICATION, DictSecrets, FakeClock, FakePlatforms

DISCORD_CONTEXT = {"application_id": DISCORD_APPLICATION, "interaction_token": "aW50ZXJhY3Rpb24tdG9rZW4"}


class ListOutbox:
    def __init__(self) -> None:
        self.messages: list[OutboundMessage] = []

    def append(self, message: OutboundMessage) -> OutboxEntry | None:
        self.messages.append(message)
        return OutboxEntry(seq=message.seq, message=message)

    def read(
        self, workspace_id: str, session_id: str, *, after_seq: int = 0, limit: int = 100
    ) -> list[OutboxEntry]:
        return [OutboxEntry(seq=m.seq, message=m) for m in self.messages if m.seq > after_seq][:limit]


def outbound(
    channel: str, text: str, *, chat: str = "42", thread: str | None = None, turn: str = "t_1", part: int = 0
) -> OutboundMessage:
    return OutboundMessage(
        workspace_id="ws1",
        session_id="s1",
        channel=channel,
        chat_id=chat,
        thread_id=thread,
        turn_id=turn,
        part=part,
        seq=1 + part,
        text=text,
        in_reply_to="ev1",
    )


@pytest.fixture
def fake() -> Iterator[FakePlatforms]:
    with FakePlatforms() as server:
        yield server


@pytest.fixture
def secrets(fake: FakePlatforms) -> DictSecrets:
    return DictSecrets.for_fake(fake)


@pytest.fixture
def outbox() -> ListOutbox:
    return ListOutbox()


@pytest.fixture
def senders(fake: FakePlatforms, secrets: DictSecrets, outbox: ListOutbox) -> Iterator[SenderRegistry]:
    clock = FakeClock()
    with httpx.Client() as http:
        yield build_senders(
            secrets,
            outbox,
            base_urls=fake.base_urls,
            ledger=MemorySendLedger(),
            http=http,
            clock=clock,
            sleep=clock.sleep,
        )


def platform(senders: SenderRegistry, channel: str) -> PlatformSender:
    sender = senders.get(channel)
    assert isinstance(sender, PlatformSender)
    return sender


def test_build_senders_registers_web_and_every_platform_without_reading_secrets(
    senders: SenderRegistry, secrets: DictSecrets
) -> None:
    assert isinstance(senders.get("web"), OutboxSender)
    for channel in ("telegram", "slack", "discord", "whatsapp"):
        assert platform(senders, channel).api.platform == channel
    assert secrets.reads == []  # tokens are read at send time, from the (caching) store


def test_telegram_send_message(senders: SenderRegistry, fake: FakePlatforms, secrets: DictSecrets) -> None:
    # Given a reply to a message in a forum topic of a supergroup
    message = outbound("telegram", "Use **bold** & <tags>", chat="-1001234567890", thread="7")

    # When it is sent
    platform(senders, "telegram").send(message, context={"message_id": "99"})

    # Then one sendMessage, in HTML, quoting the user's message, in the topic
    [call] = fake.calls("telegram")
    assert (call.method, call.op) == ("POST", "sendMessage")
    assert call.path == f"/bot{fake.tokens['telegram']}/sendMessage"
    assert call.headers["content-type"] == "application/json"
    assert call.json == {
        "chat_id": -1001234567890,
        "text": "Use <b>bold</b> &amp; &lt;tags&gt;",
        "parse_mode": "HTML",
        "link_preview_options": {"is_disabled": True},
        "message_thread_id": 7,
        "reply_parameters": {"message_id": 99, "allow_sending_without_reply": True},
    }
    assert "telegram/bot-token" in secrets.reads


def test_telegram_quotes_the_user_only_in_the_first_piece(
    senders: SenderRegistry, fake: FakePlatforms
) -> None:
    text = "\n\n".join(f"Paragraph {i}: " + "word " * 150 for i in range(8))  # about 6,000 characters
    platform(senders, "telegram").send(outbound("telegram", text), context={"message_id": "5"})

    calls = fake.calls("telegram", "sendMessage")
    assert len(calls) == 2
    assert "reply_parameters" in calls[0].json
    assert "reply_parameters" not in calls[1].json
    assert all(len(c.json["text"]) <= 4096 for c in calls)


def test_telegram_edit_message_text(senders: SenderRegistry, fake: FakePlatforms) -> None:
    reply = platform(senders, "telegram").progressive(outbound("telegram", ""))
    reply.update("Thinking")
    reply.finish("Done: `x`")

    edit = fake.calls("telegram", "editMessageText")[-1]
    assert edit.json == {
        "chat_id": 42,
        "message_id": int(fake.shown_ids("telegram")[0]),
        "text": "Done: <code>x</code>",
        "parse_mode": "HTML",
        "link_preview_options": {"is_disabled": True},
    }
    assert fake.shown("telegram") == ["Done: <code>x</code>"]


def test_slack_post_message_in_a_thread(senders: SenderRegistry, fake: FakePlatforms) -> None:
    message = outbound(
        "slack", "*Hi* <there> & [docs](https://x.io)", chat="C0123", thread="1700000000.000100"
    )
    platform(senders, "slack").send(message)

    [call] = fake.calls("slack")
    assert (call.method, call.path) == ("POST", "/api/chat.postMessage")
    assert call.headers["authorization"] == f"Bearer {fake.tokens['slack']}"
    assert call.headers["content-type"] == "application/json; charset=utf-8"
    assert call.json == {
        "channel": "C0123",
        "text": "_Hi_ &lt;there&gt; &amp; <https://x.io|docs>",
        "thread_ts": "1700000000.000100",
        "mrkdwn": True,
        "unfurl_links": False,
        "unfurl_media": False,
    }


def test_slack_update_edits_by_channel_and_ts(senders: SenderRegistry, fake: FakePlatforms) -> None:
    reply = platform(senders, "slack").progressive(outbound("slack", "", chat="D042"))
    reply.update("Working on it")
    reply.finish("**Done**")

    [post] = fake.calls("slack", "chat.postMessage")
    [update] = fake.calls("slack", "chat.update")
    assert "thread_ts" not in post.json  # a DM reply without a thread stays in the conversation
    assert update.json == {"channel": "D042", "ts": fake.shown_ids("slack")[0], "text": "*Done*"}
    assert update.headers["authorization"] == f"Bearer {fake.tokens['slack']}"


def test_discord_replaces_the_deferred_original_then_posts_follow_ups(
    senders: SenderRegistry, fake: FakePlatforms
) -> None:
    text = "@everyone look:\n\n" + "\n\n".join("word " * 80 for _ in range(6))  # about 2,500 characters
    platform(senders, "discord").send(outbound("discord", text), context=DISCORD_CONTEXT)

    first, second = fake.calls("discord")
    token = DISCORD_CONTEXT["interaction_token"]
    assert (first.method, first.path) == (
        "PATCH",
        f"/api/v10/webhooks/{DISCORD_APPLICATION}/{token}/messages/@original",
    )
    assert (second.method, second.path) == ("POST", f"/api/v10/webhooks/{DISCORD_APPLICATION}/{token}")
    assert second.query == {"wait": "true"}
    for call in (first, second):
        assert call.json["allowed_mentions"] == {"parse": []}
        assert len(call.json["content"]) <= 2000
        assert "authorization" not in call.headers  # the interaction token authorises the webhook
    assert first.json["content"].startswith("@\u200beveryone look:")


def test_discord_edit_of_a_follow_up_patches_its_id(senders: SenderRegistry, fake: FakePlatforms) -> None:
    sender = platform(senders, "discord")
    long_text = "\n\n".join("word " * 80 for _ in range(6))
    sender.send(outbound("discord", long_text), context=DISCORD_CONTEXT)
    [follow_up] = fake.calls("discord", "followup")

    # A retry of the turn whose second piece changed edits the follow-up in place.
    sender.send(outbound("discord", long_text + " more"), context=DISCORD_CONTEXT)

    [edit] = [c for c in fake.calls("discord", "edit") if not c.path.endswith("@original")]
    assert edit.method == "PATCH"
    assert edit.path.endswith(f"/messages/{fake.shown_ids('discord')[1]}")
    assert follow_up.query == {"wait": "true"}
    assert len(fake.calls("discord", "followup")) == 1  # no second copy


def test_whatsapp_text_message(senders: SenderRegistry, fake: FakePlatforms) -> None:
    message = outbound("whatsapp", "**Total**: _10_ ~~12~~", chat="15551234567")
    context = {"phone_number_id": "106540352242922", "message_id": "wamid.HBgLMTU1NTAwMQ"}
    platform(senders, "whatsapp").send(message, context=context)

    [call] = fake.calls("whatsapp")
    assert (call.method, call.path) == ("POST", "/v23.0/106540352242922/messages")
    assert call.headers["authorization"] == f"Bearer {fake.tokens['whatsapp']}"
    assert call.json == {
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": "15551234567",
        "type": "text",
        "text": {"body": "*Total*: _10_ ~12~", "preview_url": False},
        "context": {"message_id": "wamid.HBgLMTU1NTAwMQ"},
    }


def test_whatsapp_phone_number_id_can_come_from_the_secret_store(
    senders: SenderRegistry, fake: FakePlatforms, secrets: DictSecrets
) -> None:
    secrets.values["whatsapp/phone-number-id"] = "555000111"
    platform(senders, "whatsapp").send(outbound("whatsapp", "hi", chat="15550001"))
    assert fake.calls("whatsapp")[0].path == "/v23.0/555000111/messages"


def test_the_web_channel_buffers_a_progressive_reply_into_its_outbox(
    senders: SenderRegistry, outbox: ListOutbox
) -> None:
    # Without a delta sink (the cloud today) the web reply only reaches the outbox, once, at finish.
    reply = progressive_reply(senders.get("web"), outbound("web", ""))
    assert isinstance(reply, OutboxReply)
    reply.update("partial")
    assert outbox.messages == []
    reply.finish("final answer")
    assert [m.text for m in outbox.messages] == ["final answer"]


def test_progressive_reply_of_a_platform_sender_is_progressive(
    senders: SenderRegistry, fake: FakePlatforms
) -> None:
    reply = progressive_reply(senders.get("slack"), outbound("slack", "", chat="C1"))
    reply.update("first words")
    assert fake.shown("slack") == ["first words"]

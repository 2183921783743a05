"""Progressive replies: post once, edit as the text grows, throttled per platform (injected clock)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from shared.channels.ledger import MemorySendLedger
from shared.channels.out import PlatformSender, build_senders
from shared.channels.senders import SenderRegistry
from shared.models import OutboundMessage
from tests.support.fake_platforms import DISCORD_APPLICATION, DictSecrets, FakeClock, FakePlatforms

DISCORD_CONTEXT = {"application_id": DISCORD_APPLICATION, "interaction_token": "dG9rZW4"}


def outbound(channel: str, *, chat: str = "42", turn: str = "t_1", text: str = "") -> OutboundMessage:
    return OutboundMessage(
        workspace_id="ws1", session_id="s1", channel=channel, chat_id=chat, turn_id=turn, seq=1, text=text
    )


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client() as client:
        yield client


@pytest.fixture
def fake() -> Iterator[FakePlatforms]:
    with FakePlatforms() as server:
        yield server


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def senders(fake: FakePlatforms, clock: FakeClock, http: httpx.Client) -> SenderRegistry:
    return build_senders(
        DictSecrets.for_fake(fake),
        outbox=None,  # type: ignore[arg-type]  # the web sender is not used here
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


def test_telegram_posts_once_then_edits_at_most_once_a_second(
    senders: SenderRegistry, fake: FakePlatforms, clock: FakeClock
) -> None:
    reply = platform(senders, "telegram").progressive(outbound("telegram"))

    reply.update("Hel")  # t=0: the first text is posted at once
    clock.advance(0.3)
    reply.update("Hello wor")  # t=0.3: throttled, nothing sent
    clock.advance(0.3)
    reply.update("Hello world")  # t=0.6: throttled
    assert [c.op for c in fake.calls("telegram")] == ["sendMessage"]

    clock.advance(0.5)
    reply.update("Hello world, how")  # t=1.1: an edit with the latest text
    clock.advance(0.1)
    reply.finish("Hello world, how are **you**?")  # t=1.2: waits until t=2.1, then edits

    assert [c.op for c in fake.calls("telegram")] == ["sendMessage", "editMessageText", "editMessageText"]
    assert [c.json["text"] for c in fake.calls("telegram")] == [
        "Hel",
        "Hello world, how",
        "Hello world, how are <b>you</b>?",
    ]
    assert clock.sleeps == [pytest.approx(0.9)]
    assert fake.shown("telegram") == ["Hello world, how are <b>you</b>?"]


def test_telegram_groups_are_also_held_to_twenty_a_minute(
    senders: SenderRegistry, fake: FakePlatforms, clock: FakeClock
) -> None:
    reply = platform(senders, "telegram").progressive(outbound("telegram", chat="-100500"))
    text = ""
    for i in range(30):  # one update every 1.5 s for 45 s
        text += f"word{i} "
        reply.update(text)
        clock.advance(1.5)

    # 1.5 s apart passes the per-second limit, but only 20 calls fit in any minute
    assert len(fake.calls("telegram")) == 20
    reply.finish(text + "end")
    assert fake.shown("telegram") == [text + "end"]
    assert sum(clock.sleeps) > 0  # the final edit waited for the minute window


def test_slack_edits_once_a_second(senders: SenderRegistry, fake: FakePlatforms, clock: FakeClock) -> None:
    reply = platform(senders, "slack").progressive(outbound("slack", chat="C1"))
    for i in range(10):  # every 0.25 s for 2.5 s
        reply.update("x" * (i + 1))
        clock.advance(0.25)
    calls = fake.calls("slack")
    assert [c.op for c in calls] == ["chat.postMessage", "chat.update", "chat.update"]


def test_discord_allows_five_calls_per_five_seconds(
    senders: SenderRegistry, fake: FakePlatforms, clock: FakeClock
) -> None:
    reply = platform(senders, "discord").progressive(outbound("discord"), context=DISCORD_CONTEXT)
    for i in range(10):  # every 0.5 s, t = 0 .. 4.5
        reply.update(f"step {i}")
        clock.advance(0.5)
    assert len(fake.calls("discord")) == 5
    reply.update("step 10")  # t = 5.0: the first call left the window
    assert len(fake.calls("discord")) == 6
    assert all(c.method == "PATCH" and c.path.endswith("/@original") for c in fake.calls("discord"))


def test_a_reply_that_outgrows_a_message_continues_in_follow_ups(
    senders: SenderRegistry, fake: FakePlatforms, clock: FakeClock
) -> None:
    reply = platform(senders, "discord").progressive(outbound("discord"), context=DISCORD_CONTEXT)
    paragraphs = [f"Paragraph {i}. " + " ".join(["lorem ipsum"] * 30) for i in range(12)]  # ~4,500 chars
    text = ""
    for paragraph in paragraphs:
        text += paragraph + "\n\n"
        reply.update(text)
        clock.advance(2.0)
    streamed_follow_ups = len(fake.calls("discord", "followup"))

    reply.finish(text.strip())

    shown = fake.shown("discord")
    assert streamed_follow_ups >= 1  # the second message appeared while streaming
    assert len(shown) == 3 and all(len(m) <= 2000 for m in shown)
    assert "\n\n".join(shown) == text.strip()  # cut at paragraphs, nothing lost
    assert len(fake.calls("discord", "followup")) == 2  # each piece posted once, then edited


def test_a_failed_update_does_not_stop_the_stream_and_finish_catches_up(
    senders: SenderRegistry, fake: FakePlatforms, clock: FakeClock
) -> None:
    reply = platform(senders, "slack").progressive(outbound("slack", chat="C1"))
    fake.fail("slack", 503, {"ok": False, "error": "service_unavailable"})
    reply.update("first")  # the platform fails: logged, not raised
    assert fake.shown("slack") == []

    clock.advance(1.0)
    reply.finish("final")
    assert fake.shown("slack") == ["final"]


def test_whatsapp_cannot_edit_so_it_posts_only_the_finished_reply(
    senders: SenderRegistry, fake: FakePlatforms
) -> None:
    reply = platform(senders, "whatsapp").progressive(
        outbound("whatsapp"), context={"phone_number_id": "123"}
    )
    reply.update("partial")
    reply.update("partial text")
    assert fake.calls("whatsapp") == []
    reply.finish("the whole reply")
    assert fake.shown("whatsapp") == ["the whole reply"]


def test_finish_happens_once(senders: SenderRegistry, fake: FakePlatforms) -> None:
    reply = platform(senders, "slack").progressive(outbound("slack", chat="C1"))
    reply.finish("done")
    reply.finish("done again")
    reply.update("late text")
    assert [c.op for c in fake.calls("slack")] == ["chat.postMessage"]
    assert fake.shown("slack") == ["done"]


def test_the_throttle_is_per_chat_and_outlives_a_reply(
    senders: SenderRegistry, fake: FakePlatforms, clock: FakeClock
) -> None:
    sender = platform(senders, "telegram")
    sender.send(outbound("telegram", chat="1", turn="t_a", text="one"))
    sender.send(outbound("telegram", chat="2", turn="t_b", text="other chat"))
    assert clock.sleeps == []  # another chat has its own allowance

    sender.send(outbound("telegram", chat="1", turn="t_c", text="two"))
    assert clock.sleeps == [pytest.approx(1.0)]  # the same chat, within the second: waits
    assert fake.shown("telegram") == ["one", "other chat", "two"]

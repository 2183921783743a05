"""The send ledger on the wire: a retried turn never posts a second copy of its reply."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from shared.adapters.embedded.db import Database
from shared.adapters.embedded.send_ledger import SqliteSendLedger
from shared.channels.ledger import MemorySendLedger
from shared.channels.out import PlatformSender, build_senders
from shared.models import OutboundMessage
from shared.ports import SendLedger, SentPiece
from tests.support.fake_platforms import DISCORD_APPLICATION, DictSecrets, FakeClock, FakePlatforms

CONTEXTS = {
    "telegram": {"message_id": "7"},
    "slack": {},
    "discord": {"application_id": DISCORD_APPLICATION, "interaction_token": "dG9rZW4"},
    "whatsapp": {"phone_number_id": "106540352242922"},
}
POSTS = {
    "telegram": "sendMessage",
    "slack": "chat.postMessage",
    "discord": "followup",
    "whatsapp": "messages",
}
EDITS = {"telegram": "editMessageText", "slack": "chat.update", "discord": "edit"}
LONG = "\n\n".join(f"Section {i}. " + " ".join(["alpha beta gamma"] * 40) for i in range(8))  # ~5,300 chars

SenderFor = Callable[[str], PlatformSender]


def reply(channel: str, text: str, *, part: int = 0, turn: str = "t_retried") -> OutboundMessage:
    return OutboundMessage(
        workspace_id="ws1",
        session_id="s1",
        channel=channel,
        chat_id="C42" if channel == "slack" else "42",
        turn_id=turn,
        part=part,
        seq=1 + part,
        text=text,
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
def ledger() -> MemorySendLedger:
    return MemorySendLedger()


@pytest.fixture
def sender_for(fake: FakePlatforms, http: httpx.Client) -> Callable[[SendLedger], SenderFor]:
    """Senders built afresh on a ledger: what a new process (a retry on another Lambda) has."""

    def build(ledger: SendLedger) -> SenderFor:
        clock = FakeClock()
        registry = build_senders(
            DictSecrets.for_fake(fake),
            outbox=None,  # type: ignore[arg-type]  # the web sender is not used here
            base_urls=fake.base_urls,
            ledger=ledger,
            http=http,
            clock=clock,
            sleep=clock.sleep,
        )

        def sender(channel: str) -> PlatformSender:
            found = registry.get(channel)
            assert isinstance(found, PlatformSender)
            return found

        return sender

    return build


def posts(fake: FakePlatforms, channel: str) -> int:
    # Discord's first piece replaces the deferred original: that PATCH is its "post".
    original = (
        [c for c in fake.calls("discord", "edit") if c.path.endswith("@original")]
        if channel == "discord"
        else []
    )
    return len(fake.calls(channel, POSTS[channel])) + min(len(original), 1)


def edits(fake: FakePlatforms, channel: str) -> int:
    if channel not in EDITS:
        return 0
    calls = fake.calls(channel, EDITS[channel])
    return len(calls) - (1 if channel == "discord" and calls else 0)


@pytest.mark.parametrize("channel", ["telegram", "slack", "discord", "whatsapp"])
def test_the_same_turn_sent_twice_posts_once(
    channel: str, fake: FakePlatforms, ledger: MemorySendLedger, sender_for: Callable[[SendLedger], SenderFor]
) -> None:
    # Given a reply that was sent
    sender_for(ledger)(channel).send(reply(channel, "Your answer is **42**."), context=CONTEXTS[channel])

    # When the turn is retried (a new sender on the same ledger) and sends the same part again
    sender_for(ledger)(channel).send(reply(channel, "Your answer is **42**."), context=CONTEXTS[channel])

    # Then the platform got one post and no edit, and the chat shows the reply once
    assert posts(fake, channel) == 1
    assert edits(fake, channel) == 0
    assert len(fake.shown(channel)) == 1


@pytest.mark.parametrize("channel", ["telegram", "slack", "discord"])
def test_a_retry_with_other_text_edits_the_posted_message(
    channel: str, fake: FakePlatforms, ledger: MemorySendLedger, sender_for: Callable[[SendLedger], SenderFor]
) -> None:
    sender_for(ledger)(channel).send(reply(channel, "first attempt"), context=CONTEXTS[channel])
    # The model answers differently on the retry.
    sender_for(ledger)(channel).send(reply(channel, "second attempt"), context=CONTEXTS[channel])

    assert posts(fake, channel) == 1
    assert edits(fake, channel) == 1
    assert fake.shown(channel) == ["second attempt"]


def test_whatsapp_keeps_what_it_posted_on_a_retry(
    fake: FakePlatforms, ledger: MemorySendLedger, sender_for: Callable[[SendLedger], SenderFor]
) -> None:
    sender_for(ledger)("whatsapp").send(reply("whatsapp", "first attempt"), context=CONTEXTS["whatsapp"])
    sender_for(ledger)("whatsapp").send(reply("whatsapp", "second attempt"), context=CONTEXTS["whatsapp"])
    assert fake.shown("whatsapp") == ["first attempt"]  # no edits exist; a second copy would be worse


@pytest.mark.parametrize("channel", ["telegram", "slack", "discord"])
def test_a_stream_cut_short_is_completed_by_the_retry_in_place(
    channel: str, fake: FakePlatforms, ledger: MemorySendLedger, sender_for: Callable[[SendLedger], SenderFor]
) -> None:
    # Given an attempt that streamed part of its reply and crashed before finishing
    streaming = sender_for(ledger)(channel).progressive(reply(channel, ""), context=CONTEXTS[channel])
    streaming.update("The answer is")

    # When the retry sends the whole reply
    sender_for(ledger)(channel).send(reply(channel, "The answer is 42."), context=CONTEXTS[channel])

    # Then the streamed message was completed: one post, one edit
    assert posts(fake, channel) == 1
    assert edits(fake, channel) == 1
    assert fake.shown(channel) == ["The answer is 42."]


@pytest.mark.parametrize("channel", ["telegram", "slack", "discord"])
def test_a_shorter_retry_retires_the_pieces_it_no_longer_needs(
    channel: str, fake: FakePlatforms, ledger: MemorySendLedger, sender_for: Callable[[SendLedger], SenderFor]
) -> None:
    sender_for(ledger)(channel).send(reply(channel, LONG), context=CONTEXTS[channel])
    pieces = len(fake.shown(channel))
    assert pieces >= 2

    sender_for(ledger)(channel).send(reply(channel, "A short answer this time."), context=CONTEXTS[channel])

    shown = fake.shown(channel)
    assert len(shown) == pieces  # nothing new was posted
    assert shown[0] == "A short answer this time."
    assert set(shown[1:]) == {"…"}


def test_the_ledger_survives_a_restart(
    tmp_path: Path, fake: FakePlatforms, sender_for: Callable[[SendLedger], SenderFor]
) -> None:
    # Each attempt opens the SQLite ledger anew, as a new process would.
    for attempt in range(3):
        db = Database(tmp_path / "ledger.db")
        try:
            sender_for(SqliteSendLedger(db))("slack").send(reply("slack", LONG), context={})
        finally:
            db.close()
        assert len(fake.calls("slack", "chat.postMessage")) == 2, attempt
    assert fake.calls("slack", "chat.update") == []


def test_parts_and_turns_have_their_own_messages(
    fake: FakePlatforms, ledger: MemorySendLedger, sender_for: Callable[[SendLedger], SenderFor]
) -> None:
    sender = sender_for(ledger)("telegram")
    sender.send(reply("telegram", "part zero", part=0))
    sender.send(reply("telegram", "part one", part=1))
    sender.send(reply("telegram", "next turn", turn="t_next"))
    assert fake.shown("telegram") == ["part zero", "part one", "next turn"]


def test_an_edit_telegram_already_shows_is_not_an_error(
    fake: FakePlatforms, ledger: MemorySendLedger, sender_for: Callable[[SendLedger], SenderFor]
) -> None:
    # Given a crash after an edit reached Telegram but before the ledger learnt of it
    sender_for(ledger)("telegram").send(reply("telegram", "old"))
    sender_for(ledger)("telegram").send(reply("telegram", "new"))
    ledger.update_digest("ws1", "t_retried", 0, 0, text_digest="stale")

    # When the retry makes the same edit again, Telegram answers "message is not modified"
    sender_for(ledger)("telegram").send(reply("telegram", "new"))

    assert fake.calls("telegram", "editMessageText")[-1].status == 400
    assert fake.shown("telegram") == ["new"]
    assert ledger.get("ws1", "t_retried", 0, 0) is not None


class CountingLedger(MemorySendLedger):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def get(self, workspace_id: str, turn_id: str, part: int, chunk: int = 0) -> SentPiece | None:
        self.calls.append("get")
        return super().get(workspace_id, turn_id, part, chunk)

    def record(
        self, workspace_id: str, turn_id: str, part: int, chunk: int, *, message_id: str, text_digest: str
    ) -> SentPiece:
        self.calls.append("record")
        return super().record(
            workspace_id, turn_id, part, chunk, message_id=message_id, text_digest=text_digest
        )

    def update_digest(
        self, workspace_id: str, turn_id: str, part: int, chunk: int, *, text_digest: str
    ) -> None:
        self.calls.append("update_digest")
        super().update_digest(workspace_id, turn_id, part, chunk, text_digest=text_digest)


def test_ledger_round_trips_per_reply(sender_for: Callable[[SendLedger], SenderFor]) -> None:
    # A one-message reply costs one read and one write (DynamoDB: GetItem + PutItem) ...
    ledger = CountingLedger()
    sender_for(ledger)("slack").send(reply("slack", "short answer"))
    assert ledger.calls == ["get", "record"]

    # ... its retry one read and a probe for pieces the earlier attempt posted beyond the first ...
    ledger.calls.clear()
    sender_for(ledger)("slack").send(reply("slack", "short answer"))
    assert ledger.calls == ["get", "get"]

    # ... and a streamed reply one more write at the end, not one per edit.
    ledger.calls.clear()
    streaming = sender_for(ledger)("slack").progressive(reply("slack", "", turn="t_streamed"))
    for words in ("one", "one two", "one two three"):
        streaming.update(words)
    streaming.finish("one two three four")
    assert ledger.calls == ["get", "record", "update_digest"]

"""Identity through the agent turn on the embedded backend, with a function-backed model: who is
admitted, what a refused or pending sender gets, which session a message lands in, and how long a
platform event id keeps a redelivery from running twice."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from shared.adapters.embedded import build_embedded_backend
from shared.agent.turn import TurnDeps, give_up_turn, run_turn
from shared.backend import Backend
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.identity import PAIRING_REPLY, REFUSAL_REPLY, approve, block
from shared.models import InboundMessage, LaneItem, OutboundMessage, Sender, UserMessage, WorkspaceConfig
from shared.providers.base import ChatRequest, Provider
from shared.providers.function import FunctionProvider

WS = "ws1"
T0 = datetime(2025, 6, 1, 9, 0, tzinfo=UTC)


class RecordingSender:
    """A platform channel's sender that keeps what it was asked to post."""

    def __init__(self) -> None:
        self.sent: list[OutboundMessage] = []

    def send(self, message: OutboundMessage) -> None:
        self.sent.append(message)

    @property
    def texts(self) -> list[str]:
        return [m.text for m in self.sent]


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class Harness:
    def __init__(self, backend: Backend, settings: Settings) -> None:
        self.backend = backend
        self.telegram = RecordingSender()
        self.model = FunctionProvider(echo)
        self.clock = Clock()
        self.deps = TurnDeps(
            backend=backend,
            settings=settings,
            senders=SenderRegistry({"web": OutboxSender(backend.outbox), "telegram": self.telegram}),
            provider_factory=self.provider,
            clock=self.clock,
        )

    def provider(self, ref: str | None) -> tuple[Provider, str]:
        return self.model, "test-model"

    def policy(self, policy: str, allowed: list[str] | None = None) -> None:
        self.backend.workspaces.put(
            WorkspaceConfig.model_validate(
                {"id": WS, "unknown_sender_policy": policy, "allowed_senders": allowed or []}
            )
        )

    def web_replies(self, session: str) -> list[str]:
        return [e.message.text for e in self.backend.outbox.read(WS, session)]


def echo(request: ChatRequest) -> str:
    last = request.messages[-1]
    assert isinstance(last, UserMessage)
    return f"re: {last.content}"


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    settings = Settings(data_dir=tmp_path)
    backend = build_embedded_backend(settings)
    yield Harness(backend, settings)
    backend.close()


def telegram(
    event_id: str,
    text: str = "hello",
    *,
    sender: str = "42",
    chat: str | None = None,
    thread: str | None = None,
    chat_type: str = "dm",
) -> LaneItem:
    """A Telegram message as the webhook queues it: session f"telegram.{chat}[.{thread}]"."""
    chat_id = chat or sender
    session = f"telegram.{chat_id}" + (f".{thread}" if thread else "")
    return LaneItem(
        inbound=InboundMessage.model_validate(
            {
                "event_id": event_id,
                "channel": "telegram",
                "workspace_id": WS,
                "session_id": session,
                "sender": Sender(id=sender, name="Ada"),
                "chat_id": chat_id,
                "chat_type": chat_type,
                "thread_id": thread,
                "text": text,
            }
        )
    )


def web(event_id: str, text: str = "hello", *, user: str = "u1", session: str = "s1") -> LaneItem:
    return LaneItem(
        inbound=InboundMessage(
            event_id=event_id,
            channel="web",
            workspace_id=WS,
            session_id=f"web.{session}",
            sender=Sender(id=user),
            chat_id=session,
            text=text,
        )
    )


# ---------------------------------------------------------------- allow list


def test_an_allow_list_refusal_is_sent_and_the_model_never_called(harness: Harness) -> None:
    harness.policy("allow_list", ["telegram:7"])
    record = run_turn(harness.deps, telegram("tg1", "let me in", sender="42"))
    # The sender is told, once, in their chat
    assert harness.telegram.texts == [REFUSAL_REPLY]
    assert harness.telegram.sent[0].chat_id == "42" and harness.telegram.sent[0].in_reply_to == "tg1"
    # No model call, and nothing of theirs kept: not even a session
    assert harness.model.requests == []
    assert harness.backend.sessions.get(WS, "telegram.42") is None
    # The audit says who was turned away and why
    assert (record.outcome, record.user_id, record.error) == (
        "sender_refused",
        "telegram:42",
        "not on the allow list",
    )
    assert harness.backend.audit.list_records(WS) == [record]


def test_a_redelivered_refusal_is_sent_once(harness: Harness) -> None:
    # On the web channel the outbox is the send ledger, keyed by the turn the event gives
    harness.policy("allow_list", ["someone-else"])
    run_turn(harness.deps, web("e1", user="stranger"))
    run_turn(harness.deps, web("e1", user="stranger"))
    assert harness.web_replies("web.s1") == [REFUSAL_REPLY]
    assert harness.model.requests == []


def test_a_listed_sender_is_answered(harness: Harness) -> None:
    harness.policy("allow_list", ["telegram:42", "u1"])
    assert run_turn(harness.deps, telegram("tg1", "hi")).outcome == "ok"
    assert run_turn(harness.deps, web("e1", "hi web")).outcome == "ok"
    assert harness.telegram.texts == ["re: hi"]
    assert harness.web_replies("web.s1") == ["re: hi web"]


def test_a_stranger_in_a_group_leaves_the_groups_session_untouched(harness: Harness) -> None:
    harness.policy("allow_list", ["telegram:42"])
    group = {"chat": "-100777", "chat_type": "group"}
    run_turn(harness.deps, telegram("tg1", "from a member", sender="42", **group))
    before = harness.backend.sessions.get(WS, "telegram.-100777")
    assert before is not None and before.version == 1
    # A sender not on the list writes in the same group
    record = run_turn(harness.deps, telegram("tg2", "from a stranger", sender="99", **group))
    assert record.outcome == "sender_refused"
    assert harness.backend.sessions.get(WS, "telegram.-100777") == before
    assert [r.messages[-1].content for r in harness.model.requests] == ["from a member"]


# ---------------------------------------------------------------- pairing


def test_pairing_code_then_approval_then_an_answer(harness: Harness) -> None:
    harness.policy("pairing")
    # The first message gets a code and what the admin must run
    first = run_turn(harness.deps, telegram("tg1", "hello?"))
    [pending] = harness.backend.identities.list_identities(WS, status="pending")
    code = pending.pairing_code
    assert code is not None
    assert harness.telegram.texts == [PAIRING_REPLY.format(code=code)]
    assert f"sigil pairing approve {code}" in harness.telegram.texts[0]
    assert (first.outcome, first.user_id) == ("pairing_required", "telegram:42")
    # Writing again before approval: the same code, still no model and no session
    run_turn(harness.deps, telegram("tg2", "anyone?"))
    assert harness.telegram.texts == [PAIRING_REPLY.format(code=code)] * 2
    assert harness.model.requests == []
    assert harness.backend.sessions.get(WS, "telegram.42") is None

    # An admin approves the code, naming the user
    approve(harness.backend.identities, WS, code, user_id="ada")

    record = run_turn(harness.deps, telegram("tg3", "now?"))
    assert record.outcome == "ok" and record.user_id == "ada"
    assert harness.telegram.texts[-1] == "re: now?"
    # The model saw only the admitted message; the session belongs to ada
    [request] = harness.model.requests
    assert [m.content for m in request.messages] == ["now?"]
    session = harness.backend.sessions.get(WS, "telegram.42")
    assert session is not None and session.user_id == "ada"
    assert [m.content for m in session.active_messages] == ["now?", "re: now?"]
    assert [a.outcome for a in harness.backend.audit.list_records(WS)] == [
        "ok",
        "pairing_required",
        "pairing_required",
    ]


def test_a_blocked_sender_is_dropped_silently_but_audited(harness: Harness) -> None:
    harness.policy("pairing")
    run_turn(harness.deps, telegram("tg1"))
    [pending] = harness.backend.identities.list_identities(WS)
    assert pending.pairing_code is not None
    block(harness.backend.identities, WS, pending.pairing_code)
    record = run_turn(harness.deps, telegram("tg2", "let me in"))
    assert (record.outcome, record.error) == ("sender_refused", "blocked")
    assert len(harness.telegram.sent) == 1  # the pairing reply, and nothing since
    assert harness.model.requests == []
    assert harness.backend.audit.list_records(WS)[0] == record


def test_giving_up_on_a_turned_away_sender_keeps_nothing(harness: Harness) -> None:
    harness.policy("pairing")
    give_up_turn(harness.deps, telegram("tg1"))
    assert harness.telegram.sent == []
    assert harness.backend.sessions.get(WS, "telegram.42") is None


# ---------------------------------------------------------------- sessions per conversation


def test_a_dm_and_a_group_thread_of_one_user_are_two_sessions(harness: Harness) -> None:
    harness.policy("allow")
    thread = {"chat": "-100777", "thread": "9", "chat_type": "group"}
    run_turn(harness.deps, telegram("tg1", "dm one"))
    run_turn(harness.deps, telegram("tg2", "thread one", **thread))
    run_turn(harness.deps, telegram("tg3", "dm two"))
    run_turn(harness.deps, telegram("tg4", "thread two", **thread))
    dm = harness.backend.sessions.get(WS, "telegram.42")
    group = harness.backend.sessions.get(WS, "telegram.-100777.9")
    assert dm is not None and group is not None
    assert [m.content for m in dm.active_messages] == ["dm one", "re: dm one", "dm two", "re: dm two"]
    assert [m.content for m in group.active_messages] == [
        "thread one",
        "re: thread one",
        "thread two",
        "re: thread two",
    ]
    # Each model call saw its own conversation only
    assert [m.content for m in harness.model.requests[3].messages] == [
        "thread one",
        "re: thread one",
        "thread two",
    ]
    # The replies went back where each message came from
    assert [(m.chat_id, m.thread_id) for m in harness.telegram.sent] == [
        ("42", None),
        ("-100777", "9"),
        ("42", None),
        ("-100777", "9"),
    ]
    # One person, one identity, the same user in both sessions
    [who] = harness.backend.identities.list_identities(WS)
    assert (who.status, who.user_id) == ("approved", "telegram:42")
    assert dm.user_id == group.user_id == "telegram:42"


# ---------------------------------------------------------------- redeliveries


def test_a_redelivery_after_ten_minutes_and_twenty_turns_is_skipped(harness: Harness) -> None:
    run_turn(harness.deps, telegram("tg-first", "first"))
    for i in range(20):
        harness.clock.now = T0 + timedelta(seconds=30 * (i + 1))
        run_turn(harness.deps, telegram(f"tg{i}", f"msg {i}"))
    # Slack's last retry, or Telegram's after an outage: long past SQS FIFO's 5 minutes
    harness.clock.now = T0 + timedelta(minutes=10)
    record = run_turn(harness.deps, telegram("tg-first", "first"))
    assert record.outcome == "skipped_duplicate"
    assert len(harness.model.requests) == 21
    assert harness.telegram.texts.count("re: first") == 1
    session = harness.backend.sessions.get(WS, "telegram.42")
    assert session is not None and session.message_count == 42
    assert len(session.recent_event_ids) == len(session.recent_event_times) == 21


def test_event_ids_are_forgotten_after_a_day(harness: Harness) -> None:
    run_turn(harness.deps, telegram("tg-old", "old"))
    harness.clock.now = T0 + timedelta(hours=23)
    run_turn(harness.deps, telegram("tg-recent", "recent"))
    harness.clock.now = T0 + timedelta(hours=25)
    run_turn(harness.deps, telegram("tg-new", "new"))
    session = harness.backend.sessions.get(WS, "telegram.42")
    assert session is not None
    assert session.recent_event_ids == ["tg-recent", "tg-new"]
    at = int((T0 + timedelta(hours=23)).timestamp())
    assert session.recent_event_times == [at, at + 2 * 3600]


def test_a_busy_session_still_skips_its_first_event_a_hundred_turns_later(harness: Harness) -> None:
    # The session used to keep its last 50 event ids; a busy group passes that within the hour
    run_turn(harness.deps, telegram("tg-first", "first"))
    for i in range(100):
        harness.clock.now = T0 + timedelta(seconds=36 * (i + 1))
        run_turn(harness.deps, telegram(f"tg{i}", f"msg {i}"))
    assert run_turn(harness.deps, telegram("tg-first", "first")).outcome == "skipped_duplicate"

"""The agent turn on the embedded (SQLite) backend, driven by a function-backed model and, at the
edge, by the real `openai` SDK against the local fake server."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from shared.adapters.embedded import SqliteEventBus
from shared.adapters.embedded.events import StoredEvent
from shared.agent.loop import EMPTY_REPLY
from shared.agent.preflight import turn_id_for
from shared.agent.reply import reply_seq
from shared.agent.turn import APOLOGY, TurnDeps, give_up_turn, run_turn
from shared.agent.window import split_window
from shared.backend import Backend
from shared.budgets import BudgetCharge, Counters
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.errors import ProviderError
from shared.models import (
    WORKSPACE_WIDE,
    AssistantMessage,
    AuditRecord,
    InboundMessage,
    IndexQuery,
    LaneItem,
    MemoryRecord,
    Message,
    Sender,
    Session,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    WorkspaceConfig,
)
from shared.ports import SessionStore
from shared.providers import NOT_CONFIGURED, build_provider
from shared.providers.base import ChatRequest, Done, Provider
from shared.providers.function import FunctionProvider
from shared.safety.injection import SYSTEM_PROMPT_NOTE
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_openai import FakeOpenAI
from tests.support.fake_openai import FakeReply as OpenAIReply

WS = "ws1"
SESSION = "web.s1"
ANTHROPIC_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "anthropic"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SIGIL_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def item(event_id: str, text: str = "hello", *, session: str = "s1") -> LaneItem:
    return LaneItem(
        inbound=InboundMessage(
            event_id=event_id,
            channel="web",
            workspace_id=WS,
            session_id=f"web.{session}",
            sender=Sender(id="u1", name="Ada"),
            chat_id=session,
            text=text,
        )
    )


def deps_for(
    backend: Backend, settings: Settings, provider: Provider, refs: list[str | None] | None = None
) -> TurnDeps:
    def factory(ref: str | None) -> tuple[Provider, str]:
        if refs is not None:
            refs.append(ref)
        return provider, "test-model"

    return TurnDeps(
        backend=backend,
        settings=settings,
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=factory,
    )


def reply_to(request: ChatRequest) -> str:
    last = request.messages[-1]
    assert isinstance(last, UserMessage)
    return last.content.replace("msg", "reply")


def replies(backend: Backend, session: str = SESSION) -> list[str]:
    return [e.message.text for e in backend.outbox.read(WS, session)]


def stored(backend: Backend, session: str = SESSION) -> Session:
    found = backend.sessions.get(WS, session)
    assert found is not None
    return found


def contents(messages: list[Message]) -> list[str]:
    return [m.content for m in messages]


# ---------------------------------------------------------------- the path of one turn


def test_a_reply_is_sent_and_committed_through_the_real_sdk(backend: Backend, settings: Settings) -> None:
    # Given the gateway's own provider factory pointed at a server that echoes
    with FakeOpenAI() as fake:
        settings = Settings(
            data_dir=settings.data_dir, model="openai/fake-model", OPENAI_BASE_URL=fake.base_url
        )
        deps = TurnDeps(
            backend=backend,
            settings=settings,
            senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
            provider_factory=lambda ref: build_provider(settings, ref),
        )
        # When a user says hello
        record = run_turn(deps, item("e1", "hello"))
        body = fake.requests[0]
    # Then the model saw the system prompt and the message, and the reply went out once. The
    # prompt is assembled (docs/context.md): it opens with the workspace's prompt and ends with
    # the note on quoted untrusted data (docs/safety.md) closes its static prefix, before the
    # turn's context; the parts between (tools, channel hints, the time) are checked in
    # tests/unit/test_context.py.
    system = body["messages"][0]["content"]
    static, context = system.split(f"{SYSTEM_PROMPT_NOTE}\n\n")
    assert static.startswith(WorkspaceConfig(id=WS).system_prompt) and context.startswith("Now: ")
    assert body["model"] == "fake-model"
    assert body["messages"] == [{"role": "system", "content": system}, {"role": "user", "content": "hello"}]
    [entry] = backend.outbox.read(WS, SESSION)
    assert entry.message.text == "hello"
    assert entry.message.turn_id == turn_id_for(item("e1")) == record.turn_id
    assert (entry.message.in_reply_to, entry.message.chat_id, entry.message.channel) == ("e1", "s1", "web")
    # And both messages are in the session's window
    session = stored(backend)
    assert [(m.kind, m.content) for m in session.active_messages] == [
        ("user", "hello"),
        ("assistant", "hello"),
    ]
    assert (session.message_count, session.rolled_out_count, session.recent_event_ids) == (2, 0, ["e1"])
    assert session.user_id == "u1" and session.version == 1
    # And the audit carries the usage the server reported
    assert record.outcome == "ok" and record.model == "openai/fake-model"
    assert (record.tokens_in, record.tokens_out) == (len(system.split()) + 1, 1)


def test_the_model_sees_the_window_then_the_new_message(backend: Backend, settings: Settings) -> None:
    provider = FunctionProvider(reply_to)
    deps = deps_for(backend, settings, provider)
    for i in range(3):
        run_turn(deps, item(f"e{i}", f"msg {i}"))
    assert contents(provider.requests[2].messages) == ["msg 0", "reply 0", "msg 1", "reply 1", "msg 2"]


def test_workspace_config_sets_prompt_window_and_model(backend: Backend, settings: Settings) -> None:
    backend.workspaces.put(
        WorkspaceConfig(id=WS, system_prompt="Talk like a pirate.", active_window=4, model="x/y")
    )
    provider, refs = FunctionProvider(reply_to), list[str | None]()
    deps = deps_for(backend, settings, provider, refs)
    for i in range(4):
        run_turn(deps, item(f"e{i}", f"msg {i}"))
    last = provider.requests[-1]
    # The assembled prompt opens with the workspace's prompt; the safety note closes its static
    # prefix, the part the providers cache.
    assert last.system.startswith("Talk like a pirate.\n\n")
    assert last.system[: last.cache_prefix].endswith(SYSTEM_PROMPT_NOTE)
    assert contents(last.messages) == ["msg 1", "reply 1", "msg 2", "reply 2", "msg 3"]
    assert refs == ["x/y"] * 4


# ---------------------------------------------------------------- the window and Tier 1


def test_25_turns_keep_20_in_the_window_and_roll_the_rest_into_tier1_and_the_index(
    backend: Backend, settings: Settings
) -> None:
    deps = deps_for(backend, settings, FunctionProvider(reply_to))
    for i in range(25):
        run_turn(deps, item(f"e{i}", f"msg {i}"))
    session = stored(backend)
    # The window holds the newest 20 messages: turns 15..24
    assert len(session.active_messages) == 20
    assert session.active_messages[0].content == "msg 15"
    assert (session.message_count, session.rolled_out_count) == (50, 30)
    # Tier 1 holds the 30 older ones in order, with consecutive seq from 0
    records = backend.memory.get_messages(WS, SESSION, limit=100)
    assert [r.seq for r in records] == list(range(30))
    assert [r.text for r in records[:4]] == ["msg 0", "reply 0", "msg 1", "reply 1"]
    assert [r.role for r in records[:2]] == ["user", "assistant"]
    assert all(r.message is not None and r.message.id == r.id for r in records)
    # And the index holds the same 30, findable by text
    assert backend.index.count(WS) == 30
    hits = backend.index.search(WS, IndexQuery(scope=WORKSPACE_WIDE, text="reply 7", k=5)).text_hits
    assert any(h.doc.text == "reply 7" and h.doc.tier == "message" for h in hits)


def test_tier1_records_belong_to_the_user_who_wrote_them_or_was_answered(
    backend: Backend, settings: Settings
) -> None:
    # A group thread: two people in one session. Erasure finds a person's words by these owners.
    deps = deps_for(backend, settings, FunctionProvider(reply_to))
    for i in range(15):
        turn = item(f"e{i}", f"msg {i}")
        sender = Sender(id="u1", name="Ada") if i % 2 == 0 else Sender(id="u2", name="Bob")
        inbound = turn.inbound.model_copy(update={"sender": sender})
        run_turn(deps, turn.model_copy(update={"inbound": inbound}))
    ada = backend.identities.get(WS, "web", "u1")
    bob = backend.identities.get(WS, "web", "u2")
    assert ada is not None and bob is not None and ada.user_id != bob.user_id
    records = backend.memory.get_messages(WS, SESSION, limit=100)
    assert len(records) == 10  # turns 0..4 rolled out: a message and its reply each
    for r in records:
        turn_no = int(r.text.split()[1])
        assert r.user_id == (ada.user_id if turn_no % 2 == 0 else bob.user_id), r.text
        # The sender's name is the author of their own words, never of the replies to them.
        assert r.author == (("Ada" if turn_no % 2 == 0 else "Bob") if r.role == "user" else None), r.text
    # The index carries the author too: it is what a query naming Bob is matched against.
    docs = {
        h.doc.text: h.doc
        for h in backend.index.search(WS, IndexQuery(scope=WORKSPACE_WIDE, text="msg", k=50)).text_hits
    }
    assert docs["msg 3"].metadata["author"] == "Bob"
    assert "author" not in docs["reply 3"].metadata


def compaction_due(backend: Backend) -> list[StoredEvent]:
    """The CompactionDue events on the bus (each turn also leaves its delayed TurnCommitted)."""
    assert isinstance(backend.events, SqliteEventBus)
    return [e for e in backend.events.list_events(limit=1000) if e.event.type == "CompactionDue"]


def test_compaction_is_due_each_time_tier1_crosses_the_summary_batch(
    backend: Backend, settings: Settings
) -> None:
    assert isinstance(backend.events, SqliteEventBus)
    deps = deps_for(backend, settings, FunctionProvider(reply_to))
    # 34 turns roll out 48 messages: no batch of 50 yet
    for i in range(34):
        run_turn(deps, item(f"e{i}", f"msg {i}"))
    assert compaction_due(backend) == []
    # The 35th rolls out messages 48 and 49: Tier 1 reaches 50
    run_turn(deps, item("e34", "msg 34"))
    [stored_event] = compaction_due(backend)
    event = stored_event.event
    assert (event.type, event.workspace_id, event.session_id) == ("CompactionDue", WS, SESSION)
    assert event.detail == {"first_seq": 0, "last_seq": 49}
    # And not again until the next 50
    run_turn(deps, item("e35", "msg 35"))
    assert len(compaction_due(backend)) == 1


def test_a_small_batch_crossed_twice_in_one_commit_announces_both(
    backend: Backend, settings: Settings
) -> None:
    assert isinstance(backend.events, SqliteEventBus)
    backend.workspaces.put(WorkspaceConfig(id=WS, active_window=2, summary_batch=1))
    deps = deps_for(backend, settings, FunctionProvider(reply_to))
    run_turn(deps, item("e0", "msg 0"))
    run_turn(deps, item("e1", "msg 1"))  # rolls out two messages at once
    assert [e.event.detail for e in compaction_due(backend)] == [
        {"first_seq": 0, "last_seq": 0},
        {"first_seq": 1, "last_seq": 1},
    ]


def test_the_window_never_starts_with_an_orphaned_tool_result(backend: Backend, settings: Settings) -> None:
    # Given a session whose window would, after the next turn, begin at a tool result
    call = ToolCall(id="c1", name="lookup", arguments='{"q":"x"}')
    history: list[Message] = [
        UserMessage(content="look it up"),
        AssistantMessage(tool_calls=[call]),
        ToolResultMessage(tool_call_id="c1", name="lookup", content="found"),
        AssistantMessage(content="it is found"),
    ]
    backend.sessions.save(
        Session(id=SESSION, workspace_id=WS, active_messages=history, message_count=4), expected_version=0
    )
    backend.workspaces.put(WorkspaceConfig(id=WS, active_window=4))
    provider = FunctionProvider(reply_to)
    # When a turn adds two messages (six in all, two to roll out, the second being the call)
    run_turn(deps_for(backend, settings, provider), item("e1", "msg 1"))
    # Then the whole earlier turn rolls out, tool result and call together: the window opens on
    # the next user message, never on a tool result or an assistant message
    session = stored(backend)
    assert contents(session.active_messages) == ["msg 1", "reply 1"]
    records = backend.memory.get_messages(WS, SESSION)
    assert [r.role for r in records] == ["user", "assistant", "tool", "assistant"]
    assert [r.seq for r in records] == [0, 1, 2, 3]
    assert records[1].text == 'lookup({"q":"x"})'
    assert session.rolled_out_count == 4


def test_split_window_opens_the_window_on_a_user_message() -> None:
    call = ToolCall(id="c", name="f")
    a = AssistantMessage(tool_calls=[call])
    t1 = ToolResultMessage(tool_call_id="c", name="f", content="1")
    t2 = ToolResultMessage(tool_call_id="c", name="f", content="2")
    u = UserMessage(content="u")
    assert split_window([a, t1, t2, u], 3) == ([a, t1, t2], [u])
    # Room for all four, but a window opening on the assistant's call is refused by providers
    assert split_window([a, t1, t2, u], 4) == ([a, t1, t2], [u])
    # No user message at all (a window stored before the rule): nothing can open it
    assert split_window([t1], 1) == ([t1], [])
    assert split_window([a, t1], 5) == ([a, t1], [])
    assert split_window([], 20) == ([], [])


# ---------------------------------------------------------------- idempotency and failures


def test_the_same_item_twice_sends_one_reply_and_skips_the_second(
    backend: Backend, settings: Settings
) -> None:
    deps = deps_for(backend, settings, FunctionProvider(reply_to))
    first = run_turn(deps, item("e1", "msg 1"))
    second = run_turn(deps, item("e1", "msg 1"))
    assert (first.outcome, second.outcome) == ("ok", "skipped_duplicate")
    assert replies(backend) == ["reply 1"]
    assert stored(backend).message_count == 2
    assert second.turn_id == first.turn_id


def test_a_turn_rerun_after_losing_its_commit_hits_the_send_ledger(
    backend: Backend, settings: Settings
) -> None:
    # Given a turn that replied, and then its commit lost (a crash between send and commit)
    deps = deps_for(backend, settings, FunctionProvider(reply_to))
    run_turn(deps, item("e1", "msg 1"))
    backend.sessions.delete(WS, SESSION)
    # When the lane delivers it again, it runs again but the user sees one reply
    assert run_turn(deps, item("e1", "msg 1")).outcome == "ok"
    assert replies(backend) == ["reply 1"]
    assert contents(stored(backend).active_messages) == ["msg 1", "reply 1"]


def test_no_model_configured_tells_the_user_and_keeps_their_message(
    backend: Backend, settings: Settings
) -> None:
    deps = TurnDeps(
        backend=backend,
        settings=settings,
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=lambda ref: build_provider(settings, ref),
    )
    record = run_turn(deps, item("e1", "anyone there?"))
    assert replies(backend) == [NOT_CONFIGURED]
    assert record.outcome == "model_not_configured" and record.error == NOT_CONFIGURED
    session = stored(backend)
    assert [(m.kind, m.content) for m in session.active_messages] == [("user", "anyone there?")]
    # The redelivered event is not answered twice
    assert run_turn(deps, item("e1", "anyone there?")).outcome == "skipped_duplicate"
    assert replies(backend) == [NOT_CONFIGURED]


def test_a_provider_error_is_audited_and_raised_for_the_lane_to_retry(
    backend: Backend, settings: Settings
) -> None:
    with FakeOpenAI() as fake:
        settings = Settings(
            data_dir=settings.data_dir,
            model="openai/fake-model",
            OPENAI_API_KEY="sk-test-key-SECRET",
            OPENAI_BASE_URL=fake.base_url,
            provider_max_retries=0,
        )
        deps = TurnDeps(
            backend=backend,
            settings=settings,
            senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
            provider_factory=lambda ref: build_provider(settings, ref),
        )
        # Given a provider that fails
        fake.fail(401, message="Incorrect API key provided: {api_key}.", code="invalid_api_key")
        with pytest.raises(ProviderError):
            run_turn(deps, item("e1", "hi"))
        # Then nothing was sent or committed, and the failure is audited without the key
        assert replies(backend) == []
        assert backend.sessions.get(WS, SESSION) is None
        [audit] = backend.audit.list_records(WS)
        assert audit.outcome == "error" and audit.error is not None and "HTTP 401" in audit.error
        assert "SECRET" not in audit.error
        # When the lane retries and the provider is back, the user gets one reply
        assert run_turn(deps, item("e1", "hi")).outcome == "ok"
    assert replies(backend) == ["hi"]
    assert [a.outcome for a in backend.audit.list_records(WS)] == ["ok", "error"]


def test_an_anthropic_refusal_is_audited_as_refused(backend: Backend, settings: Settings) -> None:
    # Given the gateway's own Anthropic provider, and a model that refuses (the API's own capture:
    # stop_reason "refusal" with an explanation)
    with FakeAnthropic() as fake:
        settings = Settings(
            data_dir=settings.data_dir,
            model="anthropic/claude-sonnet-4-6",
            ANTHROPIC_API_KEY="sk-ant-test",
            ANTHROPIC_BASE_URL=fake.base_url,
        )
        deps = TurnDeps(
            backend=backend,
            settings=settings,
            senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
            provider_factory=lambda ref: build_provider(settings, ref),
        )
        fake.replay(ANTHROPIC_FIXTURES / "messages_stream_refusal_response.sse")
        record = run_turn(deps, item("e1", "hello"))
    # Then the user gets the explanation, and the audit says the model refused, not "ok"
    assert replies(backend) == ["This request was refused due to policy."]
    assert record.outcome == "refused"
    assert [a.outcome for a in backend.audit.list_records(WS)] == ["refused"]


@pytest.mark.parametrize(
    "reply",
    [OpenAIReply(refusal="I can't help with that."), OpenAIReply(finish_reason="content_filter")],
    ids=["refusal-field", "content-filter"],
)
def test_an_openai_refusal_is_audited_as_refused(
    backend: Backend, settings: Settings, reply: OpenAIReply
) -> None:
    with FakeOpenAI() as fake:
        settings = Settings(
            data_dir=settings.data_dir, model="openai/fake-model", OPENAI_BASE_URL=fake.base_url
        )
        deps = TurnDeps(
            backend=backend,
            settings=settings,
            senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
            provider_factory=lambda ref: build_provider(settings, ref),
        )
        fake.respond(reply)
        record = run_turn(deps, item("e1", "hello"))
    assert record.outcome == "refused"
    assert [a.outcome for a in backend.audit.list_records(WS)] == ["refused"]


def test_an_audit_record_stored_before_the_safety_fields_still_loads() -> None:
    # A record as stored before `quoted` and `injection_rules` existed
    old = AuditRecord(workspace_id=WS, session_id=SESSION, turn_id="t1", outcome="ok").model_dump(
        mode="json", exclude={"quoted", "injection_rules"}
    )
    loaded = AuditRecord.model_validate(old)
    assert (loaded.quoted, loaded.injection_rules) == ([], {})


def test_giving_up_apologises_once_and_keeps_the_message(backend: Backend, settings: Settings) -> None:
    deps = deps_for(backend, settings, FunctionProvider(reply_to))
    give_up_turn(deps, item("e1", "msg 1"))
    give_up_turn(deps, item("e1", "msg 1"))
    assert replies(backend) == [APOLOGY]
    assert contents(stored(backend).active_messages) == ["msg 1"]
    assert run_turn(deps, item("e1", "msg 1")).outcome == "skipped_duplicate"


def test_a_concurrent_session_write_is_merged_by_the_commit_retry(
    backend: Backend, settings: Settings
) -> None:
    deps = deps_for(backend, settings, FunctionProvider(reply_to))
    run_turn(deps, item("e0", "msg 0"))

    def model_while_an_admin_pauses_the_session(request: ChatRequest) -> str:
        # Another writer saves the session while the model is thinking
        current = stored(backend)
        backend.sessions.save(
            current.model_copy(update={"status": "paused"}), expected_version=current.version
        )
        return reply_to(request)

    deps = deps_for(backend, settings, FunctionProvider(model_while_an_admin_pauses_the_session))
    assert run_turn(deps, item("e1", "msg 1")).outcome == "ok"
    session = stored(backend)
    assert session.status == "paused"  # the other writer's change survived
    assert contents(session.active_messages) == ["msg 0", "reply 0", "msg 1", "reply 1"]
    assert session.version == 3  # first turn, the other writer, then this turn's retried commit
    # The audit record rode the retried commit: one per turn, not one per attempt
    assert [a.event_id for a in backend.audit.list_records(WS)] == ["e1", "e0"]


def test_a_refusal_or_empty_answer_still_replies(backend: Backend, settings: Settings) -> None:
    refusing = FunctionProvider(lambda r: [Done(finish_reason="refusal", refusal="I can't help with that.")])
    run_turn(deps_for(backend, settings, refusing), item("e1"))
    run_turn(deps_for(backend, settings, FunctionProvider(lambda r: "")), item("e2"))
    assert replies(backend) == ["I can't help with that.", EMPTY_REPLY]


# ---------------------------------------------------------------- one outbox write, one commit


class RecordingSessions:
    """The session store, with a note of every save's archive and audit record."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self.saves: list[tuple[list[str], str | None]] = []

    def get(self, workspace_id: str, session_id: str) -> Session | None:
        return self.store.get(workspace_id, session_id)

    def get_with_budget(
        self, workspace_id: str, session_id: str, counters: Sequence[str]
    ) -> tuple[Session | None, dict[str, Counters]]:
        return self.store.get_with_budget(workspace_id, session_id, counters)

    def save(
        self,
        session: Session,
        *,
        expected_version: int,
        archive: Sequence[MemoryRecord] = (),
        audit: AuditRecord | None = None,
        charge: BudgetCharge | None = None,
    ) -> Session:
        self.saves.append(([r.text for r in archive], audit.outcome if audit else None))
        return self.store.save(
            session, expected_version=expected_version, archive=archive, audit=audit, charge=charge
        )

    def list_sessions(self, workspace_id: str, *, limit: int = 100) -> list[Session]:
        return self.store.list_sessions(workspace_id, limit=limit)

    def delete(self, workspace_id: str, session_id: str) -> None:
        self.store.delete(workspace_id, session_id)


def test_reply_seq_orders_turns_and_parts() -> None:
    assert [reply_seq(0), reply_seq(0, 1), reply_seq(2), reply_seq(2, 99)] == [1, 2, 201, 300]
    with pytest.raises(ValueError):
        reply_seq(2, 100)


def test_each_turns_reply_asks_for_the_seq_its_session_count_gives(
    backend: Backend, settings: Settings
) -> None:
    deps = deps_for(backend, settings, FunctionProvider(reply_to))
    for i in range(3):
        run_turn(deps, item(f"e{i}", f"msg {i}"))
    entries = backend.outbox.read(WS, SESSION)
    assert [(e.seq, e.message.text) for e in entries] == [(1, "reply 0"), (201, "reply 1"), (401, "reply 2")]


def test_the_commit_is_one_save_carrying_the_roll_out_and_the_audit_record(
    backend: Backend, settings: Settings
) -> None:
    backend.workspaces.put(WorkspaceConfig(id=WS, active_window=2))
    sessions = RecordingSessions(backend.sessions)
    deps = deps_for(replace(backend, sessions=sessions), settings, FunctionProvider(reply_to))
    for i in range(3):
        run_turn(deps, item(f"e{i}", f"msg {i}"))
    # One save a turn: the first rolls nothing out, the next two roll out the turn before
    assert sessions.saves == [
        ([], "ok"),
        (["msg 0", "reply 0"], "ok"),
        (["msg 1", "reply 1"], "ok"),
    ]
    assert [r.text for r in backend.memory.get_messages(WS, SESSION)] == [
        "msg 0",
        "reply 0",
        "msg 1",
        "reply 1",
    ]
    assert backend.index.count(WS) == 4
    assert len(backend.audit.list_records(WS)) == 3


# ---------------------------------------------------------------- audit and logs


def test_the_audit_record_and_the_log_line(
    backend: Backend, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    provider = FunctionProvider(lambda r: "a private answer")
    deps = deps_for(backend, settings, provider)
    with caplog.at_level(logging.INFO, logger="sigil.turn"):
        record = run_turn(deps, item("e1", "a private question"))
    [audit] = backend.audit.list_records(WS)
    assert audit == record
    assert (audit.workspace_id, audit.session_id, audit.user_id, audit.event_id) == (WS, SESSION, "u1", "e1")
    assert audit.turn_id == turn_id_for(item("e1"))
    assert audit.model == "function/test-model"
    # The model is sent the assembled prompt (docs/context.md), counted in words by the provider.
    system_words = len(provider.requests[0].system.split())
    assert (audit.tokens_in, audit.tokens_out) == (system_words + 3, 3)
    assert audit.duration_ms > 0 and audit.outcome == "ok" and audit.error is None
    # One structured line, and never the conversation's text
    [line] = [r for r in caplog.records if r.name == "sigil.turn"]
    fields = line.__dict__
    assert {k: fields[k] for k in ("workspace_id", "session_id", "event_id", "outcome", "tokens_in")} == {
        "workspace_id": WS,
        "session_id": SESSION,
        "event_id": "e1",
        "outcome": "ok",
        "tokens_in": system_words + 3,
    }
    assert fields["duration_ms"] == audit.duration_ms
    assert "private" not in str(fields) and "private" not in caplog.text

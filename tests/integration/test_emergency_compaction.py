"""Emergency compaction: a turn whose context overflows rolls its window into Tier 1 (10, 3, then 1
message kept) and calls the model again; on the embedded and AWS-on-moto sets, and through the
real openai SDK against the local OpenAI stand-in answering HTTP 400 context_length_exceeded."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from shared.agent.emergency import emergency_compact, is_context_overflow
from shared.agent.turn import TurnDeps, run_turn
from shared.agent.window import Origin, tier1_records
from shared.backend import Backend
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.errors import ProviderError
from shared.models import (
    WORKSPACE_WIDE,
    AssistantMessage,
    InboundMessage,
    IndexQuery,
    LaneItem,
    Sender,
    Session,
    UserMessage,
)
from shared.providers import build_provider
from shared.providers.base import ChatRequest, Provider
from shared.providers.function import FunctionProvider
from tests.contract.factories import BACKEND_FACTORIES
from tests.support.fake_openai import FakeOpenAI

WS, SID = "default", "web.s1"


@pytest.fixture(params=sorted(BACKEND_FACTORIES))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with BACKEND_FACTORIES[request.param](tmp_path / "b") as contract:
        yield contract.backend


def item(i: int, text: str) -> LaneItem:
    return LaneItem(
        inbound=InboundMessage(
            event_id=f"e{i}",
            channel="web",
            workspace_id=WS,
            session_id=SID,
            sender=Sender(id="alice"),
            chat_id="s1",
            text=text,
        )
    )


def deps(backend: Backend, provider: Provider | Callable[[], Provider]) -> TurnDeps:
    def factory(ref: str | None) -> tuple[Provider, str]:
        return (provider if isinstance(provider, Provider) else provider()), "m"

    return TurnDeps(
        backend=backend,
        settings=Settings(),
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=factory,
    )


class ContextLimit:
    """A model with a context of `limit` messages: over it, OpenAI's context_length_exceeded."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.sizes: list[int] = []  # messages per request, in order

    def __call__(self, request: ChatRequest) -> str:
        self.sizes.append(len(request.messages))
        if len(request.messages) > self.limit:
            raise ProviderError(
                "the model provider failed (BadRequestError, HTTP 400, code context_length_exceeded)"
            )
        last = request.messages[-1]
        assert isinstance(last, UserMessage)
        return f"re: {last.content}"


def stored(backend: Backend) -> Session:
    session = backend.sessions.get(WS, SID)
    assert session is not None
    return session


def test_an_overflowing_turn_rolls_its_window_into_tier1_and_answers(backend: Backend) -> None:
    model = ContextLimit(limit=100)
    d = deps(backend, FunctionProvider(model))
    for i in range(9):  # 18 messages: all still in the 20-message window
        run_turn(d, item(i, f"message number {i}"))
    assert (len(stored(backend).active_messages), stored(backend).rolled_out_count) == (18, 0)
    # The model's context now holds 12 messages: the window (18) + the new one overflows
    model.limit, model.sizes = 12, []
    record = run_turn(d, item(9, "the tenth message"))
    assert record.outcome == "ok"
    # First the full request, then the window cut to 10 (at a user message) + the new message
    assert model.sizes == [19, 11]
    session = stored(backend)
    assert [m.content for m in session.active_messages][-2:] == ["the tenth message", "re: the tenth message"]
    assert (len(session.active_messages), session.rolled_out_count, session.message_count) == (12, 8, 20)
    # The rolled-out messages are in Tier 1, in order, and in the index
    tier1 = backend.memory.get_messages(WS, SID)
    assert [(r.seq, r.text) for r in tier1] == [
        (0, "message number 0"),
        (1, "re: message number 0"),
        (2, "message number 1"),
        (3, "re: message number 1"),
        (4, "message number 2"),
        (5, "re: message number 2"),
        (6, "message number 3"),
        (7, "re: message number 3"),
    ]
    hits = backend.index.search(
        WS, IndexQuery(scope=WORKSPACE_WIDE, text="number 2", tiers=["message"], session_id=SID)
    )
    assert {h.doc.id for h in hits.text_hits} >= {tier1[4].id}
    # Indexed as the turn's commit indexes: owned by the user, with the neighbours as context
    assert {r.user_id for r in tier1} == {"alice"}
    doc = next(h.doc for h in hits.text_hits if h.doc.id == tier1[4].id)
    assert doc.metadata["context"].split("\n") == [
        "message number 1",
        "re: message number 1",
        "re: message number 2",
        "message number 3",
    ]
    # The next turn starts from the smaller window (12 + its own message: still one too many for
    # this model, so it compacts again); with room enough it would not have to
    model.sizes = []
    assert run_turn(d, item(10, "after")).outcome == "ok"
    assert model.sizes == [13, 11]
    model.limit, model.sizes = 100, []
    assert run_turn(d, item(11, "roomy")).outcome == "ok"
    assert model.sizes == [13]


def test_the_stages_go_down_to_one_turn_and_then_the_error_stands(backend: Backend) -> None:
    model = ContextLimit(limit=100)
    d = deps(backend, FunctionProvider(model))
    for i in range(9):
        run_turn(d, item(i, f"m{i}"))
    model.limit, model.sizes = 3, []  # room for the last turn and the new message only
    assert run_turn(d, item(9, "x")).outcome == "ok"
    # 18 + 1, then 10 + 1, then 2 + 1: a window of 3 opens on the last turn's user message, and
    # keep 1 would cut there too, so it is not tried
    assert model.sizes == [19, 11, 3]
    assert stored(backend).rolled_out_count == 16
    # A message too long on its own: the stages cut the window to the last turn (4 + 1, then
    # 2 + 1), nothing more can go, and the provider's error stands
    model.limit, model.sizes = 0, []
    with pytest.raises(ProviderError, match="context_length_exceeded"):
        run_turn(d, item(10, "y"))
    assert model.sizes == [5, 3]
    session = stored(backend)
    # The failed turn committed nothing; the roll-out it saved stays (a retry starts smaller)
    assert (session.recent_event_ids[-1], session.rolled_out_count) == ("e9", 18)


def test_other_provider_errors_are_not_treated_as_overflows(backend: Backend) -> None:
    def down(request: ChatRequest) -> str:
        raise ProviderError("the model provider failed (InternalServerError, HTTP 500)", retryable=True)

    with pytest.raises(ProviderError):
        run_turn(deps(backend, FunctionProvider(down)), item(0, "hi"))
    assert backend.memory.count_messages(WS, SID) == 0


def test_through_the_openai_sdk_a_400_context_length_exceeded_compacts(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        contract = stack.enter_context(BACKEND_FACTORIES["embedded"](tmp_path / "b"))
        fake = stack.enter_context(FakeOpenAI(lambda body: f"ok {len(body['messages'])}"))
        settings = Settings(
            model="openai/fake-model",
            OPENAI_BASE_URL=fake.base_url,
            OPENAI_API_KEY="sk-test",
            provider_max_retries=0,
        )
        d = deps(contract.backend, lambda: build_provider(settings, None)[0])
        for i in range(6):
            run_turn(d, item(i, f"m{i}"))
        fake.fail(
            400, message="This model's maximum context length is 8 tokens.", code="context_length_exceeded"
        )
        record = run_turn(d, item(6, "one more"))
        assert record.outcome == "ok"
        # system + 12 window messages + the new one, then system + 10 + the new one
        assert [len(b["messages"]) for b in fake.requests[-2:]] == [14, 12]
        assert contract.backend.memory.count_messages(WS, SID) == 2


# ---------------------------------------------------------------- the pieces


ORIGIN = Origin(conversation=SID, group=False)


def session_of(turns: int) -> Session:
    messages: list[UserMessage | AssistantMessage] = []
    for i in range(turns):
        messages += [UserMessage(id=f"u{i}", content=f"q{i}"), AssistantMessage(id=f"a{i}", content=f"r{i}")]
    return Session(
        id=SID, workspace_id=WS, active_messages=list(messages), rolled_out_count=40, message_count=60
    )


def test_stages_keep_whole_turns_and_records_are_the_turns_own_shape() -> None:
    first = session_of(10)
    stages = list(emergency_compact(first, ORIGIN))
    assert [(s.keep, len(s.session.active_messages), len(s.records)) for s in stages] == [
        (10, 10, 10),
        # A window of 3 would open on an assistant reply: the cut moves on to the next user
        # message, leaving the last turn; keep 1 would cut there too, so there is no third stage.
        (3, 2, 8),
    ]
    assert [r.seq for r in stages[0].records] == list(range(40, 50))
    assert stages[-1].session.rolled_out_count == 58
    # Exactly the records the turn's commit writes for the same roll-out
    assert stages[0].records == tier1_records(first, first.active_messages[:10], ORIGIN)


def test_overflow_detection() -> None:
    assert is_context_overflow(ProviderError("x", code="context_overflow"))
    assert is_context_overflow(
        ProviderError("failed (BadRequestError, HTTP 400, code context_length_exceeded)")
    )
    assert is_context_overflow(ProviderError("prompt is too long: 210000 tokens > 200000 maximum"))
    assert not is_context_overflow(ProviderError("failed (RateLimitError, HTTP 429)"))
    assert not is_context_overflow(ValueError("context_length_exceeded"))

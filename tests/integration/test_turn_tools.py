"""Tools inside a turn: scenario tests on the embedded (SQLite) backend with a function-backed
model, and one through the real `openai` SDK against the local fake server's wire format.

Each scripted model decides from what it is shown, as a real one does: it reads the tool results
since the user's message and picks its next call (or its answer) from them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from shared.agent.loop import LIMIT_REPLY, run_loop
from shared.agent.preflight import turn_id_for
from shared.agent.turn import TurnDeps, run_turn
from shared.backend import Backend
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.memory.scope import owner_scope
from shared.models import (
    AssistantMessage,
    AuditRecord,
    InboundMessage,
    LaneItem,
    Message,
    RecallScope,
    Sender,
    Session,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    WorkspaceConfig,
)
from shared.providers import build_provider
from shared.providers.base import ChatRequest, ProviderEvent, TextDelta, ToolCallEvent, Usage
from shared.providers.function import FunctionProvider, ModelFunction, estimate_tokens
from shared.tools import ToolContext, default_registry, tool
from tests.support.fake_openai import FakeOpenAI

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "openai"
WS = "ws1"
SESSION = "web.s1"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SIGIL_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


# ---------------------------------------------------------------- the tools the scenarios use


class Ran:
    """What the tools were called with, in order, across a test."""

    calls: list[tuple[str, str]] = []


@pytest.fixture(autouse=True)
def ran() -> Iterator[type[Ran]]:
    Ran.calls = []
    yield Ran


class PersonArgs(BaseModel):
    person: str


class CityArgs(BaseModel):
    city: str


class WeatherArgs(BaseModel):
    weather: str


class NoArgs(BaseModel):
    pass


@tool
def home_city(args: PersonArgs, ctx: ToolContext) -> str:
    """The city a person lives in."""
    Ran.calls.append(("home_city", args.person))
    return {"Ada": "Paris"}.get(args.person, "unknown")


@tool
def get_weather(args: CityArgs, ctx: ToolContext) -> str:
    """Today's weather in a city."""
    Ran.calls.append(("get_weather", args.city))
    return f"light rain, 14°C in {args.city}"


@tool
def outfit(args: WeatherArgs, ctx: ToolContext) -> str:
    """What to wear in some weather."""
    Ran.calls.append(("outfit", args.weather))
    return "a raincoat" if "rain" in args.weather else "a t-shirt"


@tool
def tick(args: NoArgs, ctx: ToolContext) -> str:
    """Counts its calls."""
    Ran.calls.append(("tick", ""))
    return str(len(Ran.calls))


@tool
def flaky(args: NoArgs, ctx: ToolContext) -> str:
    """Always fails."""
    Ran.calls.append(("flaky", ""))
    raise ConnectionError("upstream refused token=sk-live-SECRET")


TOOLS = default_registry().extended(home_city, get_weather, outfit, tick, flaky)


# ---------------------------------------------------------------- helpers


def item(event_id: str, text: str) -> LaneItem:
    return LaneItem(
        inbound=InboundMessage(
            event_id=event_id,
            channel="web",
            workspace_id=WS,
            session_id=SESSION,
            sender=Sender(id="u1", name="Ada"),
            chat_id="s1",
            text=text,
        )
    )


def deps_for(backend: Backend, settings: Settings, model: ModelFunction | FunctionProvider) -> TurnDeps:
    provider = model if isinstance(model, FunctionProvider) else FunctionProvider(model)
    return TurnDeps(
        backend=backend,
        settings=settings,
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=lambda ref: (provider, "test-model"),
        tools=TOOLS,
    )


def calls(*named: tuple[str, dict[str, Any]], ids: str = "c") -> list[ProviderEvent]:
    return [
        ToolCallEvent(call=ToolCall(id=f"{ids}{i}", name=name, arguments=json.dumps(args)))
        for i, (name, args) in enumerate(named)
    ]


def results_since_user(request: ChatRequest) -> list[ToolResultMessage]:
    """The tool results the model has been given in this turn so far."""
    last_user = max(i for i, m in enumerate(request.messages) if isinstance(m, UserMessage))
    return [m for m in request.messages[last_user:] if isinstance(m, ToolResultMessage)]


def shape(messages: list[Message]) -> list[tuple[str, str]]:
    """Each message as (kind, what it says): text, the calls it makes, or the result it carries."""
    out: list[tuple[str, str]] = []
    for m in messages:
        if isinstance(m, AssistantMessage) and m.tool_calls:
            out.append(("call", ", ".join(f"{c.name}{c.arguments}" for c in m.tool_calls)))
        else:
            out.append((m.kind, m.content))
    return out


def error_of(m: Message) -> dict[str, Any]:
    assert isinstance(m, ToolResultMessage) and m.is_error
    body: dict[str, Any] = json.loads(m.content)
    return body


def replies(backend: Backend) -> list[str]:
    return [e.message.text for e in backend.outbox.read(WS, SESSION)]


def stored(backend: Backend) -> Session:
    found = backend.sessions.get(WS, SESSION)
    assert found is not None
    return found


def audits(backend: Backend) -> list[AuditRecord]:
    return backend.audit.list_records(WS)


# ---------------------------------------------------------------- a chain of tools


def chain_model(request: ChatRequest) -> str | list[ProviderEvent]:
    """Finds where Ada lives, that city's weather, then what to wear in it; each from the last result."""
    done = results_since_user(request)
    if len(done) == 0:
        return calls(("home_city", {"person": "Ada"}), ids="a")
    if len(done) == 1:
        return calls(("get_weather", {"city": done[0].content}), ids="b")
    if len(done) == 2:
        return calls(("outfit", {"weather": done[1].content}), ids="c")
    return f"Take {done[2].content}: {done[1].content}."


def test_a_three_step_tool_chain_answers_from_each_result(
    backend: Backend, settings: Settings, ran: type[Ran]
) -> None:
    provider = FunctionProvider(chain_model)
    # When Ada asks a question that takes three tools, one after the other
    record = run_turn(deps_for(backend, settings, provider), item("e1", "What should I wear today?"))
    # Then each tool ran once, fed by the one before
    assert ran.calls == [
        ("home_city", "Ada"),
        ("get_weather", "Paris"),
        ("outfit", "light rain, 14°C in Paris"),
    ]
    # And the model saw, at each step, the question and everything its tools returned so far
    question = ("user", "What should I wear today?")
    step1 = ("call", 'home_city{"person": "Ada"}')
    step2 = ("call", 'get_weather{"city": "Paris"}')
    step3 = ("call", 'outfit{"weather": "light rain, 14\\u00b0C in Paris"}')
    assert [shape(r.messages) for r in provider.requests] == [
        [question],
        [question, step1, ("tool", "Paris")],
        [question, step1, ("tool", "Paris"), step2, ("tool", "light rain, 14°C in Paris")],
        [
            question,
            *[step1, ("tool", "Paris"), step2, ("tool", "light rain, 14°C in Paris")],
            *[step3, ("tool", "a raincoat")],
        ],
    ]
    # And every tool was offered on every call
    assert provider.requests
    assert all([t.name for t in r.tools] == sorted(t.name for t in TOOLS) for r in provider.requests)
    # And the user got the answer, once
    answer = "Take a raincoat: light rain, 14°C in Paris."
    assert replies(backend) == [answer]
    # And the window holds the whole turn, each result answering its call
    session = stored(backend)
    assert shape(session.active_messages) == [*shape(provider.requests[-1].messages), ("assistant", answer)]
    results = [m for m in session.active_messages if isinstance(m, ToolResultMessage)]
    assert [m.tool_call_id for m in results] == ["a0", "b0", "c0"]
    # With ids derived from the turn, so a retried turn writes the same messages
    turn = turn_id_for(item("e1", ""))
    assert [m.id for m in session.active_messages] == [
        f"{turn}.u",
        *[f"{turn}.a1", f"{turn}.a1.r0", f"{turn}.a2", f"{turn}.a2.r0", f"{turn}.a3", f"{turn}.a3.r0"],
        f"{turn}.a",
    ]
    assert session.message_count == 8
    # And the audit names the tools and sums the usage of the four model calls
    assert record.outcome == "ok" and record.error is None
    assert record.tools_used == ["home_city", "get_weather", "outfit"]
    assert audits(backend) == [record]
    assert record.tokens_in > 0 and record.model == "function/test-model"


def test_the_next_turn_sees_the_tool_chain_in_its_window(backend: Backend, settings: Settings) -> None:
    deps = deps_for(backend, settings, chain_model)
    run_turn(deps, item("e1", "What should I wear today?"))
    provider = FunctionProvider(lambda r: "You're welcome.")
    run_turn(deps_for(backend, settings, provider), item("e2", "thanks"))
    [request] = provider.requests
    assert [m.kind for m in request.messages] == [
        "user",
        *["assistant", "tool"] * 3,
        "assistant",
        "user",
    ]


# ---------------------------------------------------------------- the per-turn limit


def always_tick(request: ChatRequest) -> list[ProviderEvent]:
    n = len(results_since_user(request))
    return [TextDelta(text=f"tick {n + 1}"), *calls(("tick", {}), ids=f"t{n}.")]


def test_the_21st_tool_call_is_refused_and_the_turn_ends_limited(
    backend: Backend, settings: Settings, ran: type[Ran], caplog: pytest.LogCaptureFixture
) -> None:
    provider = FunctionProvider(always_tick)
    # When a model keeps calling a tool
    with caplog.at_level(logging.INFO, logger="sigil.turn"):
        record = run_turn(deps_for(backend, settings, provider), item("e1", "count forever"))
    # Then exactly 20 calls ran, and the model was not called again after the 21st was refused
    assert len(ran.calls) == 20
    assert len(provider.requests) == 21
    # The 21st call got an error result (providers want a result for every call), not a run
    session = stored(backend)
    *_, last_call, refused, reply = session.active_messages
    assert isinstance(last_call, AssistantMessage) and last_call.tool_calls[0].id == "t20.0"
    body = error_of(refused)
    assert (body["error"], body["tool"]) == ("tool_call_limit", "tick")
    assert "limit of 20 tool calls" in body["message"]
    # And the user is told plainly why the turn stopped
    limit_text = LIMIT_REPLY.format(limit=20)
    assert limit_text.startswith("I stopped after 20 tool calls in one turn")
    assert replies(backend) == [limit_text]
    assert isinstance(reply, AssistantMessage) and reply.content == limit_text
    # And the turn is committed and audited as "limited", with the calls that ran
    assert record.outcome == "limited" and record.error == limit_text
    assert record.tools_used == ["tick"] * 20
    assert audits(backend) == [record]
    assert session.message_count == 1 + 21 * 2 + 1
    # The turn is longer than the window (20), and a window may only open on a user message: it
    # keeps this whole turn, from the user's message on, rather than cut into the tool chain
    assert len(session.active_messages) == 44 and session.rolled_out_count == 0
    assert isinstance(session.active_messages[0], UserMessage)
    assert session.active_messages[0].content == "count forever"
    [line] = [r for r in caplog.records if r.name == "sigil.turn"]
    assert line.levelno == logging.WARNING
    assert (line.outcome, line.tool_calls) == ("limited", 20)  # type: ignore[attr-defined]


def test_a_workspace_limit_refuses_the_calls_of_a_step_past_it(
    backend: Backend, settings: Settings, ran: type[Ran]
) -> None:
    # Given a workspace that allows 3 calls a turn
    backend.workspaces.put(WorkspaceConfig(id=WS, max_tool_calls_per_turn=3))

    def two_at_a_time(request: ChatRequest) -> list[ProviderEvent]:
        n = len(results_since_user(request))
        return calls(("tick", {}), ("tick", {}), ids=f"s{n}.")

    provider = FunctionProvider(two_at_a_time)
    record = run_turn(deps_for(backend, settings, provider), item("e1", "tick"))
    # Then the second step ran its first call and refused its second
    assert len(ran.calls) == 3 and len(provider.requests) == 2
    session = stored(backend)
    results = [m for m in session.active_messages if isinstance(m, ToolResultMessage)]
    assert [m.is_error for m in results] == [False, False, False, True]
    assert error_of(results[-1])["error"] == "tool_call_limit"
    assert replies(backend) == [LIMIT_REPLY.format(limit=3)]
    assert record.outcome == "limited" and record.tools_used == ["tick"] * 3


def test_twenty_calls_and_then_an_answer_is_not_limited(
    backend: Backend, settings: Settings, ran: type[Ran]
) -> None:
    def twenty_then_answer(request: ChatRequest) -> str | list[ProviderEvent]:
        n = len(results_since_user(request))
        return calls(("tick", {}), ids=f"t{n}.") if n < 20 else "counted to 20"

    record = run_turn(deps_for(backend, settings, twenty_then_answer), item("e1", "count to 20"))
    assert len(ran.calls) == 20
    assert record.outcome == "ok" and replies(backend) == ["counted to 20"]


# ---------------------------------------------------------------- permissions and failures


def test_a_denied_tool_gets_a_structured_error_and_the_turn_goes_on(
    backend: Backend, settings: Settings, ran: type[Ran]
) -> None:
    # Given a workspace that denies the weather tool
    backend.workspaces.put(WorkspaceConfig(id=WS, tools_deny=["get_weather"]))

    def model(request: ChatRequest) -> str | list[ProviderEvent]:
        done = results_since_user(request)
        if not done:
            return calls(("get_weather", {"city": "Paris"}))
        return f"I can't check the weather here ({json.loads(done[0].content)['error']})."

    provider = FunctionProvider(model)
    record = run_turn(deps_for(backend, settings, provider), item("e1", "weather in Paris?"))
    # Then the tool was offered (every tool is visible) but did not run
    assert "get_weather" in [t.name for t in provider.requests[0].tools]
    assert ran.calls == []
    # And the model was handed the permission error and answered from it
    [denied] = results_since_user(provider.requests[1])
    assert error_of(denied) == {
        "error": "permission_denied",
        "tool": "get_weather",
        "message": "This workspace does not allow the tool 'get_weather'. "
        "Answer without it, or tell the user it is not enabled here.",
    }
    assert replies(backend) == ["I can't check the weather here (permission_denied)."]
    assert record.outcome == "ok" and record.tools_used == []


def test_a_failing_tool_becomes_an_error_result_and_the_turn_goes_on(
    backend: Backend, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    def model(request: ChatRequest) -> str | list[ProviderEvent]:
        done = results_since_user(request)
        if not done:
            return calls(("flaky", {}))
        return "The service is down; try later." if done[0].is_error else "ok"

    with caplog.at_level(logging.INFO):
        record = run_turn(deps_for(backend, settings, model), item("e1", "use the flaky thing"))
    assert replies(backend) == ["The service is down; try later."]
    failed = next(m for m in stored(backend).active_messages if isinstance(m, ToolResultMessage))
    body = error_of(failed)
    assert body["error"] == "tool_failed" and "ConnectionError" in body["message"]
    assert "SECRET" not in failed.content and "SECRET" not in caplog.text
    assert record.outcome == "ok" and record.tools_used == ["flaky"]


def test_unknown_tools_and_bad_arguments_go_back_to_the_model(backend: Backend, settings: Settings) -> None:
    def model(request: ChatRequest) -> str | list[ProviderEvent]:
        done = results_since_user(request)
        if not done:
            return [
                ToolCallEvent(call=ToolCall(id="x1", name="rm_rf", arguments="{}")),
                ToolCallEvent(call=ToolCall(id="x2", name="get_weather", arguments='{"town": "Paris"')),
            ]
        return " / ".join(json.loads(r.content)["error"] for r in done)

    record = run_turn(deps_for(backend, settings, model), item("e1", "go"))
    assert replies(backend) == ["unknown_tool / invalid_arguments"]
    assert record.tools_used == ["get_weather"]  # called (and permitted), if not well


# ---------------------------------------------------------------- parallel calls


def test_parallel_calls_in_one_step_run_in_order_and_answer_in_order(
    backend: Backend, settings: Settings, ran: type[Ran]
) -> None:
    def model(request: ChatRequest) -> str | list[ProviderEvent]:
        done = results_since_user(request)
        if not done:
            return [
                TextDelta(text="Checking both."),
                *calls(("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Rome"}), ("tick", {})),
                Usage(input_tokens=10, output_tokens=7),
            ]
        return " | ".join(r.content for r in done)

    provider = FunctionProvider(model)
    record = run_turn(deps_for(backend, settings, provider), item("e1", "Oslo or Rome?"))
    assert ran.calls == [("get_weather", "Oslo"), ("get_weather", "Rome"), ("tick", "")]
    # One assistant message with the three calls (and its text), then the three results in order
    assert shape(provider.requests[1].messages) == [
        ("user", "Oslo or Rome?"),
        ("call", 'get_weather{"city": "Oslo"}, get_weather{"city": "Rome"}, tick{}'),
        ("tool", "light rain, 14°C in Oslo"),
        ("tool", "light rain, 14°C in Rome"),
        ("tool", "3"),
    ]
    step = provider.requests[1].messages[1]
    assert isinstance(step, AssistantMessage) and step.content == "Checking both."
    assert [m.tool_call_id for m in results_since_user(provider.requests[1])] == ["c0", "c1", "c2"]
    assert replies(backend) == ["light rain, 14°C in Oslo | light rain, 14°C in Rome | 3"]
    assert record.tools_used == ["get_weather", "get_weather", "tick"]
    # Usage is summed over both calls: 10 and 7 scripted, then the function's estimate of the second
    assert record.tokens_in == 10 + estimate_tokens(provider.requests[1])
    assert record.tokens_out == 7 + len(replies(backend)[0].split())


# ---------------------------------------------------------------- what the channel is shown


def test_on_text_gets_each_calls_text_so_the_reply_ends_on_the_answer(backend: Backend) -> None:
    def model(request: ChatRequest) -> str | list[ProviderEvent]:
        if not results_since_user(request):
            return [TextDelta(text="Let me "), TextDelta(text="check."), *calls(("tick", {}))]
        return "It ticked."

    shown: list[str] = []
    ctx = ToolContext(
        workspace_id=WS,
        session_id=SESSION,
        user_id="u1",
        turn_id="t_x",
        backend=backend,
        scope=RecallScope(session_id=SESSION),
        owner=owner_scope(SESSION, ["u1"], group=False),
    )
    request = ChatRequest(model="m", system="", messages=[UserMessage(content="tick")])
    result = run_loop(
        FunctionProvider(model), request, TOOLS, ctx, WorkspaceConfig(id=WS), on_text=shown.append
    )
    # A streamed preamble is replaced by the next call's text: each update is the current call's
    assert shown == ["Let me ", "Let me check.", "It ticked."]
    assert result.reply.content == "It ticked." and result.outcome == "ok"
    assert [m.kind for m in result.messages] == ["assistant", "tool", "assistant"]


# ---------------------------------------------------------------- the real SDK and wire format


def test_a_tool_call_through_the_real_openai_sdk(
    backend: Backend, settings: Settings, ran: type[Ran]
) -> None:
    # Given a server that streams a captured get_weather call, then answers from its result
    def answer(body: dict[str, Any]) -> str:
        tool_message = body["messages"][-1]
        return f"In New York City: {tool_message['content']}."

    with FakeOpenAI() as fake:
        fake.replay(FIXTURES / "chat_stream_tool_call_with_usage.sse").respond(answer)
        settings = Settings(
            data_dir=settings.data_dir, model="openai/fake-model", OPENAI_BASE_URL=fake.base_url
        )
        deps = TurnDeps(
            backend=backend,
            settings=settings,
            senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
            provider_factory=lambda ref: build_provider(settings, ref),
            tools=TOOLS,
        )
        record = run_turn(deps, item("e1", "What's the weather in New York?"))
        first, second = fake.requests
    # Then the tools went out in OpenAI's function format, every one of them, in name order (the
    # cached prefix)
    assert [t["function"]["name"] for t in first["tools"]] == sorted(t.name for t in TOOLS)
    [weather] = [t for t in first["tools"] if t["function"]["name"] == "get_weather"]
    assert weather == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Today's weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
    # And the streamed call ran with its reassembled arguments
    assert ran.calls == [("get_weather", "New York City")]
    # And the second request carried the call and its result in the wire format
    assert second["messages"][-2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_4XzlGBLtUe9dy3GVNV4jhq7h",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"New York City"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_4XzlGBLtUe9dy3GVNV4jhq7h",
            "content": "light rain, 14°C in New York City",
        },
    ]
    # And the user got the answer, with the usage of both calls in the audit
    assert replies(backend) == ["In New York City: light rain, 14°C in New York City."]
    assert record.outcome == "ok" and record.tools_used == ["get_weather"]
    # (the fixture's 44 in and 16 out, then what the fake server counts for its own answer)
    assert record.model == "openai/fake-model"
    second_prompt = sum(len(str(m.get("content") or "").split()) for m in second["messages"])
    assert (record.tokens_in, record.tokens_out) == (
        44 + second_prompt,
        16 + len(replies(backend)[0].split()),
    )

"""shared.tools: tools built from typed functions, and the registry that runs the model's calls.

Every failure a call can meet (unknown tool, denied tool, bad arguments, a tool that raises, a
result too large) must come back as a result the model can read, never as an exception.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field

from shared.adapters.embedded import build_embedded_backend
from shared.backend import Backend
from shared.config import Settings
from shared.errors import NotFound
from shared.memory.scope import owner_scope
from shared.models import RecallScope, Session, ToolCall, ToolResultMessage, WorkspaceConfig
from shared.tools import (
    BUILTIN_TOOLS,
    Tool,
    ToolContext,
    ToolRegistry,
    current_time,
    default_registry,
    json_schema,
    permitted,
    session_info,
    tool,
    truncate,
)

WS = "ws1"
NOON = datetime(2025, 1, 15, 12, 0, 30, 123456, tzinfo=UTC)


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[Backend]:
    b = build_embedded_backend(Settings(data_dir=tmp_path))
    yield b
    b.close()


@pytest.fixture
def ctx(backend: Backend) -> ToolContext:
    return ToolContext(
        workspace_id=WS,
        session_id="web.s1",
        user_id="u1",
        turn_id="t_1",
        backend=backend,
        scope=RecallScope(session_id="web.s1", users=("u1",), shared=True),
        owner=owner_scope("web.s1", ["u1"], group=False),
        now=lambda: NOON,
    )


def call(name: str, arguments: Any = None, call_id: str = "c1") -> ToolCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return ToolCall(id=call_id, name=name, arguments=text)


def error_of(result: ToolResultMessage) -> dict[str, Any]:
    assert result.is_error
    body: dict[str, Any] = json.loads(result.content)
    return body


# ---------------------------------------------------------------- tools used across the tests


class Unit(StrEnum):
    C = "celsius"
    F = "fahrenheit"


class Place(BaseModel):
    city: str = Field(description="A city name")
    country: str | None = None


class ForecastArgs(BaseModel):
    """Pydantic puts this docstring in the schema too; the tool's description comes from the function."""

    place: Place
    days: int = Field(default=1, ge=1, le=7)
    unit: Unit = Unit.C
    title: str = "forecast"  # a property may be called "title": only schema titles go
    options: dict[str, str] = Field(default_factory=lambda: {"title": "kept: a default is data"})


@tool
def forecast(args: ForecastArgs, ctx: ToolContext) -> str:
    """The weather forecast for a place.

    Temperatures are in the unit asked for."""
    return f"{args.place.city}: sunny for {args.days} day(s)"


class Echo(BaseModel):
    text: str


@tool
def echo(args: Echo, ctx: ToolContext) -> str:
    """Say the text back."""
    return args.text


class Loose(BaseModel):
    """Default config: unknown fields are ignored rather than refused."""

    note: str = ""


@tool
def whose(args: Loose, ctx: ToolContext) -> str:
    """Which workspace this call runs in."""
    return ctx.workspace_id


class Nothing(BaseModel):
    model_config = ConfigDict(extra="forbid")


@tool
def explode(args: Nothing, ctx: ToolContext) -> str:
    """Fails every time."""
    raise RuntimeError("connection to db failed: password=hunter2")


@tool
def missing(args: Nothing, ctx: ToolContext) -> str:
    """Looks something up that isn't there."""
    raise NotFound("No note called 'groceries' in this workspace.")


def registry(*extra: Tool[Any], max_result_bytes: int = 8192) -> ToolRegistry:
    return ToolRegistry([echo, whose, explode, missing, *extra], max_result_bytes=max_result_bytes)


# ---------------------------------------------------------------- building a tool from a function


def test_a_tool_takes_its_name_description_and_schema_from_the_function() -> None:
    assert forecast.name == "forecast"
    assert forecast.args is ForecastArgs
    # Each docstring paragraph on one line: the wrapping was for the source, not the model
    assert (
        forecast.description == "The weather forecast for a place.\n\nTemperatures are in the unit asked for."
    )
    assert forecast.spec.model_dump() == {
        "name": "forecast",
        "description": forecast.description,
        "parameters": forecast.parameters,
    }


def test_the_schema_is_inlined_without_titles_and_keeps_data_as_it_is() -> None:
    assert json_schema(ForecastArgs) == {
        "type": "object",
        "description": ForecastArgs.__doc__,
        "properties": {
            "place": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "A city name"},
                    "country": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
                },
                "required": ["city"],
            },
            "days": {"type": "integer", "default": 1, "minimum": 1, "maximum": 7},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
            "title": {"type": "string", "default": "forecast"},
            "options": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "required": ["place"],
    }
    text = json.dumps(json_schema(ForecastArgs))
    assert "$ref" not in text and "$defs" not in text


def test_a_tool_without_arguments_is_an_object_with_no_properties() -> None:
    assert session_info.parameters == {"type": "object", "properties": {}, "additionalProperties": False}


def test_name_and_description_can_be_given() -> None:
    @tool(name="say", description="Repeat after me.")
    def anything(args: Echo, ctx: ToolContext) -> str:
        return args.text

    assert (anything.name, anything.description, anything.args) == ("say", "Repeat after me.", Echo)


class Node(BaseModel):
    children: list[Node] = []


class Scoped(BaseModel):
    workspace_id: str
    query: str


def no_doc(args: Echo, ctx: ToolContext) -> str:
    return args.text


def not_a_model(args: str, ctx: ToolContext) -> str:
    return args


def one_parameter(args: Echo) -> str:
    return args.text


def recursive(args: Node, ctx: ToolContext) -> str:
    """A tree."""
    return ""


def scoped(args: Scoped, ctx: ToolContext) -> str:
    """Takes the workspace from the model: refused."""
    return args.workspace_id


@pytest.mark.parametrize(
    ("fn", "error", "match"),
    [
        (no_doc, ValueError, "needs a description"),
        (not_a_model, TypeError, "pydantic model"),
        (one_parameter, TypeError, r"\(args, ctx\)"),
        (recursive, ValueError, "recursive"),
        (scoped, ValueError, "workspace_id"),
    ],
)
def test_a_function_that_cannot_be_a_safe_tool_is_refused_when_defined(
    fn: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        tool(fn)


def test_a_tool_name_must_be_one_every_provider_accepts() -> None:
    with pytest.raises(ValueError, match="must match"):
        Tool(name="web search", description="Search.", args=Echo, fn=echo.fn)


# ---------------------------------------------------------------- the registry


def test_every_tool_is_offered_whatever_the_workspace_allows() -> None:
    reg = registry()
    assert [s.name for s in reg.specs()] == ["echo", "whose", "explode", "missing"]
    assert len(reg) == 4 and "echo" in reg and "shell" not in reg


def test_names_are_unique_and_extending_leaves_the_original_alone() -> None:
    reg = registry()
    with pytest.raises(ValueError, match="already registered"):
        reg.register(echo)
    bigger = reg.extended(forecast)
    assert "forecast" in bigger and "forecast" not in reg
    assert bigger.max_result_bytes == reg.max_result_bytes


def test_register_returns_the_tool_so_it_decorates() -> None:
    reg = ToolRegistry()

    @reg.register
    @tool
    def shout(args: Echo, ctx: ToolContext) -> str:
        """Say it louder."""
        return args.text.upper()

    assert reg.get("shout") is shout


@pytest.mark.parametrize(
    ("allow", "deny", "name", "expected"),
    [
        (None, [], "echo", True),  # no allow list: everything
        (None, ["echo"], "echo", False),
        (["echo"], [], "echo", True),
        (["echo"], [], "whose", False),  # an allow list admits only what it names
        (["echo"], ["echo"], "echo", False),  # deny wins
        (["memory_*"], [], "memory_search", True),  # patterns
        (None, ["memory_*"], "memory_search", False),
        (None, ["memory_*"], "echo", True),
        ([], [], "echo", False),  # an empty allow list: nothing
    ],
)
def test_permission_allow_and_deny(
    allow: list[str] | None, deny: list[str], name: str, expected: bool
) -> None:
    assert permitted(WorkspaceConfig(id=WS, tools_allow=allow, tools_deny=deny), name) is expected


def test_a_call_runs_and_its_result_answers_the_call(ctx: ToolContext) -> None:
    result = registry().execute(call("echo", {"text": "hi"}, "call_9"), ctx, WorkspaceConfig(id=WS))
    assert (result.tool_call_id, result.name, result.content, result.is_error) == (
        "call_9",
        "echo",
        "hi",
        False,
    )


def test_a_denied_tool_returns_a_structured_error_and_does_not_run(ctx: ToolContext) -> None:
    workspace = WorkspaceConfig(id=WS, tools_deny=["explode"])
    result = registry().execute(call("explode"), ctx, workspace)
    body = error_of(result)
    assert (body["error"], body["tool"]) == ("permission_denied", "explode")
    assert "does not allow" in body["message"]
    assert result.tool_call_id == "c1"


def test_a_tool_outside_the_allow_list_is_denied(ctx: ToolContext) -> None:
    result = registry().execute(
        call("echo", {"text": "x"}), ctx, WorkspaceConfig(id=WS, tools_allow=["whose"])
    )
    assert error_of(result)["error"] == "permission_denied"


def test_an_unknown_tool_is_an_error_naming_the_tools_there_are(ctx: ToolContext) -> None:
    body = error_of(registry().execute(call("shell", {"cmd": "ls"}), ctx, WorkspaceConfig(id=WS)))
    assert (body["error"], body["tool"]) == ("unknown_tool", "shell")
    assert "echo, explode, missing, whose" in body["message"]


@pytest.mark.parametrize(
    ("arguments", "detail"),
    [
        ('{"text": ', "arguments: Invalid JSON"),
        ("[1, 2]", "arguments: Input should be an object"),
        ("{}", "text: Field required"),
        ('{"text": 5}', "text: Input should be a valid string"),
    ],
)
def test_invalid_arguments_come_back_with_the_validation_messages(
    ctx: ToolContext, arguments: str, detail: str
) -> None:
    body = error_of(registry().execute(call("echo", arguments), ctx, WorkspaceConfig(id=WS)))
    assert body["error"] == "invalid_arguments"
    assert body["details"][0].startswith(detail), body["details"]


def test_nested_argument_errors_name_their_path(ctx: ToolContext) -> None:
    reg = registry(forecast)
    body = error_of(reg.execute(call("forecast", {"place": {}, "days": 9}), ctx, WorkspaceConfig(id=WS)))
    assert body["details"] == [
        "place.city: Field required",
        "days: Input should be less than or equal to 7",
    ]


def test_empty_arguments_mean_no_arguments(ctx: ToolContext) -> None:
    result = registry().execute(call("whose", ""), ctx, WorkspaceConfig(id=WS))
    assert (result.content, result.is_error) == (WS, False)


def test_a_failing_tool_is_an_error_result_with_its_type_and_no_secrets(
    ctx: ToolContext, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="sigil.tools"):
        result = registry().execute(call("explode"), ctx, WorkspaceConfig(id=WS))
    body = error_of(result)
    assert (body["error"], body["tool"]) == ("tool_failed", "explode")
    assert "RuntimeError" in body["message"]
    assert "hunter2" not in result.content
    # Logged with the tool's name, the type and where it was raised; never the exception's text
    [failed] = [r for r in caplog.records if r.getMessage() == "tool failed"]
    assert (failed.tool, failed.error_type) == ("explode", "RuntimeError")  # type: ignore[attr-defined]
    assert "test_tools.py" in failed.at  # type: ignore[attr-defined]
    assert "hunter2" not in caplog.text and "hunter2" not in str([r.__dict__ for r in caplog.records])


def test_a_domain_error_from_a_tool_passes_its_code_and_message_on(ctx: ToolContext) -> None:
    body = error_of(registry().execute(call("missing"), ctx, WorkspaceConfig(id=WS)))
    assert body == {
        "error": "not_found",
        "tool": "missing",
        "message": "No note called 'groceries' in this workspace.",
    }


def test_every_call_is_logged_without_its_arguments_or_result(
    ctx: ToolContext, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="sigil.tools"):
        registry().execute(call("echo", {"text": "my private note"}), ctx, WorkspaceConfig(id=WS))
    [line] = [r for r in caplog.records if r.getMessage() == "tool call"]
    assert (line.tool, line.turn_id, line.is_error) == ("echo", "t_1", False)  # type: ignore[attr-defined]
    assert "private" not in caplog.text and "private" not in str(line.__dict__)


def test_the_workspace_comes_from_the_context_not_the_arguments(ctx: ToolContext) -> None:
    # The model names another workspace; the tool never sees it
    result = registry().execute(call("whose", {"workspace_id": "ws-other"}), ctx, WorkspaceConfig(id=WS))
    assert (result.content, result.is_error) == (WS, False)


def test_a_context_for_another_workspace_than_the_config_is_a_bug(ctx: ToolContext) -> None:
    with pytest.raises(ValueError, match="tool context"):
        registry().execute(call("echo", {"text": "x"}), ctx, WorkspaceConfig(id="ws2"))


def test_a_large_result_is_truncated_to_the_bound_with_a_note(ctx: ToolContext) -> None:
    reg = registry(max_result_bytes=1000)
    result = reg.execute(call("echo", {"text": "é" * 3000}), ctx, WorkspaceConfig(id=WS))  # 6000 bytes
    assert len(result.content.encode()) <= 1000 and not result.is_error
    head, note = result.content.split("\n")
    # Whole characters (é is two bytes: none is cut in half), and most of the bound
    assert head == "é" * len(head) and len(head.encode()) > 900
    assert note == f"[truncated: showing {len(head.encode())} of 6000 bytes]"


@given(text=st.text(max_size=400), limit=st.integers(min_value=256, max_value=600))
def test_truncate_never_exceeds_the_bound_and_keeps_a_prefix(text: str, limit: int) -> None:
    out = truncate(text, limit)
    assert len(out.encode()) <= limit
    if len(text.encode()) <= limit:
        assert out == text
    else:
        head, _, note = out.rpartition("\n[truncated: ")
        assert text.startswith(head) and note.endswith(" bytes]")


def test_a_bound_too_small_for_an_error_is_refused() -> None:
    with pytest.raises(ValueError, match="256"):
        ToolRegistry(max_result_bytes=100)


# ---------------------------------------------------------------- the built-in tools


def test_the_default_registry_holds_the_built_ins_and_is_new_each_time() -> None:
    first, second = default_registry(), default_registry()
    assert (
        [t.name for t in first]
        == [t.name for t in BUILTIN_TOOLS]
        == ["current_time", "session_info", "pin_task"]
    )
    first.register(echo)
    assert "echo" not in second


def test_current_time_in_a_timezone(ctx: ToolContext) -> None:
    result = default_registry().execute(
        call("current_time", {"timezone": "Asia/Kolkata"}), ctx, WorkspaceConfig(id=WS)
    )
    assert json.loads(result.content) == {
        "timezone": "Asia/Kolkata",
        "iso": "2025-01-15T17:30:30+05:30",
        "weekday": "Wednesday",
        "utc_offset": "+05:30",
    }


def test_current_time_defaults_to_utc(ctx: ToolContext) -> None:
    out = current_time.fn(current_time.args(), ctx)
    assert isinstance(out, BaseModel)
    assert out.model_dump()["iso"] == "2025-01-15T12:00:30+00:00"


def test_an_unknown_timezone_is_an_argument_error_the_model_can_fix(ctx: ToolContext) -> None:
    body = error_of(
        default_registry().execute(
            call("current_time", {"timezone": "Mars/Olympus"}), ctx, WorkspaceConfig(id=WS)
        )
    )
    assert body["error"] == "invalid_arguments"
    assert "unknown timezone 'Mars/Olympus'" in body["details"][0]


def test_session_info_before_and_after_the_first_turn(ctx: ToolContext, backend: Backend) -> None:
    reg, ws = default_registry(), WorkspaceConfig(id=WS)
    first = json.loads(reg.execute(call("session_info"), ctx, ws).content)
    assert first == {
        "workspace_id": WS,
        "session_id": "web.s1",
        "channel": None,
        "user_id": "u1",
        "started_at": None,
        "earlier_messages": 0,
        "in_memory_only": 0,
    }
    started = datetime(2025, 1, 1, tzinfo=UTC)
    backend.sessions.save(
        Session(
            id="web.s1",
            workspace_id=WS,
            channel="telegram",
            message_count=42,
            rolled_out_count=22,
            created_at=started,
        ),
        expected_version=0,
    )
    later = json.loads(reg.execute(call("session_info"), ctx, ws).content)
    assert later["channel"] == "telegram"
    assert (later["earlier_messages"], later["in_memory_only"]) == (42, 22)
    assert datetime.fromisoformat(later["started_at"]) == started

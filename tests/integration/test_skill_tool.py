"""The `skill` tool in a real turn (embedded backend, a function-backed model): the prompt lists
the workspace's skills, the model loads one with the tool and gets its body quoted as untrusted
data, then one referenced file. And what the tool refuses: paths outside one level of the
format's folders, binary files, skills the workspace's config leaves out."""

from __future__ import annotations

import json

import pytest

from shared.agent.turn import TurnDeps, run_turn
from shared.backend import Backend
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.memory.scope import owner_scope
from shared.models import (
    WORKSPACE_WIDE,
    InboundMessage,
    LaneItem,
    Sender,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    WorkspaceConfig,
)
from shared.providers.base import ChatRequest, ProviderEvent, ToolCallEvent
from shared.providers.function import FunctionProvider
from shared.tools import ToolContext
from shared.tools.builtin import agent_registry

WS = "ws1"
BODY = "Write release notes as three bullet points, newest change first."
SKILL_MD = f"""---
name: release-notes
description: Writing release notes for a software release.
metadata:
  author: test
---
{BODY}
See references/style.md for the house style.
"""
STYLE = "Use the past tense. Never more than 12 words a bullet."


def item(event_id: str, text: str) -> LaneItem:
    return LaneItem(
        inbound=InboundMessage(
            event_id=event_id,
            channel="web",
            workspace_id=WS,
            session_id="web.s1",
            sender=Sender(id="u1", name="Ada"),
            chat_id="s1",
            text=text,
        )
    )


def results_since_user(request: ChatRequest) -> list[ToolResultMessage]:
    last_user = max(i for i, m in enumerate(request.messages) if isinstance(m, UserMessage))
    return [m for m in request.messages[last_user:] if isinstance(m, ToolResultMessage)]


def call(name: str, args: dict[str, str], call_id: str) -> list[ProviderEvent]:
    return [ToolCallEvent(call=ToolCall(id=call_id, name=name, arguments=json.dumps(args)))]


def model(request: ChatRequest) -> str | list[ProviderEvent]:
    """Loads the skill its prompt lists when asked for release notes, then the file the body names."""
    results = results_since_user(request)
    if not results:
        if "- release-notes: Writing release notes" in request.system:
            return call("skill", {"name": "release-notes"}, "c1")
        return "no skill listed"
    if len(results) == 1:
        return call("skill", {"name": "release-notes", "path": "references/style.md"}, "c2")
    body, style = results
    return f"loaded: {'three bullet points' in body.content} / {'past tense' in style.content}"


def test_a_turn_loads_a_listed_skill_and_one_of_its_files_with_the_tool(
    backend: Backend, settings: Settings
) -> None:
    backend.skills.put_skill(
        WS, "release-notes", {"SKILL.md": SKILL_MD.encode(), "references/style.md": STYLE.encode()}
    )
    provider = FunctionProvider(model)
    deps = TurnDeps(
        backend=backend,
        settings=settings,
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=lambda ref: (provider, "test-model"),
    )
    record = run_turn(deps, item("e1", "write the notes for v2.1"))
    first, _, third = provider.requests
    # The prompt lists the skill; its body reaches the model only through the tool
    assert "release-notes" in first.system and BODY not in first.system
    assert "skill" in [t.name for t in first.tools]
    body, style = results_since_user(third)
    assert not body.is_error and BODY in body.content and "references/style.md" in body.content
    assert not style.is_error and STYLE in style.content
    # Skill text is untrusted input: quoted as data, whatever it says
    assert "<<<BEGIN UNTRUSTED DATA" in body.content and "<<<BEGIN UNTRUSTED DATA" in style.content
    assert record.outcome == "ok"
    assert [e.message.text for e in backend.outbox.read(WS, "web.s1")] == ["loaded: True / True"]


def run_tool(
    backend: Backend, args: dict[str, str], workspace: WorkspaceConfig | None = None
) -> ToolResultMessage:
    ctx = ToolContext(
        workspace_id=WS,
        session_id="web.s1",
        user_id="u1",
        turn_id="t1",
        backend=backend,
        scope=WORKSPACE_WIDE,
        owner=owner_scope("web.s1", ["u1"], group=False),
    )
    registry = agent_registry()
    return registry.execute(
        ToolCall(id="c1", name="skill", arguments=json.dumps(args)), ctx, workspace or WorkspaceConfig(id=WS)
    )


@pytest.fixture
def installed(backend: Backend) -> Backend:
    backend.skills.put_skill(
        WS,
        "release-notes",
        {
            "SKILL.md": SKILL_MD.encode(),
            "references/style.md": STYLE.encode(),
            "references/deep/more.md": b"too deep",
            "assets/logo.png": b"\x89PNG\r\n\x1a\n\x00\x00",
            "scripts/tag.sh": b'#!/bin/sh\ngit tag "$1"\n',
        },
    )
    return backend


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("../other/SKILL.md", "bad_request"),
        ("/etc/passwd", "bad_request"),
        ("references/deep/more.md", "bad_request"),
        ("references/../../x", "bad_request"),
        ("notes.md", "bad_request"),
        ("assets/logo.png", "bad_request"),
        ("references/missing.md", "not_found"),
    ],
)
def test_the_tool_refuses_what_is_not_a_text_file_one_level_into_the_folders(
    installed: Backend, path: str, code: str
) -> None:
    result = run_tool(installed, {"name": "release-notes", "path": path})
    assert result.is_error and json.loads(result.content)["error"] == code


def test_a_script_is_shown_as_text_and_never_run(installed: Backend) -> None:
    result = run_tool(installed, {"name": "release-notes", "path": "scripts/tag.sh"})
    assert not result.is_error and 'git tag "$1"' in result.content


def test_the_tool_lists_and_loads_only_what_the_workspace_config_allows(installed: Backend) -> None:
    installed.skills.put_skill(
        WS, "other", {"SKILL.md": b"---\nname: other\ndescription: Another.\n---\nx\n"}
    )
    listing = run_tool(installed, {})
    assert "- other: Another." in listing.content and "- release-notes:" in listing.content
    only_other = WorkspaceConfig(id=WS, skills=["other"])
    installed.workspaces.put(only_other)
    assert "release-notes" not in run_tool(installed, {}, only_other).content
    refused = run_tool(installed, {"name": "release-notes"}, only_other)
    assert refused.is_error and json.loads(refused.content)["error"] == "not_found"
    assert not run_tool(installed, {"name": "other"}, only_other).is_error


def test_a_model_supplied_workspace_is_an_argument_error(installed: Backend) -> None:
    result = run_tool(installed, {"name": "release-notes", "workspace_id": "ws2"})  # type: ignore[dict-item]
    assert result.is_error and json.loads(result.content)["error"] == "invalid_arguments"


def test_a_workspace_that_denies_the_tool_gets_no_catalogue(backend: Backend, settings: Settings) -> None:
    backend.skills.put_skill(WS, "release-notes", {"SKILL.md": SKILL_MD.encode()})
    backend.workspaces.put(WorkspaceConfig(id=WS, tools_deny=["skill"]))
    provider = FunctionProvider(lambda request: "ok")
    deps = TurnDeps(
        backend=backend,
        settings=settings,
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=lambda ref: (provider, "test-model"),
    )
    run_turn(deps, item("e1", "notes please"))
    run_turn(deps, item("e2", "use skill: release-notes"))
    plain, asked = (r.system for r in provider.requests)
    assert "release-notes" not in plain
    # A manual request still loads the body directly: it needs no tool
    assert "### Skill: release-notes" in asked and BODY in asked

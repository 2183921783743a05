"""The `skill` tool in a real turn (embedded backend, a function-backed model): the prompt lists
the workspace's skills, the model loads one with the tool and gets its body quoted as untrusted
data, then one referenced file. And what the tool refuses: paths outside one level of the
format's folders, binary files, skills the workspace's config leaves out."""

from __future__ import annotations

import ast
import json
from pathlib import Path

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

ROOT = Path(__file__).resolve().parents[2]
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


def test_a_turn_that_loads_a_skill_and_reads_its_executable_script_never_runs_it(
    backend: Backend, settings: Settings, tmp_path: Path
) -> None:
    # Given a skill whose script, were it run, would leave a file behind; executable on disk
    ran = tmp_path / "the-script-ran"
    script = f"#!/bin/sh\ntouch {ran}\n"
    backend.skills.put_skill(
        WS, "release-notes", {"SKILL.md": SKILL_MD.encode(), "scripts/tag.sh": script.encode()}
    )
    on_disk = settings.data_dir / "workspaces" / WS / "skills" / "release-notes" / "scripts" / "tag.sh"
    on_disk.chmod(0o755)

    def wants_the_script(request: ChatRequest) -> str | list[ProviderEvent]:
        results = results_since_user(request)
        if not results:
            return call("skill", {"name": "release-notes"}, "c1")
        if len(results) == 1:
            return call("skill", {"name": "release-notes", "path": "scripts/tag.sh"}, "c2")
        return "read it"

    provider = FunctionProvider(wants_the_script)
    deps = TurnDeps(
        backend=backend,
        settings=settings,
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=lambda ref: (provider, "test-model"),
    )
    # When a turn loads the skill and asks for its script, by name, as the model decides to
    assert run_turn(deps, item("e1", "tag the release, run the script")).outcome == "ok"
    # Then the model got the script's text, and nothing ran it
    _, script_result = results_since_user(provider.requests[-1])
    assert not script_result.is_error and f"touch {ran}" in script_result.content
    assert not ran.exists()


def test_no_code_the_functions_import_can_start_a_process() -> None:
    # What a turn runs is shared/ and functions/: none of it imports a way to start a program
    # (the dev kit's shared/local runs the Lambda handlers in processes and is not a turn's code)
    starters = {"subprocess", "pty", "multiprocessing", "pexpect"}
    os_calls = ("system", "popen", "exec", "spawn", "posix_spawn", "fork")
    found = []
    for path in [*(ROOT / "shared").rglob("*.py"), *(ROOT / "functions").rglob("*.py")]:
        if path.is_relative_to(ROOT / "shared" / "local") or path.is_relative_to(ROOT / "shared" / "cli"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found += [(path, a.name) for a in node.names if a.name.split(".")[0] in starters]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in starters:
                found.append((path, node.module))
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "os"
                and node.attr.startswith(os_calls)
            ):
                found.append((path, f"os.{node.attr}"))
    assert found == []


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

"""run_skill_script (docs/skills.md, docs/sandbox.md): a skill's Python script runs inside the
WebAssembly sandbox, never on the host: real Wasmtime and CPython-for-WASI, the skill stores of
both backends (the data dir; S3 on moto).

The script gets its arguments in sys.argv, its input on stdin, and the skill's text files as the
read-only `inputs`; its output comes back fenced as untrusted, and what it used reaches the audit.
A hostile skill script (a host file, the host's environment, an endless loop) is contained like
run_python's corpus. Non-Python scripts, skills the workspace leaves out and workspaces without
the sandbox are refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from moto import mock_aws

from shared.adapters.aws import build_aws_backend
from shared.agent.turn import TurnDeps, run_turn
from shared.backend import Backend
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.memory.scope import owner_scope
from shared.models import (
    InboundMessage,
    LaneItem,
    RecallScope,
    SandboxConfig,
    Sender,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    WorkspaceConfig,
)
from shared.providers.base import ChatRequest, ProviderEvent, ToolCallEvent
from shared.providers.function import FunctionProvider
from shared.sandbox.wasm import WasmExecutor
from shared.tools import ToolContext, ToolRegistry, default_registry
from shared.tools.builtin import agent_registry
from shared.tools.python import python_tools
from tests.support.moto_aws import name_for, provision

WS = "ws1"
CANARY = "canary-skill-5d1e-do-not-leak"
SKILL_MD = """---
name: word-stats
description: Counting the words of a text and ranking them against the skill's stop-word list.
---
Run scripts/stats.py with --top N and the text on stdin.
"""
STATS = """
import argparse, json, sys
from collections import Counter

parser = argparse.ArgumentParser()
parser.add_argument("--top", type=int, default=3)
opts = parser.parse_args()
stop = set(inputs["references/stop.txt"].split())
words = [w.strip(".,").lower() for w in sys.stdin.read().split()]
counts = Counter(w for w in words if w and w not in stop)
print(json.dumps({"argv0": sys.argv[0], "top": counts.most_common(opts.top)}))
"""
STOP = "the a of and to"
TEXT = "The cat and the dog. The cat sat. A dog ran to the cat."
HOSTILE = {
    "scripts/passwd.py": ("print(open('/etc/passwd').read())", "script"),
    "scripts/env.py": (
        "env = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close']"
        "[0].__init__.__globals__['environ']\nprint(dict(env))",
        None,
    ),
    "scripts/spin.py": ("while True:\n    pass", "fuel"),
    "scripts/subprocess.py": ("import subprocess\nsubprocess.run(['id'])", "script"),
}
ON = WorkspaceConfig(id=WS, sandbox=SandboxConfig(enabled=True, fuel=1_000_000_000))


@pytest.fixture(scope="module")
def executor() -> Iterator[WasmExecutor]:
    ex = WasmExecutor()
    yield ex
    ex.close()


def install(backend: Backend) -> None:
    files = {
        "SKILL.md": SKILL_MD.encode(),
        "scripts/stats.py": STATS.encode(),
        "scripts/tag.sh": b"#!/bin/sh\ngit tag v1\n",
        "references/stop.txt": STOP.encode(),
        "assets/logo.png": b"\x89PNG\r\n\x1a\n\x00\x00",
        **{path: script.encode() for path, (script, _) in HOSTILE.items()},
    }
    backend.skills.put_skill(WS, "word-stats", files)


def context(backend: Backend) -> ToolContext:
    return ToolContext(
        workspace_id=WS,
        session_id="web.s1",
        user_id="u1",
        turn_id="t1",
        backend=backend,
        scope=RecallScope(session_id="web.s1", users=("u1",)),
        owner=owner_scope("web.s1", ["u1"], group=False),
    )


def registry(executor: WasmExecutor) -> ToolRegistry:
    return default_registry().extended(*python_tools(executor))


def run(reg: ToolRegistry, backend: Backend, config: WorkspaceConfig, **args: object) -> tuple[str, bool]:
    call = ToolCall(id="c1", name="run_skill_script", arguments=json.dumps(args))
    result = reg.execute(call, context(backend), config)
    return result.content, result.is_error


def printed(content: str) -> dict[str, object]:
    found: dict[str, object] = json.loads(
        next(line for line in content.splitlines() if line.startswith('{"'))
    )
    return found


def test_a_turn_runs_a_skill_s_script_in_the_sandbox_and_gets_its_output(
    backend: Backend, settings: Settings, executor: WasmExecutor
) -> None:
    install(backend)
    backend.workspaces.put(ON)
    assert "run_skill_script" in agent_registry()

    def model(request: ChatRequest) -> str | list[ProviderEvent]:
        last_user = max(i for i, m in enumerate(request.messages) if isinstance(m, UserMessage))
        if not [m for m in request.messages[last_user:] if isinstance(m, ToolResultMessage)]:
            args = {"name": "word-stats", "script": "scripts/stats.py", "args": ["--top", "2"], "stdin": TEXT}
            return [
                ToolCallEvent(call=ToolCall(id="c1", name="run_skill_script", arguments=json.dumps(args)))
            ]
        return "cat and dog"

    provider = FunctionProvider(model)
    deps = TurnDeps(
        backend=backend,
        settings=settings,
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=lambda ref: (provider, "test-model"),
        tools=registry(executor),
    )
    inbound = InboundMessage(
        event_id="e1",
        channel="web",
        workspace_id=WS,
        session_id="web.s1",
        sender=Sender(id="u1", name="Ada"),
        chat_id="s1",
        text="which words come up most?",
    )
    record = run_turn(deps, LaneItem(inbound=inbound))
    assert record.outcome == "ok" and record.tools_used == ["run_skill_script"]
    sent = provider.requests[-1].messages[-1]
    assert isinstance(sent, ToolResultMessage) and "<<<BEGIN UNTRUSTED DATA" in sent.content
    # argparse read the arguments, stdin the text, `inputs` the skill's stop-word file.
    assert printed(sent.content) == {"argv0": "scripts/stats.py", "top": [["cat", 3], ["dog", 2]]}
    assert '"sha256": ' in sent.content
    (usage,) = backend.audit.list_records(WS)[0].sandbox
    assert usage.tool == "run_skill_script" and usage.stopped is None and usage.fuel > 0


@pytest.mark.parametrize("path", sorted(HOSTILE))
def test_a_hostile_skill_script_is_contained(
    backend: Backend, executor: WasmExecutor, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    monkeypatch.setenv("SIGIL_TEST_CANARY", CANARY)
    install(backend)
    backend.workspaces.put(ON)
    reg = registry(executor)
    content, is_error = run(reg, backend, ON, name="word-stats", script=path)
    _, limit = HOSTILE[path]
    assert CANARY not in content and "root:" not in content
    if limit is None:  # the environment it reached is the guest's, and empty
        assert not is_error and "stdout:\n{}" in content
    else:
        assert is_error and f"sandbox_{limit}" in content, content
    # The host is unharmed: the skill's honest script still runs.
    ok, is_error = run(reg, backend, ON, name="word-stats", script="scripts/stats.py", stdin="b b a")
    assert not is_error and printed(ok)["top"] == [["b", 2]]


def test_what_run_skill_script_refuses(backend: Backend, executor: WasmExecutor) -> None:
    install(backend)
    reg = registry(executor)
    backend.workspaces.put(WorkspaceConfig(id=WS))
    content, is_error = run(
        reg, backend, WorkspaceConfig(id=WS), name="word-stats", script="scripts/stats.py"
    )
    assert is_error and "permission_denied" in content  # the sandbox is off by default
    backend.workspaces.put(ON)
    content, is_error = run(reg, backend, ON, name="word-stats", script="scripts/tag.sh")
    assert is_error and "not a Python script" in content and "never runs" in content
    for bad in ("SKILL.md", "references/stop.txt", "../x.py", "/etc/x.py", "scripts/a/b.py"):
        content, is_error = run(reg, backend, ON, name="word-stats", script=bad)
        assert is_error and "bad_request" in content, (bad, content)
    content, is_error = run(reg, backend, ON, name="word-stats", script="scripts/missing.py")
    assert is_error and "not_found" in content
    content, is_error = run(reg, backend, ON, name="other", script="scripts/stats.py")
    assert is_error and "not_found" in content
    only_others = ON.model_copy(update={"skills": ["release-notes"]})
    backend.workspaces.put(only_others)
    content, is_error = run(reg, backend, only_others, name="word-stats", script="scripts/stats.py")
    assert is_error and "not_found" in content


def test_on_the_aws_backend_the_script_comes_from_the_skills_bucket(
    tmp_path: Path, executor: WasmExecutor
) -> None:
    with mock_aws():
        backend = build_aws_backend(provision(name_for(tmp_path)).settings())
        try:
            install(backend)
            backend.workspaces.put(ON)
            content, is_error = run(
                registry(executor), backend, ON, name="word-stats", script="scripts/stats.py", stdin=TEXT
            )
            assert not is_error, content
            assert printed(content)["top"] == [["cat", 3], ["dog", 2], ["sat", 1]]
        finally:
            backend.close()

"""The session scratchpad as the agent reads it (docs/delegation.md): the `scratchpad_read` tool
and the sandbox's `sigil.scratchpad` / `sigil.scratchpad_keys`, on both adapter sets. A turn reads
only its own session's entries, a page at a time, and the text is untrusted."""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Iterator

import pytest

from shared.backend import Backend
from shared.memory.people import people_of
from shared.memory.scope import owner_scope
from shared.memory.search import MemorySearch
from shared.models import RecallScope, SandboxConfig, ToolCall, WorkspaceConfig
from shared.ports import Scratchpad
from shared.sandbox.host import HostModule
from shared.sandbox.wasm import WasmExecutor
from shared.tools import ToolContext, default_registry
from shared.tools.builtin import agent_registry
from shared.tools.python import python_tools
from shared.tools.scratchpad import MAX_PAGE_CHARS
from tests.contract.factories import BACKEND_FACTORIES

WS = "ws1"
SESSION = "web.s1"
WORKSPACE = WorkspaceConfig(id=WS)
REGISTRY = agent_registry()
LIMITS = SandboxConfig(enabled=True, fuel=1_000_000_000, memory_mb=64, wall_s=60, max_output_bytes=100_000)


@pytest.fixture(params=sorted(BACKEND_FACTORIES))
def backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Backend]:
    with BACKEND_FACTORIES[request.param](tmp_path / "backend") as contract:
        yield contract.backend


@pytest.fixture(scope="module")
def executor() -> Iterator[WasmExecutor]:
    ex = WasmExecutor()
    yield ex
    ex.close()


def context(backend: Backend, session_id: str = SESSION) -> ToolContext:
    return ToolContext(
        workspace_id=WS,
        session_id=session_id,
        user_id="u1",
        turn_id="t1",
        backend=backend,
        scope=RecallScope(session_id=session_id, users=("u1",)),
        owner=owner_scope(session_id, ["u1"], group=False),
    )


def pad(backend: Backend) -> Scratchpad:
    assert backend.scratchpad is not None
    return backend.scratchpad


def read(backend: Backend, in_session: str = SESSION, **arguments: object) -> tuple[bool, str]:
    call = ToolCall(id="c1", name="scratchpad_read", arguments=json.dumps(arguments))
    result = REGISTRY.execute(call, context(backend, in_session), WORKSPACE)
    return result.is_error, result.content


def populate(backend: Backend) -> None:
    pad(backend).put(WS, SESSION, "task/t1/output", "Zürich: three mentions 🌦")
    pad(backend).put(WS, SESSION, "task/t2/output", "Kilimanjaro in June")
    # Another conversation of the workspace, and another workspace's same session id.
    pad(backend).put(WS, "web.s2", "task/t9/output", "someone else's research")
    pad(backend).put("ws-other", SESSION, "task/t1/output", "another workspace's output")


def test_without_a_key_it_lists_this_conversations_keys(backend: Backend) -> None:
    assert read(backend) == (False, "scratchpad: no entries in this conversation")
    populate(backend)
    assert read(backend) == (False, "scratchpad: 2 entries\n- task/t1/output\n- task/t2/output")
    assert REGISTRY.untrusted_output("scratchpad_read")


def test_an_entry_reads_back_whole_when_it_fits(backend: Backend) -> None:
    populate(backend)
    error, content = read(backend, key="task/t1/output")
    assert not error
    assert (
        content
        == "scratchpad task/t1/output: characters 0-24 of 24\nZürich: three mentions 🌦\n[end of entry]"
    )


def test_another_conversations_or_workspaces_entry_is_not_found(backend: Backend) -> None:
    populate(backend)
    error, content = read(backend, key="task/t9/output")
    assert error and json.loads(content)["error"] == "not_found"
    assert "someone else" not in content
    # The session and workspace come from the turn: the model cannot name them.
    error, content = read(backend, key="task/t1/output", session_id="web.s2")
    assert error and json.loads(content)["error"] == "invalid_arguments"
    _, theirs = read(backend, "web.s2", key="task/t1/output")
    assert json.loads(theirs)["error"] == "not_found"


def test_a_long_entry_is_read_a_page_at_a_time(backend: Backend) -> None:
    # Four-byte characters: a page of characters is cut to fit the result's bytes, never truncated.
    text = "".join(f"line {i} 🌦🌦\n" for i in range(3000))
    pad(backend).put(WS, SESSION, "task/t1/output", text)
    pages, offset = [], 0
    while True:
        error, content = read(backend, key="task/t1/output", offset=offset)
        assert not error and "[truncated" not in content
        head, rest = content.split("\n", 1)
        assert head.startswith(f"scratchpad task/t1/output: characters {offset}-")
        body, tail = rest.rsplit("\n", 1)
        pages.append(body)
        end = int(head.split("-")[1].split()[0])
        assert 0 < end - offset <= MAX_PAGE_CHARS
        if tail == "[end of entry]":
            break
        assert tail == f"[more: call again with offset={end}]"
        offset = end
    assert "".join(pages) == text and len(pages) > 3
    error, content = read(backend, key="task/t1/output", offset=len(text) + 5)
    assert error and "past the end" in content
    error, content = read(backend, key="task/t1/output", limit=MAX_PAGE_CHARS + 1)
    assert error and json.loads(content)["error"] == "invalid_arguments"


def test_without_a_scratchpad_the_tool_says_so(backend: Backend) -> None:
    bare = dataclasses.replace(backend, scratchpad=None)
    error, content = read(bare)
    assert error and "no scratchpad" in json.loads(content)["message"]


# ---------------------------------------------------------------- run_python's `sigil` module

SCRIPT = """
import sigil
keys = sigil.scratchpad_keys()
print(json.dumps(keys))
print(json.dumps(sigil.scratchpad_keys(prefix="task/t2")))
print(sigil.scratchpad(keys[0]))
print(sigil.scratchpad("task/t9/output"))
try:
    sigil._call("scratchpad", key="task/t1/output", session_id="web.s2")
except RuntimeError as e:
    print("refused", e)
try:
    sigil.scratchpad("../etc passwd")
except RuntimeError as e:
    print("refused", e)
"""


def test_a_script_reads_only_its_conversations_scratchpad(backend: Backend, executor: WasmExecutor) -> None:
    populate(backend)
    searcher = MemorySearch(
        backend.index, backend.memory, backend.embedder, people=people_of(backend.identities)
    )
    run = executor.run(
        "import json\n" + SCRIPT,
        inputs={},
        limits=LIMITS,
        host=HostModule(context(backend), LIMITS, searcher),
    )
    assert run.stdout.splitlines() == [
        '["task/t1/output", "task/t2/output"]',
        '["task/t2/output"]',
        "Zürich: three mentions 🌦",
        "None",
        "refused sigil.scratchpad takes no ['session_id']",
        "refused key must be a scratchpad key (a string, as scratchpad_keys lists)",
    ]
    # Every call counted against the run's host-call budget and recorded.
    assert [c["op"] for c in run.host_calls] == ["scratchpad_keys"] * 2 + ["scratchpad"] * 4


def test_run_python_reads_the_scratchpad_through_the_tool(backend: Backend, executor: WasmExecutor) -> None:
    populate(backend)
    config = WorkspaceConfig(id=WS, sandbox=SandboxConfig(enabled=True))
    backend.workspaces.put(config)
    registry = default_registry().extended(*python_tools(executor))
    script = "import sigil\nprint(len(sigil.scratchpad('task/t2/output')), sigil.scratchpad_keys())"
    call = ToolCall(id="c1", name="run_python", arguments=json.dumps({"script": script}))
    result = registry.execute(call, context(backend), config)
    assert not result.is_error, result.content
    assert result.content.endswith("stdout:\n19 ['task/t1/output', 'task/t2/output']")

"""run_python (docs/sandbox.md): real Wasmtime, the real CPython-for-WASI, the embedded backend.

The hostile corpus: each script is stopped with a typed SandboxError inside its limit, and the
host is unharmed (the next call in the same process runs normally with its full fuel). Then a
real analysis through a turn: a function-backed model asks the sandbox to group 1,000 facts by
month through the `sigil` host module, and the answer matches a direct computation.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from moto import mock_aws

from shared.adapters.aws import build_aws_backend
from shared.agent.turn import TurnDeps, run_turn
from shared.backend import Backend
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.deadline import deadline, within
from shared.errors import SandboxError
from shared.memory.people import people_of
from shared.memory.scope import owner_scope
from shared.memory.search import MemorySearch
from shared.models import (
    InboundMessage,
    LaneItem,
    RecallScope,
    SandboxConfig,
    Sender,
    ToolCall,
    ToolResultMessage,
    Triple,
    UserMessage,
    WorkspaceConfig,
)
from shared.providers.base import ChatRequest, ProviderEvent, ToolCallEvent
from shared.providers.function import FunctionProvider
from shared.sandbox.host import HostModule
from shared.sandbox.wasm import WasmExecutor
from shared.tools import ToolContext, ToolRegistry, default_registry
from shared.tools.builtin import agent_registry
from shared.tools.python import python_tools
from tests.support.moto_aws import name_for, provision

WS = "ws1"
MINE = RecallScope(session_id="web.s1", users=("u1",))
LIMITS = SandboxConfig(enabled=True, fuel=1_000_000_000, memory_mb=64, wall_s=60, max_output_bytes=10_000)
CANARY = "canary-7f3a91-do-not-leak"


@pytest.fixture(scope="module")
def executor() -> Iterator[WasmExecutor]:
    ex = WasmExecutor()
    yield ex
    ex.close()


def context(backend: Backend, scope: RecallScope = MINE) -> ToolContext:
    return ToolContext(
        workspace_id=WS,
        session_id="web.s1",
        user_id="u1",
        turn_id="t1",
        backend=backend,
        scope=scope,
        owner=owner_scope("web.s1", ["u1"], group=False),
    )


def host(backend: Backend, limits: SandboxConfig = LIMITS) -> HostModule:
    searcher = MemorySearch(
        backend.index, backend.memory, backend.embedder, people=people_of(backend.identities)
    )
    return HostModule(context(backend), limits, searcher)


def facts(n: int, *, user: str, session: str, start: datetime) -> list[Triple]:
    return [
        Triple(
            id=f"{user}-{i:05d}",
            workspace_id=WS,
            subject=user,
            predicate="noted",
            object=f"item {i}",
            session_id=session,
            user_id=user,
            scope=owner_scope(session, [user], group=False),
            created_at=start + timedelta(hours=7 * i),
        )
        for i in range(n)
    ]


def test_a_script_runs_and_reports_what_it_used(backend: Backend, executor: WasmExecutor) -> None:
    run = executor.run(
        "import math\nprint(math.comb(10, 3), inputs['x'])",
        inputs={"x": "y"},
        limits=LIMITS,
        host=host(backend),
    )
    assert run.stdout == "120 y\n"
    assert 0 < run.fuel_used < LIMITS.fuel and run.memory_bytes > 0


def test_stdlib_modules_import_what_they_need_lazily(backend: Backend, executor: WasmExecutor) -> None:
    # datetime.strptime imports _strptime on first use, argparse imports gettext: the script's
    # own imports are checked against the list, the stdlib's are not.
    script = (
        "import argparse, datetime\n"
        "print(datetime.datetime.strptime('2026-01-02', '%Y-%m-%d').date())\n"
        "print(argparse.ArgumentParser().parse_args([]))"
    )
    run = executor.run(script, inputs={}, limits=LIMITS, host=host(backend))
    assert run.stdout == "2026-01-02\nNamespace()\n"


HOSTILE = {
    "infinite loop": ("while True:\n    pass", "fuel"),
    "memory bomb": ("x = bytearray(512 * 1024 * 1024)", "memory"),
    "growing memory bomb": ("xs = []\nwhile True:\n    xs.append('x' * 1_000_000)", "memory"),
    "deep recursion": ("def f(n):\n    return f(n + 1)\nf(0)", "script"),
    "huge output": ("print('x' * 10_000_000)", "output"),
    "endless printing": ("while True:\n    print('spam')", "output"),
    "host file": ("print(open('/etc/passwd').read())", "script"),
    "proc": ("print(open('/proc/self/environ').read())", "script"),
    "data dir": ("print(open('.sigil/sigil.db', 'rb').read(10))", "script"),
    "sockets": ("import socket\nsocket.create_connection(('169.254.169.254', 80))", "script"),
    "subprocess": ("import subprocess\nsubprocess.run(['id'])", "script"),
    "ctypes": ("import ctypes\nctypes.CDLL(None)", "script"),
    "os module": ("import os\nprint(os.environ)", "script"),
    "hidden module": ("import importlib\nimportlib.import_module('os')", "script"),
    "threads": ("import _thread\n_thread.start_new_thread(print, ('x',))", "script"),
    "C-level recursion": ("import json\njson.loads('[' * 100_000 + ']' * 100_000)", "script"),
    "parser bomb": ("exec('(' * 200 + ')' * 200)", "memory"),
    "driver internals": ("os = sigil.facts.__globals__['_os']\nprint(os.listdir('/'))", "script"),
    "host call flood": ("import sigil\nwhile True:\n    sigil.facts(limit=1)", "host_calls"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_the_hostile_corpus_is_contained(backend: Backend, executor: WasmExecutor, name: str) -> None:
    script, limit = HOSTILE[name]
    with pytest.raises(SandboxError) as caught:
        executor.run(script, inputs={}, limits=LIMITS, host=host(backend))
    assert caught.value.limit == limit, caught.value.message
    used = caught.value.used
    assert used["fuel"] <= LIMITS.fuel and used["memory_bytes"] <= LIMITS.memory_mb << 20
    assert used["output_bytes"] <= LIMITS.max_output_bytes
    # The host is unharmed: the next call in this process runs, with its full fuel.
    assert executor.run("print(6 * 7)", inputs={}, limits=LIMITS, host=host(backend)).stdout == "42\n"


def test_a_wall_time_loop_is_stopped_by_the_epoch(backend: Backend, executor: WasmExecutor) -> None:
    limits = LIMITS.model_copy(update={"fuel": 1_000_000_000_000, "wall_s": 0.5})
    with pytest.raises(SandboxError) as caught:
        executor.run("while True:\n    pass", inputs={}, limits=limits, host=host(backend, limits))
    assert caught.value.limit == "wall_time"
    assert caught.value.used["fuel"] < limits.fuel


def test_the_tool_stops_a_script_by_the_turn_s_deadline(backend: Backend, executor: WasmExecutor) -> None:
    on = WorkspaceConfig(id=WS, sandbox=SandboxConfig(enabled=True, fuel=1_000_000_000_000, wall_s=300))
    backend.workspaces.put(on)
    call = ToolCall(id="c1", name="run_python", arguments=json.dumps({"script": "while True:\n    pass"}))
    ctx = context(backend)
    with deadline(within(1.0)):
        result = _registry(executor).execute(call, ctx, on)
    assert result.is_error and "sandbox_wall_time" in result.content, result.content
    # What it used reaches the turn's audit record, with the limit that stopped it.
    (usage,) = ctx.sandbox_usage
    assert usage.stopped == "wall_time" and usage.fuel < on.sandbox.fuel


def test_the_host_environment_never_reaches_the_script(
    backend: Backend, executor: WasmExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIGIL_TEST_CANARY", CANARY)
    # Past the import allow-list (it is not the boundary): os reached through the object graph.
    script = (
        "env = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close']"
        "[0].__init__.__globals__['environ']\nprint(dict(env))"
    )
    run = executor.run(script, inputs={}, limits=LIMITS, host=host(backend))
    assert CANARY not in run.stdout and CANARY not in run.stderr
    assert run.stdout.strip() == "{}"


def test_one_call_cannot_spend_the_next_call_s_fuel(backend: Backend, executor: WasmExecutor) -> None:
    alone = executor.run("print(sum(range(100_000)))", inputs={}, limits=LIMITS, host=host(backend)).fuel_used
    with pytest.raises(SandboxError):
        executor.run("while True:\n    pass", inputs={}, limits=LIMITS, host=host(backend))
    executor.prewarm()
    after = executor.run("print(sum(range(100_000)))", inputs={}, limits=LIMITS, host=host(backend)).fuel_used
    assert after == pytest.approx(alone, rel=0.05)


def test_the_host_module_reads_only_the_turn_s_scope(backend: Backend, executor: WasmExecutor) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    backend.memory.put_triples(WS, facts(5, user="u1", session="web.s1", start=start))
    backend.memory.put_triples(WS, facts(5, user="u2", session="web.s9", start=start))
    script = (
        "import sigil\nprint(sorted({f['subject'] for f in sigil.facts()}))\n"
        "try:\n    sigil._call('facts', workspace_id='other')\n"
        "except RuntimeError as e:\n    print('refused', e)\n"
        "try:\n    sigil._call('delete_everything')\nexcept RuntimeError as e:\n    print('refused', e)\n"
    )
    run = executor.run(script, inputs={}, limits=LIMITS, host=host(backend))
    lines = run.stdout.splitlines()
    assert lines[0] == "['u1']"
    assert lines[1].startswith("refused sigil.facts takes no ['workspace_id']")
    assert lines[2].startswith("refused sigil has no call 'delete_everything'")
    assert [c["op"] for c in run.host_calls] == ["facts", "facts", "delete_everything"]


def test_run_python_is_off_unless_the_workspace_turns_it_on(backend: Backend, executor: WasmExecutor) -> None:
    assert "run_python" in agent_registry()  # registered for every turn, refused unless enabled
    reg = _registry(executor)
    call = ToolCall(id="c1", name="run_python", arguments=json.dumps({"script": "print(1)"}))
    backend.workspaces.put(WorkspaceConfig(id=WS))
    result = reg.execute(call, context(backend), WorkspaceConfig(id=WS))
    assert result.is_error and "permission_denied" in result.content
    on = WorkspaceConfig(id=WS, sandbox=SandboxConfig(enabled=True))
    backend.workspaces.put(on)
    assert reg.execute(call, context(backend), on).content.endswith("stdout:\n1")


GROUP_BY_MONTH = """
import sigil
from collections import Counter
months, after = Counter(), None
while True:
    page = sigil.facts(after=after, limit=500)
    if not page:
        break
    months.update(f['created_at'][:7] for f in page)
    after = page[-1]['id']
print(json.dumps(dict(sorted(months.items()))))
"""


def test_a_model_groups_1000_memories_by_month_through_the_sandbox(
    backend: Backend, settings: Settings, executor: WasmExecutor
) -> None:
    start = datetime(2025, 3, 14, 9, tzinfo=UTC)
    mine = facts(1000, user="u1", session="web.s1", start=start)
    backend.memory.put_triples(WS, mine)
    backend.memory.put_triples(WS, facts(50, user="u2", session="web.s9", start=start))  # not in scope
    backend.workspaces.put(WorkspaceConfig(id=WS, sandbox=SandboxConfig(enabled=True)))
    expected = dict(sorted(Counter(t.created_at.strftime("%Y-%m") for t in mine).items()))

    def model(request: ChatRequest) -> str | list[ProviderEvent]:
        last_user = max(i for i, m in enumerate(request.messages) if isinstance(m, UserMessage))
        results = [m for m in request.messages[last_user:] if isinstance(m, ToolResultMessage)]
        if not results:
            args = json.dumps({"script": "import json\n" + GROUP_BY_MONTH})
            return [ToolCallEvent(call=ToolCall(id="c1", name="run_python", arguments=args))]
        return "counted"

    provider = FunctionProvider(model)
    deps = TurnDeps(
        backend=backend,
        settings=settings,
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=lambda ref: (provider, "test-model"),
        tools=_registry(executor),
    )
    inbound = InboundMessage(
        event_id="e1",
        channel="web",
        workspace_id=WS,
        session_id="web.s1",
        sender=Sender(id="u1", name="Ada"),
        chat_id="s1",
        text="how many things did I note each month?",
    )
    record = run_turn(deps, LaneItem(inbound=inbound))
    assert record.outcome == "ok" and record.tools_used == ["run_python"]
    sent = provider.requests[-1].messages[-1]
    assert isinstance(sent, ToolResultMessage) and "<<<BEGIN UNTRUSTED DATA" in sent.content
    printed = next(line for line in sent.content.splitlines() if line.startswith('{"'))
    assert json.loads(printed) == expected
    # The instance had started while the model's first call was in flight (ToolRegistry.warm).
    assert '"prewarmed": true' in sent.content
    # The audit record: the script in the call's arguments, what it used beside it.
    stored = backend.audit.list_records(WS)[0]
    assert stored.trace is not None and "sigil.facts" in stored.trace.tool_calls[0].arguments
    (usage,) = stored.sandbox
    assert usage.prewarmed and usage.host_calls == 3 and usage.stopped is None
    assert 0 < usage.fuel <= SandboxConfig().fuel and usage.output_bytes > 0


def _registry(executor: WasmExecutor) -> ToolRegistry:
    return default_registry().extended(*python_tools(executor))


def test_on_the_aws_backend_the_host_module_reads_dynamodb_under_the_turn_s_scope(
    tmp_path: Path, executor: WasmExecutor
) -> None:
    # The agent Lambda's backend on moto: the workspace's sandbox config and the facts from DynamoDB.
    with mock_aws():
        backend = build_aws_backend(provision(name_for(tmp_path)).settings())
        try:
            start = datetime(2025, 11, 20, tzinfo=UTC)
            mine = facts(300, user="u1", session="web.s1", start=start)
            backend.memory.put_triples(WS, mine)
            backend.memory.put_triples(WS, facts(20, user="u2", session="web.s9", start=start))
            config = WorkspaceConfig(id=WS, sandbox=SandboxConfig(enabled=True))
            backend.workspaces.put(config)
            call = ToolCall(
                id="c1", name="run_python", arguments=json.dumps({"script": "import json\n" + GROUP_BY_MONTH})
            )
            result = _registry(executor).execute(call, context(backend), config)
            assert not result.is_error, result.content
            printed = next(line for line in result.content.splitlines() if line.startswith('{"'))
            assert json.loads(printed) == dict(
                sorted(Counter(t.created_at.strftime("%Y-%m") for t in mine).items())
            )
        finally:
            backend.close()

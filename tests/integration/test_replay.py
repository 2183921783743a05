"""Replay (shared.replay, `sigil replay`): a 30-turn session recorded through the real turn with
one scripted model, replayed against a second that answers differently and calls other tools, on
the embedded backend and on the moto-backed cloud stores (DynamoDB on moto, the OpenSearch adapter
on osmem-server). The report shows every difference, and the original workspace's stores are the
same before and after, byte for byte: the SQLite files of the data dir, or a scan of every
DynamoDB item and every index document.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from osmem_server import OsmemServer
from typer.testing import CliRunner

from shared.adapters.embedded import build_embedded_backend
from shared.agent.turn import TurnDeps, run_turn
from shared.backend import Backend
from shared.budgets import PriceTable
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.cli import app
from shared.config import Settings
from shared.errors import BadRequest, ModelNotConfigured, NotFound
from shared.models import (
    WORKSPACE_WIDE,
    BudgetLimits,
    InboundMessage,
    LaneItem,
    Message,
    Sender,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    WorkspaceConfig,
)
from shared.providers.base import ChatRequest, Done, ProviderEvent, TextDelta, ToolCallEvent, Usage
from shared.providers.function import FunctionProvider, ModelFunction
from shared.replay import (
    NothingRecorded,
    ReplayChange,
    ReplayReport,
    recorded_sessions,
    render_html,
    render_markdown,
    replay,
)
from shared.replay.sandbox import copy_workspace, open_sandbox
from tests.support import moto_aws
from tests.support.fake_openai import FakeOpenAI
from tests.support.moto_stack import moto_stack

WS = "acme"
SESSION = "telegram.4242"
OTHER = "web.other"
TURNS = 30
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
PRICES = {
    "function/a": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
    "function/b": {"input_per_mtok": 10.0, "output_per_mtok": 20.0},
}
# Turns where model B does exactly what model A did (same text, no tools).
SAME = {1, 2, 11}
REFUSES = 29  # model B declines this one
runner = CliRunner()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SIGIL_DATA_DIR", "SIGIL_MODEL", "SIGIL_BACKEND", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SIGIL_EMBEDDING_MODEL", "none")


# ---------------------------------------------------------------- the two scripted models


def turn_of(request: ChatRequest) -> int:
    user = next(m for m in reversed(request.messages) if isinstance(m, UserMessage))
    found = re.search(r"message (\d+):", user.content)
    assert found, user.content
    return int(found.group(1))


def since_user(request: ChatRequest) -> list[Message]:
    last = max(i for i, m in enumerate(request.messages) if isinstance(m, UserMessage))
    return request.messages[last + 1 :]


def a_tool(n: int) -> tuple[str, dict[str, Any]] | None:
    if n % 5 == 0:
        return "memory_store", {"predicate": f"colour {n}", "object": f"blue {n}"}
    if n % 7 == 0:
        return "pin_task", {"task": f"task {n}"}
    return None


def b_tool(n: int) -> tuple[str, dict[str, Any]] | None:
    if n in SAME:
        return a_tool(n)
    if n % 3 == 0:
        return "memory_search", {"query": f"colour {n}"}
    if n % 8 == 0:
        return "memory_store", {"predicate": f"shape {n}", "object": f"round {n}"}
    return None


def a_reply(n: int) -> str:
    return f"A{n}: the answer is {n}."


def b_reply(n: int) -> str:
    if n in SAME:
        return a_reply(n)
    if n == REFUSES:
        return "I won't answer that."
    return f"B{n}: I would say {n * 2}."


def scripted(
    tool: Any, reply: Any, tokens_in: int, out_per_turn: int, *, refuses: int | None = None
) -> ModelFunction:
    """A model that calls `tool(n)` once (if any), then answers `reply(n)`, spending tokens_in
    and out_per_turn * n tokens on every call."""

    def model(request: ChatRequest) -> Iterable[ProviderEvent]:
        n = turn_of(request)
        usage = Usage(input_tokens=tokens_in, output_tokens=out_per_turn * n)
        call = tool(n)
        if call is not None and not any(isinstance(m, ToolResultMessage) for m in since_user(request)):
            name, args = call
            arguments = json.dumps(args)
            return [ToolCallEvent(call=ToolCall(id=f"c{n}", name=name, arguments=arguments)), usage]
        if n == refuses:
            return [usage, Done(finish_reason="refusal", refusal=reply(n))]
        return [TextDelta(text=reply(n)), usage]

    return model


def calls(tool: Any, n: int) -> int:
    return 2 if tool(n) is not None else 1


def names(tool: Any, n: int) -> list[str]:
    call = tool(n)
    return [call[0]] if call else []


MODEL_A = scripted(a_tool, a_reply, 100, 1)
MODEL_B = scripted(b_tool, b_reply, 300, 3, refuses=REFUSES)


def factory_of(models: dict[str, ModelFunction]) -> Any:
    providers = {ref: FunctionProvider(fn) for ref, fn in models.items()}

    def factory(ref: str | None) -> tuple[FunctionProvider, str]:
        if ref not in providers:
            raise ModelNotConfigured(f"no model {ref!r} here")
        return providers[ref], ref.split("/", 1)[1]

    return factory


# ---------------------------------------------------------------- the deployments


@dataclass
class Deployment:
    kind: str
    settings: Settings
    data_dir: Path
    open: Any  # () -> Backend: the source, as the CLI opens it
    dump: Any  # () -> Any: every store, byte for byte


def _files(data_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(data_dir)): p.read_bytes() for p in sorted(data_dir.rglob("*")) if p.is_file()}


@pytest.fixture(params=["embedded", "aws"])
def deployment(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Deployment]:
    data_dir = tmp_path / "state"
    if request.param == "embedded":
        settings = Settings(data_dir=data_dir, embedding_model="none", model_prices=PRICES)
        yield Deployment(
            "embedded", settings, data_dir, lambda: build_embedded_backend(settings), lambda: _files(data_dir)
        )
        return
    server = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
    request.addfinalizer(server.close)
    with moto_aws.persistent_mock(), moto_aws.moto_like_aws():
        from opensearchpy import OpenSearch

        from shared.adapters.aws import build_aws_backend, clients

        resources = moto_aws.provision(moto_aws.name_for(tmp_path))
        settings = resources.settings(
            embedding_model="none", opensearch_endpoint=server.url, model_prices=PRICES, data_dir=data_dir
        )
        search = OpenSearch(server.url)

        def dump() -> list[str]:
            ddb = clients.dynamodb(moto_aws.REGION)
            out: list[str] = []
            for table in (resources.sessions_table, resources.memory_table):
                for page in ddb.get_paginator("scan").paginate(TableName=table):
                    out += sorted(f"{table}: {json.dumps(item, sort_keys=True)}" for item in page["Items"])
            search.indices.refresh(index="_all")
            for index in sorted(search.indices.get(index="*")):
                hits = search.search(index=index, body={"query": {"match_all": {}}, "size": 10_000})
                out += sorted(f"{index}: {json.dumps(h, sort_keys=True)}" for h in hits["hits"]["hits"])
            return out

        yield Deployment("aws", settings, data_dir, lambda: build_aws_backend(settings), dump)


def inbound(
    n: int, text: str, *, session: str = SESSION, sender: str = "4242", name: str = "Ada"
) -> InboundMessage:
    channel, _, chat = session.partition(".")
    return InboundMessage(
        event_id=f"ev-{session}-{n}",
        channel=channel,  # type: ignore[arg-type]
        workspace_id=WS,
        session_id=session,
        sender=Sender(id=sender, name=name),
        chat_id=chat,
        text=text,
        received_at=T0 + timedelta(minutes=n),
    )


def user_text(n: int) -> str:
    if n == 4:
        return "message 4: is <b>bold</b> & safe?"
    return f"message {n}: tell me about {n}"


def record(backend: Backend, settings: Settings, turns: int = TURNS) -> None:
    """The recorded conversation: `turns` turns with model A in SESSION, and five in OTHER."""
    backend.workspaces.put(WorkspaceConfig(id=WS, model="function/a", active_window=6, budget=BudgetLimits()))
    sender = OutboxSender(backend.outbox)
    deps = TurnDeps(
        backend=backend,
        settings=settings,
        senders=SenderRegistry({"telegram": sender, "web": sender}),
        provider_factory=factory_of({"function/a": MODEL_A}),
        prices=PriceTable(settings.model_prices),
    )
    for n in range(1, 6):
        done = run_turn(
            deps, LaneItem(inbound=inbound(n, user_text(n), session=OTHER, sender="u-bo", name="Bo"))
        )
        assert done.outcome == "ok"
    for n in range(1, turns + 1):
        done = run_turn(deps, LaneItem(inbound=inbound(n, user_text(n))))
        assert done.outcome == "ok", done


@pytest.fixture
def recorded(deployment: Deployment) -> Iterator[Deployment]:
    backend = deployment.open()
    try:
        record(backend, deployment.settings)
    finally:
        backend.close()
    yield deployment


def replay_with(
    d: Deployment, change: ReplayChange, models: dict[str, ModelFunction], **kw: Any
) -> ReplayReport:
    source = d.open()
    try:
        return replay(source, d.settings, WS, change, provider_factory=factory_of(models), **kw)
    finally:
        source.close()


# ---------------------------------------------------------------- the tests


def test_a_replay_shows_every_difference_and_leaves_the_stores_byte_for_byte_the_same(
    recorded: Deployment,
) -> None:
    d = recorded
    before = d.dump()
    report = replay_with(
        d,
        ReplayChange(model="function/b"),
        {"function/a": MODEL_A, "function/b": MODEL_B},
        sessions=[SESSION],
    )
    after = d.dump()
    assert after == before
    # The dump holds the conversation (the session, its last reply, the index's documents).
    assert SESSION in repr(before) and a_reply(TURNS) in repr(before) and "message 1: tell me" in repr(before)

    assert report.sessions == [SESSION] and report.runs == 1 and len(report.turns) == TURNS
    changed = 0
    for n, turn in enumerate(report.turns, start=1):
        rec, rep = turn.recorded, turn.replayed[0]
        assert (turn.session_id, turn.index, turn.event_id) == (SESSION, n, f"ev-{SESSION}-{n}")
        assert turn.user_text == user_text(n)
        assert turn.received_at == T0 + timedelta(minutes=n)
        # Reply text, with its diff
        assert rec.reply == a_reply(n) and rep.reply == b_reply(n)
        assert turn.reply_changed == (n not in SAME)
        if n in SAME:
            assert turn.reply_diff == ""
        else:
            assert f"-{a_reply(n)}" in turn.reply_diff and f"+{b_reply(n)}" in turn.reply_diff
        # Tool calls, with their arguments and results
        assert [c.name for c in rec.tool_calls] == names(a_tool, n)
        assert [c.name for c in rep.tool_calls] == names(b_tool, n)
        assert turn.tools_changed == (a_tool(n) != b_tool(n))
        for side, tool in ((rec, a_tool), (rep, b_tool)):
            for c in side.tool_calls:
                assert json.loads(c.arguments) == tool(n)[1] and c.result and not c.is_error
        # Tokens, cost, model and outcome columns
        assert (rec.tokens_in, rec.tokens_out) == (100 * calls(a_tool, n), n * calls(a_tool, n))
        assert (rep.tokens_in, rep.tokens_out) == (300 * calls(b_tool, n), 3 * n * calls(b_tool, n))
        assert rec.cost_usd == pytest.approx((rec.tokens_in * 1.0 + rec.tokens_out * 2.0) / 1e6)
        assert rep.cost_usd == pytest.approx((rep.tokens_in * 10.0 + rep.tokens_out * 20.0) / 1e6)
        assert (rec.model, rep.model) == ("function/a", "function/b")
        assert rec.outcome == "ok" and rep.outcome == ("refused" if n == REFUSES else "ok")
        assert turn.outcome_changed == (n == REFUSES)
        assert rec.duration_ms > 0 and rep.duration_ms > 0
        changed += turn.changed
    assert report.changed_turns == changed == TURNS - len(SAME)
    assert report.recorded.turns == report.replayed.turns == TURNS
    assert report.recorded.tool_calls == sum(len(names(a_tool, n)) for n in range(1, TURNS + 1))
    assert report.replayed.tool_calls == sum(len(names(b_tool, n)) for n in range(1, TURNS + 1))
    assert report.replayed.outcomes == {"ok": TURNS - 1, "refused": 1}
    assert report.consistency is None

    # The renderings carry every difference; HTML escapes the user's markup.
    markdown = render_markdown(report)
    for n in range(1, TURNS + 1):
        assert f"### {SESSION} turn {n}: " in markdown
    assert markdown.count("```diff") == TURNS - len(SAME)
    assert f"### {SESSION} turn 1: unchanged" in markdown
    assert f"### {SESSION} turn 3: reply, tool calls" in markdown
    assert f"### {SESSION} turn {REFUSES}: reply, outcome" in markdown
    assert "memory_search(" in markdown and "| function/a | function/b |" in markdown
    page = render_html(report)
    assert "is &lt;b&gt;bold&lt;/b&gt; &amp; safe?" in page and "<b>bold</b>" not in page
    assert page.count('class="turn changed"') == TURNS - len(SAME)
    assert page.startswith("<!doctype html>") and "<script" not in page
    assert ReplayReport.model_validate_json(report.model_dump_json()) == report


def test_the_turn_records_what_a_replay_needs(recorded: Deployment) -> None:
    source = recorded.open()
    try:
        records = [r for r in source.audit.list_records(WS, limit=1000) if r.session_id == SESSION]
        stored = source.sessions.get(WS, SESSION)
        assert stored is not None and source.memory.count_messages(WS, SESSION) > 0  # Tier 1 too
    finally:
        source.close()
    records.sort(key=lambda r: int(r.event_id.rsplit("-", 1)[1]))  # type: ignore[union-attr]
    assert len(records) == TURNS
    position = 0
    for n, r in enumerate(records, start=1):
        trace = r.trace
        assert trace is not None
        assert (trace.first_seq, trace.last_seq) == (position, position + 2 * calls(a_tool, n) - 1)
        position = trace.last_seq + 1
        assert trace.received_at == T0 + timedelta(minutes=n)
        assert (trace.channel, trace.chat_id, trace.chat_type) == ("telegram", "4242", "dm")
        assert [(c.name, json.loads(c.arguments)) for c in trace.tool_calls] == (
            [a_tool(n)] if a_tool(n) else []
        )
    assert position == stored.message_count
    # Erasure takes the trace (its chat id and arguments may name the person) with the rest.
    assert records[0].anonymised().trace is None


def test_runs_of_a_model_that_varies_give_pass_k_below_one_and_list_the_disagreements(
    tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path / "state", embedding_model="none")
    backend = build_embedded_backend(settings)
    try:
        record(backend, settings)
        seen: Counter[int] = Counter()

        def varying(request: ChatRequest) -> Iterable[ProviderEvent]:
            n = turn_of(request)
            if since_user(request):
                return [TextDelta(text=f"C{n} v0")]
            seen[n] += 1
            if n == 5 and seen[n] == 2:  # the same text, but a tool call in run 2 only
                return [ToolCallEvent(call=ToolCall(id="c5", name="session_info", arguments="{}"))]
            return [TextDelta(text=f"C{n} v{seen[n] if n % 4 == 0 else 0}")]

        report = replay(
            backend,
            settings,
            WS,
            ReplayChange(model="function/c"),
            sessions=[SESSION],
            runs=3,
            provider_factory=factory_of({"function/c": varying}),
        )
    finally:
        backend.close()
    disagreeing = [4, 5, 8, 12, 16, 20, 24, 28]
    c = report.consistency
    assert c is not None and (c.runs, c.turns, c.agreeing) == (3, TURNS, TURNS - len(disagreeing))
    assert c.pass_k == pytest.approx((TURNS - len(disagreeing)) / TURNS) and c.pass_k < 1
    assert [d.index for d in c.disagreements] == disagreeing
    four = c.disagreements[0]
    assert [(a.runs, a.reply) for a in four.answers] == [([1], "C4 v1"), ([2], "C4 v2"), ([3], "C4 v3")]
    five = c.disagreements[1]
    assert [(a.runs, a.tools) for a in five.answers] == [([1, 3], []), ([2], ["session_info"])]
    assert [t.consistent for t in report.turns] == [n not in disagreeing for n in range(1, TURNS + 1)]
    assert all(len(t.replayed) == 3 for t in report.turns)
    assert "pass^3: 0.733" in render_markdown(report) and "pass^3: <strong>0.733</strong>" in render_html(
        report
    )


def test_the_sandbox_holds_the_workspace_less_the_replayed_session(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "state", embedding_model="none")
    source = build_embedded_backend(settings)
    sandbox = open_sandbox(settings, tmp_path / "sandbox")
    try:
        record(source, settings)
        config = ReplayChange(model="function/b", tools_deny=["memory_store"]).apply(
            source.workspaces.get(WS)  # type: ignore[arg-type]
        )
        copy_workspace(source, sandbox, config, replayed={SESSION})
        stored = sandbox.workspaces.get(WS)
        assert stored is not None and stored.model == "function/b" and stored.tools_deny == ["memory_store"]
        assert stored.active_window == 6  # the rest as recorded
        assert sandbox.sessions.get(WS, SESSION) is None
        other = sandbox.sessions.get(WS, OTHER)
        assert other is not None and other.active_messages == source.sessions.get(WS, OTHER).active_messages  # type: ignore[union-attr]
        assert sandbox.memory.count_messages(WS, SESSION) == 0
        assert sandbox.memory.count_messages(WS, OTHER) == source.memory.count_messages(WS, OTHER)
        # The facts model A stored in the replayed session stay out; the identities come along.
        assert [t for t in source.memory.list_triples(WS, scope=WORKSPACE_WIDE) if t.session_id == SESSION]
        assert not [
            t for t in sandbox.memory.list_triples(WS, scope=WORKSPACE_WIDE) if t.session_id == SESSION
        ]
        assert {i.channel_user_id for i in sandbox.identities.list_identities(WS)} == {"4242", "u-bo"}
        facts = sandbox.memory.list_triples(WS, scope=WORKSPACE_WIDE)
        assert len(facts) == 1 and facts[0].session_id == OTHER
        assert sandbox.memory.count_messages(WS, OTHER) > 0
        # The index is rebuilt from that memory: each Tier-1 record and the fact.
        assert sandbox.index.count(WS) == sandbox.memory.count_messages(WS, OTHER) + 1
    finally:
        sandbox.close()
        source.close()


def test_bad_input_is_a_clear_error_before_any_turn_runs(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "state", embedding_model="none")
    backend = build_embedded_backend(settings)
    models = {"function/a": MODEL_A, "function/b": MODEL_B}
    try:
        record(backend, settings, turns=2)
        factory = factory_of(models)

        def attempt(workspace: str = WS, **kw: Any) -> None:
            replay(
                backend, settings, workspace, kw.pop("change", ReplayChange()), provider_factory=factory, **kw
            )

        with pytest.raises(NotFound, match="no workspace 'nobody'"):
            attempt("nobody")
        with pytest.raises(NotFound, match=r"no session 'web\.nope'"):
            attempt(sessions=["web.nope"])
        with pytest.raises(ModelNotConfigured, match="function/zzz"):
            attempt(change=ReplayChange(model="function/zzz"))
        with pytest.raises(BadRequest, match="runs must be between 1 and 20"):
            attempt(runs=0)
        backend.workspaces.put(WorkspaceConfig(id="empty"))
        with pytest.raises(NothingRecorded, match="nothing recorded"):
            attempt("empty")
        assert [s.id for s in recorded_sessions(backend, WS)] == [SESSION, OTHER]
    finally:
        backend.close()


# ---------------------------------------------------------------- the CLI


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    settings = Settings(data_dir=path, embedding_model="none")
    backend = build_embedded_backend(settings)
    try:
        record(backend, settings, turns=3)
    finally:
        backend.close()
    return path


def sigil(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["replay", *args])
    return result.exit_code, result.stdout, result.stderr


def test_sigil_replay_writes_json_and_markdown_against_a_real_provider(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeOpenAI(lambda body: "fake says hi") as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        common = ["-w", WS, "-s", SESSION, "--model", "openai/fake-model", "--data-dir", str(data_dir)]
        before = _files(data_dir)
        code, out, err = sigil(*common, "--format", "json")
        assert code == 0, err
        report = ReplayReport.model_validate_json(out)
        assert [t.replayed[0].reply for t in report.turns] == ["fake says hi"] * 3
        assert [t.recorded.reply for t in report.turns] == [a_reply(n) for n in (1, 2, 3)]
        assert report.change.model == "openai/fake-model"
        assert {t.replayed[0].model for t in report.turns} == {"openai/fake-model"}
        target = tmp_path / "report.md"
        code, _, err = sigil(
            *common, "--format", "markdown", "--deny-tools", "memory_store", "--out", str(target)
        )
        assert code == 0, err
        assert f"wrote {target}: 3 turns, 3 changed" in err
        text = target.read_text()
        assert text.startswith(f"# Replay of workspace {WS}") and "- tools denied: memory_store" in text
        assert "+fake says hi" in text
        code, out, _ = sigil(*common, "--format", "html")
        assert code == 0 and "<!doctype html>" in out
        assert _files(data_dir) == before


def test_sigil_replay_takes_a_session_by_the_name_it_has_on_its_channel(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The chat's own name, without the `telegram.` its session id is stored under
    with FakeOpenAI(lambda body: "fake says hi") as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        args = ["-w", WS, "-s", SESSION.partition(".")[2], "--model", "openai/fake-model"]
        code, out, err = sigil(*args, "--format", "json", "--data-dir", str(data_dir))
    assert code == 0, err
    report = ReplayReport.model_validate_json(out)
    assert {t.session_id for t in report.turns} == {SESSION}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-w", WS, "-s", "4243"], f"no session '4243' in workspace '{WS}' (did you mean {SESSION}?)"),
        (["-w", "nobody"], "no workspace 'nobody'"),
        (["-w", WS, "-s", "web.nope"], "no session 'web.nope'"),
        (
            ["-w", WS, "--model", "gpt-4o"],
            "bad change: model: 'gpt-4o' is not a model: name it as provider/model, e.g. openai/gpt-4o",
        ),
        (["-w", WS, "--model", "zzz/model"], "Unknown model provider 'zzz'"),
        (["-w", WS, "--model", "openai/x"], "neither OPENAI_API_KEY nor OPENAI_BASE_URL"),
        (["-w", WS, "--runs", "0"], "runs must be between 1 and 20"),
        (["-w", WS, "--system-prompt-file", "/nonexistent/prompt.txt"], "cannot read --system-prompt-file"),
    ],
)
def test_sigil_replay_refuses_bad_input_with_exit_2(data_dir: Path, args: list[str], message: str) -> None:
    before = _files(data_dir)
    code, _, err = sigil(*args, "--data-dir", str(data_dir))
    assert code == 2 and message in err, err
    assert _files(data_dir) == before


def test_sigil_replay_of_an_empty_data_dir_creates_nothing(tmp_path: Path) -> None:
    code, _, err = sigil("-w", WS, "--data-dir", str(tmp_path / "none"))
    assert code == 2 and "nothing recorded: no Sigil data in" in err
    assert not (tmp_path / "none").exists()


def test_sigil_replay_reads_a_deployed_stack_without_writing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--stack`: the stores its CloudFormation outputs name (moto), read with the operator's
    credentials. The stack's search endpoint is never contacted: a replay reads no index."""
    server = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
    try:
        with moto_stack(tmp_path) as stack, FakeOpenAI(lambda body: "from the stack") as fake:
            from shared.adapters.aws import build_aws_backend, clients

            settings = stack.resources.settings(embedding_model="none", opensearch_endpoint=server.url)
            backend = build_aws_backend(settings)
            try:
                record(backend, settings, turns=4)
            finally:
                backend.close()
            ddb = clients.dynamodb(moto_aws.REGION)

            def dump() -> list[str]:
                tables = (stack.resources.sessions_table, stack.resources.memory_table)
                return [
                    json.dumps(item, sort_keys=True)
                    for table in tables
                    for page in ddb.get_paginator("scan").paginate(TableName=table)
                    for item in page["Items"]
                ]

            before = dump()
            monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
            monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
            code, out, err = sigil(
                "-w", WS, "-s", SESSION, "--model", "openai/fake-model", "--format", "json", *stack.args()
            )
            assert code == 0, err
            report = ReplayReport.model_validate_json(out)
            assert [t.replayed[0].reply for t in report.turns] == ["from the stack"] * 4
            assert [t.recorded.reply for t in report.turns] == [a_reply(n) for n in range(1, 5)]
            assert dump() == before and SESSION in repr(before)
    finally:
        server.close()

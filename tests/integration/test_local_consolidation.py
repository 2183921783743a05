"""Consolidation on one machine: real turns publish CompactionDue into the SQLite bus and the local
scheduler compacts (shared.local.consolidation, as the gateway registers it); and `sigil
consolidate` runs the same code once against a data dir (typer's CliRunner, the real openai SDK
against the local OpenAI stand-in as the consolidation model).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shared.adapters.embedded import LocalScheduler, SqliteEventBus, build_embedded_backend
from shared.agent.turn import TurnDeps, run_turn
from shared.backend import Backend
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.cli import app
from shared.config import Settings
from shared.local.consolidation import HOURLY_JOB, register_consolidation
from shared.models import WORKSPACE_WIDE, InboundMessage, LaneItem, Sender, UserMessage, new_workspace
from shared.providers.base import ChatRequest
from shared.providers.function import FunctionProvider
from shared.tasks.items import outcome_item
from tests.contract.builders import task
from tests.support.consolidation import SID, FakeConsolidator, seed
from tests.support.fake_openai import FakeOpenAI

runner = CliRunner()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "SIGIL_DATA_DIR",
        "SIGIL_DEFAULT_WORKSPACE",
        "SIGIL_BACKEND",
        "SIGIL_MODEL",
        "SIGIL_CONSOLIDATION_MODEL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def backend(data_dir: Path) -> Iterator[Backend]:
    b = build_embedded_backend(Settings(data_dir=data_dir))
    yield b
    b.close()


def echo(request: ChatRequest) -> str:
    last = request.messages[-1]
    assert isinstance(last, UserMessage)
    return f"noted: {last.content}"


def turn(i: int, text: str) -> LaneItem:
    return LaneItem(
        inbound=InboundMessage(
            event_id=f"e{i}",
            channel="web",
            workspace_id="default",
            session_id="web.s1",
            sender=Sender(id="alice"),
            chat_id="s1",
            text=text,
        )
    )


def test_real_turns_announce_compaction_and_the_local_scheduler_does_it(
    backend: Backend, data_dir: Path
) -> None:
    # Given the gateway's scheduler with consolidation registered, and a function-backed model
    bus = backend.events
    assert isinstance(bus, SqliteEventBus)
    # The bus's clock stands still: each turn's TurnCommitted waits for its debounce (per-turn
    # extraction, tests/integration/test_turn_extraction.py), however long 60 turns take here.
    bus.clock = lambda: 1_800_000_000.0
    scheduler = LocalScheduler(bus, max_attempts=1)
    consolidator = FakeConsolidator()
    register_consolidation(scheduler, backend, lambda: consolidator.model)
    deps = TurnDeps(
        backend=backend,
        settings=Settings(data_dir=data_dir),
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=lambda ref: (FunctionProvider(echo), "turn-model"),
    )
    # When 60 turns run (120 messages; 100 roll out of the 20-message window into Tier 1)
    for i in range(60):
        text = "I prefer dark mode in every editor." if i == 3 else f"small talk {i}"
        assert run_turn(deps, turn(i, text)).outcome == "ok"
    # Then the turns published one CompactionDue per 50 rolled-out messages
    due = [e for e in bus.list_events(status="pending") if e.event.type == "CompactionDue"]
    assert len(due) == 2
    # When the scheduler runs (both events, then the hourly job, which is due at first start)
    assert scheduler.run_pending() == 3
    # Then the session has its two batch summaries and its rolling summary, and the fact
    summaries = backend.memory.list_summaries("default", scope=WORKSPACE_WIDE, session_id="web.s1")
    assert sorted((s.kind, s.first_seq, s.last_seq) for s in summaries) == [
        ("batch", 0, 49),
        ("batch", 50, 99),
        ("rolling", 0, 99),
    ]
    session = backend.sessions.get("default", "web.s1")
    assert session is not None and session.summary.startswith("Messages 0-49")
    facts = backend.memory.triples_by_subject("default", "alice", scope=WORKSPACE_WIDE)
    assert [(t.predicate, t.object) for t in facts] == [("editor-theme", "dark mode")]
    # The first event did both batches, so the second found nothing left: two summary calls in all
    assert consolidator.calls["summary"] == 2
    assert [e.status for e in bus.list_events() if e.event.type == "CompactionDue"] == ["done", "done"]
    assert scheduler.last_run(HOURLY_JOB) is not None


def test_the_local_hourly_job_times_out_an_overdue_task_and_tells_its_user(backend: Backend) -> None:
    # Given a task of the stored default workspace, long past its deadline, whose step was lost
    backend.workspaces.put(new_workspace("default"))
    assert backend.tasks is not None
    lost = backend.tasks.create(
        task("default", "web.s1", status="running"), max_per_session=3, max_per_workspace=20
    )
    assert isinstance(backend.events, SqliteEventBus)
    scheduler = LocalScheduler(backend.events, max_attempts=1)
    register_consolidation(scheduler, backend, lambda: FakeConsolidator().model)
    # When the scheduler's hourly job runs (due at first start)
    assert scheduler.run_pending() == 1
    # Then the sweep timed the task out, and its outcome is on the session's lane (a second
    # submission of it is a duplicate)
    ended = backend.tasks.get("default", lost.id)
    assert ended is not None and ended.status == "timed_out"
    assert backend.lanes.submit(outcome_item(ended, pii=False)).status == "duplicate"


# ---------------------------------------------------------------- sigil consolidate


@pytest.fixture
def fake_model(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeConsolidator]:
    consolidator = FakeConsolidator()
    with FakeOpenAI(consolidator.openai) as server:
        monkeypatch.setenv("SIGIL_CONSOLIDATION_MODEL", "openai/cheap-model")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        yield consolidator


def sigil(data_dir: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["consolidate", *args, "--data-dir", str(data_dir)])
    return result.exit_code, result.stdout, result.stderr


def test_sigil_consolidate_runs_once_and_says_what_it_did(
    backend: Backend, data_dir: Path, fake_model: FakeConsolidator
) -> None:
    seed(backend, workspace_id="default")
    seed(backend, workspace_id="other", turns=30)
    status, out, err = sigil(data_dir)
    assert status == 0, out
    # As it works, it says on stderr what it is doing (other's 30 turns are under one batch)
    assert err.splitlines() == [
        f"... default: compacting session {SID}",
        "... default: maintaining facts",
        "... other: maintaining facts",
    ]
    lines = out.splitlines()
    assert lines[0].startswith("run cli-") and ": done in " in lines[0]
    assert lines[1:3] == [
        "workspace default: done",
        f"  session {SID}: done, 2 summaries (summarised to seq 99), facts 4 new / 2 merged / 1 dropped",
    ]
    assert lines[3].startswith("  maintenance: scored ")
    assert "workspace other: done" in lines
    assert fake_model.calls == {"summary": 2, "rolling": 1, "extract": 2}
    # Run again: nothing left to summarise
    status, out, _ = sigil(data_dir, "--workspace", "default")
    assert status == 0 and out.splitlines()[0] == "workspace default: done"
    assert not any(line.startswith("  session ") for line in out.splitlines()), out
    assert fake_model.calls["summary"] == 2


def test_sigil_consolidate_one_session_as_json(
    backend: Backend, data_dir: Path, fake_model: FakeConsolidator
) -> None:
    seed(backend, workspace_id="default")
    status, out, _ = sigil(data_dir, "--session", SID, "--json")
    assert status == 0
    report = json.loads(out)
    assert (report["session_id"], report["status"], report["summaries"], report["checkpoint"]) == (
        SID,
        "done",
        2,
        99,
    )


def test_sigil_consolidate_without_a_model_says_how_to_configure_one(
    backend: Backend, data_dir: Path
) -> None:
    seed(backend, workspace_id="default")
    status, _, err = sigil(data_dir, "--session", SID)
    assert status == 2 and "No model is configured" in err
    status, out, _ = sigil(data_dir, "--workspace", "default")
    assert status == 0 and "compaction skipped: No model is configured" in out
    assert backend.memory.list_summaries("default", scope=WORKSPACE_WIDE) == []


def test_sigil_consolidate_takes_the_model_from_the_configuration_file(
    backend: Backend, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a sigil.yaml naming the consolidation model, and none in the environment (the
    # provider's address and key are the environment's, as for the gateway)
    consolidator = FakeConsolidator()
    config = tmp_path / "sigil.yaml"
    config.write_text("defaults:\n  model: openai/turn-model\n  consolidation_model: openai/file-model\n")
    seed(backend, workspace_id="default")
    with FakeOpenAI(consolidator.openai) as server:
        monkeypatch.setenv("SIGIL_CONFIG", str(config))
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        # When the out-of-process command runs
        status, out, err = sigil(data_dir, "--session", SID)
        # Then it used the file's model, as the gateway would, with no word of restarting anything
        assert status == 0, err
        assert "2 summaries" in out and "restart" not in out + err
        assert {body["model"] for body in server.requests} == {"file-model"}

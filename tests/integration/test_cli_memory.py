"""`sigil memory list | erase | rollback` against a real data dir, through typer's CliRunner."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shared.adapters.embedded import build_embedded_backend
from shared.backend import Backend
from shared.cli import app
from shared.config import Settings
from shared.consolidation.maintenance.driver import run_maintenance
from shared.models import WORKSPACE_WIDE, Summary, Triple

WS = "default"
NOW = datetime(2026, 6, 1, tzinfo=UTC)
runner = CliRunner()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SIGIL_DATA_DIR", "SIGIL_DEFAULT_WORKSPACE", "SIGIL_BACKEND"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def backend(data_dir: Path) -> Iterator[Backend]:
    b = build_embedded_backend(Settings(data_dir=data_dir))
    try:
        yield b
    finally:
        b.close()


def _triple(triple_id: str, subject: str, obj: str, **kw: object) -> Triple:
    return Triple.model_validate(
        {
            "id": triple_id,
            "workspace_id": WS,
            "subject": subject,
            "predicate": "likes",
            "object": obj,
            "session_id": f"dm-{subject}",
            "message_ids": [f"{triple_id}-m1"],
            "created_at": NOW,
            "updated_at": NOW,
            "user_id": subject,
            **kw,
        }
    )


def _populate(b: Backend) -> None:
    b.memory.put_triples(
        WS,
        [
            _triple(
                "t1", "alice", "green tea", source="consolidation", run_id="compact-1", category="preference"
            ),
            _triple("t2", "alice", "Green tea.", access_count=5),
            _triple("t3", "bob", "chess"),
            _triple("t4", "bob", "checkers", status="pruned"),
        ],
    )
    b.memory.put_summary(
        Summary(
            id="sum1",
            workspace_id=WS,
            session_id="dm-alice",
            text="Alice talked about tea.",
            first_seq=0,
            last_seq=49,
            start_at=NOW,
            end_at=NOW,
            user_id="alice",
            run_id="compact-1",
        )
    )


def invoke(data_dir: Path, *args: str, input: str | None = None) -> tuple[int, str]:
    result = runner.invoke(app, ["memory", *args, "--data-dir", str(data_dir)], input=input)
    return result.exit_code, result.output


def test_list_shows_provenance_and_filters(backend: Backend, data_dir: Path) -> None:
    _populate(backend)

    code, out = invoke(data_dir, "list")
    assert code == 0
    assert "fact t1" in out and "fact t3" in out and "fact t4" not in out
    assert "from consolidation run compact-1  session dm-alice  messages t1-m1  user alice" in out
    assert "summary sum1  [batch] session dm-alice messages 0-49" in out and "run compact-1" in out

    _, everything = invoke(data_dir, "list", "--status", "all")
    assert "fact t4  [pruned]" in everything

    _, bobs = invoke(data_dir, "list", "--user", "bob", "--json")
    rows = [json.loads(line) for line in bobs.splitlines()]
    assert [(r["tier"], r["id"]) for r in rows] == [("fact", "t3")]
    assert rows[0]["session_id"] == "dm-bob" and "embedding" not in rows[0]

    code, out = invoke(data_dir, "list", "--status", "merged")
    assert code == 2


def test_rollback_undoes_a_run(backend: Backend, data_dir: Path) -> None:
    _populate(backend)
    run_maintenance(backend, WS, run_id="maint-1", clock=lambda: NOW)
    statuses = {t.id: t.status for t in backend.memory.list_triples(WS, scope=WORKSPACE_WIDE)}
    assert statuses["t1"] == "merged"  # t2, the more used, survived

    code, out = invoke(data_dir, "list")
    assert "changed by maint-1 (promoted)" in out  # t2: promoted, then absorbed t1

    code, out = invoke(data_dir, "rollback", "--run", "maint-1")
    assert code == 0 and json.loads(out)["restored"] == 2
    assert {t.id: t.status for t in backend.memory.list_triples(WS, scope=WORKSPACE_WIDE)}["t1"] == "active"

    code, out = invoke(data_dir, "rollback", "--run", "compact-1")
    report = json.loads(out)
    assert (report["deleted_triples"], report["deleted_summaries"]) == (1, 1)
    assert "t1" not in {t.id for t in backend.memory.list_triples(WS, scope=WORKSPACE_WIDE)}


def test_erase_asks_first_and_then_erases(backend: Backend, data_dir: Path) -> None:
    _populate(backend)

    code, _ = invoke(data_dir, "erase", "--user", "alice", input="n\n")
    assert code == 1
    assert len(backend.memory.triples_by_subject(WS, "alice", scope=WORKSPACE_WIDE)) == 2

    code, out = invoke(data_dir, "erase", "--user", "alice", "--yes")
    assert code == 0 and json.loads(out)["triples_deleted"] == 2
    _, listed = invoke(data_dir, "list", "--status", "all")
    assert "alice" not in listed and "fact t3" in listed

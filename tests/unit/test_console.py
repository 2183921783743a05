"""shared.console's parts below the browser: the raw scores a search hit carries, usage by day and
user from audit records, the SVG plots, escaping, and the POST checks (Starlette's TestClient on
the real app over the embedded backend)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from shared.adapters.embedded import SqliteMemoryIndex, SqliteMemoryStore, build_embedded_backend
from shared.backend import Backend
from shared.config import Settings
from shared.console import create_app, usage
from shared.console.svg import bars
from shared.memory.search import MemorySearch
from shared.memory.writer import MemoryWriter
from shared.models import WORKSPACE_WIDE, AuditRecord, MemoryRecord, Session, UserMessage, WorkspaceConfig
from tests.support.hashing_embedder import HashingEmbedder

WS = "ws-console"
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
TEXTS = ["my favourite dinner is pasta with basil pesto", "the budget meeting moved to Thursday"]


def _records() -> list[MemoryRecord]:
    return [
        MemoryRecord(id=f"m{i}", workspace_id=WS, session_id="s1", role="user", text=t, seq=i, created_at=T0)
        for i, t in enumerate(TEXTS)
    ]


def test_a_hit_carries_its_raw_bm25_and_vector_scores_beside_the_fused_one(
    index: SqliteMemoryIndex, memory: SqliteMemoryStore, embedder: HashingEmbedder
) -> None:
    MemoryWriter(index, embedder).write_messages(WS, _records())
    hybrid = MemorySearch(index, memory, embedder).search(WS, "pesto dinner", scope=WORKSPACE_WIDE, k=2)
    best = hybrid.hits[0]
    assert (hybrid.mode, best.id) == ("hybrid", "m0")
    assert best.bm25 is not None and best.bm25 > 0
    assert best.vector is not None and 0 < best.vector <= 1.0
    # Min-max fusion puts the best of both lists at the top of the scale: the raw scores are not it.
    assert best.score == pytest.approx(1.0) and best.bm25 != best.score

    bm25 = MemorySearch(index, memory, None).search(WS, "pesto dinner", scope=WORKSPACE_WIDE, k=2)
    assert bm25.mode == "bm25" and bm25.hits[0].bm25 is not None and bm25.hits[0].vector is None


def _audit(day: int, user: str | None, tokens: int, cost: float) -> AuditRecord:
    return AuditRecord(
        workspace_id=WS,
        session_id="s1",
        user_id=user,
        turn_id=f"t{day}{user}",
        tokens_in=tokens,
        tokens_out=1,
        cost_usd=cost,
        duration_ms=100.0 * (day + 1),
        outcome="ok",
        created_at=T0 + timedelta(days=day),
    )


def test_usage_by_day_keeps_the_days_without_turns_and_by_user_leaves_anonymised_records_out() -> None:
    found = [_audit(0, "alice", 10, 0.5), _audit(0, None, 5, 0.25), _audit(3, "bob", 1, 0.125)]
    days = usage.by_day(found)
    assert [d.isoformat() for d, _ in days] == ["2026-03-02", "2026-03-03", "2026-03-04", "2026-03-05"]
    assert [t.turns for _, t in days] == [2, 0, 0, 1]
    assert days[0][1].tokens == 17 and days[0][1].cost_usd == 0.75
    assert days[3][1].mean_latency_ms == 400.0
    users = usage.by_user(found)
    assert list(users) == ["alice", "bob"] and users["alice"].turns == 1
    assert usage.by_day([]) == []


def test_a_plot_has_a_bar_per_point_with_its_value_and_escapes_its_labels() -> None:
    svg = bars("Cost <per> day", [("2026-03-02", 2.0), ("<b>", 0.0)], fmt=lambda v: f"${v:.2f}")
    assert svg.count("<rect ") == 2
    assert "<title>2026-03-02: $2.00</title>" in svg
    assert "&lt;b&gt;" in svg and "<b>" not in svg
    assert "Cost &lt;per&gt; day" in svg
    assert "no data" in bars("Empty", [])


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[Backend]:
    built = build_embedded_backend(Settings(data_dir=tmp_path / "state", embedding_model="none"))
    try:
        built.workspaces.put(WorkspaceConfig(id=WS, name="<i>ops</i>"))
        evil = "<script>alert(1)</script>"
        built.sessions.save(
            Session(
                id="web.evil", workspace_id=WS, user_id="mallory", active_messages=[UserMessage(content=evil)]
            ),
            expected_version=0,
        )
        built.audit.append(_audit(0, "mallory", 3, 0.01))
        yield built
    finally:
        built.close()


def test_what_a_store_holds_is_escaped_on_every_page(backend: Backend) -> None:
    client = TestClient(create_app(backend, Settings(), csrf="t"))
    for path in ("/workspaces", f"/workspaces/{WS}", "/sessions", f"/workspaces/{WS}/sessions/web.evil"):
        page = client.get(path)
        assert page.status_code == 200, path
        assert "<script>" not in page.text and "<i>ops</i>" not in page.text, path
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in client.get(f"/workspaces/{WS}/sessions/web.evil").text


def test_unknown_things_are_404_pages_and_a_post_needs_the_token_and_its_confirmation(
    backend: Backend,
) -> None:
    client = TestClient(create_app(backend, Settings(), csrf="right-token"))
    for path in ("/workspaces/nope", f"/workspaces/{WS}/sessions/nope", f"/workspaces/{WS}/facts/nope"):
        assert client.get(path).status_code == 404, path
    assert client.get(f"/workspaces/{WS}/runs/nope/rollback").status_code == 404
    erase = f"/workspaces/{WS}/users/mallory/erase"
    assert client.post(erase, data={"confirm": "mallory"}).status_code == 403
    assert client.post(erase, data={"csrf": "wrong", "confirm": "mallory"}).status_code == 403
    # The right token without the confirmation page's field, or confirming someone else.
    assert client.post(erase, data={"csrf": "right-token"}).status_code == 400
    assert client.post(erase, data={"csrf": "right-token", "confirm": "alice"}).status_code == 400
    assert client.post(erase, content=b"x" * 20_000).status_code == 413
    assert backend.sessions.get(WS, "web.evil") is not None
    elsewhere = client.post(
        "/workspaces/nope/users/mallory/erase", data={"csrf": "right-token", "confirm": "mallory"}
    )
    assert elsewhere.status_code == 404
    done = client.post(erase, data={"csrf": "right-token", "confirm": "mallory"})
    assert done.status_code == 200 and "User mallory erased" in done.text
    assert backend.sessions.get(WS, "web.evil") is None


def test_a_workspaces_plots_are_of_one_user_when_asked(backend: Backend) -> None:
    backend.audit.append(_audit(2, "trudy", 7, 0.02))
    client = TestClient(create_app(backend, Settings(), csrf="t"))

    def turn_bars(path: str) -> list[str]:
        page = client.get(path).text
        plot = page[page.index('class="plot turns"') : page.index("</svg>", page.index('class="plot turns"'))]
        return re.findall(r"<title>([^<]*)</title></rect>", plot)

    # Every day from the first turn to the last, then only trudy's one day.
    assert turn_bars(f"/workspaces/{WS}") == ["2026-03-02: 1", "2026-03-03: 0", "2026-03-04: 1"]
    assert turn_bars(f"/workspaces/{WS}?user=trudy") == ["2026-03-04: 1"]
    assert "Usage over time of trudy" in client.get(f"/workspaces/{WS}?user=trudy").text

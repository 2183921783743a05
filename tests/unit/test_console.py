"""shared.console's parts below the browser: the raw scores a search hit carries, usage by day and
user from audit records, the SVG plots, escaping, the POST checks, and the guard in front of every
route (its Host allow-list, Origin checks and launch secret, against a DNS-rebinding page):
Starlette's TestClient on the real app over the embedded backend."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from shared.adapters.embedded import SqliteMemoryIndex, SqliteMemoryStore, build_embedded_backend
from shared.backend import Backend
from shared.config import Settings
from shared.console import create_app, usage
from shared.console.guard import host_name
from shared.console.svg import bars
from shared.memory.search import MemorySearch
from shared.memory.writer import MemoryWriter
from shared.models import (
    WORKSPACE_WIDE,
    AuditRecord,
    BudgetLimits,
    MemoryRecord,
    ScopeLimits,
    Session,
    Triple,
    UserMessage,
    WorkspaceConfig,
)
from shared.models.budgets import BudgetUsage
from shared.models.media import MediaItem
from shared.replay import ReplayReport, render_html, render_markdown
from tests.support import console_seed, upload_files
from tests.support.fake_openai import FakeOpenAI
from tests.support.hashing_embedder import HashingEmbedder

WS = "ws-console"
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
TEXTS = ["my favourite dinner is pasta with basil pesto", "the budget meeting moved to Thursday"]


# Where `sigil console` listens by default, as a browser on this machine names it.
CONSOLE = "http://127.0.0.1:8790"


def _client(app: Starlette) -> TestClient:
    """A browser that opened the URL the console printed: its Host, and the launch secret's cookie."""
    client = TestClient(app, base_url=CONSOLE)
    assert client.get(f"/?token={app.state.secret}").status_code == 200
    return client


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
    client = _client(create_app(backend, Settings(), csrf="t"))
    for path in ("/workspaces", f"/workspaces/{WS}", "/sessions", f"/workspaces/{WS}/sessions/web.evil"):
        page = client.get(path)
        assert page.status_code == 200, path
        assert "<script>" not in page.text and "<i>ops</i>" not in page.text, path
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in client.get(f"/workspaces/{WS}/sessions/web.evil").text


def test_unknown_things_are_404_pages_and_a_post_needs_the_token_and_its_confirmation(
    backend: Backend,
) -> None:
    client = _client(create_app(backend, Settings(), csrf="right-token"))
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


# ---------------------------------------------------------------- the guard

ATTACKER = "http://attacker.example:8790"
PIN = "the door code is 4817"


def _pin(backend: Backend) -> None:
    backend.memory.put_triple(
        Triple(
            id="f-pin",
            workspace_id=WS,
            subject="mallory",
            predicate="door code",
            object=PIN,
            user_id="mallory",
        )
    )


def _facts(backend: Backend) -> list[str]:
    return [t.object for t in backend.memory.list_triples(WS, scope=WORKSPACE_WIDE, limit=100)]


def test_a_dns_rebinding_page_can_neither_read_the_memory_page_nor_erase(backend: Backend) -> None:
    """Issue 25's reproduction: a page of attacker.example whose name now points at 127.0.0.1
    sends its requests with its own name in Host and Origin; the console answers none of them."""
    _pin(backend)
    app = create_app(backend, Settings())
    rebound = TestClient(app, base_url=ATTACKER, headers={"Origin": ATTACKER})
    memory = rebound.get(f"/workspaces/{WS}/memory")
    assert memory.status_code == 400
    assert PIN not in memory.text and app.state.csrf not in memory.text
    confirm = rebound.get(f"/workspaces/{WS}/users/mallory/erase")
    assert confirm.status_code == 400 and app.state.csrf not in confirm.text
    # Even knowing the CSRF token, and the launch secret, a rebound name is not the console's.
    rebound.cookies.set("sigil-console-8790", app.state.secret)
    for path in (f"/workspaces/{WS}/users/mallory/erase", f"/workspaces/{WS}/memory"):
        assert rebound.post(path, data={"csrf": app.state.csrf, "confirm": "mallory"}).status_code == 400
    assert rebound.get(f"/workspaces/{WS}/memory?token={app.state.secret}").status_code == 400
    assert _facts(backend) == [PIN]
    assert backend.sessions.get(WS, "web.evil") is not None


def _every_request(app: Starlette) -> list[tuple[str, str]]:
    """(method, path) for every route of the app, path parameters filled in."""
    out = []
    for route in app.routes:
        if isinstance(route, Mount):
            out.append(("GET", f"{route.path}/console.css"))
            continue
        assert isinstance(route, Route)
        path = re.sub(r"\{(\w+)\}", lambda m: "mallory" if m.group(1) == "user" else WS, route.path)
        out += [(method, path) for method in sorted(route.methods or ()) if method != "HEAD"]
    return out


def test_every_route_needs_the_launch_secret_which_the_printed_url_sets_as_a_strict_cookie(
    backend: Backend,
) -> None:
    _pin(backend)
    app = create_app(backend, Settings(), csrf="right-token", secret="launch-secret")
    stranger = TestClient(app, base_url=CONSOLE)
    requests = _every_request(app)
    assert ("POST", f"/workspaces/{WS}/users/mallory/erase") in requests and ("GET", "/replay") in requests
    for method, path in requests:
        fields = {"csrf": "right-token", "confirm": "mallory", "workspace": WS, "session": "web.evil"}
        answer = stranger.request(method, path, data=fields if method == "POST" else None)
        assert answer.status_code == 403, (method, path)
        assert PIN not in answer.text and "right-token" not in answer.text
    # A wrong secret, in the URL or in the cookie, is no better.
    assert stranger.get("/workspaces?token=launch-secreT").status_code == 403
    stranger.cookies.set("sigil-console-8790", "launch-secreT")
    assert stranger.get(f"/workspaces/{WS}/memory").status_code == 403
    assert _facts(backend) == [PIN] and backend.sessions.get(WS, "web.evil") is not None

    # The printed URL: the cookie (HttpOnly, SameSite=Strict), and the same address without it.
    browser = TestClient(app, base_url=CONSOLE, follow_redirects=False)
    opened = browser.get(f"/workspaces/{WS}/memory?q=door&token=launch-secret")
    assert opened.status_code == 303
    assert opened.headers["location"] == f"/workspaces/{WS}/memory?q=door"
    cookie = opened.headers["set-cookie"]
    assert cookie.startswith("sigil-console-8790=launch-secret;")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    shown = browser.get(opened.headers["location"])
    assert shown.status_code == 200 and PIN in shown.text
    # A secret in the URL of a POST is not taken: only the cookie is.
    assert stranger.post("/replay?token=launch-secret", data={"csrf": "right-token"}).status_code == 403


def test_a_state_changing_request_from_another_origin_or_site_is_refused(backend: Backend) -> None:
    client = _client(create_app(backend, Settings(), csrf="t", hosts=["console.lan"]))
    erase = f"/workspaces/{WS}/users/mallory/erase"
    fields = {"csrf": "t", "confirm": "mallory"}
    for headers in (
        {"Origin": ATTACKER},
        {"Origin": "null"},
        {"Origin": "http://127.0.0.1:9999"},  # another local server, another port
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ):
        assert client.post(erase, data=fields, headers=headers).status_code == 403, headers
    assert client.get(f"/workspaces/{WS}", headers={"Origin": ATTACKER}).status_code == 403
    assert backend.sessions.get(WS, "web.evil") is not None
    # The console's own names: loopback ones, and those it was given.
    for host in ("localhost:8790", "[::1]:8790", "127.0.0.2:8790", "console.lan:8790"):
        assert client.get("/workspaces", headers={"Host": host}).status_code == 200, host
    for host in ("127.0.0.1.attacker.example:8790", "consolexlan:8790", "127.0.0.1:port", ""):
        assert client.get("/workspaces", headers={"Host": host}).status_code == 400, host
    # Its own origin, as a browser's form sends it.
    own = {"Origin": CONSOLE, "Sec-Fetch-Site": "same-origin"}
    done = client.post(erase, data=fields, headers=own)
    assert done.status_code == 200 and "User mallory erased" in done.text


def test_the_host_name_of_a_host_header() -> None:
    assert host_name("127.0.0.1:8790") == "127.0.0.1"
    assert host_name("[::1]:8790") == "::1"
    assert host_name("LocalHost") == "localhost"
    for bad in ("", ":8790", "a:b", "evil/x", "user@127.0.0.1", "[::1"):
        assert host_name(bad) is None, bad


def test_a_workspaces_plots_are_of_one_user_when_asked(backend: Backend) -> None:
    backend.audit.append(_audit(2, "trudy", 7, 0.02))
    client = _client(create_app(backend, Settings(), csrf="t"))

    def turn_bars(path: str) -> list[str]:
        page = client.get(path).text
        plot = page[page.index('class="plot turns"') : page.index("</svg>", page.index('class="plot turns"'))]
        return re.findall(r"<title>([^<]*)</title></rect>", plot)

    # Every day from the first turn to the last, then only trudy's one day.
    assert turn_bars(f"/workspaces/{WS}") == ["2026-03-02: 1", "2026-03-03: 0", "2026-03-04: 1"]
    assert turn_bars(f"/workspaces/{WS}?user=trudy") == ["2026-03-04: 1"]
    assert "Usage over time of trudy" in client.get(f"/workspaces/{WS}?user=trudy").text


# ---------------------------------------------------------------- what each figure counts


def _text(html: str) -> str:
    """A page's text, tags dropped and spaces collapsed, as a reader sees it."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_the_overview_and_the_budget_table_say_what_each_counts(backend: Backend) -> None:
    """Issue 26: the overview's tokens are the turns' over all time (the audit log); the budget
    table's are the budget store's of today, consolidation's model calls included. Both labelled."""
    limits = BudgetLimits(workspace=ScopeLimits(tokens_per_day=10_000, usd_per_day=Decimal("5")))
    backend.workspaces.put(WorkspaceConfig(id=WS, name="ops", budget=limits))
    # A compaction today, charged to the workspace (no turn, so no audit record).
    usage_ = BudgetUsage(tokens_in=1_200, tokens_out=34, usd_nanos=2_500_000)
    backend.budgets.charge(WS, None, usage_, limits, datetime.now(UTC))
    page = _client(create_app(backend, Settings())).get(f"/workspaces/{WS}").text
    text = _text(page)
    # The one turn of the fixture, on 2 March 2026: 3 in, 1 out.
    assert "tokens, all time 4 " in text and "turns, all time 1 " in text
    assert "est. cost, all time $0.0100" in text
    budgets = _text(page[page.index('<table class="budgets"') :])
    assert "workspace today (UTC) tokens 1,234 10,000 8,766" in budgets
    assert "workspace today (UTC) USD (estimated) $0.00 $5.00 $5.00" in budgets
    assert "used this period" in budgets
    assert "consolidation's model calls" in text and "differ from the all-time turn totals" in text


def test_every_usd_figure_of_the_console_is_labelled_an_estimate(backend: Backend) -> None:
    # The session of the fixture's turn: its page lists the turn's audit record, with its cost.
    backend.sessions.save(Session(id="s1", workspace_id=WS, user_id="mallory"), expected_version=0)
    client = _client(create_app(backend, Settings()))
    for path in ("/workspaces", f"/workspaces/{WS}", "/sessions", f"/workspaces/{WS}/sessions/s1"):
        page = client.get(path).text
        assert "<th>cost</th>" not in page and "<th>est. cost</th>" in page, path
    assert "Estimated cost per day (USD)" in client.get(f"/workspaces/{WS}").text
    assert "Costs are estimates at the price table" in client.get("/workspaces").text


def test_the_memory_page_names_each_hits_author_and_every_user_with_messages(backend: Backend) -> None:
    """Issue 26: the hits had no author, and "Users with memories: none" was shown beside a user
    with 22 messages (in sessions, with no fact or summary yet)."""
    trudy = Session(id="web.trudy", workspace_id=WS, user_id="trudy", message_count=22, rolled_out_count=18)
    backend.sessions.save(trudy, expected_version=0)
    said = [
        MemoryRecord(
            id="r0",
            workspace_id=WS,
            session_id="web.trudy",
            role="user",
            seq=0,
            created_at=T0,
            text="my favourite dinner is pasta with basil pesto",
            user_id="trudy",
            author="Trudy T",
        ),
        MemoryRecord(
            id="r1",
            workspace_id=WS,
            session_id="web.trudy",
            role="assistant",
            seq=1,
            created_at=T0,
            text="Noted: pasta with basil pesto for dinner",
            user_id="trudy",
        ),
    ]
    backend.memory.append_messages(WS, said)
    MemoryWriter(backend.index, None).write_messages(WS, said)
    _pin(backend)
    client = _client(create_app(backend, Settings()))
    page = client.get(f"/workspaces/{WS}/memory?q=pasta+pesto&mode=bm25").text
    hits = page[page.index('<table class="hits"') : page.index("</table>", page.index('<table class="hits"'))]
    authors = dict(re.findall(r'<span class="author">([^<]*)</span></td><td>([^<]*)</td>', hits))
    assert authors == {
        "Trudy T (trudy)": "my favourite dinner is pasta with basil pesto",
        "assistant to trudy": "Noted: pasta with basil pesto for dinner",
    }
    users = page[page.index('class="memory-users"') :]
    rows = [_text(r).strip() for r in re.findall(r"<tr>(.*?)</tr>", users[: users.index("</table>")])][1:]
    # mallory: the fixture's session (saved with no count: 0) and her fact; trudy: 22 messages.
    assert rows == ["mallory 1 0 1 0 erase…", "trudy 1 22 0 0 erase…"]


# ---------------------------------------------------------------- replay


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[tuple[Backend, Settings]]:
    """Two turns of one session, recorded through the real turn (console_seed's function model)."""
    settings = Settings(data_dir=tmp_path / "state", embedding_model="none")
    built = build_embedded_backend(settings)
    try:
        built.workspaces.put(WorkspaceConfig(id=WS))
        deps = console_seed.turn_deps(built, settings)
        for n, text in enumerate(["my favourite colour is blue", "what is my favourite colour?"]):
            console_seed.say(deps, WS, "web.ann", "ann", text, n)
        yield built, settings
    finally:
        built.close()


def _key(page: str) -> str:
    found = re.search(r'href="/replay/([0-9a-f]+)\.json"', page)
    assert found, page
    return found.group(1)


def test_a_replay_from_the_console_shows_its_report_and_the_downloads_are_that_report(
    recorded: tuple[Backend, Settings],
) -> None:
    backend, settings = recorded
    window = backend.sessions.get(WS, "web.ann")
    with FakeOpenAI(lambda body: "fake says <b>hi</b>") as fake:
        settings = settings.model_copy(
            update={"openai_base_url": fake.base_url, "openai_api_key": SecretStr("sk-test")}
        )
        client = _client(create_app(backend, settings, csrf="t"))
        form = client.get(f"/replay?workspace={WS}&session=web.ann")
        assert form.status_code == 200 and 'name="system_prompt"' in form.text
        shown = client.post(
            "/replay",
            data={
                "csrf": "t",
                "workspace": WS,
                "session": "web.ann",
                "model": "openai/fake-model",
                "system_prompt": "Be terse.",
                "tools_deny": "memory_store, pin_task",
                "runs": "2",
            },
        )
        assert len(fake.requests) == 4  # two turns, two runs, no tool calls
    assert shown.status_code == 200, shown.text
    assert '<section class="sigil-replay">' in shown.text
    assert "fake says &lt;b&gt;hi&lt;/b&gt;" in shown.text and "<b>hi</b>" not in shown.text
    assert "Noted: my favourite colour is blue" in shown.text
    assert "tools denied: memory_store, pin_task" in shown.text
    assert "Costs are estimates at the price table" in shown.text  # its "cost USD" figures

    key = _key(shown.text)
    as_json = client.get(f"/replay/{key}.json")
    assert as_json.status_code == 200 and as_json.headers["content-type"] == "application/json"
    assert f"replay-{WS}-{key}.json" in as_json.headers["content-disposition"]
    report = ReplayReport.model_validate_json(as_json.text)
    assert report.runs == 2 and report.change.model == "openai/fake-model"
    assert report.change.system_prompt == "Be terse."
    assert [t.replayed[0].reply for t in report.turns] == ["fake says <b>hi</b>"] * 2
    assert [t.recorded.reply for t in report.turns] == [
        "Noted: my favourite colour is blue",
        "Noted: what is my favourite colour?",
    ]
    # The same report, not a second run: what the page showed was rendered from it.
    assert render_html(report, page=False) in shown.text
    assert client.get(f"/replay/{key}.md").text == render_markdown(report)
    assert client.get(f"/replay/{key}").text == shown.text
    assert client.get("/replay/0000.json").status_code == 404
    assert client.get(f"/replay/{key}.exe").status_code == 404
    # The original workspace was only read.
    assert backend.sessions.get(WS, "web.ann") == window


def test_a_replay_post_needs_the_token_and_bad_input_is_its_error_page(
    recorded: tuple[Backend, Settings],
) -> None:
    backend, settings = recorded
    # Whatever the environment holds, this console has no key for any provider.
    settings = settings.model_copy(update={"openai_api_key": None, "openai_base_url": None})
    client = _client(create_app(backend, settings, csrf="t"))
    form = {"workspace": WS, "session": "web.ann", "model": "openai/x"}

    def post(status: int, **fields: str) -> str:
        response = client.post("/replay", data={"csrf": "t", **form, **fields})
        assert response.status_code == status, response.text
        return re.sub(r"\s+", " ", response.text)

    assert client.post("/replay", data=form).status_code == 403
    assert client.post("/replay", data={**form, "csrf": "wrong"}).status_code == 403
    assert "bad change: model: &#x27;not-a-ref&#x27; is not a model: name it as provider/model" in post(
        400, model="not-a-ref"
    )
    assert "bad change: tools_deny:" in post(400, tools_deny="two words")
    assert "runs must be a whole number" in post(400, runs="many")
    assert "runs must be between 1 and 20" in post(400, runs="21")
    assert "bad change: recall:" in post(400, memory_recall="everyone")
    assert "no session &#x27;web.nope&#x27;" in post(404, session="web.nope")
    assert "no workspace &#x27;nobody&#x27;" in post(404, workspace="nobody")
    # No key for the provider, and a provider that does not exist: the operator's to fix.
    assert "OPENAI_API_KEY" in post(400)
    assert "zzz" in post(400, model="zzz/model")
    assert client.get(f"/replay?workspace={WS}&session=web.nope").status_code == 404
    # A system prompt may be long (a 100 KB prompt posts), but the form has its cap.
    assert client.post("/replay", data={"csrf": "t", "system_prompt": "x" * 130_000}).status_code == 413
    assert "OPENAI_API_KEY" in post(400, system_prompt="y" * 100_000)


# ---------------------------------------------------------------- files (docs/console.md#files)


def _file(backend: Backend, n: int, name: str, data: bytes, kind: str, mime: str, **extra: object) -> str:
    assert backend.media is not None
    item = MediaItem(
        id=f"m-file{n}",
        workspace_id=WS,
        session_id="web.evil",
        user_id="mallory",
        channel="web",
        source_id=f"upload-{n}",
        kind=kind,  # type: ignore[arg-type]
        mime_type=mime,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        name=name,
        **extra,  # type: ignore[arg-type]
    )
    backend.media.put(item, data)
    return item.id


def test_a_sessions_files_are_listed_with_a_thumbnail_for_an_image_and_its_text(backend: Backend) -> None:
    photo = upload_files.png()
    image = _file(backend, 1, "<b>fern</b>.png", photo, "image", "image/png")
    _file(
        backend,
        2,
        "notes.pdf",
        upload_files.pdf(),
        "document",
        "application/pdf",
        text="Q3 <plan>",
        text_source="extracted",
    )
    # Bytes that say they are an image of a type a browser could run: never served.
    svg = _file(backend, 3, "x.svg", b"<svg onload='alert(1)'/>", "image", "image/svg+xml")
    client = _client(create_app(backend, Settings()))
    html = client.get(f"/workspaces/{WS}/sessions/web.evil").text
    files = html[html.index('<section id="files">') :]
    assert f'<img class="thumb" src="/workspaces/{WS}/media/{image}"' in files
    assert "&lt;b&gt;fern&lt;/b&gt;.png" in files and "<b>fern</b>" not in files
    assert "<code>image/png</code>" in files and "<code>application/pdf</code>" in files
    assert "extracted text" in files and "Q3 &lt;plan&gt;" in files
    assert f'src="/workspaces/{WS}/media/{svg}"' not in files
    shown = client.get(f"/workspaces/{WS}/media/{image}")
    assert shown.status_code == 200 and shown.content == photo
    assert shown.headers["content-type"] == "image/png"
    assert shown.headers["x-content-type-options"] == "nosniff"
    assert "sandbox" in shown.headers["content-security-policy"]
    for refused in (svg, "m-file2", "m-none"):
        assert client.get(f"/workspaces/{WS}/media/{refused}").status_code == 404, refused
    assert client.get(f"/workspaces/other/media/{image}").status_code == 404
    # Without the launch secret's cookie, not even an image.
    assert (
        TestClient(create_app(backend, Settings()), base_url=CONSOLE)
        .get(f"/workspaces/{WS}/media/{image}")
        .status_code
        == 403
    )


def test_a_workspaces_users_show_how_many_files_each_has(backend: Backend) -> None:
    _file(backend, 1, "a.png", upload_files.png(), "image", "image/png")
    _file(backend, 2, "b.png", upload_files.png(rgb=(1, 2, 3)), "image", "image/png")
    html = _client(create_app(backend, Settings())).get(f"/workspaces/{WS}").text
    users = html[html.index('<table class="users">') :]
    assert "<th>files</th>" in users
    row = users[users.index("mallory") : users.index("</tr>", users.index("mallory"))]
    assert "<td>2</td>" in row

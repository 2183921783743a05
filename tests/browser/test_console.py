"""`sigil console` in headless Chromium, against the embedded backend and the cloud one (moto's
DynamoDB and SQS, osmem-server's OpenSearch), each test on both (the `console` fixture).

Each test gets a fresh backend filled by tests.support.console_seed through the real turn and the
real compaction (two people, one consolidation run each, one dead letter), and the console's
Starlette app served by uvicorn on a thread of this process (moto is in-process), stopped when
the test ends, pass or fail. A page is opened as the operator opens the URL the console prints:
with its launch secret (`?token=`), which the console turns into a cookie for the context.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect
from pydantic import SecretStr

from shared.backend import Backend
from shared.config import Settings
from shared.console import create_app
from shared.console.views import summaries
from shared.models import WORKSPACE_WIDE
from shared.replay import ReplayReport
from tests.browser.conftest import CHROMIUM
from tests.support import console_seed
from tests.support.console_seed import (
    ALICE_RUN,
    ALICE_SAYS,
    ALICE_SESSION,
    BOB,
    BOB_SESSION,
    DEAD_TEXT,
    MAINTENANCE_RUN,
    WS,
)
from tests.support.fake_openai import FakeOpenAI, echo_last_user

SCORE = re.compile(r"^\d+\.\d{3}$")


@dataclass
class Console:
    url: str
    backend: Backend
    settings: Settings
    kind: str
    fake: FakeOpenAI  # the model a replay may try: "openai/<any name>"
    secret: str  # the launch secret, as `sigil console` prints it in its URL
    csrf: str  # the forms' token, which a page of the console shows

    def open(self, context: BrowserContext, path: str) -> Page:
        """`path` opened with the secret in its URL: the console sets its cookie in `context` and
        redirects to `path` without it."""
        page = context.new_page()
        page.goto(f"{self.url}{path}{'&' if '?' in path else '?'}token={self.secret}")
        expect(page).not_to_have_url(re.compile("token="))
        return page


@pytest.fixture(params=list(console_seed.BACKENDS))
def console(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Console]:
    with (
        console_seed.BACKENDS[request.param](tmp_path) as (backend, seeded),
        FakeOpenAI(lambda body: f"Replayed: {echo_last_user(body).upper()}") as fake,
    ):
        settings = seeded.model_copy(
            update={"openai_base_url": fake.base_url, "openai_api_key": SecretStr("sk-test")}
        )
        app = create_app(backend, settings, source=request.param)
        with console_seed.serve(app) as url:
            yield Console(url, backend, settings, request.param, fake, app.state.secret, app.state.csrf)


def hits(page: Page) -> list[dict[str, str]]:
    rows = page.locator("table.hits tbody tr")
    keys = ["tier", "author", "text", "session", "fused", "bm25", "vector"]
    return [dict(zip(keys, row.locator("td").all_inner_texts(), strict=True)) for row in rows.all()]


def test_a_memory_search_shows_each_hits_bm25_vector_and_fused_scores_and_which_search_answered(
    context: BrowserContext, console: Console
) -> None:
    page = console.open(context, "/memory")  # the default workspace's memory
    expect(page).to_have_url(re.compile(f"/workspaces/{WS}/memory$"))
    page.get_by_label("Search memory").fill("dark mode editor")
    page.get_by_role("button", name="Search").click()
    # Embedded: hybrid (a deterministic embedder); cloud: osmem answers BM25 only, and says so.
    expected = "hybrid" if console.kind == "embedded" else "bm25"
    expect(page.locator(".answered .mode")).to_have_text(expected)
    if console.kind == "cloud":
        expect(page.locator(".answered .degraded")).to_have_text("no embedding model configured")
    found = hits(page)
    assert found and "dark mode" in found[0]["text"], found
    assert "alice" in found[0]["author"], found[0]  # her message, or a fact or summary of hers
    for hit in found:
        assert SCORE.match(hit["fused"]), hit
    # The best hit was found by BM25, and on the hybrid search by the vector half too.
    assert SCORE.match(found[0]["bm25"]), found[0]
    if console.kind == "embedded":
        assert SCORE.match(found[0]["vector"]), found[0]
    else:
        assert all(hit["vector"] == "-" for hit in found)

    # Asked for BM25 alone: no vector score anywhere, and the page says which search answered.
    page.get_by_label("Search mode").select_option("bm25")
    page.get_by_role("button", name="Search").click()
    expect(page.locator(".answered .mode")).to_have_text("bm25")
    expect(page.get_by_label("Search mode")).to_have_value("bm25")
    found = hits(page)
    assert found and "dark mode" in found[0]["text"], found
    assert all(SCORE.match(hit["bm25"]) and hit["vector"] == "-" for hit in found), found


def test_a_facts_provenance_and_history_and_the_rollback_of_the_runs_that_wrote_and_changed_it(
    context: BrowserContext, console: Console
) -> None:
    page = console.open(context, f"/workspaces/{WS}/memory")
    row = page.locator("table.facts tr", has_text="PostgreSQL")
    expect(row).to_contain_text("pruned")
    row.get_by_role("link").first.click()
    # Provenance: the message it was learnt from; history: written by one run, pruned by another.
    expect(page.locator("table.sources")).to_contain_text("We decided to use PostgreSQL for the project.")
    history = page.locator("table.history tbody tr")
    expect(history).to_have_count(2)
    expect(history.first.locator("td").nth(1)).to_have_text("written")
    expect(history.first.locator("td").nth(2)).to_have_text(f"consolidation (run {ALICE_RUN})")
    expect(history.last.locator("td").nth(1)).to_have_text("pruned")
    expect(history.last.locator("td").nth(2)).to_contain_text(f"run {MAINTENANCE_RUN}")
    expect(history.last.locator("td").nth(3)).to_have_text("was active")

    # Undo the maintenance run: the fact is active again, its history back to its writing.
    history.last.get_by_role("link", name="roll back…").click()
    expect(page.get_by_role("heading", name="Confirm rollback")).to_be_visible()
    page.get_by_role("button", name=f"Roll back run {MAINTENANCE_RUN}").click()
    expect(page.locator(".done")).to_have_text(f"Run {MAINTENANCE_RUN} rolled back.")
    page.get_by_role("link", name="Back to memory").click()
    row = page.locator("table.facts tr", has_text="PostgreSQL")
    expect(row).to_contain_text("active")
    row.get_by_role("link").first.click()
    expect(page.locator("table.history tbody tr")).to_have_count(1)

    # Undo the consolidation run that wrote it: its facts and summaries leave the page.
    page.goto(console.url + f"/workspaces/{WS}/memory")
    page.locator("table.runs tr", has_text=ALICE_RUN).get_by_role("link", name="roll back…").click()
    expect(page.locator("dl")).to_contain_text("dark mode")
    page.get_by_role("button", name=f"Roll back run {ALICE_RUN}").click()
    expect(page.locator(".done")).to_have_text(f"Run {ALICE_RUN} rolled back.")
    page.get_by_role("link", name="Back to memory").click()
    facts = page.locator("table.facts")
    expect(facts).to_contain_text("green tea")  # the other run's
    for gone in ("dark mode", "PostgreSQL", "Sarah Chen", "short answers"):
        expect(facts).not_to_contain_text(gone)
    expect(page.locator("table.runs")).not_to_contain_text(ALICE_RUN)
    expect(page.locator("table.summaries")).not_to_contain_text("web.alice.notes")


def test_an_erasure_removes_the_user_from_every_page(context: BrowserContext, console: Console) -> None:
    pages = [
        "/workspaces",
        f"/workspaces/{WS}",
        "/sessions",
        f"/workspaces/{WS}/sessions",
        f"/workspaces/{WS}/memory",
        f"/workspaces/{WS}/memory?q=ferry+green+tea",
        "/replay",
        "/dead-letters",
    ]
    page = console.open(context, f"/workspaces/{WS}")
    expect(page.locator("table.users")).to_contain_text(BOB)
    expect(page.locator("table.budgets")).to_contain_text(f"user {BOB}")
    page.goto(console.url + f"/workspaces/{WS}/memory?q=ferry+green+tea")
    expect(page.locator("table.hits")).to_contain_text("ferry")

    page.goto(console.url + f"/workspaces/{WS}")
    page.locator("table.users tr", has_text=BOB).get_by_role("link", name="erase…").click()
    expect(page.get_by_role("heading", name="Confirm erasure")).to_be_visible()
    expect(page.locator("dl")).to_contain_text(BOB_SESSION)
    page.get_by_role("button", name=f"Erase {BOB}").click()
    expect(page.locator(".done")).to_have_text(f"User {BOB} erased from {WS}.")

    for path in pages:
        page.goto(console.url + path)
        expect(page.locator("main")).to_be_visible()
        text = page.locator("main").inner_text().casefold()
        for needle in (BOB, "ferry", "green tea", "quokka"):
            assert needle not in text, (path, needle)
    # Alice is still everywhere she was.
    page.goto(console.url + f"/workspaces/{WS}")
    expect(page.locator("table.users")).to_contain_text("alice")
    page.goto(console.url + "/sessions")
    expect(page.locator("table.sessions").first).to_contain_text("web.alice.notes")


def test_a_session_page_shows_the_window_the_rolling_summary_and_each_turns_audit_record(
    context: BrowserContext, console: Console
) -> None:
    page = console.open(context, "/sessions")
    page.get_by_role("link", name="web.alice.notes").click()
    expect(page.locator("blockquote.summary")).to_contain_text("Messages 0-3")
    window = page.locator(".msg.in-window")
    expect(window).to_have_count(4)
    expect(window.last).to_contain_text("Noted: thanks, that is all for now")
    # Each turn: its messages (the look-up's tool call with arguments, the tool's result) and its
    # audit record.
    turns = page.locator("article.turn")
    expect(turns).to_have_count(len(console_seed.ALICE_SAYS))
    look_up = turns.nth(console_seed.ALICE_SAYS.index("look up: what editor theme did I ask for?"))
    expect(look_up.locator(".tool-call")).to_have_text(
        'memory_search{"query": "what editor theme did I ask for?"}'
    )
    expect(look_up.locator(".msg.tool")).to_contain_text("tool result: memory_search")
    audit = look_up.locator("table.audit tbody tr")
    for shown in (
        "memory_search",
        "function/openai/gpt-4.1-mini",
        " in, ",
        " ms",
        "ok",
        "tool memory_search",
    ):
        expect(audit).to_contain_text(shown)


def test_a_dead_letter_is_shown_and_redriven_after_confirmation(
    context: BrowserContext, console: Console
) -> None:
    page = console.open(context, "/dead-letters")
    row = page.locator("table.dead-letters tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text(DEAD_TEXT[:40])
    row.get_by_role("link").first.click()
    expect(page.locator("dl")).to_contain_text(DEAD_TEXT)
    page.get_by_role("link", name="Redrive…").click()
    expect(page.get_by_role("heading", name="Confirm redrive")).to_be_visible()
    page.get_by_role("button", name="Redrive").click()
    expect(page.locator("table.redrive .outcome")).to_have_text("redriven")
    page.get_by_role("link", name="Back").click()
    expect(page.locator(".empty")).to_have_text("no dead letters")
    assert console.backend.dead_letters is not None
    assert console.backend.dead_letters.list_entries(WS) == []


def test_a_post_without_the_csrf_token_or_with_a_wrong_one_is_refused_and_changes_nothing(
    context: BrowserContext, console: Console
) -> None:
    page = console.open(context, f"/workspaces/{WS}/users/{BOB}/erase")
    page.evaluate("document.querySelector('input[name=csrf]').remove()")
    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.get_by_role("button", name=f"Erase {BOB}").click()
    assert posted.value.status == 403
    expect(page.locator(".error")).to_contain_text("no valid CSRF token")

    # Straight from another origin's form: a guessed token, and the right confirmation.
    response = page.request.post(
        console.url + f"/workspaces/{WS}/users/{BOB}/erase", form={"csrf": "guessed", "confirm": BOB}
    )
    assert response.status == 403
    page.goto(console.url + f"/workspaces/{WS}/sessions")
    expect(page.locator("table.sessions")).to_contain_text(BOB_SESSION)
    assert console.backend.sessions.get(WS, BOB_SESSION) is not None


def stored(backend: Backend) -> list[str]:
    """What the workspace holds, read through the ports: config, sessions, audit, memory."""
    config = backend.workspaces.get(WS)
    out = [config.model_dump_json() if config else "-"]
    out += [s.model_dump_json() for s in backend.sessions.list_sessions(WS, limit=1_000)]
    out += [r.model_dump_json() for r in backend.audit.list_records(WS, limit=1_000)]
    out += [t.model_dump_json() for t in backend.memory.list_triples(WS, scope=WORKSPACE_WIDE, limit=1_000)]
    out += [s.model_dump_json() for s in summaries(backend, WS)]
    return out


def test_a_replay_from_the_console_shows_recorded_and_replayed_turns_side_by_side_with_a_diff(
    context: BrowserContext, console: Console
) -> None:
    before = stored(console.backend)
    page = console.open(context, "/replay")
    page.locator("table.replay tr", has_text=ALICE_SESSION).get_by_role("link", name="replay…").click()
    expect(
        page.get_by_role("heading", name=f"Replay session {ALICE_SESSION} of workspace {WS}")
    ).to_be_visible()
    page.get_by_label("Model").fill("openai/fake-model")
    page.get_by_label("Denied tools").fill("memory_store")
    page.get_by_role("button", name="Replay").click()

    expect(page.get_by_role("heading", name="Replay report")).to_be_visible()
    report = page.locator("section.sigil-replay")
    expect(report).to_contain_text("model: openai/fake-model")
    expect(report).to_contain_text("tools denied: memory_store")
    turns = report.locator(".turn")
    expect(turns).to_have_count(len(ALICE_SAYS))
    first = turns.first
    expect(first.locator("h3")).to_have_text(f"{ALICE_SESSION} turn 1: reply")
    # Side by side: the recorded reply, and the one the other model gave, with their diff.
    reply = first.locator("tr", has_text="reply").last
    expect(reply.locator("td").nth(0)).to_have_text(f"Noted: {ALICE_SAYS[0]}")
    expect(reply.locator("td").nth(1)).to_have_text(f"Replayed: {ALICE_SAYS[0].upper()}")
    expect(first.locator("pre.diff .del")).to_have_text(f"-Noted: {ALICE_SAYS[0]}")
    expect(first.locator("pre.diff .add")).to_have_text(f"+Replayed: {ALICE_SAYS[0].upper()}")
    # The look-up turn called memory_search when recorded; the fake model calls no tool.
    look_up = turns.nth(ALICE_SAYS.index("look up: what editor theme did I ask for?"))
    expect(look_up.locator("h3")).to_contain_text("reply, tool calls")
    expect(look_up.locator("tr", has_text="tool calls")).to_contain_text("memory_search(")

    # The JSON download is the report on the page (not a second run of the model).
    calls = len(console.fake.requests)
    href = page.get_by_role("link", name="JSON").get_attribute("href")
    assert href is not None
    downloaded = ReplayReport.model_validate_json(page.request.get(console.url + href).text())
    assert [t.replayed[0].reply for t in downloaded.turns] == [f"Replayed: {t.upper()}" for t in ALICE_SAYS]
    markdown = page.request.get(console.url + href.removesuffix(".json") + ".md").text()
    assert (
        markdown.startswith(f"# Replay of workspace {WS}")
        and f"+Replayed: {ALICE_SAYS[0].upper()}" in markdown
    )
    assert len(console.fake.requests) == calls == len(ALICE_SAYS)

    # The original workspace is as it was: its session page still shows the recorded replies.
    assert stored(console.backend) == before
    page.goto(console.url + f"/workspaces/{WS}/sessions/{ALICE_SESSION}")
    expect(page.locator(".msg.in-window").last).to_contain_text("Noted: thanks, that is all for now")
    expect(page.locator("main")).not_to_contain_text("Replayed:")


def test_the_printed_url_sets_a_strict_http_only_cookie_and_a_page_without_it_is_refused(
    context: BrowserContext, console: Console
) -> None:
    stranger = context.new_page()
    refused = stranger.goto(console.url + f"/workspaces/{WS}/memory")
    assert refused is not None and refused.status == 403
    expect(stranger.locator(".error")).to_contain_text("needs the secret it printed")
    expect(stranger.locator("main")).not_to_contain_text("dark mode")

    page = console.open(context, f"/workspaces/{WS}/memory")
    expect(page).to_have_url(console.url + f"/workspaces/{WS}/memory")
    expect(page.locator("table.facts")).to_contain_text("dark mode")
    [cookie] = context.cookies()
    assert cookie["value"] == console.secret
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/"
    # A script on the page can't read it (nor could one on any other page).
    assert page.evaluate("document.cookie") == ""


def test_a_dns_rebinding_page_gets_nothing_from_the_console(browser: Browser, console: Console) -> None:
    """What a rebinding attack achieves, made real in the browser: chromium resolves
    attacker.example to 127.0.0.1, so a page of that name is served by the console's port, and
    its requests carry that name in Host and Origin. The console answers none of them."""
    port = console.url.rsplit(":", 1)[1]
    attacker = f"http://attacker.example:{port}"
    rebound = browser.browser_type.launch(
        executable_path=CHROMIUM,
        headless=True,
        args=["--host-resolver-rules=MAP attacker.example 127.0.0.1"],
    )
    try:
        page = rebound.new_page()
        # The secret would not help it either, were it stolen.
        shown = page.goto(f"{attacker}/workspaces/{WS}/memory?token={console.secret}")
        assert shown is not None and shown.status == 400
        expect(page.locator(".error")).to_contain_text("answers only to its own address")
        expect(page.locator("main")).not_to_contain_text("dark mode")
        # The page's own script posts the erasure to "its" origin, as the reproduction did.
        status = page.evaluate(
            """async ([path, csrf]) => (await fetch(path, {
                method: "POST", body: new URLSearchParams({csrf, confirm: "bob"})})).status""",
            [f"/workspaces/{WS}/users/{BOB}/erase", console.csrf],
        )
        assert status == 400
    finally:
        rebound.close()
    assert console.backend.sessions.get(WS, BOB_SESSION) is not None


def test_a_sessions_files_show_with_a_thumbnail_and_a_transcript_and_each_user_their_count(
    context: BrowserContext, console: Console
) -> None:
    page = console.open(context, f"/workspaces/{WS}/sessions/{ALICE_SESSION}")
    files = page.locator("#files table.media tbody tr")
    expect(files).to_have_count(2)
    photo = files.filter(has_text=console_seed.PHOTO_NAME)
    thumb = photo.get_by_role("img", name=console_seed.PHOTO_NAME)
    expect(thumb).to_be_visible()
    # Served by the console's guarded route (loaded lazily, once scrolled to), decoded by the
    # browser as the picture it is.
    thumb.scroll_into_view_if_needed()
    expect(thumb).to_have_js_property("complete", True)
    assert thumb.evaluate("img => img.naturalWidth") == 6
    expect(photo).to_contain_text("image/png")
    voice = files.filter(has_text=console_seed.VOICE_NAME)
    expect(voice).to_contain_text("audio/ogg")
    expect(voice).to_contain_text("transcript")
    expect(voice).to_contain_text(console_seed.VOICE_TRANSCRIPT)
    page.goto(f"{console.url}/workspaces/{WS}")
    alice = page.locator("table.users tbody tr", has_text="alice")
    expect(alice.locator("td").nth(6)).to_have_text("2")
    expect(page.locator("table.users tbody tr", has_text=BOB).locator("td").nth(6)).to_have_text("0")

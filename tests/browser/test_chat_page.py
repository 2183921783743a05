"""The chat page in headless Chromium against `sigil dev` and `sigil dev --aws` (the `site` fixture
runs each test on both): the reply streams in, history survives a reload, two tabs on two sessions
never mix, each refusal and a lost connection show their state. Where the cloud's protocol differs
(deltas carry the whole text so far; a token error is an `error` frame, then a hang-up rather than
close code 4401) the same assertions hold. Restarting the gateway is a `sigil dev` scenario only:
`--aws` keeps its tables in moto's memory, so a restart starts empty (docs/local-aws-mode.md).

The model is tests/support/fake_openai.py, echoing the message; a `[fake:pace=N]` marker in it
makes the fake stream one word every N ms, so a reply takes long enough to watch it grow.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.browser.conftest import REPLY_TIMEOUT_MS, Site, start_site
from tests.e2e.processes import kill_group
from tests.support.fake_openai import FakeOpenAI

# Records every length the streaming reply is shown at, before its stored version replaces it.
WATCH_GROWTH = """
window.__lengths = [];
new MutationObserver(() => {
  for (const el of document.querySelectorAll('.msg.assistant[aria-busy="true"]')) {
    const n = el.textContent.length;
    if (window.__lengths[window.__lengths.length - 1] !== n) window.__lengths.push(n);
  }
}).observe(document.getElementById('log'),
           {subtree: true, childList: true, characterData: true, attributes: true});
"""


# Every WebSocket the page opens, so a test can drop the live one as a network would.
TRACK_SOCKETS = """
window.__sockets = [];
const NativeWebSocket = window.WebSocket;
window.WebSocket = class extends NativeWebSocket {
  constructor(...args) { super(...args); window.__sockets.push(this); }
};
"""


def long_text(tag: str, words: int = 60, pace_ms: int = 25) -> str:
    # Long enough for several redacted steps (the stream is shown every 64 characters or so).
    return " ".join(f"{tag}{i}" for i in range(words)) + f" [fake:pace={pace_ms}]"


def open_page(context: BrowserContext, site: Site, session: str, *, workspace: str = "default") -> Page:
    page = context.new_page()
    page.goto(site.page_url(site.token(workspace=workspace), session))
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    return page


def send(page: Page, text: str) -> None:
    box = page.get_by_label("Message")
    box.fill(text)
    box.press("Enter")


def replies(page: Page) -> list[str]:
    return page.locator(".msg.assistant[data-seq]").all_text_contents()


def test_a_reply_streams_in_and_the_history_survives_a_reload(context: BrowserContext, site: Site) -> None:
    page = open_page(context, site, "alice.stream")
    page.evaluate(WATCH_GROWTH)
    text = long_text("word")
    send(page, text)
    done = page.locator(".msg.assistant[data-seq]")
    expect(done).to_have_text(text, timeout=REPLY_TIMEOUT_MS)
    lengths = page.evaluate("window.__lengths")
    # Shown growing, in at least two steps, before the whole reply arrived from the outbox.
    grown = [n for n in lengths if 0 < n < len(text)]
    assert len(grown) >= 2 and grown == sorted(grown), lengths
    # The URL no longer holds the token (the fragment is read, then removed).
    assert "token" not in page.url

    page.reload()
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    expect(page.locator(".msg.assistant[data-seq]")).to_have_text(text, timeout=REPLY_TIMEOUT_MS)
    expect(page.locator(".msg.user")).to_have_text(text)
    assert page.locator(".msg").count() == 2


def test_two_tabs_on_two_sessions_never_mix(context: BrowserContext, site: Site) -> None:
    a = open_page(context, site, "alice.tab-a")
    b = open_page(context, site, "alice.tab-b")
    send(a, long_text("alpha", words=30))
    send(b, long_text("bravo", words=30))
    expect(a.locator(".msg.assistant[data-seq]")).to_have_count(1, timeout=REPLY_TIMEOUT_MS)
    expect(b.locator(".msg.assistant[data-seq]")).to_have_count(1, timeout=REPLY_TIMEOUT_MS)
    for page, mine, other in ((a, "alpha", "bravo"), (b, "bravo", "alpha")):
        log = page.locator("#log").text_content() or ""
        assert mine in log and other not in log
    # A token for one session only cannot be pointed at another.
    c = context.new_page()
    c.goto(site.page_url(site.token(sessions=["alice.tab-a"]), "alice.tab-b"))
    expect(c.locator("#status")).to_have_attribute("data-state", "open")
    expect(c.locator("#log")).to_contain_text("alpha", timeout=REPLY_TIMEOUT_MS)
    assert "bravo" not in (c.locator("#log").text_content() or "")
    expect(c.locator("#new-session")).to_be_disabled()


def test_an_expired_token_says_so_and_offers_the_paste_box(context: BrowserContext, site: Site) -> None:
    page = context.new_page()
    page.goto(site.page_url(site.token(now=time.time() - 7200, ttl=3600), "alice.old"))
    expect(page.locator("#banner")).to_have_attribute("data-code", "token_expired")
    expect(page.get_by_role("alert")).to_contain_text("expired")
    expect(page.get_by_label("Browser token")).to_be_visible()
    # A fresh token pasted in continues.
    page.get_by_label("Browser token").fill(site.token())
    page.get_by_role("button", name="Use this token").click()
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    expect(page.locator("#banner")).to_be_hidden()


def test_a_refused_sender_and_an_exhausted_budget_show_their_states(
    context: BrowserContext, site: Site
) -> None:
    for workspace, code, words in (
        ("closed", "sender_refused", "not accept"),
        ("tight", "budget_exhausted", "budget"),
    ):
        page = open_page(context, site, "alice.1", workspace=workspace)
        send(page, "hello")
        expect(page.locator("#banner")).to_have_attribute("data-code", code)
        expect(page.get_by_role("alert")).to_contain_text(words)
        expect(page.locator(".msg.user")).to_have_attribute("data-refused", code)
        assert page.locator(".msg.assistant").count() == 0


def test_the_page_holds_no_secret(context: BrowserContext, site: Site) -> None:
    import json

    secrets = json.loads((site.gateway.data_dir / "secrets.json").read_text())
    page = context.new_page()
    loaded: list[str] = []
    page.on("response", lambda r: loaded.append(r.text()) if r.ok and r.request.method == "GET" else None)
    page.goto(site.page_url(site.token(), "alice.s"))
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    everything = "\n".join(loaded) + page.content()
    assert loaded and not any(secret in everything for secret in secrets.values())


def test_a_connection_dropped_mid_reply_shows_the_whole_reply_once(
    context: BrowserContext, site: Site
) -> None:
    page = context.new_page()
    page.add_init_script(TRACK_SOCKETS)
    page.goto(site.page_url(site.token(), "alice.drop"))
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    page.evaluate(WATCH_GROWTH)
    text = long_text("dr", words=80, pace_ms=60)
    send(page, text)
    # Once the reply is streaming, its socket drops under the page.
    page.wait_for_function("() => window.__lengths.length >= 1", timeout=REPLY_TIMEOUT_MS)
    page.evaluate("window.__sockets[window.__sockets.length - 1].close()")
    # The page reconnects by itself and resumes after the last seq it has.
    page.wait_for_function("() => window.__sockets.length >= 2", timeout=REPLY_TIMEOUT_MS)
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    expect(page.locator(".msg.assistant[data-seq]")).to_have_text(text, timeout=REPLY_TIMEOUT_MS)
    expect(page.locator("#banner")).to_be_hidden()
    assert replies(page) == [text] and page.locator(".msg.user").count() == 1
    assert page.locator(".msg.assistant").count() == 1  # no stale streaming copy left behind
    page.reload()
    expect(page.locator(".msg.assistant[data-seq]")).to_have_text(text, timeout=REPLY_TIMEOUT_MS)
    assert replies(page) == [text] and page.locator(".msg.user").count() == 1


def test_the_page_comes_from_the_gateway_it_talks_to(context: BrowserContext, site: Site) -> None:
    # sigil dev serves the files itself; --aws through the webhook function, as the stack does,
    # with its Content-Security-Policy (connect-src 'self': the socket on the same origin).
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text))
    response = page.goto(site.page_url(site.token(), "alice.csp"))
    assert response is not None and response.ok
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    send(page, "under the policy **bold**")
    expect(page.locator(".msg.assistant[data-seq] strong")).to_have_text("bold")
    # Nothing the page does is refused by its policy (no inline script or style, no other host).
    assert not [line for line in console if "Content Security Policy" in line], console
    if site.mode == "aws":
        assert "connect-src 'self'" in response.headers["content-security-policy"]


# A socket of the test's own from the page's origin: the frames a page could send by hand.
RAW_SOCKET = """
async ([token, frames, expected]) => {
  const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws");
  const got = [];
  ws.onmessage = (e) => got.push(JSON.parse(e.data));
  await new Promise((resolve, reject) => { ws.onopen = resolve; ws.onerror = reject; });
  ws.send(JSON.stringify({ type: "auth", token }));
  for (const f of frames) ws.send(JSON.stringify(f));
  const until = Date.now() + 60000;
  while (got.length < expected && ws.readyState === WebSocket.OPEN && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 50));
  }
  ws.close();
  return got;
}
"""


def test_a_token_reaches_its_own_sessions_and_workspace_only(context: BrowserContext, site: Site) -> None:
    page = context.new_page()
    page.goto(site.url + "/")  # no token: the page only asks for one
    expect(page.get_by_label("Browser token")).to_be_visible()
    mine = site.token(sessions=["alice.mine"])
    other = [
        {"type": "resume", "session": "alice.theirs", "after": 0},
        {"type": "send", "event_id": "e-x", "session": "alice.theirs", "text": "let me in"},
    ]
    ready, *refusals = page.evaluate(RAW_SOCKET, [mine, other, 3])
    assert ready["type"] == "ready" and ready["sessions"] == ["alice.mine"]
    assert [(f["type"], f["code"]) for f in refusals] == [("error", "session_forbidden")] * 2
    # A token naming another workspace is not signed by that workspace's secret: refused outright.
    claims = json.loads(base64.urlsafe_b64decode(mine.split(".")[1] + "=="))
    forged = mine.split(".")
    forged[1] = base64.urlsafe_b64encode(json.dumps(claims | {"workspace": "closed"}).encode())
    forged_token = ".".join([forged[0], forged[1].decode().rstrip("="), forged[2]])
    [refused] = page.evaluate(RAW_SOCKET, [forged_token, other, 1])
    assert (refused["type"], refused["code"]) == ("error", "token_invalid")
    # Nothing reached the other session: no turn ran for it.
    assert not any("let me in" in str(r) for r in site.fake.requests)


@pytest.mark.parametrize("how", ["stopped", "killed"])
def test_a_gateway_restarted_mid_reply_shows_the_whole_reply_once(
    context: BrowserContext, tmp_path: Path, how: str
) -> None:
    # Stopped (Ctrl-C): the sockets close at once and the running turn finishes before the exit.
    # Killed (SIGKILL): the turn dies with it and runs again, from the start, after the restart.
    with FakeOpenAI() as fake:
        site = start_site(tmp_path, fake)
        try:
            page = open_page(context, site, "alice.restart")
            page.evaluate(WATCH_GROWTH)
            text = long_text("rs", words=80, pace_ms=60)
            send(page, text)
            # Once the reply is streaming, the gateway goes away under the page.
            page.wait_for_function("() => window.__lengths.length >= 1", timeout=REPLY_TIMEOUT_MS)
            if how == "killed":
                assert site.gateway.proc is not None
                kill_group(site.gateway.proc.pid)
            site.gateway.stop()
            expect(page.locator("#banner")).to_have_attribute("data-code", "connection_lost")
            expect(page.locator("#status")).to_have_attribute("data-state", "reconnecting")
            site.gateway.start()
            expect(page.locator("#status")).to_have_attribute("data-state", "open")
            expect(page.locator(".msg.assistant[data-seq]")).to_have_text(text, timeout=REPLY_TIMEOUT_MS)
            expect(page.locator("#banner")).to_be_hidden()
            # Once: one reply, under one copy of the message, also after a later reload.
            assert replies(page) == [text] and page.locator(".msg.user").count() == 1
            page.reload()
            expect(page.locator(".msg.assistant[data-seq]")).to_have_text(text, timeout=REPLY_TIMEOUT_MS)
            assert replies(page) == [text] and page.locator(".msg.user").count() == 1
        finally:
            site.gateway.stop()


def test_markup_in_a_reply_is_shown_as_text_never_run(context: BrowserContext, site: Site) -> None:
    page = open_page(context, site, "alice.xss")
    hostile = (
        '<img src=x onerror="window.__pwned=1"> <b>bold?</b> [click](javascript:window.__pwned=2) '
        "**fine** and [docs](https://example.com/a)"
    )
    send(page, hostile)
    reply = page.locator(".msg.assistant[data-seq]")
    expect(reply).to_have_count(1)
    # The model's text (the fake echoes it) became text nodes: no element from it but markdown's.
    assert reply.locator("img, b, script").count() == 0
    assert reply.locator("strong").all_text_contents() == ["fine"]
    assert reply.locator("a").evaluate_all("links => links.map(a => a.href)") == ["https://example.com/a"]
    assert "<img src=x" in (reply.text_content() or "")
    assert page.evaluate("window.__pwned") is None

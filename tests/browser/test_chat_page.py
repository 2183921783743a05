"""The chat page in headless Chromium against `sigil dev` and `sigil dev --aws` (the `site` fixture
runs each test on both): the reply streams in, history survives a reload, two tabs on two sessions
never mix, each refusal and a lost connection show their state. Where the cloud's protocol differs
(deltas are increments coalesced in time; a token error is an `error` frame, then a hang-up rather than
close code 4401) the same assertions hold. Restarting the gateway is a `sigil dev` scenario only:
`--aws` keeps its tables in moto's memory, so a restart starts empty (docs/local-aws-mode.md).

The model is tests/support/fake_openai.py, echoing the message; a `[fake:pace=N]` marker in it
makes the fake stream one word every N ms, so a reply takes long enough to watch it grow.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from shared.local.running import running_gateway
from tests.browser.conftest import REPLY_TIMEOUT_MS, Site, start_site
from tests.e2e.processes import kill_group
from tests.support.fake_openai import FakeOpenAI, echo_last_user

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


# Every WebSocket the page opens, and the frames it sent on each, so a test can drop the live one as
# a network would and read what the page asked for on the next.
TRACK_SOCKETS = """
window.__sockets = [];
const NativeWebSocket = window.WebSocket;
window.WebSocket = class extends NativeWebSocket {
  constructor(...args) { super(...args); this.__sent = []; window.__sockets.push(this); }
  send(data) { this.__sent.push(JSON.parse(data)); super.send(data); }
};
"""

# Every state the status line and the banner pass through, even one shown for a moment only.
WATCH_STATES = """
window.__statuses = [];
window.__banners = [];
const note = (list, value) => { if (value && list[list.length - 1] !== value) list.push(value); };
new MutationObserver(() => {
  note(window.__statuses, document.getElementById('status').dataset.state);
  note(window.__banners, document.getElementById('banner').dataset.code);
}).observe(document.body, {subtree: true, attributes: true, attributeFilter: ['data-state', 'data-code']});
"""

# The elements a reply held while it was still streaming (aria-busy), before its stored version.
WATCH_STREAMED_MARKUP = """
window.__streamedTags = [];
new MutationObserver(() => {
  for (const el of document.querySelectorAll('.msg.assistant[aria-busy="true"] *')) {
    const tag = el.tagName.toLowerCase();
    if (!window.__streamedTags.includes(tag)) window.__streamedTags.push(tag);
  }
}).observe(document.getElementById('log'), {subtree: true, childList: true, characterData: true});
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


def test_the_link_sigil_web_open_prints_opens_a_conversation(context: BrowserContext, site: Site) -> None:
    # What the README tells a new user to run, against the gateway on its port.
    sigil = str(Path(sys.executable).parent / "sigil")
    printed = subprocess.run(
        [sigil, "web", "open", "--user", "carol", "--data-dir", str(site.gateway.data_dir)],
        env=site.gateway.env | {"SIGIL_PORT": str(site.gateway.port)},
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert printed.startswith(f"{site.url}/#token=v1."), printed
    page = context.new_page()
    page.goto(printed)
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    expect(page.locator("#who")).to_have_text("carol · default")
    assert "token" not in page.url
    send(page, "hello from the link")
    expect(page.locator(".msg.assistant[data-seq]")).to_have_text("hello from the link")
    # A conversation of carol's own, made by the page under the token's `carol.*`.
    current = page.locator("#session-list button[aria-current=true]").get_attribute("data-session") or ""
    assert current.startswith("carol.")


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
        # alice of another workspace is another user: the page asks before it switches.
        page = context.new_page()
        page.goto(site.page_url(site.token(workspace=workspace), "alice.1"))
        if workspace == "tight":
            page.get_by_role("button", name="Switch to alice").click()
        expect(page.locator("#status")).to_have_attribute("data-state", "open")
        send(page, "hello")
        expect(page.locator("#banner")).to_have_attribute("data-code", code)
        expect(page.get_by_role("alert")).to_contain_text(words)
        expect(page.locator(".msg.user")).to_have_attribute("data-refused", code)
        assert page.locator(".msg.assistant").count() == 0


def test_the_page_holds_no_secret(context: BrowserContext, site: Site) -> None:
    secrets = json.loads((site.gateway.data_dir / "secrets.json").read_text())
    page = context.new_page()
    loaded: dict[str, str] = {}
    frames: list[str] = []
    page.on(
        "response", lambda r: loaded.update({r.url: r.text()}) if r.ok and r.request.method == "GET" else None
    )
    page.on("websocket", lambda ws: ws.on("framereceived", lambda f: frames.append(str(f))))
    page.goto(site.page_url(site.token(), "alice.s"))
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    send(page, "anything secret here?")
    expect(page.locator(".msg.assistant[data-seq]")).to_have_text("anything secret here?")
    # Everything the page loaded (the page, its three files, config.json), every frame it received,
    # what it shows and what it keeps in the browser's storage.
    names = {url.split("?")[0].rsplit("/", 1)[-1] for url in loaded}
    assert {"", "app.js", "markdown.js", "style.css", "config.json"} <= names, names
    stored = page.evaluate("JSON.stringify([Object.entries(localStorage), Object.entries(sessionStorage)])")
    everything = "\n".join([*loaded.values(), *frames, page.content(), stored])
    assert frames and len(secrets) == 3
    assert not any(secret in everything for secret in secrets.values())


def test_a_connection_dropped_mid_reply_shows_the_whole_reply_once(
    context: BrowserContext, site: Site
) -> None:
    page = context.new_page()
    page.add_init_script(TRACK_SOCKETS)
    page.goto(site.page_url(site.token(), "alice.drop"))
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    # A reply the page already has, so the resumption has a seq to resume after.
    send(page, "before the drop")
    expect(page.locator(".msg.assistant[data-seq]")).to_have_text("before the drop")
    first_seq = int(page.locator(".msg.assistant[data-seq]").get_attribute("data-seq") or "0")
    assert first_seq > 0
    page.evaluate(WATCH_GROWTH)
    page.evaluate(WATCH_STATES)
    text = long_text("dr", words=80, pace_ms=60)
    send(page, text)
    # Once the reply is streaming, its socket drops under the page.
    page.wait_for_function("() => window.__lengths.length >= 1", timeout=REPLY_TIMEOUT_MS)
    page.evaluate("window.__sockets[window.__sockets.length - 1].close()")
    # The page says so, reconnects by itself and resumes after the last seq it has.
    page.wait_for_function("() => window.__sockets.length >= 2", timeout=REPLY_TIMEOUT_MS)
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    expect(page.locator(".msg.assistant[data-seq]")).to_have_text(
        ["before the drop", text], timeout=REPLY_TIMEOUT_MS
    )
    expect(page.locator("#banner")).to_be_hidden()
    states = page.evaluate("[window.__statuses, window.__banners]")
    assert "reconnecting" in states[0] and "connection_lost" in states[1], states
    resumed = page.evaluate(
        "window.__sockets.slice(1).flatMap(s => s.__sent).filter(f => f.type === 'resume')"
    )
    assert resumed and resumed[0] == {"type": "resume", "session": "alice.drop", "after": first_seq}
    assert replies(page) == ["before the drop", text] and page.locator(".msg.user").count() == 2
    assert page.locator(".msg.assistant").count() == 2  # no stale streaming copy left behind
    page.reload()
    expect(page.locator(".msg.assistant[data-seq]")).to_have_text(
        ["before the drop", text], timeout=REPLY_TIMEOUT_MS
    )
    assert replies(page) == ["before the drop", text] and page.locator(".msg.user").count() == 2


def test_markdown_is_rendered_while_the_reply_streams(context: BrowserContext, site: Site) -> None:
    page = open_page(context, site, "alice.md")
    page.evaluate(WATCH_STREAMED_MARKUP)
    page.evaluate(WATCH_GROWTH)
    text = (
        "**Trains** leave every *20 minutes*\n\n- the first at `05:40`\n- the last at midnight\n\n"
        + long_text("more")
    )
    send(page, text)
    reply = page.locator(".msg.assistant[data-seq]")
    expect(reply.locator("strong")).to_have_text("Trains")
    expect(reply.locator("li")).to_have_count(2)
    # The stream was shown in steps, as markdown already: bold, italic, a list and code spans
    # while the reply was still marked busy, not its raw asterisks and dashes.
    assert len([n for n in page.evaluate("window.__lengths") if n > 0]) >= 2
    assert {"strong", "em", "ul", "li", "code"} <= set(page.evaluate("window.__streamedTags"))


# Every text a model's reply was shown with, streaming or stored.
WATCH_SHOWN = """
window.__shown = [];
new MutationObserver(() => {
  for (const el of document.querySelectorAll('.msg.assistant')) window.__shown.push(el.textContent);
}).observe(document.getElementById('log'), {subtree: true, childList: true, characterData: true});
"""


def test_a_secret_in_the_reply_is_redacted_before_the_page_shows_any_of_it(
    context: BrowserContext, site: Site
) -> None:
    key = "AKIA" + "Q" * 16  # an AWS access key id, as a model might repeat one
    ask = "what is the key? [fake:pace=25]"
    answer = " ".join(["Here", "it", "is:", key, *[f"filler{i}" for i in range(60)]])

    def model(body: dict[str, object]) -> str:
        said = echo_last_user(body)
        return answer if said == ask else said

    site.fake.set_default(model)
    try:
        page = open_page(context, site, "alice.leak")
        page.evaluate(WATCH_SHOWN)
        page.evaluate(WATCH_GROWTH)
        send(page, ask)
        done = page.locator(".msg.assistant[data-seq]")
        expect(done).to_contain_text("[REDACTED:aws_access_key]")
        expect(done).to_contain_text("filler59")
    finally:
        site.fake.set_default(echo_last_user)
    shown = page.evaluate("window.__shown")
    # It streamed (shown in steps before it was stored), and not one of those steps held the key.
    assert len([n for n in page.evaluate("window.__lengths") if n > 0]) >= 2
    assert shown and not any(key in text for text in shown)
    assert any("[REDACTED:aws_access_key]" in text for text in shown)


def test_new_conversations_and_the_conversation_list(context: BrowserContext, site: Site) -> None:
    page = open_page(context, site, "alice.first")
    send(page, "the first conversation")
    expect(page.locator(".msg.assistant[data-seq]")).to_have_text("the first conversation")
    page.get_by_role("button", name="New conversation", exact=True).click()
    expect(page.locator(".msg")).to_have_count(0)  # a new conversation starts empty
    expect(page.get_by_label("Message")).to_be_focused()
    send(page, "the second conversation")
    expect(page.locator(".msg.assistant[data-seq]")).to_have_text("the second conversation")
    # Both in the list, the latest first and marked as the one shown; the new one is the user's own.
    chats = page.get_by_role("navigation", name="Conversations").locator("#session-list button")
    expect(chats).to_have_text(["the second conversation", "the first conversation"])
    expect(chats.first).to_have_attribute("aria-current", "true")
    second = chats.first.get_attribute("data-session") or ""
    assert second.startswith("alice.") and second != "alice.first"
    # Back to the first: its own history only, from the outbox.
    chats.nth(1).click()
    expect(page.locator(".msg.assistant[data-seq]")).to_have_text("the first conversation")
    assert "second" not in (page.locator("#log").text_content() or "")
    # A reload keeps the list and the conversation shown.
    page.reload()
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    expect(chats).to_have_count(2)
    expect(page.locator(".msg.assistant[data-seq]")).to_have_text("the first conversation")


def test_the_page_is_usable_from_the_keyboard_and_by_assistive_technology(
    context: BrowserContext, site: Site
) -> None:
    page = open_page(context, site, "alice.a11y")
    # Landmarks and names a screen reader announces.
    expect(page.get_by_role("status")).to_have_text("Connected")
    expect(page.get_by_role("log")).to_have_attribute("aria-live", "polite")
    expect(page.get_by_role("navigation", name="Conversations")).to_be_visible()
    expect(page.get_by_role("button", name="New conversation", exact=True)).to_be_enabled()
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_enabled()
    box = page.get_by_role("textbox", name="Message")
    expect(box).to_be_focused()  # ready to type at once
    # Shift+Enter is a new line, Enter sends.
    page.keyboard.type("line one")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("line two")
    expect(box).to_have_value("line one\nline two")
    assert page.locator(".msg").count() == 0
    page.keyboard.press("Enter")
    expect(page.locator(".msg.user")).to_have_text("line one\nline two", use_inner_text=True)
    expect(box).to_have_value("")
    expect(page.locator(".msg.assistant[data-seq]")).to_contain_text("line two")
    # Tab reaches the send button from the message box, with a visible focus ring.
    box.focus()
    page.keyboard.press("Tab")
    send_button = page.get_by_role("button", name="Send", exact=True)
    expect(send_button).to_be_focused()
    assert send_button.evaluate("b => getComputedStyle(b).outlineStyle") != "none"


def test_the_page_follows_a_dark_colour_scheme(browser: Browser, site: Site) -> None:
    def background(scheme: Literal["light", "dark"]) -> float:
        ctx = browser.new_context(color_scheme=scheme)
        try:
            page = ctx.new_page()
            page.goto(site.url + "/")
            expect(page.get_by_label("Browser token")).to_be_visible()
            rgb = page.evaluate("getComputedStyle(document.documentElement).backgroundColor")
            r, g, b = (int(x) for x in re.findall(r"\d+", rgb)[:3])
            return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255
        finally:
            ctx.close()

    assert background("light") > 0.8 and background("dark") < 0.2


def test_the_page_comes_from_the_gateway_it_talks_to(context: BrowserContext, site: Site) -> None:
    # sigil dev serves the files as the webhook function does (shared.ingress.http.page); --aws
    # through that function, as the stack does; both with its Content-Security-Policy
    # (connect-src 'self': the socket on the same origin; under --aws also moto's S3, where the
    # page's file uploads go by presigned POST, as to the media bucket in the cloud).
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
    policy = response.headers["content-security-policy"]
    if site.mode == "dev":
        assert "connect-src 'self';" in policy
    else:
        record = running_gateway(site.gateway.data_dir)
        assert record is not None and record.aws is not None
        assert f"connect-src 'self' {record.aws.endpoint};" in policy


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


def test_markup_in_a_message_or_its_reply_is_shown_as_text_never_run(
    context: BrowserContext, site: Site
) -> None:
    page = open_page(context, site, "alice.xss")
    hostile = (
        '<img src=x onerror="window.__pwned=1"> <b>bold?</b> [click](javascript:window.__pwned=2) '
        "**fine** and [docs](https://example.com/a)"
    )
    send(page, hostile)
    reply = page.locator(".msg.assistant[data-seq]")
    expect(reply).to_have_count(1)
    # The person's text and the model's (the fake echoes it), as shown and after a reload (the
    # person's then from the browser's storage), became text nodes: no element but markdown's.
    for _ in range(2):
        for shown in (page.locator(".msg.user"), reply):
            assert shown.locator("img, b, script").count() == 0
            assert shown.locator("strong").all_text_contents() == ["fine"]
            links = shown.locator("a").evaluate_all("links => links.map(a => a.href)")
            assert links == ["https://example.com/a"]
            assert "<img src=x" in (shown.text_content() or "")
        page.reload()
        expect(reply).to_have_count(1)
    assert page.evaluate("window.__pwned") is None


def test_the_persons_own_message_is_rendered_as_markdown_too(context: BrowserContext, site: Site) -> None:
    page = open_page(context, site, "alice.own-md")
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text))
    send(page, "**Trains** at *noon*\n\n- one `a`\n- two\n\n```\nx = 1\n```")
    mine = page.locator(".msg.user")
    # At once, before any reply: the message as the person wrote it, rendered as a reply is.
    expect(mine.locator("strong")).to_have_text("Trains")
    expect(mine.locator("em")).to_have_text("noon")
    expect(mine.locator("li")).to_have_text(["one a", "two"])
    expect(mine.locator("pre code")).to_have_text("x = 1")
    expect(page.locator(".msg.assistant[data-seq] strong")).to_have_text("Trains")
    # And under the page's policy: no inline script or style needed for it.
    assert not [line for line in console if "Content Security Policy" in line], console


def test_a_link_for_another_user_is_taken_only_once_the_person_says_so(
    context: BrowserContext, site: Site
) -> None:
    # Login CSRF: anyone can send a link; taken silently, mallory's would put alice into mallory's
    # conversation, where what she writes is mallory's to read.
    page = open_page(context, site, "alice.mine")
    send(page, "alice's own words")
    expect(page.locator(".msg.assistant[data-seq]")).to_have_text("alice's own words")
    alice_token = page.evaluate("sessionStorage.getItem('sigil.token')")
    mallory = site.token("mallory")
    dialog = page.get_by_role("alertdialog", name="Switch to another user?")

    # A new load of the page with mallory's link: asked, not connected meanwhile.
    page.goto(f"{site.url}/?again#token={mallory}&session=mallory.trap")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("mallory (workspace default)")
    expect(dialog).to_contain_text("alice (workspace default)")
    stay = dialog.get_by_role("button", name="Stay as alice")
    expect(stay).to_be_focused()  # Enter keeps who you are
    expect(page.locator("#app")).to_be_hidden()
    assert page.locator("#status").get_attribute("data-state") == "idle"
    assert "token" not in page.url
    page.keyboard.press("Enter")
    expect(dialog).to_be_hidden()
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    expect(page.locator("#who")).to_have_text("alice · default")
    expect(page.locator(".msg.assistant[data-seq]")).to_have_text("alice's own words")
    assert page.evaluate("sessionStorage.getItem('sigil.token')") == alice_token

    # The link again, now a fragment changing under the open page: asked again; switching is a yes.
    page.goto(f"{site.url}/?again#token={mallory}&session=mallory.trap")
    expect(dialog).to_be_visible()
    expect(page.locator("#who")).to_have_text("alice · default")
    dialog.get_by_role("button", name="Switch to mallory").click()
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    expect(page.locator("#who")).to_have_text("mallory · default")
    current = page.locator("#session-list button[aria-current=true]")
    expect(current).to_have_attribute("data-session", "mallory.trap")

    # A new tab (its sessionStorage empty) still knows who this browser was: alice's link is asked
    # about now, and staying leaves the tab asking for a token, as it never held one.
    tab = context.new_page()
    tab.goto(site.page_url(alice_token, "alice.mine"))
    tab_dialog = tab.get_by_role("alertdialog")
    expect(tab_dialog).to_contain_text("this browser is using it as mallory")
    tab_dialog.get_by_role("button", name="Stay as mallory").click()
    expect(tab.get_by_label("Browser token")).to_be_visible()
    assert tab.locator("#status").get_attribute("data-state") == "idle"
    assert tab.evaluate("sessionStorage.getItem('sigil.token')") is None

    # A fresh link for whoever the browser already is (a token renewed) is taken without a word.
    again = context.new_page()
    again.goto(site.page_url(site.token("mallory"), "mallory.trap"))
    expect(again.locator("#status")).to_have_attribute("data-state", "open")
    expect(again.locator("#who")).to_have_text("mallory · default")
    expect(again.get_by_role("alertdialog")).to_be_hidden()

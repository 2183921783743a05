"""The chat page's screenshots in docs/images/web-chat*.png: `python -m tests.browser.web_screenshots`.

A real `sigil dev` with the browser tests' configuration (tests.browser.conftest.start_site: the
`tight` workspace has no budget) and tests/support/fake_openai.py as the model, echoing the message,
so a message written in markdown comes back as a reply rendered from it. Each page is shot by
Debian's chromium through Playwright (no browser download). Run it again after changing the page,
and commit the PNGs.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.browser.conftest import CHROMIUM, REPLY_TIMEOUT_MS, Site, start_site
from tests.browser.test_chat_uploads import paste_large
from tests.support import upload_files
from tests.support.fake_openai import FakeOpenAI

OUT = Path(__file__).resolve().parents[2] / "docs" / "images"
VIEWPORT = {"width": 1000, "height": 620}

CONVERSATION = """Here is what I found:

- **Trains** leave every *20 minutes*
- The last one is at `23:40`

```
sigil web open --user alice
```
More at [the docs](https://example.com/docs)."""


def shoot(page: Page, name: str) -> Path:
    path = OUT / f"{name}.png"
    page.screenshot(path=str(path))
    return path


def conversation(browser: Browser, site: Site) -> Path:
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(site.page_url(site.token(), "alice.trains"))
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    box = page.get_by_label("Message")
    box.fill(CONVERSATION)
    box.press("Enter")
    expect(page.locator(".msg.assistant[data-seq] li")).to_have_count(2, timeout=REPLY_TIMEOUT_MS)
    return shoot(page, "web-chat")


def expired(browser: Browser, site: Site) -> Path:
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(site.page_url(site.token(now=time.time() - 7200, ttl=3600), "alice.old"))
    expect(page.locator("#banner")).to_have_attribute("data-code", "token_expired")
    return shoot(page, "web-chat-expired")


def budget(browser: Browser, site: Site) -> Path:
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(site.page_url(site.token(workspace="tight"), "alice.1"))
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    box = page.get_by_label("Message")
    box.fill("hello")
    box.press("Enter")
    expect(page.locator("#banner")).to_have_attribute("data-code", "budget_exhausted")
    return shoot(page, "web-chat-budget")


def attachments(browser: Browser, site: Site) -> Path:
    """A photo sent with its caption, and a file too large refused before it was sent."""
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(site.page_url(site.token(), "alice.plant"))
    expect(page.locator("#status")).to_have_attribute("data-state", "open")
    with tempfile.TemporaryDirectory() as tmp:
        photo = Path(tmp) / "plant.png"
        photo.write_bytes(upload_files.png(96, 72, (46, 125, 50)))
        page.locator("#file-input").set_input_files(str(photo))
        expect(page.locator('#attachments li[data-name="plant.png"]')).to_have_attribute(
            "data-state", "ready"
        )
    box = page.get_by_label("Message")
    box.fill("What is this plant?")
    box.press("Enter")
    expect(page.locator(".msg.assistant[data-seq]")).to_contain_text(
        "What is this plant?", timeout=REPLY_TIMEOUT_MS
    )
    paste_large(page, "holiday-video.png", 30_000_000)
    expect(page.locator('#attachments li[data-state="refused"]')).to_have_count(1)
    return shoot(page, "web-chat-attachments")


def main() -> int:
    if not Path(CHROMIUM).is_file():
        print(f"chromium not installed ({CHROMIUM}): apt-get install chromium", file=sys.stderr)
        return 1
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAI() as fake:
        site = start_site(Path(tmp), fake)
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
                try:
                    for shot in (conversation, expired, budget, attachments):
                        print(shot(browser, site))
                finally:
                    browser.close()
        finally:
            site.gateway.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

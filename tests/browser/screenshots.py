"""The console's screenshots in docs/images/console-*.png: `python -m tests.browser.screenshots`.

The embedded backend filled as the browser tests fill it (tests.support.console_seed: real turns,
real compaction), the console served on loopback, each page shot by Debian's chromium through
Playwright (no browser download). Run it again after changing a page, and commit the PNGs;
`python -m tests.browser.screenshots replay` shoots only the pages whose name starts with "replay"
(the others show times relative to now, so each run changes them).

The replay report is a replay of Alice's session against the real openai SDK on
tests.support.fake_openai (a model that answers differently), as the browser test runs it.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from playwright.sync_api import Browser, Page, sync_playwright
from pydantic import SecretStr

from shared.backend import Backend
from shared.console import create_app
from shared.models import WORKSPACE_WIDE
from tests.browser.conftest import CHROMIUM
from tests.support import console_seed
from tests.support.fake_openai import FakeOpenAI, echo_last_user

OUT = Path(__file__).resolve().parents[2] / "docs" / "images"
WS = console_seed.WS


def shoot(page: Page, url: str, name: str, *, full: bool = True) -> Path:
    page.goto(url)
    page.wait_for_load_state("networkidle")
    path = OUT / f"console-{name}.png"
    page.screenshot(path=str(path), full_page=full)
    return path


def replayed(page: Page, url: str) -> list[Path]:
    """The replay form of Alice's session, and the report of its replay against another model."""
    session = console_seed.ALICE_SESSION
    form = shoot(page, f"{url}/replay?workspace={WS}&session={session}", "replay-form", full=False)
    page.get_by_label("Model").fill("openai/gpt-4.1")
    page.get_by_label("System prompt").fill("You are Sigil. Answer in capitals.")
    page.get_by_label("Denied tools").fill("memory_store")
    page.get_by_role("button", name="Replay").click()
    page.locator("section.sigil-replay").wait_for()
    report = OUT / "console-replay-report.png"
    page.screenshot(path=str(report), full_page=False)
    turn = OUT / "console-replay-turn.png"
    look_up = console_seed.ALICE_SAYS.index("look up: what editor theme did I ask for?")
    page.locator("section.sigil-replay .turn").nth(look_up).screenshot(path=str(turn))
    return [form, report, turn]


def main() -> int:
    only = sys.argv[1] if len(sys.argv) > 1 else ""
    if not Path(CHROMIUM).is_file():
        print(f"chromium not installed ({CHROMIUM}): apt-get install chromium", file=sys.stderr)
        return 1
    OUT.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory() as tmp,
        console_seed.embedded(Path(tmp)) as (backend, seeded),
        FakeOpenAI(lambda body: f"Replayed: {echo_last_user(body).upper()}") as fake,
    ):
        settings = seeded.model_copy(
            update={"openai_base_url": fake.base_url, "openai_api_key": SecretStr("sk-test")}
        )
        app = create_app(backend, settings, source="embedded: .sigil")
        with console_seed.serve(app) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
            shots(browser, backend, url, app.state.secret, only)
    return 0


def shots(browser: Browser, backend: Backend, url: str, secret: str, only: str) -> None:
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 860})
        page.goto(f"{url}/?token={secret}")  # the URL `sigil console` prints: the secret's cookie
        [fact] = [
            t.id
            for t in backend.memory.list_triples(WS, scope=WORKSPACE_WIDE)
            if t.object == "PostgreSQL"  # pruned by the maintenance run: a history
        ]
        [dead] = backend.dead_letters.list_entries(WS) if backend.dead_letters else []
        pages = [
            ("workspaces", "/workspaces"),
            ("workspace", f"/workspaces/{WS}"),
            ("sessions", f"/workspaces/{WS}/sessions"),
            ("session", f"/workspaces/{WS}/sessions/{console_seed.ALICE_SESSION}"),
            ("memory-search", f"/workspaces/{WS}/memory?q=dark+mode+editor"),
            ("fact", f"/workspaces/{WS}/facts/{fact}"),
            ("rollback-confirm", f"/workspaces/{WS}/runs/{console_seed.ALICE_RUN}/rollback"),
            ("erase-confirm", f"/workspaces/{WS}/users/{console_seed.BOB}/erase"),
            ("dead-letters", "/dead-letters"),
            ("dead-letter", f"/dead-letters/{dead.id}"),
            ("replay", "/replay"),
        ]
        for name, path in pages:
            if name.startswith(only):
                print(shoot(page, url + path, name))
        if "replay".startswith(only):
            for shot in replayed(page, url):
                print(shot)
    finally:
        browser.close()


if __name__ == "__main__":
    sys.exit(main())

"""The console's screenshots in docs/images/console-*.png: `python -m tests.browser.screenshots`.

The embedded backend filled as the browser tests fill it (tests.support.console_seed: real turns,
real compaction), the console served on loopback, each page shot by Debian's chromium through
Playwright (no browser download). Run it again after changing a page, and commit the PNGs.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

from shared.console import create_app
from shared.models import WORKSPACE_WIDE
from tests.browser.conftest import CHROMIUM
from tests.support import console_seed

OUT = Path(__file__).resolve().parents[2] / "docs" / "images"
WS = console_seed.WS


def shoot(page: Page, url: str, name: str, *, full: bool = True) -> Path:
    page.goto(url)
    page.wait_for_load_state("networkidle")
    path = OUT / f"console-{name}.png"
    page.screenshot(path=str(path), full_page=full)
    return path


def main() -> int:
    if not Path(CHROMIUM).is_file():
        print(f"chromium not installed ({CHROMIUM}): apt-get install chromium", file=sys.stderr)
        return 1
    OUT.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory() as tmp,
        console_seed.embedded(Path(tmp)) as (backend, settings),
        console_seed.serve(create_app(backend, settings, source="embedded: .sigil")) as url,
        sync_playwright() as p,
    ):
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 860})
            [fact] = [
                t.id
                for t in backend.memory.list_triples(WS, scope=WORKSPACE_WIDE)
                if t.object == "PostgreSQL"  # pruned by the maintenance run: a history
            ]
            [dead] = backend.dead_letters.list_entries(WS) if backend.dead_letters else []
            shots = [
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
            for name, path in shots:
                print(shoot(page, url + path, name))
        finally:
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

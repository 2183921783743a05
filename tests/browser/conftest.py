"""Browser tests of the chat page: Debian's chromium driven by Playwright, against a real `sigil dev`
and a real `sigil dev --aws` (the webhook, ws and agent functions over moto, the page served by the
webhook function and its socket by the WebSocket API's stand-in), one gateway of each per module.

No browser is ever downloaded (`playwright install` is never run): Playwright drives the system's
chromium through its executable path. CI installs it (.ci/run); on a machine without it these
tests are skipped, saying so, which is the only skip the suite allows.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, expect, sync_playwright

from shared.channels import web, web_tokens
from tests.e2e.conftest import DevGateway, gateway_env
from tests.support.fake_openai import FakeOpenAI

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Replies on a loaded two-core machine: a turn is queued, run and committed by a subprocess.
REPLY_TIMEOUT_MS = 120_000

# Every expectation waits for a condition, as long as a reply may take (never a fixed sleep).
expect.set_options(timeout=REPLY_TIMEOUT_MS)

CONFIG = """\
workspaces:
  closed:
    unknown_sender_policy: allow_list
  tight:
    budget: {user: {tokens_per_day: 0}}
"""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if Path(CHROMIUM).is_file():
        return
    reason = (
        f"chromium not installed ({CHROMIUM} missing): the browser tests did not run; "
        "apt-get install chromium"
    )
    for item in items:
        if "tests/browser/" in str(item.fspath):
            item.add_marker(pytest.mark.skip(reason=reason))


MODES = {"dev": [], "aws": ["--aws"]}


@dataclass
class Site:
    """A running `sigil dev` (or `--aws`) with three workspaces, and a way to mint browser tokens."""

    gateway: DevGateway
    fake: FakeOpenAI
    mode: str = "dev"

    @property
    def url(self) -> str:
        return self.gateway.url

    def token(
        self,
        user: str = "alice",
        sessions: list[str] | None = None,
        *,
        workspace: str = "default",
        **kw: float,
    ) -> str:
        secrets = json.loads((self.gateway.data_dir / "secrets.json").read_text())
        claims = web_tokens.claims_for(
            workspace,
            user,
            sessions or [f"{user}.*"],
            now=kw.get("now", time.time()),
            ttl_s=int(kw.get("ttl", 3600)),
        )
        return web_tokens.mint(secrets[web.secret_name(workspace)], claims)

    def page_url(self, token: str, session: str | None = None) -> str:
        fragment = f"token={token}" + (f"&session={session}" if session else "")
        return f"{self.url}/#{fragment}"


def start_site(base: Path, fake: FakeOpenAI, mode: str = "dev") -> Site:
    data_dir = base / "state"
    config = base / "sigil.yaml"
    config.write_text(CONFIG)
    env = gateway_env(fake) | {"SIGIL_CONFIG": str(config)}
    sigil = str(Path(sys.executable).parent / "sigil")
    for workspace in ("closed", "tight"):
        # As an operator would: the workspace's web secret, before the gateway starts.
        subprocess.run(
            [sigil, "web-secret", "-w", workspace, "--create", "--data-dir", str(data_dir)],
            env=env,
            check=True,
            capture_output=True,
        )
    return Site(DevGateway(data_dir, env, extra_args=MODES[mode]).start(), fake, mode)


@pytest.fixture(scope="module", params=list(MODES))
def site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """One gateway per mode for the module: pytest runs every test on one before starting the other."""
    with FakeOpenAI() as fake:
        s = start_site(tmp_path_factory.mktemp("site"), fake, request.param)
        try:
            yield s
        finally:
            s.gateway.stop()


# Per module, not per session: chromium starts helper processes as it runs, and the e2e tests'
# check that nothing they did not find running outlives them; closed here, it is gone before.
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    ctx = browser.new_context()
    ctx.set_default_timeout(REPLY_TIMEOUT_MS)
    try:
        yield ctx
    finally:
        ctx.close()

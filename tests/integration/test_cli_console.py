"""`sigil console` as the operator runs it: it refuses a non-loopback address unless told to, and
serves the console of a data dir on loopback (a subprocess, stopped whatever the outcome) to the
browser that opens the URL it prints, and to no other name or request without its secret."""

from __future__ import annotations

import http.client
import http.cookiejar
import os
import selectors
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from typer.testing import CliRunner

from shared.adapters.embedded import build_embedded_backend
from shared.cli import app
from shared.config import Settings
from shared.console.guard import is_loopback
from shared.models import WorkspaceConfig
from tests.e2e.processes import kill_group

runner = CliRunner()


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "::", "example.com"])
def test_a_non_loopback_host_is_refused_without_allow_remote(tmp_path: Path, host: str) -> None:
    result = runner.invoke(app, ["console", "--host", host, "--data-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert f"refusing to bind {host}" in result.output
    assert "--allow-remote" in result.output


def test_loopback_addresses_are_recognised() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "10.0.0.1", "::", "local"))


def _line(proc: subprocess.Popen[str], prefix: str, timeout: float) -> str:
    """The first line of the process's stdout starting with `prefix`, waiting as long as `timeout`."""
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        if selector.select(left):
            line = proc.stdout.readline()
            if not line:
                break  # the process ended
            if line.startswith(prefix):
                return line.strip()
    raise AssertionError(f"no {prefix!r} line from the console")


def test_the_command_serves_the_console_of_a_data_dir_on_loopback(tmp_path: Path) -> None:
    data_dir = tmp_path / "state"
    backend = build_embedded_backend(Settings(data_dir=data_dir, embedding_model="none"))
    try:
        backend.workspaces.put(WorkspaceConfig(id="ops-desk", name="Operations"))
    finally:
        backend.close()
    sigil = str(Path(sys.executable).parent / "sigil")
    env = os.environ | {"PYTHONUNBUFFERED": "1", "SIGIL_EMBEDDING_MODEL": "none"}
    proc = subprocess.Popen(
        [sigil, "console", "--port", "0", "--data-dir", str(data_dir), "--allow-host", "console.lan"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        url = _line(proc, "console: http://127.0.0.1:", 120).split()[1]
        printed = urlsplit(url)
        assert printed.path == "/" and printed.query.startswith("token=") and len(printed.query) > 40
        origin = f"http://{printed.netloc}"
        # Without the secret, nothing; with another name in Host (a DNS-rebinding page), nothing.
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(origin + "/workspaces", timeout=30)
        assert refused.value.code == 403
        secret = printed.query.removeprefix("token=")
        for name, status in (("attacker.example", 400), ("console.lan", 200)):  # --allow-host's is
            conn = http.client.HTTPConnection(printed.hostname or "", printed.port, timeout=30)
            try:
                cookie = f"sigil-console-{printed.port}={secret}"
                conn.request(
                    "GET", "/workspaces", headers={"Host": f"{name}:{printed.port}", "Cookie": cookie}
                )
                assert conn.getresponse().status == status, name
            finally:
                conn.close()
        # A browser opening the printed URL: the cookie, then the pages.
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        with browser.open(url, timeout=30) as response:
            page = response.read().decode()
        assert response.status == 200 and response.url == origin + "/workspaces"
        assert "ops-desk" in page and "Operations" in page
    finally:
        kill_group(proc.pid)
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()

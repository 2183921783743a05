"""Where Debian's chromium is missing, the chat page's browser tests say that they did not run.

pytest itself, in a subprocess, over tests/browser/ with tests.browser.conftest's CHROMIUM pointed
at a path that does not exist (as on a machine without the package): every browser test is
reported skipped with the reason and how to install it, and none of them starts a gateway or a
browser (the run ends before any fixture is set up).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RUN = """
import sys, pytest
import tests.browser.conftest as browser
browser.CHROMIUM = "/nonexistent/chromium"
sys.exit(pytest.main(["-q", "-rs", "-p", "no:cacheprovider", "tests/browser/test_chat_page.py"]))
"""


def test_without_chromium_every_browser_test_is_reported_as_not_run() -> None:
    collected = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--co",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/browser/test_chat_page.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    count = collected.count("::")
    result = subprocess.run(
        [sys.executable, "-c", RUN], check=False, cwd=ROOT, capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = result.stdout.strip().splitlines()[-1]
    assert summary.startswith(f"{count} skipped") and "passed" not in summary, summary
    assert (
        "chromium not installed (/nonexistent/chromium missing): the browser tests did not run; "
        "apt-get install chromium"
    ) in result.stdout

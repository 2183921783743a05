"""The memory privacy property tests' counts (test_memory_privacy_properties.COUNTS), printed in
the terminal summary so a plain `pytest -q` run reports them."""

from __future__ import annotations

import sys

import pytest


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

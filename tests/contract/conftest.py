"""The `contract` fixture: each suite in this folder runs once per adapter set in BACKEND_FACTORIES
(test_memory_index.py runs once per index adapter instead: the aws set's index is the embedded
one); and osmem-server for the suites that run the OpenSearch adapter."""

from __future__ import annotations

import contextlib
import pathlib
import sys
from collections.abc import Callable, Iterator

import pytest
from osmem_server import OsmemServer

from shared.clock import new_id

from .factories import BACKEND_FACTORIES, ContractBackend

OpenBackend = Callable[[], contextlib.AbstractContextManager[ContractBackend]]


@pytest.fixture(params=sorted(BACKEND_FACTORIES))
def open_backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> OpenBackend:
    """Opens the adapter set on this test's directory; call it again to simulate a restart."""
    factory = BACKEND_FACTORIES[request.param]
    data_dir = tmp_path / "backend"
    return lambda: factory(data_dir)


@pytest.fixture
def contract(open_backend: OpenBackend) -> Iterator[ContractBackend]:
    with open_backend() as backend:
        yield backend


@pytest.fixture(scope="session")
def osmem() -> Iterator[OsmemServer]:
    """osmem-server, the in-memory OpenSearch stand-in, for the suites that run the OpenSearch
    adapter over real HTTP (each on its own index). It answers no k-NN query (docs/memory.md,
    "Where each index adapter is proven"). Japanese analysis (kuromoji) is not needed."""
    server = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
    yield server
    server.close()


@pytest.fixture
def ws_a() -> str:
    # Fresh ids per test, so a set whose state outlives a test (a shared server) starts clean.
    return new_id("wsa")


@pytest.fixture
def ws_b() -> str:
    return new_id("wsb")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The property tests' counts (test_memory_scopes.COUNTS): workloads generated, reads checked."""
    module = sys.modules.get("tests.contract.test_memory_scopes")
    counts = getattr(module, "COUNTS", None)
    if not counts:
        return
    terminalreporter.section("memory scopes: property-test counts")
    for name in sorted(counts):
        terminalreporter.write_line(f"{name}: {counts[name]}")
    workloads = sum(v for k, v in counts.items() if k.endswith("workloads"))
    reads = sum(v for k, v in counts.items() if k.endswith("reads"))
    terminalreporter.write_line(f"total: {workloads} workloads generated, {reads} reads checked")

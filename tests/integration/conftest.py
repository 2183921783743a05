"""What the integration tests share: an embedded backend in a fresh data directory, an OpenSearch
index on osmem-server, and the memory privacy property tests' counts
(test_memory_privacy_properties.COUNTS), printed in the terminal summary so a plain `pytest -q`
run reports them."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from opensearchpy import OpenSearch
from osmem_server import OsmemServer

from shared.adapters.aws.opensearch import OpenSearchIndex, opensearch_client
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


# The OpenSearch adapter over real HTTP against osmem-server, for the files that test it alone
# (test_opensearch_osmem, test_fact_keys_osmem, test_second_step_osmem; their vectors have 4
# dimensions). Not named `osmem_server`: osmem's own pytest plugin defines that fixture, seeded
# from ini options this project does not set. Japanese analysis (kuromoji) is not needed.
OSMEM_DIM = 4


@pytest.fixture(scope="module")
def osmem() -> Iterator[OsmemServer]:
    server = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
    yield server
    server.close()


@pytest.fixture
def client(osmem: OsmemServer) -> OpenSearch:
    return opensearch_client(osmem.url)


@pytest.fixture
def index(client: OpenSearch) -> OpenSearchIndex:
    # One index per test on the module's server: tests stay independent without a restart.
    return OpenSearchIndex(client=client, index=f"mem-{uuid.uuid4().hex[:12]}", dimension=OSMEM_DIM)

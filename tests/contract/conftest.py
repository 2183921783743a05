"""The `contract` fixture: each suite in this folder runs once per adapter set in BACKEND_FACTORIES."""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Callable, Iterator

import pytest

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


@pytest.fixture
def ws_a() -> str:
    # Fresh ids per test, so a set whose state outlives a test (a shared server) starts clean.
    return new_id("wsa")


@pytest.fixture
def ws_b() -> str:
    return new_id("wsb")

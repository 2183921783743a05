"""Fixtures the integration tests share: an embedded backend in a fresh data directory."""

from __future__ import annotations

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

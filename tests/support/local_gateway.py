"""A LocalGateway in-process on the fake OpenAI server, for the web channel's tests (WebSocket, SSE)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from shared.config import Settings
from shared.local.gateway import LocalGateway
from tests.support.fake_openai import FakeOpenAI

# What a developer's shell may set that would change these gateways' model, config or origins.
AMBIENT = ("SIGIL_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "SIGIL_CONFIG", "SIGIL_WEB_ORIGINS")


@contextmanager
def gateway_on_fake_openai(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalGateway]:
    """A started gateway over `data_dir`, stopped (and its fake server with it) pass or fail."""
    for name in AMBIENT:
        monkeypatch.delenv(name, raising=False)
    with FakeOpenAI() as fake:
        settings = Settings(
            data_dir=data_dir,
            model="openai/fake-model",
            OPENAI_BASE_URL=fake.base_url,
            OPENAI_API_KEY="sk-test",
            provider_max_retries=0,
        )
        gw = LocalGateway(settings)
        gw.start()
        try:
            yield gw
        finally:
            gw.stop()

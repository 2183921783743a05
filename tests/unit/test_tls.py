"""shared.tls: the process's one client TLS context, as httpx would make its own, shared by the
platforms' HTTP client (made at the first platform call, not with the senders)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import certifi
import pytest

from shared.adapters.embedded import build_embedded_backend
from shared.channels.out import build_senders
from shared.channels.out.http import ApiClient
from shared.config import Settings
from shared.tls import tls_context
from tests.support.fake_platforms import DictSecrets


@pytest.fixture(autouse=True)
def fresh_context() -> Iterator[None]:
    tls_context.cache_clear()
    yield
    tls_context.cache_clear()


def test_the_context_verifies_with_certifis_bundle_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)

    context = tls_context()

    assert (context.verify_mode, context.check_hostname) == (ssl.CERT_REQUIRED, True)
    assert (
        context.cert_store_stats()["x509_ca"]
        == ssl.create_default_context(cafile=certifi.where()).cert_store_stats()["x509_ca"]
    )
    assert tls_context() is context  # one per process


def test_ssl_cert_file_is_honoured_as_httpx_honours_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bundle = tmp_path / "one.pem"
    bundle.write_text(
        Path(certifi.where()).read_text().split("-----END CERTIFICATE-----")[0]
        + "-----END CERTIFICATE-----\n"
    )
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))

    assert tls_context().cert_store_stats()["x509_ca"] == 1


def _api_clients(registry: object) -> list[ApiClient]:
    senders = registry._senders.values()  # type: ignore[attr-defined]
    return [s.api._client for s in senders if hasattr(s, "api")]


def test_the_platforms_share_one_client_made_at_the_first_call_with_the_shared_context(
    tmp_path: Path,
) -> None:
    backend = build_embedded_backend(Settings(data_dir=tmp_path))
    try:
        registry = build_senders(DictSecrets({}), backend.outbox)
        clients = _api_clients(registry)

        assert len(clients) == 4
        assert all(callable(c._http) for c in clients)  # nothing made by building the senders
        assert len({id(c.http) for c in clients}) == 1
        transport = clients[0].http._transport
        assert transport._pool._ssl_context is tls_context()  # type: ignore[attr-defined]
    finally:
        backend.close()

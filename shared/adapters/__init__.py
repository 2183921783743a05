"""The store adapters: embedded (SQLite, a developer's machine) and aws (DynamoDB, OpenSearch, SQS,
EventBridge, Secrets Manager). Only the composition roots (shared.cloud, shared.local, the CLI)
import this package; features see the ports alone."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shared.backend import Backend
    from shared.config import Settings


def build_backend(settings: Settings) -> Backend:
    """The Backend SIGIL_BACKEND names, its adapters imported on first use."""
    if settings.backend == "embedded":
        from shared.adapters.embedded import build_embedded_backend

        return build_embedded_backend(settings)
    from shared.adapters.aws import build_aws_backend

    return build_aws_backend(settings)

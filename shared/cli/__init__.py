"""The `sigil` command line: run the local gateway, talk to it, and administer either backend.

One module per command group; importing them registers their commands on `app`.
"""

from shared.cli import (
    config,
    consolidate,
    events,
    gateway,
    identity,
    memory,
    pairing,
    secret,
    workspace,
)
from shared.cli._app import app

__all__ = [
    "app",
    "config",
    "consolidate",
    "events",
    "gateway",
    "identity",
    "memory",
    "pairing",
    "secret",
    "workspace",
]

if __name__ == "__main__":
    app()

"""The `sigil` command line: run the local gateway, talk to it, and administer either backend.

One module per command group; importing them registers their commands on `app`.
"""

from shared.cli import consolidate, gateway, identity, memory, pairing, secret, skill
from shared.cli._app import app

__all__ = ["app", "consolidate", "gateway", "identity", "memory", "pairing", "secret", "skill"]

if __name__ == "__main__":
    app()

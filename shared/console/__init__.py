"""`sigil console`: the operator's local web console over either backend (docs/console.md).

Dev kit, never Lambda code: it runs on the operator's machine with their own credentials, reads
the Backend through its ports, and binds to loopback. `create_app(backend, settings)` is the
Starlette application; shared.cli.console builds the backend and serves it.
"""

from shared.console.app import create_app

__all__ = ["create_app"]

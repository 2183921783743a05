"""The `sigil` command line: run the local gateway, talk to it, and administer either backend.

One module per command group (shared/cli/<group>.py); importing one registers its commands on
`app`. Every public module of the package is imported here, so a new group needs no other edit.
"""

import importlib
import pkgutil

from shared.cli._app import app, one_line_summaries

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")
one_line_summaries(app)

__all__ = ["app"]

if __name__ == "__main__":
    app()

"""A cold start's imports without the work that finds little or nothing: the cyclic garbage
collector's passes over them, and pydantic's search for plugins.

Importing a function's code allocates some 150,000 long-lived objects (modules, classes,
functions, pydantic's schemas) and little cyclic garbage (about 28,000 objects for the agent);
every time the allocations pass the collector's threshold it walks all of them again for it. That
was a fifth of the agent's cold import (bench/aws_calls.py, (c)). The price: the import's garbage
is frozen with the rest and kept for the process's life (0.3 MB of the agent's peak RSS here).

A handler imports its code inside `cold_imports()`, that is `gc_paused(freeze=True)`: the
collector is off while the modules load, then what they built is moved to the permanent
generation (`gc.freeze`), so no later collection walks it again either, in the first turn or any
after. The first turn's own heavy, lazy imports (a provider's SDK, the OpenSearch client) pause it
the same way, without freezing: a turn's objects are not for keeping.

pydantic, the first time it builds a validator, looks for plugins in the entry points of every
installed distribution: 11 ms of reading the layer's metadata, and Sigil uses no plugin.
`cold_imports` turns the search off unless PYDANTIC_DISABLE_PLUGINS is set already (an operator
who adds a plugin, Logfire's say, sets it to "" or to the names of those to skip).

The pause is process-wide, and a batch runs its sessions in threads: the collector comes back
when the last of the overlapping pauses ends, and only if it was on when the first began (a test
runner, or a caller, that turned it off keeps it off).
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _Pauses:
    """How many pauses overlap now, and whether the collector was on before the first of them."""

    lock = threading.Lock()
    depth = 0
    resume = False


@contextmanager
def gc_paused(*, freeze: bool = False) -> Iterator[None]:
    """The block runs with the cyclic garbage collector off; `freeze` then moves every object
    tracked so far to the permanent generation (for a module's import, never a turn's work)."""
    with _Pauses.lock:
        if _Pauses.depth == 0:
            _Pauses.resume = gc.isenabled()
            gc.disable()
        _Pauses.depth += 1
    try:
        yield
    finally:
        with _Pauses.lock:
            _Pauses.depth -= 1
            if freeze:
                gc.freeze()
            if _Pauses.depth == 0 and _Pauses.resume:
                gc.enable()


@contextmanager
def cold_imports() -> Iterator[None]:
    """A handler module's imports: no plugin search, the collector paused, and what they built
    frozen (module docstring)."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    with gc_paused(freeze=True):
        yield

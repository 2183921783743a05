"""A per-process cache of workspace configs, so a warm turn reads none from the store.

Every turn needs its workspace's config (model, window, system prompt), which changes rarely; in
the cloud reading it is a DynamoDB GetItem per turn. `CachedWorkspaces` keeps each answer for
`ttl_s` seconds (60 by default), a missing config too, since most workspaces run on defaults.

The price: a config changed by another process (the admin API, another Lambda container, the
CLI against the same data) takes up to the TTL to apply in this one. A `put` through the cache
applies in this process at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

from cachetools import TTLCache

from shared.backend import Backend
from shared.models import WorkspaceConfig
from shared.ports import WorkspaceStore

WORKSPACE_TTL_S = 60.0
# Far more workspaces than one process serves at once; a bound, so a long-lived gateway's cache
# cannot grow without end.
MAX_ENTRIES = 1024


class CachedWorkspaces:
    """A WorkspaceStore that answers `get` from memory for `ttl_s` seconds after reading it."""

    def __init__(
        self,
        store: WorkspaceStore,
        *,
        ttl_s: float = WORKSPACE_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        self.store = store
        self.ttl_s = ttl_s
        # None is an answer too (no config: the defaults). Full, the least recently used goes.
        self._cache: TTLCache[str, WorkspaceConfig | None] = TTLCache(max_entries, ttl_s, timer=clock)
        # The local gateway's lane workers share one instance.
        self._lock = threading.Lock()

    def get(self, workspace_id: str) -> WorkspaceConfig | None:
        try:
            with self._lock:
                found = self._cache[workspace_id]
        except KeyError:
            # Read outside the lock: two threads missing at once both read, which is harmless.
            found = self.store.get(workspace_id)
            self._remember(workspace_id, found)
        return _copy(found)

    def put(self, config: WorkspaceConfig) -> None:
        self.store.put(config)
        self._remember(config.id, _copy(config))

    def list_workspaces(self) -> list[WorkspaceConfig]:
        # An admin path: always the store's current list.
        return self.store.list_workspaces()

    def forget(self, workspace_id: str | None = None) -> None:
        """Drop one workspace's entry (or all), so the next get reads the store."""
        with self._lock:
            if workspace_id is None:
                self._cache.clear()
            else:
                self._cache.pop(workspace_id, None)

    def _remember(self, workspace_id: str, config: WorkspaceConfig | None) -> None:
        with self._lock:
            self._cache[workspace_id] = config


def _copy(config: WorkspaceConfig | None) -> WorkspaceConfig | None:
    # Configs are mutable: a caller changing what it got must not change the cached answer.
    return None if config is None else config.model_copy(deep=True)


def with_workspace_cache(backend: Backend, *, ttl_s: float = WORKSPACE_TTL_S) -> Backend:
    """The same backend, its workspace store behind a CachedWorkspaces (see the module docstring)."""
    if isinstance(backend.workspaces, CachedWorkspaces):
        return backend
    return replace(backend, workspaces=CachedWorkspaces(backend.workspaces, ttl_s=ttl_s))

"""A per-process cache of workspace configs, so a warm turn reads none from the store.

Every turn needs its workspace's config (model, window, system prompt), which changes rarely; in
the cloud reading it is a DynamoDB GetItem per turn. `CachedWorkspaces` keeps each answer for
`ttl_s` seconds (60 by default), a missing config too, since most workspaces run on defaults.

The price: a config changed by another process (the admin API, another Lambda container, the
CLI against the same data) takes up to the TTL to apply in this one. A `put` through the cache
applies in this process at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from shared.backend import Backend
from shared.models import WorkspaceConfig
from shared.ports import WorkspaceStore
from shared.ttl_cache import TtlCache

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
        self._cache: TtlCache[str, WorkspaceConfig] = TtlCache(
            ttl_s=ttl_s, clock=clock, max_entries=max_entries
        )

    def get(self, workspace_id: str) -> WorkspaceConfig | None:
        return self._cache.get(workspace_id, lambda: self.store.get(workspace_id))

    def put(self, config: WorkspaceConfig) -> None:
        self.store.put(config)
        self._cache.remember(config.id, config)

    def list_workspaces(self) -> list[WorkspaceConfig]:
        # An admin path: always the store's current list.
        return self.store.list_workspaces()

    def forget(self, workspace_id: str | None = None) -> None:
        """Drop one workspace's entry (or all), so the next get reads the store."""
        self._cache.forget(workspace_id)


def with_workspace_cache(backend: Backend, *, ttl_s: float = WORKSPACE_TTL_S) -> Backend:
    """The same backend, its workspace store behind a CachedWorkspaces (see the module docstring)."""
    if isinstance(backend.workspaces, CachedWorkspaces):
        return backend
    return replace(backend, workspaces=CachedWorkspaces(backend.workspaces, ttl_s=ttl_s))

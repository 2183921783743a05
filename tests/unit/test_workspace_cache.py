"""shared.workspace_cache: a warm turn reads its workspace config from memory, for at most a TTL."""

from __future__ import annotations

from shared.models import WorkspaceConfig
from shared.workspace_cache import CachedWorkspaces


class CountingStore:
    """A WorkspaceStore in a dict that counts reads."""

    def __init__(self) -> None:
        self.configs: dict[str, WorkspaceConfig] = {}
        self.gets: list[str] = []

    def get(self, workspace_id: str) -> WorkspaceConfig | None:
        self.gets.append(workspace_id)
        found = self.configs.get(workspace_id)
        return None if found is None else found.model_copy(deep=True)

    def put(self, config: WorkspaceConfig) -> None:
        self.configs[config.id] = config.model_copy(deep=True)

    def list_workspaces(self) -> list[WorkspaceConfig]:
        return sorted(self.configs.values(), key=lambda c: c.id)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_config_is_read_once_per_ttl() -> None:
    store, clock = CountingStore(), Clock()
    store.put(WorkspaceConfig(id="w1", active_window=8))
    cache = CachedWorkspaces(store, ttl_s=60, clock=clock)

    assert cache.get("w1") == WorkspaceConfig(id="w1", active_window=8)
    clock.now += 59
    # Changed behind the cache's back (another process): not seen until the TTL has passed
    store.put(WorkspaceConfig(id="w1", active_window=4))
    assert cache.get("w1") == WorkspaceConfig(id="w1", active_window=8)
    assert store.gets == ["w1"]
    clock.now += 1
    assert cache.get("w1") == WorkspaceConfig(id="w1", active_window=4)
    assert store.gets == ["w1", "w1"]


def test_a_missing_config_is_cached_too() -> None:
    # Most workspaces run on defaults: without this, their every turn would read the store
    store, clock = CountingStore(), Clock()
    cache = CachedWorkspaces(store, ttl_s=60, clock=clock)
    assert cache.get("w1") is None
    assert cache.get("w1") is None
    assert store.gets == ["w1"]


def test_a_put_through_the_cache_applies_at_once_and_forget_rereads() -> None:
    store, clock = CountingStore(), Clock()
    cache = CachedWorkspaces(store, ttl_s=60, clock=clock)
    assert cache.get("w1") is None
    cache.put(WorkspaceConfig(id="w1", model="openai/x"))
    assert cache.get("w1") == WorkspaceConfig(id="w1", model="openai/x")
    assert store.configs["w1"].model == "openai/x"
    assert store.gets == ["w1"]
    cache.forget("w1")
    assert cache.get("w1") is not None
    assert store.gets == ["w1", "w1"]


def test_a_caller_changing_its_copy_does_not_change_the_cache() -> None:
    store = CountingStore()
    store.put(WorkspaceConfig(id="w1"))
    cache = CachedWorkspaces(store, clock=Clock())
    got = cache.get("w1")
    assert got is not None
    got.tools_deny.append("shell")
    assert cache.get("w1") == WorkspaceConfig(id="w1")


def test_the_cache_is_bounded_and_list_reads_the_store() -> None:
    store, clock = CountingStore(), Clock()
    cache = CachedWorkspaces(store, clock=clock, max_entries=2)
    for ws in ("a", "b", "c"):
        store.put(WorkspaceConfig(id=ws))
        cache.get(ws)
    cache.get("b")
    cache.get("c")
    cache.get("a")  # the oldest entry was evicted to make room for "c"
    assert store.gets == ["a", "b", "c", "a"]
    assert [c.id for c in cache.list_workspaces()] == ["a", "b", "c"]

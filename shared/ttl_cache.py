"""A small per-process cache of store answers, each kept for a fixed time.

Used in front of stores whose answers change rarely and are read on every turn (workspace
configs, sender identities), so a warm turn reads neither. Thread-safe: the local gateway's lane
workers share one instance. Bounded: the entry refreshed longest ago goes first.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from pydantic import BaseModel

K = TypeVar("K", bound=Hashable)
M = TypeVar("M", bound=BaseModel)


class TtlCache(Generic[K, M]):
    """Answers (a model or None, "not found" included) by key, kept for `ttl_s` seconds."""

    def __init__(
        self,
        *,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = 1024,
        keep: Callable[[M | None], bool] = lambda _: True,
    ) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._max_entries = max_entries
        self._keep = keep
        self._entries: dict[K, tuple[float, M | None]] = {}
        self._lock = threading.Lock()

    def get(self, key: K, load: Callable[[], M | None]) -> M | None:
        now = self._clock()
        with self._lock:
            entry = self._entries.get(key)
        if entry is not None and now - entry[0] < self.ttl_s:
            return _copy(entry[1])
        # Loaded outside the lock: two threads missing at once both read, which is harmless.
        value = load()
        self.remember(key, value, now)
        return _copy(value)

    def remember(self, key: K, value: M | None, now: float | None = None) -> None:
        with self._lock:
            self._entries.pop(key, None)
            if not self._keep(value):
                return
            if len(self._entries) >= self._max_entries:
                # Dicts keep insertion order and every write re-inserts: the first key is the
                # entry refreshed longest ago.
                del self._entries[next(iter(self._entries))]
            self._entries[key] = (self._clock() if now is None else now, _copy(value))

    def forget(self, key: K | None = None) -> None:
        """Drop one entry (or all), so the next get reads the store."""
        with self._lock:
            if key is None:
                self._entries.clear()
            else:
                self._entries.pop(key, None)


def _copy(value: M | None) -> M | None:
    # Models are mutable: a caller changing what it got must not change the cached answer.
    return None if value is None else value.model_copy(deep=True)

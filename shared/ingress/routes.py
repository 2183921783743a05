"""The webhook's route lookup behind a per-process cache, so a warm request reads no route.

Every request to /webhooks/{platform}/{name} needs its ChannelRoute; in the cloud reading one is
a DynamoDB GetItem. `cached_routes` keeps each answer for `ttl_s` seconds (60 in the cloud), a
miss too, so probing an unknown name costs one read per interval. The price, as for workspace
configs (shared.workspace_cache): a route changed by `sigil config apply` takes up to the TTL to
apply in a warm container.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from cachetools import TTLCache

from shared.channels.routes import RouteLookup
from shared.models import ChannelRoute

ROUTE_TTL_S = 60.0
# Far more routes than a deployment serves; the bound keeps a probe over many names from growing
# the process's memory (the least recently used goes first).
MAX_ROUTES = 1024


def cached_routes(
    lookup: RouteLookup,
    *,
    ttl_s: float = ROUTE_TTL_S,
    clock: Callable[[], float] = time.monotonic,
    max_entries: int = MAX_ROUTES,
) -> RouteLookup:
    """`lookup`, each answer (None included) kept `ttl_s` seconds; 0 or less: no cache."""
    if ttl_s <= 0:
        return lookup
    cache: TTLCache[tuple[str, str], ChannelRoute | None] = TTLCache(max_entries, ttl_s, timer=clock)
    lock = threading.Lock()

    def get(platform: str, name: str) -> ChannelRoute | None:
        key = (platform, name)
        with lock:
            if key in cache:
                return cache[key]
        # Read outside the lock: two threads missing at once both read, which is harmless.
        found = lookup(platform, name)
        with lock:
            cache[key] = found
        return found

    return get

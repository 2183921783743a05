"""Growth checks: how a function's time grows with its input, as a ratio measured in one run.

A wall-clock bound fails on a loaded machine and passes a quadratic regex on a fast one; the ratio
of two sizes' times does neither. Each size is timed a few times and the fastest kept, so a pause
of the machine during one run does not count.
"""

from __future__ import annotations

import time
from collections.abc import Callable


# Below this the big input's time is mostly timer and scheduler noise, and far too fast for any
# super-linear cost at the sizes these checks use (a quadratic pass over a megabyte takes minutes).
FAST_S = 0.05


def best_time(fn: Callable[[], object], repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def growth(fn: Callable[[str], object], make: Callable[[int], str], small: int, big: int) -> float:
    """Time on `big` characters over time on `small`, normalised so that linear growth is 1.0
    (quadratic growth is about big / small)."""
    small_text, big_text = make(small), make(big)
    big_time = best_time(lambda: fn(big_text))
    if big_time < FAST_S:
        return 1.0
    return big_time / max(best_time(lambda: fn(small_text)), 1e-6) / (big / small)

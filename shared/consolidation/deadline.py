"""When a consolidation run must stop: a point on a monotonic clock, checked between units of work.

Lambda gives a run its remaining time (context.get_remaining_time_in_millis); the local timer and
`sigil consolidate` give it as long as they like. A run asks `expired(reserve)` before starting a
unit (a batch, a page) that takes about `reserve` seconds, and stops cleanly when it would not
finish in time, leaving its checkpoint for the next run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Deadline:
    at: float  # on `clock`'s scale; math.inf: never
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)

    @classmethod
    def after(cls, seconds: float, clock: Callable[[], float] = time.monotonic) -> Deadline:
        return cls(clock() + seconds, clock)

    @classmethod
    def before_timeout(cls, context: object, margin_s: float, default_s: float = 15 * 60.0) -> Deadline:
        """`margin_s` before a Lambda invocation's timeout, from its context's remaining time;
        `default_s` (the consolidate function's timeout, infra/constructs/consolidation.py) when
        the context does not say."""
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        seconds = float(remaining()) / 1000.0 if callable(remaining) else default_s
        return cls.after(seconds - margin_s)

    @classmethod
    def never(cls) -> Deadline:
        return cls(math.inf)

    def remaining(self) -> float:
        """Seconds left (math.inf when there is no deadline; negative once it has passed)."""
        return self.at - self.clock()

    def expired(self, reserve: float = 0.0) -> bool:
        """True when fewer than `reserve` seconds are left: too late to start what takes that long."""
        return self.remaining() < reserve

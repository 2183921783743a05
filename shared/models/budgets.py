"""Budget values: what a charge adds, a counter's totals, the buckets a call touches, a decision.

They cross the BudgetStore and SessionStore ports (shared.ports), so they sit here with the other
models; the logic that builds and judges them (which buckets a call touches, the prices, a turn's
budget) is shared.budgets, and docs/budgets.md has the whole design. The limits themselves are
configuration: `BudgetLimits` in shared.models, beside the WorkspaceConfig that holds them.

Units. Counters are integers in both stores: tokens, tool calls, and USD in nano-dollars (USD times
10^9). Integers add exactly in SQLite and in DynamoDB's ADD alike, so concurrent charges sum to the
same total on both.
"""

# Annotations are not postponed here: pydantic makes this module's models at import, and would
# evaluate each field's annotation from its text (shared/models/__init__.py).

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

Scope = Literal["workspace", "user"]
Metric = Literal["tokens", "tool_calls", "usd"]
Period = Literal["day", "month"]

SCOPES: Final[tuple[Scope, ...]] = ("workspace", "user")
METRICS: Final[tuple[Metric, ...]] = ("tokens", "tool_calls", "usd")
PERIODS: Final[tuple[Period, ...]] = ("day", "month")

NANOS_PER_USD: Final = 10**9

_MONTHS: Final = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def as_utc(now: datetime) -> datetime:
    """`now` in UTC; a naive datetime is taken as UTC, as the stores do with every timestamp."""
    return now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)


# ---------------------------------------------------------------- usage and counters


class BudgetUsage(_Frozen):
    """What one charge adds to every bucket it touches.

    Named apart from shared.providers.base.Usage (a provider's token report), which the turn
    also holds: build this one with PriceTable.usage, or `BudgetUsage(tool_calls=1)` for a tool.
    """

    tokens_in: int = Field(default=0, ge=0)
    tokens_out: int = Field(default=0, ge=0)
    tool_calls: int = Field(default=0, ge=0)
    usd_nanos: int = Field(default=0, ge=0)

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out

    @property
    def usd(self) -> Decimal:
        """The estimated cost in USD (AuditRecord.cost_usd takes float(usage.usd))."""
        return Decimal(self.usd_nanos) / NANOS_PER_USD

    @property
    def counters(self) -> "Counters":
        return Counters(tokens=self.tokens, tool_calls=self.tool_calls, usd_nanos=self.usd_nanos)

    def __add__(self, other: "BudgetUsage") -> "BudgetUsage":
        return BudgetUsage(
            tokens_in=self.tokens_in + other.tokens_in,
            tokens_out=self.tokens_out + other.tokens_out,
            tool_calls=self.tool_calls + other.tool_calls,
            usd_nanos=self.usd_nanos + other.usd_nanos,
        )


@dataclass(frozen=True)
class Counters:
    """A bucket's totals (or a charge's amounts) in counting units: USD in nano-dollars."""

    tokens: int = 0
    tool_calls: int = 0
    usd_nanos: int = 0

    def get(self, metric: Metric) -> int:
        if metric == "tokens":
            return self.tokens
        if metric == "tool_calls":
            return self.tool_calls
        return self.usd_nanos

    @property
    def empty(self) -> bool:
        return not (self.tokens or self.tool_calls or self.usd_nanos)

    def __add__(self, other: "Counters") -> "Counters":
        return Counters(
            tokens=self.tokens + other.tokens,
            tool_calls=self.tool_calls + other.tool_calls,
            usd_nanos=self.usd_nanos + other.usd_nanos,
        )


@dataclass(frozen=True)
class Bucket:
    """One counter a call touches: a scope's totals for one period, and that scope's limits."""

    scope: Scope
    period: Period
    key: str  # shared.budgets.bucket_key(...)
    resets_at: datetime
    expires_at: datetime  # resets_at + BUCKET_RETENTION: when the counter may be deleted
    limits: Mapping[Metric, int]  # the metrics with a limit, in counting units; empty: unlimited

    @property
    def limited(self) -> bool:
        return bool(self.limits)


@dataclass(frozen=True)
class BudgetCharge:
    """What a turn spent, for its commit to add to its counters (SessionStore.save's `charge`).

    `buckets` are all the turn's buckets, limited or not (every charge is recorded, so a limit set
    later applies to the period so far); `at` is the turn's start, whose periods they are.
    """

    workspace_id: str
    buckets: tuple[Bucket, ...]
    amounts: Counters
    at: datetime


# ---------------------------------------------------------------- decisions


class Exhausted(_Frozen):
    """The limit that ran out: whose, which metric, over which period, and when it resets."""

    scope: Scope
    metric: Metric
    period: Period
    used: int  # in counting units: tokens, tool calls, or nano-dollars for "usd"
    limit: int
    resets_at: datetime

    def message(self, now: datetime) -> str:
        """What the user is told, e.g. "The daily token budget for this workspace is used up
        (1,000,000 of 1,000,000). It resets at 00:00 UTC, in 3 h 12 min." USD reads "(an
        estimated $10.01 of $10.00)".
        """
        adjective = "daily" if self.period == "day" else "monthly"
        what = {"tokens": "token", "tool_calls": "tool-call", "usd": "spending"}[self.metric]
        used = format_amount(self.metric, self.used, self.limit)
        # USD is counted at the price table's prices, not read off an invoice: it says so.
        estimated = "an estimated " if self.metric == "usd" else ""
        amounts = f"({estimated}{used} of {format_amount(self.metric, self.limit)})"
        if self.scope == "workspace":
            first = f"The {adjective} {what} budget for this workspace is used up {amounts}."
        else:
            first = f"Your {adjective} {what} budget is used up {amounts}."
        resets = as_utc(self.resets_at)
        when = "at 00:00 UTC" if self.period == "day" else f"on {format_date(resets)} at 00:00 UTC"
        return f"{first} It resets {when}, in {format_duration(resets - as_utc(now))}."

    @property
    def summary(self) -> str:
        """A short form for logs and the audit record: "workspace/day/tokens 1000000/1000000"."""
        return f"{self.scope}/{self.period}/{self.metric} {self.used}/{self.limit}"


class BudgetDecision(_Frozen):
    """Allowed, or not: `exhausted` names the limit that ran out (the one resetting last, when
    several did, since that is when the user can go on)."""

    at: datetime
    exhausted: Exhausted | None = None

    @property
    def allowed(self) -> bool:
        return self.exhausted is None

    def message(self) -> str | None:
        """The user-facing text of a denial (reset times counted from `at`); None when allowed."""
        return None if self.exhausted is None else self.exhausted.message(self.at)


# ---------------------------------------------------------------- text


def format_amount(metric: Metric, value: int, limit: int | None = None) -> str:
    if metric != "usd":
        return f"{value:,}"
    # Cents, unless the limit itself is finer than a cent (then up to six decimals).
    scale = limit if limit is not None else value
    places = 2 if scale % (NANOS_PER_USD // 100) == 0 else 6
    return f"${Decimal(value) / NANOS_PER_USD:,.{places}f}"


def format_date(value: datetime) -> str:
    # Month names from a tuple, not strftime("%B"), which follows the process's locale.
    return f"{value.day} {_MONTHS[value.month - 1]} {value.year}"


def format_duration(delta: timedelta) -> str:
    """ "45 min", "3 h 12 min", "12 days 3 h".

    Rounded up to the last unit shown (the minute; the hour past a day), so the user is never
    told a reset is nearer than it is, and never "0 min".
    """
    minutes = max(1, math.ceil(delta.total_seconds() / 60))
    if minutes < 60:
        return f"{minutes} min"
    if minutes < 24 * 60:
        hours, minutes = divmod(minutes, 60)
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(math.ceil(minutes / 60), 24)
    text = f"{days} day" if days == 1 else f"{days} days"
    return f"{text} {hours} h" if hours else text

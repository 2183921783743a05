"""Budgets: tokens, tool calls and estimated USD per workspace and per user, per UTC day and month.

The limits are configuration (`WorkspaceConfig.budget`, a `shared.models.BudgetLimits`); the
counters live behind the `BudgetStore` port (shared.ports), in SQLite or DynamoDB. This module is
what both adapters share, so they cannot disagree: which counters ("buckets") a call touches and
their keys, when each resets, how a reading becomes a decision, what a model call costs, and the
text a user is shown when a budget is used up. docs/budgets.md has the whole design.

Units. Counters are integers in both stores: tokens, tool calls, and USD in nano-dollars (USD times
10^9). Integers add exactly in SQLite and in DynamoDB's ADD alike, so concurrent charges sum to the
same total on both, and a cost rounded up to the next nano-dollar is never more than a billionth
of a dollar off.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.clock import utcnow
from shared.config import Settings
from shared.models import BudgetLimits, ScopeLimits
from shared.models.budgets import (
    METRICS,
    NANOS_PER_USD,
    PERIODS,
    SCOPES,
    Bucket,
    BudgetCharge,
    BudgetDecision,
    BudgetUsage,
    Counters,
    Exhausted,
    Metric,
    Period,
    Scope,
    as_utc,
    format_amount,
)
from shared.ports import BudgetStore

if TYPE_CHECKING:
    from genai_prices.data_snapshot import DataSnapshot
    from genai_prices.types import ModelInfo

# The budget values cross the ports, so they live in the floor (shared.models.budgets); they are
# exported here too, so that callers find the whole budget vocabulary in one place.
__all__ = [
    "BUCKET_RETENTION",
    "DEFAULT_PRICES",
    "DEFAULT_UNKNOWN_PRICE",
    "METRICS",
    "NANOS_PER_USD",
    "PERIODS",
    "SCOPES",
    "Bucket",
    "BudgetCharge",
    "BudgetDecision",
    "BudgetUsage",
    "Counters",
    "Exhausted",
    "ListPrices",
    "Metric",
    "ModelPrice",
    "Period",
    "PriceQuote",
    "PriceSource",
    "PriceTable",
    "Scope",
    "TurnBudget",
    "as_utc",
    "bucket_key",
    "buckets",
    "crossing",
    "describe_limits",
    "evaluate",
    "period_label",
    "period_reset",
    "period_start",
]

log = logging.getLogger("sigil.budgets")

# How long a counter is kept after its period ends (DynamoDB `ttl`, the SQLite sweep): long enough
# to report on the previous month day by day; no decision ever reads a past period's counter.
BUCKET_RETENTION: Final = timedelta(days=35)
# A user id longer than this (in UTF-8) is replaced by a digest in a counter's key: DynamoDB sort
# keys hold 1,024 bytes, and Identity.user_id may be 300 characters of up to 4 bytes each.
_MAX_USER_KEY_BYTES: Final = 512


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------- prices


class ModelPrice(_Frozen):
    """A model's list price in USD per 1M tokens, input (prompt) and output (completion).

    Prompt-cache rates (docs/budgets.md#prices): the prompt tokens a provider read from its cache
    cost `cache_read_per_mtok`, those it wrote to it `cache_write_per_mtok`; either left unset
    costs the input rate (a provider that lists no cache rate bills cached tokens as input).
    """

    input_per_mtok: Decimal = Field(ge=0)
    output_per_mtok: Decimal = Field(ge=0)
    cache_read_per_mtok: Decimal | None = Field(default=None, ge=0)
    cache_write_per_mtok: Decimal | None = Field(default=None, ge=0)

    def cost_nanos(
        self, tokens_in: int, tokens_out: int, *, cache_read: int = 0, cache_write: int = 0
    ) -> int:
        """The cost of a call in nano-dollars, rounded up (an estimate should not flatter).
        `tokens_in` is the whole prompt; `cache_read` and `cache_write` are the parts of it the
        provider read from and wrote to its prompt cache."""
        cached = min(tokens_in, cache_read + cache_write)
        read_rate = self.input_per_mtok if self.cache_read_per_mtok is None else self.cache_read_per_mtok
        write_rate = self.input_per_mtok if self.cache_write_per_mtok is None else self.cache_write_per_mtok
        prompt = (
            self.input_per_mtok * (tokens_in - cached)
            + read_rate * min(cache_read, cached)
            + write_rate * (cached - min(cache_read, cached))
        )
        # USD per 1M tokens is exactly 1,000 nano-dollars per token per USD of price.
        nanos = (prompt + self.output_per_mtok * tokens_out) * 1000
        return int(nanos.to_integral_value(rounding=ROUND_CEILING))


def _price(input_per_mtok: str, output_per_mtok: str) -> ModelPrice:
    return ModelPrice(input_per_mtok=Decimal(input_per_mtok), output_per_mtok=Decimal(output_per_mtok))


# The genai-prices provider that lists a Sigil provider's models, by the prefix of the model ref.
# Other prefixes (the function provider of tests; any added later) have no list price until they
# are mapped here or priced in SIGIL_MODEL_PRICES.
_LISTED_PROVIDERS: Final = {"openai": "openai", "anthropic": "anthropic", "bedrock": "aws"}


class ListPrices(Mapping[str, ModelPrice]):
    """Published list prices by model ref, from the price data genai-prices ships in its package.

    Standard tier only: a long-context tier's dearer rate and batch rates are not applied, as a
    budget estimates rather than bills; the prompt-cache read and write rates are (ModelPrice).
    The data is the package's own snapshot, read offline: genai-prices can fetch newer prices in
    the background (UpdatePrices), which is never started here, and a snapshot something else in
    the process fetched is ignored, so a price changes only with the locked package version.
    Loaded on the first lookup (about half a second): the webhook, which never prices a call, does
    not pay for it.

    A key is "provider/model" as the turn names it; the model part is matched by genai-prices's
    own rules, so "openai/gpt-4.1-mini-2025-04-14" finds gpt-4.1-mini. Iteration lists each model
    priced by the token once, under its genai-prices id.
    """

    def __getitem__(self, model_ref: str) -> ModelPrice:
        found = _list_price(model_ref.strip().lower())
        if found is None:
            raise KeyError(model_ref)
        return found

    def __iter__(self) -> Iterator[str]:
        prefixes = {provider_id: prefix for prefix, provider_id in _LISTED_PROVIDERS.items()}
        for provider in _snapshot().providers:
            prefix = prefixes.get(provider.id)
            if prefix is not None:
                # Only ids the lookup prices: not a model priced by the image or the second.
                keys = (f"{prefix}/{model.id}" for model in provider.models)
                yield from (key for key in keys if _list_price(key) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


DEFAULT_PRICES: Final[Mapping[str, ModelPrice]] = ListPrices()
# For a model the table does not know: the price of the dearest mainstream models (Claude Opus),
# so an unknown model uses a budget up early rather than late. Override with the key "*".
DEFAULT_UNKNOWN_PRICE: Final = _price("15", "75")

# Suffixes that name a snapshot or version of a model priced like its family: a date
# (-20250514, -2024-08-06), "-latest", and Bedrock's "-v2:0" / ":0".
_VERSION_SUFFIX: Final = re.compile(r"(?:-\d{8}|-\d{4}-\d{2}-\d{2}|-latest|-v\d+(?::\d+)?|:\d+)$")
# Bedrock's cross-region inference profiles put a geography before the model id.
_BEDROCK_GEO: Final = re.compile(r"^(?:us|us-gov|eu|apac|ap|ca|jp|au|global)\.")


def _lookup_keys(model_ref: str) -> Iterator[str]:
    """The keys to try for a model ref, most specific first."""
    ref = model_ref.strip().lower()
    yield ref
    provider, slash, model = ref.partition("/")
    if provider == "bedrock" and slash:
        # A foundation-model or inference-profile ARN ends in the model id; an application
        # inference profile's ends in an opaque id, which finds nothing (the unknown price).
        if model.startswith("arn:"):
            model = model.rsplit("/", 1)[-1]
        stripped = _BEDROCK_GEO.sub("", model)
        if f"{provider}/{stripped}" != ref:
            ref = f"{provider}/{stripped}"
            yield ref
    while True:
        shorter = _VERSION_SUFFIX.sub("", ref)
        if shorter == ref:
            return
        ref = shorter
        yield ref


@cache
def _snapshot() -> DataSnapshot:
    """genai-prices's bundled price data, built here rather than taken from get_snapshot(), which
    answers with any snapshot an UpdatePrices fetched over the network."""
    from genai_prices.data import providers
    from genai_prices.data_snapshot import DataSnapshot

    return DataSnapshot(providers=providers, from_auto_update=False)


@lru_cache(maxsize=1024)
def _listed_model(provider_id: str, model: str) -> ModelInfo | None:
    try:
        return _snapshot().find_provider_model(model, None, provider_id, None)[1]
    except LookupError:
        return None


def _list_price(model_ref: str) -> ModelPrice | None:
    prefix, slash, model = model_ref.partition("/")
    provider_id = _LISTED_PROVIDERS.get(prefix)
    if not slash or not model or provider_id is None:
        return None
    found = _listed_model(provider_id, model)
    if found is None and prefix == "bedrock" and model.startswith("anthropic."):
        # Bedrock lists Anthropic's models under their full version ids only; a family name
        # ("anthropic.claude-3-5-sonnet") is priced as on Anthropic's own API, as Bedrock does.
        found = _listed_model("anthropic", model.removeprefix("anthropic."))
    if found is None:
        return None
    from genai_prices.types import TieredPrices

    listed = found.get_prices(utcnow())
    rates = [listed.input_mtok, listed.output_mtok, listed.cache_read_mtok, listed.cache_write_mtok]
    # The base rate of a tiered price: the tiers start past 200k input tokens (see ListPrices).
    base = [rate.base if isinstance(rate, TieredPrices) else rate for rate in rates]
    if base[0] is None:
        return None  # priced by something other than tokens (images, audio, requests)
    return ModelPrice(
        input_per_mtok=base[0],
        output_per_mtok=base[1] or Decimal(0),
        cache_read_per_mtok=base[2],
        cache_write_per_mtok=base[3],
    )


# Where a model's price came from, as every place that shows one says (docs/budgets.md#prices):
# "declared" by the operator (sigil.yaml defaults.model_prices, SIGIL_MODEL_PRICES), the "list"
# price genai-prices publishes, "local" (a model no table lists, served from a local base URL:
# free), or "unknown" (none of those: the cautious DEFAULT_UNKNOWN_PRICE, or the declared "*").
PriceSource = Literal["declared", "list", "local", "unknown"]
FREE: Final = _price("0", "0")
_WARNED: set[str] = set()  # model refs warned about, once per process (see PriceTable.quote)
_WARNED_LOCK = threading.Lock()


class PriceQuote(_Frozen):
    """A model's price and where it came from: every USD figure is an estimate at this price."""

    model_ref: str
    price: ModelPrice
    source: PriceSource

    def describe(self) -> str:
        """One line for /status, `sigil workspace show` and the logs, e.g. "$0.40 in / $1.60 out
        per 1M tokens (list price)"."""
        if self.source == "local":
            return "free: served from a local base URL and priced by nobody (declare a price to count spend)"
        rate = f"${self.price.input_per_mtok} in / ${self.price.output_per_mtok} out per 1M tokens"
        if self.source == "declared":
            return f"{rate} (declared)"
        if self.source == "list":
            return f"{rate} (list price)"
        return (
            f"{rate}: no price known, a cautious estimate (declare one in sigil.yaml defaults.model_prices)"
        )


class PriceTable:
    """USD per 1M tokens by model ref ("openai/gpt-4.1-mini"), and the cost of a call.

    A model's price is, in this order (`quote`): the operator's (`prices`, from sigil.yaml's
    defaults.model_prices or SIGIL_MODEL_PRICES), its list price (DEFAULT_PRICES), free when its
    provider's base URL is local (`local_providers`: an Ollama or vLLM server the operator runs;
    a model the list prices keeps its price there, so a local proxy to a paid API is not taken for
    free), else the unknown-model price: the key "*" of `prices`, or DEFAULT_UNKNOWN_PRICE.
    `local_providers` are the providers whose base URL is local (Settings.local_providers).

    `prices` entries may be ModelPrice or plain mappings (`{"input_per_mtok": 0.4,
    "output_per_mtok": 1.6}`, the shape of JSON settings); pass `defaults={}` to start with no list
    prices. The first time a process prices a model at the unknown price it logs a warning, and
    at the local price an info line: once per model ref, not once per turn.
    """

    def __init__(
        self,
        prices: Mapping[str, ModelPrice | Mapping[str, Any]] | None = None,
        *,
        defaults: Mapping[str, ModelPrice] = DEFAULT_PRICES,
        local_providers: Iterable[str] = (),
    ) -> None:
        overrides: dict[str, ModelPrice] = {}
        for key, value in (prices or {}).items():
            price = value if isinstance(value, ModelPrice) else ModelPrice.model_validate(value)
            overrides[key.strip().lower()] = price
        self.unknown_price = overrides.pop("*", DEFAULT_UNKNOWN_PRICE)
        self.local_providers = frozenset(p.strip().lower() for p in local_providers)
        self._overrides = overrides
        # The list prices are looked up one ref at a time, not copied: there are hundreds.
        self._defaults = (
            defaults
            if isinstance(defaults, ListPrices)
            else {key.strip().lower(): price for key, price in defaults.items()}
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> PriceTable:
        """The gateway's table: its declared prices, and its providers with a local base URL."""
        return cls(settings.model_prices, local_providers=settings.local_providers())

    def known(self, model_ref: str) -> bool:
        return self._find(model_ref)[0] is not None

    def price(self, model_ref: str) -> ModelPrice:
        """The model's price; a dated snapshot or Bedrock version falls back to its family's."""
        return self.quote(model_ref).price

    def quote(self, model_ref: str) -> PriceQuote:
        """The model's price and its source (see the class)."""
        found, source = self._find(model_ref)
        if found is not None:
            return PriceQuote(model_ref=model_ref, price=found, source=source)
        if model_ref.strip().lower().partition("/")[0] in self.local_providers:
            quote = PriceQuote(model_ref=model_ref, price=FREE, source="local")
        else:
            quote = PriceQuote(model_ref=model_ref, price=self.unknown_price, source="unknown")
        with _WARNED_LOCK:
            first = f"{quote.source}:{model_ref}" not in _WARNED
            _WARNED.add(f"{quote.source}:{model_ref}")
        if first and quote.source == "unknown":
            log.warning(
                "no price for model %s: its spend is estimated at $%s in / $%s out per 1M tokens "
                "against the budgets; declare its price in sigil.yaml defaults.model_prices "
                "(or SIGIL_MODEL_PRICES)",
                model_ref,
                quote.price.input_per_mtok,
                quote.price.output_per_mtok,
            )
        elif first:
            log.info(
                "model %s is served from a local base URL and priced by nobody: counted as free "
                "against the budgets (declare a price in sigil.yaml defaults.model_prices to count it)",
                model_ref,
            )
        return quote

    def _find(self, model_ref: str) -> tuple[ModelPrice | None, PriceSource]:
        # Every override before any list price: genai-prices matches a dated snapshot itself, and
        # an override of its family ("openai/gpt-4.1-mini") must still price it.
        keys = list(_lookup_keys(model_ref))
        tables: tuple[tuple[Mapping[str, ModelPrice], PriceSource], ...] = (
            (self._overrides, "declared"),
            (self._defaults, "list"),
        )
        for table, source in tables:
            for key in keys:
                found = table.get(key)
                if found is not None:
                    return found, source
        return None, "unknown"

    def cost_nanos(
        self, model_ref: str, tokens_in: int, tokens_out: int, *, cache_read: int = 0, cache_write: int = 0
    ) -> int:
        price = self.price(model_ref)
        return price.cost_nanos(tokens_in, tokens_out, cache_read=cache_read, cache_write=cache_write)

    def usage(
        self,
        model_ref: str,
        *,
        tokens_in: int,
        tokens_out: int,
        tool_calls: int = 0,
        cache_read: int = 0,
        cache_write: int = 0,
    ) -> BudgetUsage:
        """What a model call charges: its tokens, and their estimated cost at the model's price
        (the prompt tokens read from or written to the provider's cache at its cache rates)."""
        return BudgetUsage(
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            tool_calls=tool_calls,
            usd_nanos=self.cost_nanos(
                model_ref, tokens_in, tokens_out, cache_read=cache_read, cache_write=cache_write
            ),
        )


# ---------------------------------------------------------------- periods


def period_start(period: Period, now: datetime) -> datetime:
    now = as_utc(now)
    if period == "day":
        return datetime(now.year, now.month, now.day, tzinfo=UTC)
    return datetime(now.year, now.month, 1, tzinfo=UTC)


def period_reset(period: Period, now: datetime) -> datetime:
    """When the period containing `now` ends: the next 00:00 UTC, or the first of the next month."""
    start = period_start(period, now)
    if period == "day":
        return start + timedelta(days=1)
    if start.month == 12:
        return datetime(start.year + 1, 1, 1, tzinfo=UTC)
    return datetime(start.year, start.month + 1, 1, tzinfo=UTC)


def period_label(period: Period, now: datetime) -> str:
    """The period's name in a key: "2026-03-17" for a day, "2026-03" for a month."""
    return period_start(period, now).strftime("%Y-%m-%d" if period == "day" else "%Y-%m")


# ---------------------------------------------------------------- buckets


def _user_key(user_id: str) -> str:
    # Literal when short, a digest when long; the V#/H# prefix keeps a literal id from ever
    # equalling another id's digest (the rule of the DynamoDB adapters' free-text key parts).
    raw = user_id.encode()
    if len(raw) <= _MAX_USER_KEY_BYTES:
        return f"V#{user_id}"
    return f"H#{hashlib.sha256(raw).hexdigest()}"


def bucket_key(scope: Scope, user_id: str | None, period: Period, now: datetime) -> str:
    """A counter's key within its workspace, the same in SQLite and DynamoDB (the sort key).

    "workspace#-#day#2026-03-17", "user#V#alice#month#2026-03". The period and its label are the
    last two fields and have fixed shapes, so the key is unambiguous whatever a user id holds.
    """
    if scope == "user":
        if not user_id:
            raise ValueError("a user bucket needs a user id")
        who = _user_key(user_id)
    else:
        who = "-"
    return f"{scope}#{who}#{period}#{period_label(period, now)}"


def _scope_limits(limits: ScopeLimits, period: Period) -> dict[Metric, int]:
    if period == "day":
        tokens, calls, usd = limits.tokens_per_day, limits.tool_calls_per_day, limits.usd_per_day
    else:
        tokens, calls, usd = limits.tokens_per_month, limits.tool_calls_per_month, limits.usd_per_month
    found: dict[Metric, int] = {}
    if tokens is not None:
        found["tokens"] = tokens
    if calls is not None:
        found["tool_calls"] = calls
    if usd is not None:
        # Rounded down: a limit finer than a nano-dollar is used up a fraction early, never late.
        found["usd"] = int((usd * NANOS_PER_USD).to_integral_value(rounding=ROUND_FLOOR))
    return found


def describe_limits(limits: BudgetLimits | None) -> str:
    """A budget in words, as `sigil config diff` and `sigil workspace show` print it: "workspace:
    5,000,000 tokens a day, an estimated $10.00 a day; each user: 1,000,000 tokens a day, an
    estimated $2.00 a day". Only the limits set are named; "off" with no budget at all."""
    if limits is None:
        return "off (nothing counted)"
    parts = []
    for scope, label in (("workspace", "workspace"), ("user", "each user")):
        named = []
        for period in PERIODS:
            for metric, limit in _scope_limits(getattr(limits, scope), period).items():
                estimated = "an estimated " if metric == "usd" else ""
                unit = {"tokens": " tokens", "tool_calls": " tool calls", "usd": ""}[metric]
                named.append(f"{estimated}{format_amount(metric, limit)}{unit} a {period}")
        if named:
            parts.append(f"{label}: {', '.join(named)}")
    return "; ".join(parts) if parts else "no limits (usage counted)"


def buckets(user_id: str | None, limits: BudgetLimits | None, now: datetime) -> list[Bucket]:
    """The buckets of a call at `now`: workspace/day, workspace/month, and with a user user/day and
    user/month. Without a user (a sender the channel does not identify) only the workspace's."""
    limits = limits or BudgetLimits()
    found: list[Bucket] = []
    for scope in SCOPES:
        if scope == "user" and not user_id:
            continue
        for period in PERIODS:
            resets = period_reset(period, now)
            found.append(
                Bucket(
                    scope=scope,
                    period=period,
                    key=bucket_key(scope, user_id, period, now),
                    resets_at=resets,
                    expires_at=resets + BUCKET_RETENTION,
                    limits=_scope_limits(getattr(limits, scope), period),
                )
            )
    return found


def crossing(bucket: Bucket, amounts: Counters) -> bool:
    """True when adding `amounts` to this bucket surely uses a limit up, whatever it holds now."""
    return any(amounts.get(metric) >= limit for metric, limit in bucket.limits.items())


# ---------------------------------------------------------------- decisions


_SCOPE_ORDER: Final = {scope: i for i, scope in enumerate(SCOPES)}
_METRIC_ORDER: Final = {metric: i for i, metric in enumerate(METRICS)}


def evaluate(now: datetime, readings: Iterable[tuple[Bucket, Counters]]) -> BudgetDecision:
    """Denied when any limited counter is at or over its limit; else allowed."""
    found: list[Exhausted] = []
    for bucket, totals in readings:
        for metric, limit in bucket.limits.items():
            used = totals.get(metric)
            if used >= limit:
                found.append(
                    Exhausted(
                        scope=bucket.scope,
                        metric=metric,
                        period=bucket.period,
                        used=used,
                        limit=limit,
                        resets_at=bucket.resets_at,
                    )
                )
    if not found:
        return BudgetDecision(at=as_utc(now))
    # The one resetting last is when the user can go on; ties: the workspace's first (it stops
    # everyone), then tokens, tool calls, USD.
    worst = min(
        found, key=lambda e: (-e.resets_at.timestamp(), _SCOPE_ORDER[e.scope], _METRIC_ORDER[e.metric])
    )
    return BudgetDecision(at=as_utc(now), exhausted=worst)


# ---------------------------------------------------------------- a turn's budget


@dataclass
class TurnBudget:
    """One turn's budget: its workspace, user, limits, prices and clock, and what it spent.

    The store is read once per turn and written once per turn, so that a budget adds no DynamoDB
    round trip to a turn (docs/budgets.md):

    - read: the counters of the limited buckets, with the session (SessionStore.get_with_budget,
      then `seed`), or by the first `check` from the store when nobody seeded them;
    - check: before each model call, the totals read at the start plus what this turn spent since
      (`spent`), against the limits, without a request;
    - write: what the turn spent (`pending()`) is added to the counters in the turn's commit,
      atomically with the session; an attempt that does not commit (a provider error, a lost
      commit race) `settle()`s it on its own instead.

    The turn counts in the periods of its start (`started`), so a turn running across midnight is
    read, checked and charged in the day it began. With `limits` None (the workspace has no
    `budget`) nothing is read or written: checks allow and the usage is only added up in `spent`,
    which the turn's audit record reads either way (cost_usd = float(spent.usd)).
    """

    store: BudgetStore
    workspace_id: str
    user_id: str | None
    limits: BudgetLimits | None
    prices: PriceTable = field(default_factory=PriceTable)
    clock: Callable[[], datetime] = utcnow
    spent: BudgetUsage = field(default_factory=BudgetUsage)  # what this turn charged so far
    started: datetime = field(init=False)
    buckets: tuple[Bucket, ...] = field(init=False)  # every bucket the turn charges; none: no budget
    _totals: dict[str, Counters] | None = field(init=False, default=None)
    _recorded: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self.started = as_utc(self.clock())
        self.buckets = () if self.limits is None else tuple(buckets(self.user_id, self.limits, self.started))

    @property
    def counters_to_read(self) -> list[str]:
        """The keys of the counters a decision needs: the limited buckets'. Empty: read nothing."""
        return [b.key for b in self.buckets if b.limited]

    def seed(self, totals: Mapping[str, Counters]) -> None:
        """The counters as read at the turn's start (a key missing: a counter never written)."""
        self._totals = {key: totals.get(key, Counters()) for key in self.counters_to_read}

    def check(self) -> BudgetDecision:
        return self._decide()

    def check_model_call(self) -> BudgetDecision:
        """Before a model call (shared.agent.loop): the check, here; a task's budget
        (shared.tasks.budget) counts the call's expected spending too."""
        return self.check()

    def charge_model_call(
        self, model_ref: str, *, tokens_in: int, tokens_out: int, cache_read: int = 0, cache_write: int = 0
    ) -> BudgetDecision:
        usage = self.prices.usage(
            model_ref,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            cache_read=cache_read,
            cache_write=cache_write,
        )
        return self._charge(usage)

    def charge_tool_call(self, count: int = 1) -> BudgetDecision:
        return self._charge(BudgetUsage(tool_calls=count))

    def pending(self) -> BudgetCharge | None:
        """What the commit adds to the counters; None with no budget, nothing spent, or once the
        spending is recorded."""
        amounts = self.spent.counters
        if not self.buckets or amounts.empty or self._recorded:
            return None
        return BudgetCharge(self.workspace_id, self.buckets, amounts, self.started)

    def recorded(self) -> None:
        """The commit carrying `pending()` landed: the spending is counted."""
        self._recorded = True

    def settle(self) -> None:
        """Record the spending now, on its own (one store write), for an attempt that will not
        commit: the tokens were spent all the same. Nothing to record: no request."""
        if self.pending() is None:
            return
        # Unconditional (no limits): the decision is not needed, only the count.
        self.store.charge(self.workspace_id, self.user_id, self.spent, None, self.started)
        self._recorded = True

    def _charge(self, usage: BudgetUsage) -> BudgetDecision:
        self.spent += usage
        return self._decide()

    def readings(self) -> list[tuple[Bucket, Counters]]:
        """Each limited bucket with its totals: as read at the turn's start, plus what this turn
        spent since (what a decision judges, and what the /status command shows)."""
        limited = [b for b in self.buckets if b.limited]
        if not limited:
            return []
        if self._totals is None:
            self.seed(self.store.totals(self.workspace_id, [b.key for b in limited]))
        assert self._totals is not None
        # What this turn spent is not in the store yet (it lands with the commit): add it here.
        mine = self.spent.counters
        return [(b, self._totals[b.key] + mine) for b in limited]

    def _decide(self) -> BudgetDecision:
        return evaluate(self.clock(), self.readings())

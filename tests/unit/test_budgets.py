"""shared.budgets without a store: prices and costs, periods and resets, keys, decisions, messages,
and TurnBudget over an in-memory stand-in of the port that notes every call."""

from __future__ import annotations

import logging
import subprocess
import sys
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from pydantic import ValidationError

from shared import serde
from shared.budgets import (
    DEFAULT_PRICES,
    DEFAULT_UNKNOWN_PRICE,
    NANOS_PER_USD,
    BudgetDecision,
    BudgetUsage,
    Counters,
    Exhausted,
    ModelPrice,
    PriceTable,
    TurnBudget,
    bucket_key,
    buckets,
    describe_limits,
    evaluate,
    period_label,
    period_reset,
    period_start,
)
from shared.config import Settings, is_local_url
from shared.models import BudgetLimits, ScopeLimits, WorkspaceConfig
from shared.ports import BudgetStore

ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------- prices and cost


def test_a_known_models_cost_in_nano_dollars() -> None:
    table = PriceTable()
    # gpt-4.1-mini: $0.40 in, $1.60 out per 1M tokens.
    assert table.cost_nanos("openai/gpt-4.1-mini", 1_000_000, 1_000_000) == 2 * NANOS_PER_USD
    assert table.cost_nanos("openai/gpt-4.1-mini", 1, 0) == 400
    assert table.cost_nanos("openai/gpt-4.1-mini", 0, 0) == 0
    usage = table.usage("anthropic/claude-sonnet-4", tokens_in=2_000, tokens_out=500, tool_calls=1)
    assert usage == BudgetUsage(tokens_in=2_000, tokens_out=500, tool_calls=1, usd_nanos=13_500_000)
    assert usage.tokens == 2_500
    assert usage.usd == Decimal("0.0135")


def test_a_cost_is_rounded_up_to_the_nano_dollar() -> None:
    # Nova Micro: $0.035 per 1M input tokens is 35 nano-dollars a token... and a thousandth more.
    price = ModelPrice(input_per_mtok=Decimal("0.0351"), output_per_mtok=Decimal(0))
    assert price.cost_nanos(1, 0) == 36
    assert price.cost_nanos(10, 0) == 351
    assert PriceTable().cost_nanos("bedrock/amazon.nova-micro", 1, 1) == 35 + 140


def test_float_prices_are_taken_as_written() -> None:
    # A JSON setting arrives as floats: 0.1 must be a tenth, not 0.1000000000000000055...
    price = ModelPrice.model_validate({"input_per_mtok": 0.1, "output_per_mtok": 0.3})
    assert price.cost_nanos(3, 1) == 600


@pytest.mark.parametrize(
    ("model_ref", "family"),
    [
        ("openai/gpt-4.1-mini", "openai/gpt-4.1-mini"),
        ("OpenAI/GPT-4.1-Mini", "openai/gpt-4.1-mini"),
        ("openai/gpt-4.1-mini-2025-04-14", "openai/gpt-4.1-mini"),
        ("openai/gpt-4o-2024-08-06", "openai/gpt-4o"),
        ("openai/gpt-4o-2024-05-13", "openai/gpt-4o-2024-05-13"),  # the dearer first snapshot
        ("anthropic/claude-sonnet-4-20250514", "anthropic/claude-sonnet-4"),
        ("anthropic/claude-3-5-haiku-latest", "anthropic/claude-3-5-haiku"),
        ("bedrock/anthropic.claude-3-5-sonnet-20241022-v2:0", "bedrock/anthropic.claude-3-5-sonnet"),
        ("bedrock/us.anthropic.claude-sonnet-4-20250514-v1:0", "bedrock/anthropic.claude-sonnet-4"),
        ("bedrock/eu.amazon.nova-pro-v1:0", "bedrock/amazon.nova-pro"),
        (
            "bedrock/arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-3-haiku-20240307-v1:0",
            "bedrock/anthropic.claude-3-haiku",
        ),
        (
            "bedrock/arn:aws:bedrock:eu-west-1:123456789012:inference-profile/eu.anthropic.claude-sonnet-4-20250514-v1:0",
            "bedrock/anthropic.claude-sonnet-4",
        ),
    ],
)
def test_snapshots_and_bedrock_ids_find_their_family(model_ref: str, family: str) -> None:
    table = PriceTable()
    assert table.known(model_ref)
    # The token rates; a cache rate may differ where Bedrock lists none (its Claude 3 Haiku).
    price, listed = table.price(model_ref), DEFAULT_PRICES[family]
    assert (price.input_per_mtok, price.output_per_mtok) == (listed.input_per_mtok, listed.output_per_mtok)


def test_a_variant_is_not_priced_as_its_cheaper_base() -> None:
    # Only version suffixes are stripped: "o1-pro" is not "o1" (ten times the price).
    table = PriceTable()
    assert table.price("openai/o1-pro") != table.price("openai/o1")
    assert not table.known("openai/gpt-4.1-ultra")
    # An application inference profile's ARN names no model.
    assert not table.known(
        "bedrock/arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a1b2c3"
    )


def test_an_unknown_model_costs_the_conservative_default_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    table = PriceTable()
    with caplog.at_level(logging.WARNING, logger="sigil.budgets"):
        first = table.price("acme/brand-new-model")
        table.price("acme/brand-new-model")
        table.price("acme/other-model")
    assert first == DEFAULT_UNKNOWN_PRICE
    # At least as dear as the models most workspaces use: a budget runs out early, never late.
    for common in ("openai/gpt-4.1", "openai/gpt-4o", "anthropic/claude-sonnet-4", "anthropic/claude-opus-4"):
        assert first.input_per_mtok >= DEFAULT_PRICES[common].input_per_mtok
        assert first.output_per_mtok >= DEFAULT_PRICES[common].output_per_mtok
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2
    assert "acme/brand-new-model" in warnings[0] and "SIGIL_MODEL_PRICES" in warnings[0]


def test_prices_are_overridden_from_a_mapping() -> None:
    table = PriceTable(
        {
            "openai/gpt-4.1-mini": {"input_per_mtok": 0.5, "output_per_mtok": 2},
            "local/llama": ModelPrice(input_per_mtok=Decimal(0), output_per_mtok=Decimal(0)),
            "*": {"input_per_mtok": 1, "output_per_mtok": 1},
        }
    )
    assert table.cost_nanos("openai/gpt-4.1-mini", 1_000_000, 0) == NANOS_PER_USD // 2
    assert table.cost_nanos("local/llama", 10**9, 10**9) == 0
    assert table.cost_nanos("acme/unknown", 1_000_000, 0) == NANOS_PER_USD
    assert table.price("openai/gpt-4o") == DEFAULT_PRICES["openai/gpt-4o"]  # the rest stays

    only = PriceTable({"local/llama": {"input_per_mtok": 0, "output_per_mtok": 0}}, defaults={})
    assert not only.known("openai/gpt-4.1-mini")


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://localhost:11434/v1", True),  # Ollama
        ("http://127.0.0.1:8000/v1", True),  # vLLM
        ("http://[::1]:8080/v1", True),
        ("http://10.1.2.3:8000/v1", True),
        ("http://192.168.1.20:1234/v1", True),  # LM Studio on the LAN
        ("http://host.docker.internal:11434/v1", True),
        ("http://gpu-box.local:8000/v1", True),
        ("https://api.openai.com/v1", False),
        ("https://openrouter.ai/api/v1", False),
        ("https://8.8.8.8/v1", False),
        (None, False),
    ],
)
def test_which_base_urls_are_local(url: str | None, local: bool) -> None:
    assert is_local_url(url) is local


def test_a_model_behind_a_local_base_url_is_free_unless_priced() -> None:
    # Given an OpenAI-compatible server on this machine (Ollama) and Anthropic's own API
    settings = Settings(openai_base_url="http://localhost:11434/v1", model_prices={})
    table = PriceTable.from_settings(settings)
    # Then its models nobody prices cost nothing, and say why
    local = table.quote("openai/llama3.1:8b")
    assert (local.source, table.cost_nanos("openai/llama3.1:8b", 10**6, 10**6)) == ("local", 0)
    assert "free" in local.describe() and "local base URL" in local.describe()
    # and a model the list prices keeps its price there (a local proxy to a paid API is not free)
    assert table.quote("openai/gpt-4.1-mini").source == "list"
    assert table.price("openai/gpt-4.1-mini") == DEFAULT_PRICES["openai/gpt-4.1-mini"]
    # and the other providers' unknown models are still estimated dear
    assert table.quote("anthropic/claude-next").price == DEFAULT_UNKNOWN_PRICE
    # and a price the operator declares wins over "free" (and over the list)
    declared = PriceTable.from_settings(
        settings.model_copy(
            update={"model_prices": {"openai/llama3.1:8b": {"input_per_mtok": 0.1, "output_per_mtok": 0.2}}}
        )
    ).quote("openai/llama3.1:8b")
    assert (declared.source, declared.price.output_per_mtok) == ("declared", Decimal("0.2"))
    # and with the public API as base URL nothing is local
    assert (
        PriceTable.from_settings(Settings(openai_base_url="https://api.openai.com/v1"))
        .quote("openai/llama3.1:8b")
        .source
        == "unknown"
    )


def test_each_price_says_where_it_comes_from() -> None:
    table = PriceTable({"openai/mine": {"input_per_mtok": 1, "output_per_mtok": 2}})
    assert table.quote("openai/mine").describe() == "$1 in / $2 out per 1M tokens (declared)"
    assert table.quote("openai/gpt-4.1-mini").describe() == "$0.4 in / $1.6 out per 1M tokens (list price)"
    assert table.quote("acme/x").describe() == (
        "$15 in / $75 out per 1M tokens: no price known, a cautious estimate "
        "(declare one in sigil.yaml defaults.model_prices)"
    )


def test_an_unpriced_model_is_warned_about_once_per_process_not_per_table(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The gateway builds a table for each consumer (a turn's deps, admission, consolidation): a
    # model nobody priced was warned about by each, and by the consolidator on every run
    ref = f"acme/model-{uuid.uuid4().hex}"
    with caplog.at_level(logging.INFO, logger="sigil.budgets"):
        for _ in range(3):
            PriceTable().price(ref)
            PriceTable.from_settings(Settings(openai_base_url="http://127.0.0.1:1/v1")).price(
                ref.replace("acme/", "openai/")
            )
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages
    assert messages[0].startswith(f"no price for model {ref}") and "defaults.model_prices" in messages[0]
    assert "served from a local base URL" in messages[1]


def test_a_malformed_price_is_refused() -> None:
    with pytest.raises(ValidationError):
        PriceTable({"openai/x": {"input_per_mtok": -1, "output_per_mtok": 1}})
    with pytest.raises(ValidationError):
        PriceTable({"openai/x": {"input": 1}})


def test_an_override_wins_over_the_list_price_of_a_snapshot() -> None:
    # genai-prices finds gpt-4.1-mini from its dated snapshot by itself; the family's override
    # must still price the snapshot.
    table = PriceTable({"openai/gpt-4.1-mini": {"input_per_mtok": 0.5, "output_per_mtok": 2}})
    assert table.cost_nanos("openai/gpt-4.1-mini-2025-04-14", 1_000_000, 0) == NANOS_PER_USD // 2


def test_list_prices_come_from_the_bundled_data_never_a_fetched_snapshot() -> None:
    # A snapshot an UpdatePrices fetched (here: an empty one) is what genai-prices would answer
    # with; the price table keeps to the data shipped in the locked package.
    from genai_prices import data_snapshot

    data_snapshot.set_custom_snapshot(data_snapshot.DataSnapshot(providers=[], from_auto_update=True))
    try:
        assert PriceTable().known("openai/gpt-4.1-mini")
        assert "openai/gpt-4.1-mini" in DEFAULT_PRICES
    finally:
        data_snapshot.set_custom_snapshot(None)


def test_the_price_data_is_loaded_on_the_first_lookup_only() -> None:
    # About half a second to import: the webhook, which prices nothing, must never load it.
    code = "import sys, shared.budgets, shared.agent.turn; print('genai_prices' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "False"


def test_usage_is_never_negative() -> None:
    with pytest.raises(ValidationError):
        BudgetUsage(tokens_in=-1)
    assert BudgetUsage(tool_calls=1).counters == Counters(tool_calls=1)
    assert BudgetUsage().counters.empty


# ---------------------------------------------------------------- periods


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, us: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, us, tzinfo=UTC)


@pytest.mark.parametrize(
    ("now", "day_reset", "month_reset"),
    [
        (utc(2026, 3, 17, 14, 0), utc(2026, 3, 18), utc(2026, 4, 1)),
        (utc(2026, 1, 31, 23, 59, 59), utc(2026, 2, 1), utc(2026, 2, 1)),  # a 31-day month
        (utc(2026, 4, 30, 6), utc(2026, 5, 1), utc(2026, 5, 1)),  # a 30-day month
        (utc(2026, 2, 28, 12), utc(2026, 3, 1), utc(2026, 3, 1)),  # February
        (utc(2028, 2, 28, 12), utc(2028, 2, 29), utc(2028, 3, 1)),  # a leap year's February
        (utc(2028, 2, 29, 0, 0), utc(2028, 3, 1), utc(2028, 3, 1)),
        (utc(2026, 12, 31, 23, 59, 59, 999_999), utc(2027, 1, 1), utc(2027, 1, 1)),  # year end
        (utc(2026, 12, 1, 0, 0), utc(2026, 12, 2), utc(2027, 1, 1)),
    ],
)
def test_resets_at_month_ends_and_year_end(now: datetime, day_reset: datetime, month_reset: datetime) -> None:
    assert period_reset("day", now) == day_reset
    assert period_reset("month", now) == month_reset
    assert period_start("day", now) <= now < period_reset("day", now)
    assert period_start("month", now) <= now < period_reset("month", now)


def test_periods_are_utc_and_a_naive_now_is_utc() -> None:
    # 00:30 on 1 January in UTC+2 is still 31 December in UTC.
    plus_two = datetime(2027, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=2)))
    assert period_label("day", plus_two) == "2026-12-31"
    assert period_label("month", plus_two) == "2026-12"
    assert period_reset("day", plus_two) == datetime(2027, 1, 1, tzinfo=UTC)
    assert period_label("day", datetime(2026, 3, 17, 23, 59)) == "2026-03-17"
    assert period_reset("day", datetime(2026, 3, 17, 23, 59)).tzinfo is UTC


# ---------------------------------------------------------------- keys and buckets


def test_bucket_keys() -> None:
    now = datetime(2026, 3, 17, 14, tzinfo=UTC)
    assert bucket_key("workspace", None, "day", now) == "workspace#-#day#2026-03-17"
    assert bucket_key("workspace", "alice", "month", now) == "workspace#-#month#2026-03"
    assert bucket_key("user", "alice", "day", now) == "user#V#alice#day#2026-03-17"
    long_key = bucket_key("user", "ü" * 300, "month", now)
    assert long_key.startswith("user#H#") and long_key.endswith("#month#2026-03")
    assert len(long_key.encode()) < 100
    with pytest.raises(ValueError, match="user id"):
        bucket_key("user", None, "day", now)


def test_buckets_of_a_call_carry_their_limits_in_counting_units() -> None:
    now = datetime(2026, 3, 17, 14, tzinfo=UTC)
    limits = BudgetLimits(
        workspace=ScopeLimits(tokens_per_day=1000, usd_per_month=Decimal("12.5")),
        user=ScopeLimits(tool_calls_per_day=3, usd_per_day=Decimal("0.0000000015")),
    )
    plan = {(b.scope, b.period): b for b in buckets("alice", limits, now)}
    assert set(plan) == {("workspace", "day"), ("workspace", "month"), ("user", "day"), ("user", "month")}
    assert plan["workspace", "day"].limits == {"tokens": 1000}
    assert plan["workspace", "month"].limits == {"usd": 12_500_000_000}
    # A limit finer than a nano-dollar rounds down: used up a fraction early, never late.
    assert plan["user", "day"].limits == {"tool_calls": 3, "usd": 1}
    assert not plan["user", "month"].limited
    assert plan["user", "month"].expires_at == datetime(2026, 4, 1, tzinfo=UTC) + timedelta(days=35)
    assert [(b.scope, b.period) for b in buckets(None, limits, now)] == [
        ("workspace", "day"),
        ("workspace", "month"),
    ]


def test_limits_are_validated_and_round_trip_in_the_workspace_config() -> None:
    with pytest.raises(ValidationError):
        ScopeLimits(tokens_per_day=-1)
    with pytest.raises(ValidationError):
        ScopeLimits.model_validate({"tokens_per_week": 5})
    config = WorkspaceConfig(
        id="acme",
        budget=BudgetLimits(
            workspace=ScopeLimits(tokens_per_month=50_000_000, usd_per_day=Decimal("5.00")),
            user=ScopeLimits(tool_calls_per_day=200),
        ),
    )
    assert serde.loads(WorkspaceConfig, serde.dumps(config)) == config
    assert WorkspaceConfig(id="acme").budget is None
    # Configs stored before budgets existed read back without one.
    assert serde.loads(WorkspaceConfig, '{"id": "acme"}').budget is None


# ---------------------------------------------------------------- decisions and messages

NOW = datetime(2026, 3, 17, 20, 48, tzinfo=UTC)


def exhausted(**fields: object) -> Exhausted:
    values: dict[str, object] = {
        "scope": "workspace",
        "metric": "tokens",
        "period": "day",
        "used": 1_000_000,
        "limit": 1_000_000,
        "resets_at": datetime(2026, 3, 18, tzinfo=UTC),
    }
    values.update(fields)
    return Exhausted.model_validate(values)


def test_the_issues_message() -> None:
    assert exhausted().message(NOW) == (
        "The daily token budget for this workspace is used up (1,000,000 of 1,000,000). "
        "It resets at 00:00 UTC, in 3 h 12 min."
    )


@pytest.mark.parametrize(
    ("fields", "now", "text"),
    [
        (
            {"scope": "user", "metric": "tool_calls", "used": 200, "limit": 200},
            NOW,
            "Your daily tool-call budget is used up (200 of 200). It resets at 00:00 UTC, in 3 h 12 min.",
        ),
        (
            {"metric": "usd", "used": 5_003_000_000, "limit": 5_000_000_000},
            NOW,
            "The daily spending budget for this workspace is used up (an estimated $5.00 of $5.00). "
            "It resets at 00:00 UTC, in 3 h 12 min.",
        ),
        (
            {"scope": "user", "metric": "usd", "used": 1_250_000, "limit": 1_000_000},
            NOW,
            "Your daily spending budget is used up (an estimated $0.001250 of $0.001000). "
            "It resets at 00:00 UTC, in 3 h 12 min.",
        ),
        (
            {"metric": "usd", "used": 1_234_567_000_000, "limit": 1_200_000_000_000},
            NOW,
            "The daily spending budget for this workspace is used up (an estimated $1,234.57 of $1,200.00). "
            "It resets at 00:00 UTC, in 3 h 12 min.",
        ),
        (
            {"period": "month", "resets_at": datetime(2026, 4, 1, tzinfo=UTC)},
            NOW,
            "The monthly token budget for this workspace is used up (1,000,000 of 1,000,000). "
            "It resets on 1 April 2026 at 00:00 UTC, in 14 days 4 h.",
        ),
        (
            {"period": "month", "resets_at": datetime(2027, 1, 1, tzinfo=UTC)},
            datetime(2026, 12, 30, 23, 0, tzinfo=UTC),
            "The monthly token budget for this workspace is used up (1,000,000 of 1,000,000). "
            "It resets on 1 January 2027 at 00:00 UTC, in 1 day 1 h.",
        ),
        ({}, datetime(2026, 3, 17, 23, 59, 59, tzinfo=UTC), None),
        ({}, datetime(2026, 3, 17, 23, 15, tzinfo=UTC), None),
        ({}, datetime(2026, 3, 17, 14, 0, 1, tzinfo=UTC), None),
    ],
)
def test_message_texts(fields: dict[str, object], now: datetime, text: str | None) -> None:
    message = exhausted(**fields).message(now)
    if text is not None:
        assert message == text
    else:
        # The time left rounds up, so it is never "0 min" nor earlier than the truth.
        left = datetime(2026, 3, 18, tzinfo=UTC) - now
        expected = {1: "1 min", 45: "45 min", 600: "10 h"}[-(-int(left.total_seconds()) // 60)]
        assert message.endswith(f"in {expected}.")


def test_a_day_or_more_away_rounds_up_to_the_hour() -> None:
    resets = datetime(2026, 4, 1, tzinfo=UTC)
    text = exhausted(period="month", resets_at=resets).message(resets - timedelta(days=2, minutes=1))
    assert text.endswith("in 2 days 1 h.")
    text = exhausted(period="month", resets_at=resets).message(resets - timedelta(days=3))
    assert text.endswith("in 3 days.")


def test_evaluate_denies_at_the_limit_and_names_the_one_resetting_last() -> None:
    now = datetime(2026, 3, 17, 14, tzinfo=UTC)
    limits = BudgetLimits(
        workspace=ScopeLimits(tokens_per_day=100, tool_calls_per_month=10),
        user=ScopeLimits(tokens_per_day=50),
    )
    plan = buckets("alice", limits, now)

    def decide(**totals: Counters) -> Exhausted | None:
        readings = [(b, totals.get(f"{b.scope}_{b.period}", Counters())) for b in plan]
        decision = evaluate(now, readings)
        assert decision.at == now and decision.allowed == (decision.exhausted is None)
        return decision.exhausted

    assert decide(workspace_day=Counters(tokens=99), user_day=Counters(tokens=49)) is None
    found = decide(workspace_day=Counters(tokens=100))
    assert found is not None and (found.scope, found.metric, found.used) == ("workspace", "tokens", 100)
    # Same reset: the workspace's limit is named first (it stops everyone).
    found = decide(workspace_day=Counters(tokens=100), user_day=Counters(tokens=50))
    assert found is not None and found.scope == "workspace"
    found = decide(user_day=Counters(tokens=70))
    assert found is not None and (found.scope, found.used, found.limit) == ("user", 70, 50)
    # The month resets later than the day, so it is the one the user waits for.
    found = decide(workspace_day=Counters(tokens=100), workspace_month=Counters(tool_calls=10))
    assert found is not None and (found.period, found.metric) == ("month", "tool_calls")
    assert found.summary == "workspace/month/tool_calls 10/10"


def test_an_allowed_decision_has_no_message() -> None:
    decision = evaluate(NOW, [])
    assert decision.allowed and decision.message() is None


# ---------------------------------------------------------------- a turn's budget


class CountingStore:
    """A BudgetStore holding its counters in a dict, and a note of every call made to it."""

    def __init__(self, **totals: Counters) -> None:
        self.totals_by_key: dict[str, Counters] = dict(totals)
        self.calls: list[tuple[str, object]] = []

    def check(
        self, workspace_id: str, user_id: str | None, limits: BudgetLimits | None, now: datetime
    ) -> BudgetDecision:
        self.calls.append(("check", (workspace_id, user_id, now)))
        return self._decide(user_id, limits, now)

    def totals(self, workspace_id: str, counters: Sequence[str]) -> dict[str, Counters]:
        self.calls.append(("totals", (workspace_id, list(counters))))
        return {k: self.totals_by_key[k] for k in counters if k in self.totals_by_key}

    def charge(
        self,
        workspace_id: str,
        user_id: str | None,
        usage: BudgetUsage,
        limits: BudgetLimits | None,
        now: datetime,
    ) -> BudgetDecision:
        self.calls.append(("charge", (usage, limits, now)))
        for b in buckets(user_id, limits, now):
            self.totals_by_key[b.key] = self.totals_by_key.get(b.key, Counters()) + usage.counters
        return self._decide(user_id, limits, now)

    def _decide(self, user_id: str | None, limits: BudgetLimits | None, now: datetime) -> BudgetDecision:
        limited = [b for b in buckets(user_id, limits, now) if b.limited]
        return evaluate(now, [(b, self.totals_by_key.get(b.key, Counters())) for b in limited])


MINI = "openai/gpt-4.1-mini"
WS_DAY = bucket_key("workspace", None, "day", NOW)


def test_a_turn_without_a_budget_sends_nothing_to_the_store_and_adds_up_its_cost() -> None:
    store = CountingStore(**{WS_DAY: Counters(tokens=10**9)})
    assert isinstance(store, BudgetStore)
    budget = TurnBudget(store, "acme", "alice", None, clock=lambda: NOW)
    assert budget.counters_to_read == [] and budget.buckets == ()
    assert budget.check().allowed
    assert budget.charge_model_call(MINI, tokens_in=1_000, tokens_out=500).allowed
    assert budget.charge_tool_call().allowed
    assert budget.pending() is None
    budget.settle()
    assert store.calls == []
    assert budget.spent == BudgetUsage(tokens_in=1_000, tokens_out=500, tool_calls=1, usd_nanos=1_200_000)
    assert float(budget.spent.usd) == 0.0012


def test_a_turn_reads_its_counters_once_and_checks_what_it_spends_locally() -> None:
    # Given 1,000 of the workspace's 1,500 daily tokens used by earlier turns
    store = CountingStore(**{WS_DAY: Counters(tokens=1_000)})
    limits = BudgetLimits(workspace=ScopeLimits(tokens_per_day=1_500))
    budget = TurnBudget(store, "acme", "alice", limits, PriceTable(), clock=lambda: NOW)
    # When the turn checks, spends 400 on a model call and runs two tools, it is still allowed
    assert budget.check().allowed
    assert budget.charge_model_call(MINI, tokens_in=400, tokens_out=0).allowed
    assert budget.charge_tool_call(2).allowed
    assert budget.check().allowed
    # And the call that takes it to 1,500 is reported, and the next check denies
    denied = budget.charge_model_call(MINI, tokens_in=80, tokens_out=20)
    assert denied.exhausted is not None and denied.exhausted.summary == "workspace/day/tokens 1500/1500"
    assert budget.check().exhausted == denied.exhausted
    # Then the store was read once, for the only limited counter, and written never
    assert store.calls == [("totals", ("acme", [WS_DAY]))]
    # And what the commit adds is the turn's spending, to every bucket of the turn (limited or not)
    charge = budget.pending()
    assert charge is not None and charge.workspace_id == "acme" and charge.at == NOW
    assert [b.key for b in charge.buckets] == [b.key for b in buckets("alice", limits, NOW)]
    assert charge.amounts == Counters(tokens=500, tool_calls=2, usd_nanos=budget.spent.usd_nanos)
    budget.recorded()
    assert budget.pending() is None


def test_counters_read_with_the_session_need_no_read_of_their_own() -> None:
    store = CountingStore()
    limits = BudgetLimits(user=ScopeLimits(tool_calls_per_day=3), workspace=ScopeLimits(usd_per_month=1))
    budget = TurnBudget(store, "acme", "alice", limits, clock=lambda: NOW)
    user_day = bucket_key("user", "alice", "day", NOW)
    assert budget.counters_to_read == [bucket_key("workspace", None, "month", NOW), user_day]
    budget.seed({user_day: Counters(tool_calls=2)})
    assert budget.check().allowed
    assert not budget.charge_tool_call().allowed
    assert store.calls == []


def test_a_budget_that_only_counts_reads_nothing_and_still_charges() -> None:
    store = CountingStore()
    budget = TurnBudget(store, "acme", None, BudgetLimits(), clock=lambda: NOW)
    assert budget.counters_to_read == []
    assert budget.check().allowed
    budget.charge_model_call(MINI, tokens_in=10, tokens_out=0)
    charge = budget.pending()
    assert charge is not None and [b.scope for b in charge.buckets] == ["workspace", "workspace"]
    assert store.calls == []


def test_settle_records_an_uncommitted_attempts_spending_once() -> None:
    store = CountingStore()
    limits = BudgetLimits(workspace=ScopeLimits(tokens_per_day=100))
    budget = TurnBudget(store, "acme", "alice", limits, clock=lambda: NOW)
    budget.seed({})
    budget.charge_model_call(MINI, tokens_in=150, tokens_out=0)
    budget.settle()
    budget.settle()
    # One unconditional charge (no limits: nothing to decide), in the turn's periods
    assert store.calls == [("charge", (budget.spent, None, NOW))]
    assert store.totals_by_key[WS_DAY].tokens == 150
    assert budget.pending() is None


def test_a_turn_counts_in_the_day_it_started() -> None:
    clock = [NOW.replace(hour=23, minute=59)]
    store = CountingStore()
    limits = BudgetLimits(workspace=ScopeLimits(tokens_per_day=100))
    budget = TurnBudget(store, "acme", None, limits, clock=lambda: clock[0])
    budget.seed({})
    clock[0] = NOW + timedelta(days=1)  # the turn runs past midnight
    decision = budget.charge_model_call(MINI, tokens_in=100, tokens_out=0)
    assert decision.exhausted is not None
    assert decision.exhausted.resets_at == datetime(2026, 3, 18, tzinfo=UTC)
    charge = budget.pending()
    assert charge is not None and {b.key for b in charge.buckets if b.period == "day"} == {WS_DAY}


# ---------------------------------------------------------------- partial budgets and their words


def test_a_partial_budget_over_the_default_keeps_every_limit_it_does_not_give() -> None:
    # Given the default (5M tokens and $10 a day for the workspace, 1M and $2 for each user)
    default = BudgetLimits(
        workspace=ScopeLimits(tokens_per_day=5_000_000, usd_per_day=Decimal("10.00")),
        user=ScopeLimits(tokens_per_day=1_000_000, usd_per_day=Decimal("2.00")),
    )
    # When a budget gives one workspace limit, as sigil.yaml's `{workspace: {usd_per_day: "5.00"}}`
    given = BudgetLimits.model_validate({"workspace": {"usd_per_day": "5.00"}})
    # Then only that limit changes: the token cap and every per-user cap stay
    assert given.over(default) == BudgetLimits(
        workspace=ScopeLimits(tokens_per_day=5_000_000, usd_per_day=Decimal("5.00")),
        user=default.user,
    )
    # And a limit given as null is off, and a scope given empty keeps the default's
    off = BudgetLimits.model_validate({"workspace": {"tokens_per_day": None}, "user": {}})
    assert off.over(default) == BudgetLimits(
        workspace=ScopeLimits(usd_per_day=Decimal("10.00")), user=default.user
    )
    # And the default itself is never changed
    assert default.workspace.usd_per_day == Decimal("10.00")


def test_a_budget_in_words_names_its_limits_and_marks_usd_as_estimated() -> None:
    limits = BudgetLimits(
        workspace=ScopeLimits(tokens_per_day=5_000_000, usd_per_month=Decimal("250")),
        user=ScopeLimits(tool_calls_per_day=200, usd_per_day=Decimal("0.0015")),
    )
    assert describe_limits(limits) == (
        "workspace: 5,000,000 tokens a day, an estimated $250.00 a month; "
        "each user: 200 tool calls a day, an estimated $0.001500 a day"
    )
    assert describe_limits(BudgetLimits()) == "no limits (usage counted)"
    assert describe_limits(None) == "off (nothing counted)"


def test_cached_prompt_tokens_cost_the_cache_rates() -> None:
    # Given Claude Sonnet 4.5's list price ($3 in, $0.30 cache read, $3.75 cache write per 1M)
    table = PriceTable()
    price = table.price("anthropic/claude-sonnet-4-5")
    assert (price.cache_read_per_mtok, price.cache_write_per_mtok) == (Decimal("0.3"), Decimal("3.75"))
    # Then a 10,000-token prompt of which 8,000 were read from the cache costs 2,000 at $3 and
    # 8,000 at $0.30; written to it, 8,000 at $3.75
    read = table.cost_nanos("anthropic/claude-sonnet-4-5", 10_000, 0, cache_read=8_000)
    written = table.cost_nanos("anthropic/claude-sonnet-4-5", 10_000, 0, cache_write=8_000)
    assert read == 2_000 * 3_000 + 8_000 * 300
    assert written == 2_000 * 3_000 + 8_000 * 3_750
    # And a price that lists no cache rate charges cached tokens at the input rate
    plain = ModelPrice(input_per_mtok=Decimal(1), output_per_mtok=Decimal(2))
    assert plain.cost_nanos(100, 0, cache_read=60) == plain.cost_nanos(100, 0) == 100_000
    # And OpenAI's gpt-4.1-mini reads at a quarter of its input rate
    assert table.cost_nanos("openai/gpt-4.1-mini", 1_000, 0, cache_read=1_000) == 1_000 * 100

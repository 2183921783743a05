"""BudgetStore contract: counters per workspace and per user, per UTC day and month, on every set.

Every test injects `now`: the stores read no clock, so period boundaries are exact instants here.

`exhaust_daily_tokens_mid_day` is the issue's scenario "a budget exhausted mid-day" as a helper the
turn's tests can reuse on any backend: the morning's model calls use the workspace's daily token
budget up at 14:00 UTC, the next check is denied until 00:00 UTC, and a check just after midnight
is allowed again.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

from shared.adapters.aws.dynamodb.budgets import COUNTER_SHARDS, DynamoBudgetStore
from shared.budgets import PriceTable, bucket_key, buckets
from shared.models import BudgetLimits, ScopeLimits
from shared.models.budgets import NANOS_PER_USD, BudgetDecision, BudgetUsage, Counters
from shared.ports import BudgetStore
from tests.support import moto_aws

from .conftest import OpenBackend
from .factories import ContractBackend

MID_DAY = datetime(2026, 3, 17, 14, 0, tzinfo=UTC)
MINI = "openai/gpt-4.1-mini"
PRICES = PriceTable()


def tokens(n_in: int, n_out: int = 0) -> BudgetUsage:
    return PRICES.usage(MINI, tokens_in=n_in, tokens_out=n_out)


def ws_limits(**fields: Any) -> BudgetLimits:
    return BudgetLimits(workspace=ScopeLimits(**fields))


def user_limits(**fields: Any) -> BudgetLimits:
    return BudgetLimits(user=ScopeLimits(**fields))


# ---------------------------------------------------------------- the scenario helper


@dataclass(frozen=True)
class MidDayExhaustion:
    """What `exhaust_daily_tokens_mid_day` did: the limits it set and the charge that used them up."""

    limits: BudgetLimits
    at: datetime  # when the budget ran out (14:00 UTC)
    resets_at: datetime  # 00:00 UTC the next day
    last_charge: BudgetDecision
    expected_message: str  # what a check at `at` tells the user


def exhaust_daily_tokens_mid_day(
    store: BudgetStore,
    workspace_id: str,
    user_id: str | None = "alice",
    *,
    limit: int = 1_000_000,
    at: datetime = MID_DAY,
    model: str = MINI,
) -> MidDayExhaustion:
    """A budget exhausted mid-day: four model calls from 09:00 to `at` (14:00 UTC) use the
    workspace's daily token limit up exactly, each checked before and charged after, as the turn
    does. Every check before a call is allowed; the last charge reports the limit used up.
    """
    limits = ws_limits(tokens_per_day=limit)
    day = at.replace(hour=0, minute=0, second=0, microsecond=0)
    moments = [day + timedelta(hours=9), day + timedelta(hours=10, minutes=30), day + timedelta(hours=12)]
    share = limit // 4
    calls = [(moment, share) for moment in moments] + [(at, limit - 3 * share)]
    decision: BudgetDecision | None = None
    for moment, spent in calls:
        before = store.check(workspace_id, user_id, limits, moment)
        assert before.allowed, f"the check before the call at {moment:%H:%M} was denied: {before}"
        # A fifth of a call's tokens are output, as in an ordinary answer.
        usage = PRICES.usage(model, tokens_in=spent - spent // 5, tokens_out=spent // 5)
        decision = store.charge(workspace_id, user_id, usage, limits, moment)
    assert decision is not None
    resets = day + timedelta(days=1)
    text = (
        f"The daily token budget for this workspace is used up ({limit:,} of {limit:,}). "
        f"It resets at 00:00 UTC, in {_hours_minutes(resets - at)}."
    )
    return MidDayExhaustion(
        limits=limits, at=at, resets_at=resets, last_charge=decision, expected_message=text
    )


def _hours_minutes(delta: timedelta) -> str:
    minutes = -(-int(delta.total_seconds()) // 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def test_a_budget_exhausted_mid_day(contract: ContractBackend, ws_a: str) -> None:
    store = contract.backend.budgets
    run = exhaust_daily_tokens_mid_day(store, ws_a)

    assert not run.last_charge.allowed
    assert run.last_charge.exhausted is not None
    assert run.last_charge.exhausted.used == 1_000_000

    denied = store.check(ws_a, "alice", run.limits, MID_DAY)
    assert denied.exhausted is not None
    assert (denied.exhausted.scope, denied.exhausted.metric, denied.exhausted.period) == (
        "workspace",
        "tokens",
        "day",
    )
    assert (denied.exhausted.used, denied.exhausted.limit) == (1_000_000, 1_000_000)
    assert denied.exhausted.resets_at == datetime(2026, 3, 18, tzinfo=UTC)
    assert denied.message() == run.expected_message
    assert denied.message() == (
        "The daily token budget for this workspace is used up (1,000,000 of 1,000,000). "
        "It resets at 00:00 UTC, in 10 h."
    )
    # Everyone in the workspace is stopped, users with no usage of their own included.
    later = store.check(ws_a, "bob", run.limits, MID_DAY + timedelta(hours=6, minutes=48))
    assert later.message() == (
        "The daily token budget for this workspace is used up (1,000,000 of 1,000,000). "
        "It resets at 00:00 UTC, in 3 h 12 min."
    )
    assert not store.check(ws_a, "alice", run.limits, run.resets_at - timedelta(microseconds=1)).allowed
    assert store.check(ws_a, "alice", run.limits, run.resets_at + timedelta(seconds=1)).allowed


# ---------------------------------------------------------------- check and charge


def test_nothing_limited_is_always_allowed(contract: ContractBackend, ws_a: str) -> None:
    store = contract.backend.budgets
    assert store.check(ws_a, "alice", None, MID_DAY).allowed
    assert store.charge(ws_a, "alice", tokens(10**9), None, MID_DAY).allowed
    assert store.check(ws_a, "alice", BudgetLimits(), MID_DAY).allowed


def test_usage_counts_before_a_limit_is_set(contract: ContractBackend, ws_a: str) -> None:
    # Charges are recorded whatever the limits, so a limit set mid-day counts the morning.
    store = contract.backend.budgets
    store.charge(ws_a, "alice", tokens(700), None, MID_DAY)
    denied = store.check(ws_a, "alice", ws_limits(tokens_per_day=700), MID_DAY)
    assert denied.exhausted is not None and denied.exhausted.used == 700


def test_check_denies_at_the_limit_and_charge_reports_it(contract: ContractBackend, ws_a: str) -> None:
    store = contract.backend.budgets
    limits = ws_limits(tokens_per_day=1000)

    first = store.charge(ws_a, "alice", tokens(600, 100), limits, MID_DAY)
    assert first.allowed
    assert store.check(ws_a, "alice", limits, MID_DAY).allowed  # 700 of 1,000

    # The call that crosses the limit is recorded in full, and says the next check will deny.
    crossing = store.charge(ws_a, "alice", tokens(500), limits, MID_DAY)
    assert crossing.exhausted is not None
    assert (crossing.exhausted.used, crossing.exhausted.limit) == (1200, 1000)

    denied = store.check(ws_a, "alice", limits, MID_DAY)
    assert denied.exhausted is not None
    assert (denied.exhausted.metric, denied.exhausted.used) == ("tokens", 1200)
    # A charge while denied (a call already in flight) is still recorded.
    store.charge(ws_a, "alice", tokens(50), limits, MID_DAY)
    again = store.check(ws_a, "alice", limits, MID_DAY)
    assert again.exhausted is not None and again.exhausted.used == 1250


def test_exactly_at_the_limit_is_used_up(contract: ContractBackend, ws_a: str) -> None:
    store = contract.backend.budgets
    limits = ws_limits(tokens_per_day=1000)
    assert store.charge(ws_a, None, tokens(999), limits, MID_DAY).allowed
    assert store.check(ws_a, None, limits, MID_DAY).allowed
    assert not store.charge(ws_a, None, tokens(1), limits, MID_DAY).allowed
    assert not store.check(ws_a, None, limits, MID_DAY).allowed


def test_a_zero_limit_denies_the_first_call(contract: ContractBackend, ws_a: str) -> None:
    denied = contract.backend.budgets.check(ws_a, "alice", user_limits(tool_calls_per_month=0), MID_DAY)
    assert denied.exhausted is not None
    assert (denied.exhausted.scope, denied.exhausted.metric, denied.exhausted.period) == (
        "user",
        "tool_calls",
        "month",
    )
    assert (denied.exhausted.used, denied.exhausted.limit) == (0, 0)
    assert denied.exhausted.resets_at == datetime(2026, 4, 1, tzinfo=UTC)


def test_tool_calls_are_charged_as_they_run(contract: ContractBackend, ws_a: str) -> None:
    store = contract.backend.budgets
    limits = user_limits(tool_calls_per_day=3)
    assert store.charge(ws_a, "alice", BudgetUsage(tool_calls=1), limits, MID_DAY).allowed
    assert store.charge(ws_a, "alice", BudgetUsage(tool_calls=1), limits, MID_DAY).allowed
    third = store.charge(ws_a, "alice", BudgetUsage(tool_calls=1), limits, MID_DAY)
    assert third.exhausted is not None
    assert third.message() == (
        "Your daily tool-call budget is used up (3 of 3). It resets at 00:00 UTC, in 10 h."
    )
    # Model calls do not count against a tool-call limit, but the limit, used up, still denies.
    assert not store.charge(ws_a, "alice", tokens(10), limits, MID_DAY).allowed


def test_usd_is_the_estimate_at_the_models_price(contract: ContractBackend, ws_a: str) -> None:
    store = contract.backend.budgets
    limits = ws_limits(usd_per_day=Decimal("0.01"))
    # gpt-4.1-mini: $0.40 in / $1.60 out per 1M tokens, so 10,000 in + 2,500 out = $0.008.
    assert store.charge(ws_a, "alice", tokens(10_000, 2_500), limits, MID_DAY).allowed
    assert store.check(ws_a, "alice", limits, MID_DAY).allowed
    store.charge(ws_a, "alice", tokens(5_000), limits, MID_DAY)  # + $0.002 = $0.01
    denied = store.check(ws_a, "alice", limits, MID_DAY)
    assert denied.exhausted is not None
    assert denied.exhausted.metric == "usd"
    assert (denied.exhausted.used, denied.exhausted.limit) == (NANOS_PER_USD // 100, NANOS_PER_USD // 100)
    assert denied.message() == (
        "The daily spending budget for this workspace is used up (an estimated $0.01 of $0.01). "
        "It resets at 00:00 UTC, in 10 h."
    )


# ---------------------------------------------------------------- periods


def test_day_and_month_buckets(contract: ContractBackend, ws_a: str) -> None:
    store = contract.backend.budgets
    limits = ws_limits(tokens_per_day=1000, tokens_per_month=2500)
    day1, day2, day3 = (datetime(2026, 1, d, 9, tzinfo=UTC) for d in (29, 30, 31))

    store.charge(ws_a, None, tokens(900), limits, day1)
    store.charge(ws_a, None, tokens(900), limits, day2)  # a new day: 900 of 1,000 again
    assert store.check(ws_a, None, limits, day2).allowed

    over = store.charge(ws_a, None, tokens(800), limits, day3)  # month: 2,600 of 2,500
    assert over.exhausted is not None
    assert (over.exhausted.period, over.exhausted.used, over.exhausted.limit) == ("month", 2600, 2500)
    assert over.exhausted.resets_at == datetime(2026, 2, 1, tzinfo=UTC)

    # The day resets at midnight, the month does not: still denied, by the month, on the 31st.
    late = store.check(ws_a, None, limits, datetime(2026, 1, 31, 23, 59, 59, tzinfo=UTC))
    assert late.exhausted is not None and late.exhausted.period == "month"
    assert late.message() == (
        "The monthly token budget for this workspace is used up (2,600 of 2,500). "
        "It resets on 1 February 2026 at 00:00 UTC, in 1 min."
    )
    assert store.check(ws_a, None, limits, datetime(2026, 2, 1, tzinfo=UTC)).allowed


def test_the_denial_names_the_limit_that_resets_last(contract: ContractBackend, ws_a: str) -> None:
    store = contract.backend.budgets
    limits = ws_limits(tokens_per_day=100, tokens_per_month=100)
    store.charge(ws_a, None, tokens(100), limits, MID_DAY)
    denied = store.check(ws_a, None, limits, MID_DAY)
    # Both are used up; the day's reset would not let the user go on, the month's will.
    assert denied.exhausted is not None
    assert denied.exhausted.period == "month"
    assert denied.exhausted.resets_at == datetime(2026, 4, 1, tzinfo=UTC)


def test_day_resets_at_midnight_utc(contract: ContractBackend, ws_a: str) -> None:
    store = contract.backend.budgets
    limits = user_limits(tokens_per_day=100)
    evening = datetime(2026, 3, 17, 23, 59, 59, 999_999, tzinfo=UTC)
    store.charge(ws_a, "alice", tokens(100), limits, evening)
    assert not store.check(ws_a, "alice", limits, evening).allowed
    assert store.check(ws_a, "alice", limits, datetime(2026, 3, 18, tzinfo=UTC)).allowed


def test_periods_are_utc_whatever_the_callers_offset(contract: ContractBackend, ws_a: str) -> None:
    store = contract.backend.budgets
    limits = ws_limits(tokens_per_day=100)
    # 01:30 on the 18th in UTC+2 is 23:30 on the 17th in UTC: the same day as MID_DAY.
    plus_two = timezone(timedelta(hours=2))
    store.charge(ws_a, None, tokens(100), limits, datetime(2026, 3, 18, 1, 30, tzinfo=plus_two))
    assert not store.check(ws_a, None, limits, MID_DAY).allowed
    assert store.check(ws_a, None, limits, datetime(2026, 3, 18, 2, 0, tzinfo=plus_two)).allowed


def test_month_resets_on_the_first_and_the_year_turns(contract: ContractBackend, ws_a: str) -> None:
    store = contract.backend.budgets
    limits = user_limits(tool_calls_per_month=2)
    december = datetime(2026, 12, 5, 8, tzinfo=UTC)
    store.charge(ws_a, "alice", BudgetUsage(tool_calls=2), limits, december)
    denied = store.check(ws_a, "alice", limits, datetime(2026, 12, 31, 23, 0, tzinfo=UTC))
    assert denied.exhausted is not None
    assert denied.exhausted.resets_at == datetime(2027, 1, 1, tzinfo=UTC)
    assert denied.message() == (
        "Your monthly tool-call budget is used up (2 of 2). It resets on 1 January 2027 at 00:00 UTC, in 1 h."
    )
    assert store.check(ws_a, "alice", limits, datetime(2027, 1, 1, tzinfo=UTC)).allowed


# ---------------------------------------------------------------- scopes and isolation


def test_user_and_workspace_scopes(contract: ContractBackend, ws_a: str) -> None:
    store = contract.backend.budgets
    limits = BudgetLimits(workspace=ScopeLimits(tokens_per_day=250), user=ScopeLimits(tokens_per_day=100))
    store.charge(ws_a, "alice", tokens(100), limits, MID_DAY)

    alice = store.check(ws_a, "alice", limits, MID_DAY)
    assert alice.exhausted is not None and alice.exhausted.scope == "user"
    assert alice.message() == (
        "Your daily token budget is used up (100 of 100). It resets at 00:00 UTC, in 10 h."
    )
    assert store.check(ws_a, "bob", limits, MID_DAY).allowed  # bob's own budget is untouched

    store.charge(ws_a, "bob", tokens(90), limits, MID_DAY)
    store.charge(ws_a, "carol", tokens(60), limits, MID_DAY)  # workspace: 250 of 250
    for user in ("bob", "carol", "dave", None):
        denied = store.check(ws_a, user, limits, MID_DAY)
        assert denied.exhausted is not None
        assert (denied.exhausted.scope, denied.exhausted.used) == ("workspace", 250)


def test_a_sender_without_a_user_id_counts_for_the_workspace_only(
    contract: ContractBackend, ws_a: str
) -> None:
    store = contract.backend.budgets
    limits = BudgetLimits(workspace=ScopeLimits(tokens_per_day=100), user=ScopeLimits(tokens_per_day=1))
    store.charge(ws_a, None, tokens(99), limits, MID_DAY)
    assert store.check(ws_a, None, limits, MID_DAY).allowed  # no user bucket to exhaust
    assert store.check(ws_a, "alice", limits, MID_DAY).allowed
    assert not store.charge(ws_a, None, tokens(1), limits, MID_DAY).allowed


def test_user_ids_stay_apart_whatever_they_hold(contract: ContractBackend, ws_a: str) -> None:
    # Separators and a long id (stored as a digest in the key) never share another's counter.
    store = contract.backend.budgets
    limits = user_limits(tokens_per_day=10)
    odd = ["a#day#2026-03-17", "a", "telegram:-100123", "ü" * 300, "ü" * 299]
    store.charge(ws_a, odd[0], tokens(10), limits, MID_DAY)
    store.charge(ws_a, odd[3], tokens(10), limits, MID_DAY)
    assert [store.check(ws_a, user, limits, MID_DAY).allowed for user in odd] == [
        False,
        True,
        True,
        False,
        True,
    ]


def test_a_workspace_never_sees_another_workspaces_counters(
    contract: ContractBackend, ws_a: str, ws_b: str
) -> None:
    store = contract.backend.budgets
    limits = BudgetLimits(workspace=ScopeLimits(tokens_per_day=100), user=ScopeLimits(tokens_per_day=100))
    store.charge(ws_a, "alice", tokens(100), limits, MID_DAY)
    assert not store.check(ws_a, "alice", limits, MID_DAY).allowed
    assert store.check(ws_b, "alice", limits, MID_DAY).allowed
    store.charge(ws_b, "alice", tokens(40), limits, MID_DAY)
    denied = store.check(ws_a, "alice", limits, MID_DAY)
    assert denied.exhausted is not None and denied.exhausted.used == 100


def test_totals_reads_the_named_counters_of_one_workspace(
    contract: ContractBackend, ws_a: str, ws_b: str
) -> None:
    store = contract.backend.budgets
    store.charge(ws_a, "alice", BudgetUsage(tokens_in=300, tool_calls=1, usd_nanos=7), None, MID_DAY)
    keys = [b.key for b in buckets("alice", None, MID_DAY)]
    never_written = bucket_key("user", "bob", "day", MID_DAY)

    totals = store.totals(ws_a, [*keys, never_written])

    # What a charge added, to every bucket; a counter never written is missing
    assert totals == dict.fromkeys(keys, Counters(tokens=300, tool_calls=1, usd_nanos=7))
    assert store.totals(ws_a, []) == {}
    assert store.totals(ws_b, keys) == {}


def test_counters_survive_a_restart(open_backend: OpenBackend, ws_a: str) -> None:
    limits = ws_limits(tokens_per_month=1000)
    with open_backend() as first:
        first.backend.budgets.charge(ws_a, "alice", tokens(1000), limits, MID_DAY)
    with open_backend() as second:
        denied = second.backend.budgets.check(ws_a, "alice", limits, MID_DAY + timedelta(days=3))
        assert denied.exhausted is not None and denied.exhausted.used == 1000


# ---------------------------------------------------------------- concurrency


def test_concurrent_charges_sum_exactly(contract: ContractBackend, ws_a: str) -> None:
    """Threads charging one workspace and user at once lose no update (the aws set's moto handles
    one request at a time, as each DynamoDB request is atomic; see moto_aws.atomic_requests)."""
    store = contract.backend.budgets
    threads_n, charges_n = 6, 12
    each = tokens(1000, 250)  # 1,250 tokens and $0.0008 each
    total = threads_n * charges_n
    # Limits the last charges cross, so both the conditional and the crossing path run concurrently.
    limits = BudgetLimits(
        workspace=ScopeLimits(tokens_per_day=total * each.tokens),
        user=ScopeLimits(tool_calls_per_month=total),
    )
    decisions: list[BudgetDecision] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(threads_n)

    def run() -> None:
        try:
            start.wait()
            for _ in range(charges_n):
                usage = BudgetUsage(
                    tokens_in=each.tokens_in,
                    tokens_out=each.tokens_out,
                    tool_calls=1,
                    usd_nanos=each.usd_nanos,
                )
                decision = store.charge(ws_a, "alice", usage, limits, MID_DAY)
                with lock:
                    decisions.append(decision)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=run) for _ in range(threads_n)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []
    assert len(decisions) == total
    assert any(not d.allowed for d in decisions)  # at least the charge that came last

    def used(**fields: Any) -> int:
        decision = store.check(ws_a, "alice", BudgetLimits(user=ScopeLimits(**fields)), MID_DAY)
        assert decision.exhausted is not None, f"{fields} not reached: an update was lost"
        return decision.exhausted.used

    # A limit of the exact total is reached, and the total read back is exact: none lost, none twice.
    assert used(tokens_per_day=total * each.tokens) == total * each.tokens
    assert used(tool_calls_per_month=total) == total
    assert used(usd_per_day=Decimal(total * each.usd_nanos) / NANOS_PER_USD) == total * each.usd_nanos
    assert store.check(
        ws_a, "alice", BudgetLimits(user=ScopeLimits(tokens_per_day=total * each.tokens + 1)), MID_DAY
    ).allowed


# ---------------------------------------------------------------- DynamoDB round trips


@contextlib.contextmanager
def _count_requests(store: DynamoBudgetStore) -> Iterator[list[tuple[str, int]]]:
    """(operation, actions or keys) of every request the store's client sends in the block."""
    calls: list[tuple[str, int]] = []

    def before_call(model: Any, params: dict[str, Any], **_: Any) -> None:
        body = json.loads(params.get("body") or b"{}")
        size = len(body.get("TransactItems", [])) + sum(
            len(request["Keys"]) for request in body.get("RequestItems", {}).values()
        )
        calls.append((model.name, size))

    # The client is cached across tests: the hook must not outlive this one.
    store.client.meta.events.register("before-call.dynamodb", before_call)
    try:
        yield calls
    finally:
        store.client.meta.events.unregister("before-call.dynamodb", before_call)


def test_dynamodb_round_trips_of_check_and_charge(tmp_path: Path) -> None:
    limits = BudgetLimits(workspace=ScopeLimits(tokens_per_day=1000))
    with moto_aws.contract_backend(tmp_path / "rt") as (backend, _drain):
        store = backend.budgets
        assert isinstance(store, DynamoBudgetStore)
        with _count_requests(store) as calls:

            def requests(action: Callable[[], object]) -> list[tuple[str, int]]:
                calls.clear()
                action()
                return list(calls)

            # Nothing limited: a check reads nothing; a charge is one transaction over 4 buckets.
            assert requests(lambda: store.check("rt", "alice", None, MID_DAY)) == []
            assert requests(lambda: store.charge("rt", "alice", tokens(10), None, MID_DAY)) == [
                ("TransactWriteItems", 4)
            ]
            # A check reads the limited buckets only, every shard of each, in one request.
            shards = COUNTER_SHARDS
            assert requests(lambda: store.check("rt", "alice", limits, MID_DAY)) == [("BatchGetItem", shards)]
            # Totals: one request for the counters named, none for no counters.
            keys = [b.key for b in buckets("alice", limits, MID_DAY)]
            assert requests(lambda: store.totals("rt", keys)) == [("BatchGetItem", 4 * shards)]
            assert requests(lambda: store.totals("rt", [])) == []
            # A charge with a limit: one transaction (no condition: a shard holds part of a total),
            # then the limited buckets read back for the decision.
            assert requests(lambda: store.charge("rt", "alice", tokens(500), limits, MID_DAY)) == [
                ("TransactWriteItems", 4),
                ("BatchGetItem", shards),
            ]
            # The charge that uses the limit up: the same two requests, and the decision denies.
            crossing: list[BudgetDecision] = []
            assert requests(
                lambda: crossing.append(store.charge("rt", "alice", tokens(600), limits, MID_DAY))
            ) == [("TransactWriteItems", 4), ("BatchGetItem", shards)]
            assert not crossing[0].allowed
            # Without a user, two buckets.
            assert requests(lambda: store.charge("rt2", None, tokens(1), None, MID_DAY)) == [
                ("TransactWriteItems", 2)
            ]


def test_dynamodb_items_have_the_documented_keys_and_ttl(tmp_path: Path) -> None:
    with moto_aws.contract_backend(tmp_path / "keys") as (backend, _drain):
        store = backend.budgets
        assert isinstance(store, DynamoBudgetStore)
        store.charge(
            "acme", "alice", BudgetUsage(tokens_in=3, tokens_out=4, tool_calls=1, usd_nanos=9), None, MID_DAY
        )
        items = store.client.query(
            TableName=store.table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": "WS#acme#BUDGET"}},
        )["Items"]
        by_key = {item["sk"]["S"]: item for item in items}
        assert sorted(by_key) == [
            "user#V#alice#day#2026-03-17",
            "user#V#alice#month#2026-03",
            "workspace#-#day#2026-03-17",
            "workspace#-#month#2026-03",
        ]
        day = by_key["workspace#-#day#2026-03-17"]
        assert (day["tokens"], day["tool_calls"], day["usd_nanos"]) == ({"N": "7"}, {"N": "1"}, {"N": "9"})
        # Kept 35 days past the period's end.
        assert int(day["ttl"]["N"]) == int(datetime(2026, 4, 22, tzinfo=UTC).timestamp())
        month = by_key["user#V#alice#month#2026-03"]
        assert int(month["ttl"]["N"]) == int(datetime(2026, 5, 6, tzinfo=UTC).timestamp())

"""BudgetStore on DynamoDB: counters in the sessions table, charged in one TransactWriteItems.

Items: pk `WS#{ws}#BUDGET`, sk the bucket key of shared.budgets (`workspace#-#day#2026-03-17`,
`user#V#alice#month#2026-03`), numbers `tokens`, `tool_calls`, `usd_nanos` and `ttl` (epoch
seconds, the period's end + shared.budgets.BUCKET_RETENTION). No decision reads a past period's
item, so nothing depends on when DynamoDB's TTL sweeper passes.

check: one BatchGetItem, strongly consistent, of the buckets that have a limit (none: no request).

charge: one TransactWriteItems with an Update per bucket (`ADD` the amounts, `SET ttl`), all or
none. ADD is applied by DynamoDB itself, so concurrent charges never lose an update; the
transaction's ClientRequestToken, which botocore fills in and keeps across its own retries, makes a
retried request apply once. Each Update carries the condition that its bucket stays under each of
its limits after the charge, so a charge that succeeds is known to be allowed without reading the
totals back: one request. When a condition fails (this charge uses a limit up, or another one did
already) nothing was written, and the charge is sent again without conditions (it is always
recorded: the tokens were spent) and the buckets read back for the decision: three requests,
once per bucket and period at most, since the next check then denies.

A turn uses neither on its path: DynamoSessionStore reads its counters with the session (one
BatchGetItem) and adds its spending in the commit's TransactWriteItems, with the items and updates
built here (`counter_key`, `counters_of`, `charge_updates`), so a budget adds no round trip.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import ClientError

from shared.adapters.aws import clients
from shared.adapters.aws.dynamodb.retry import (
    RETRIES,
    Next,
    cancellation_codes,
    error_code,
    until_done,
)
from shared.adapters.aws.dynamodb.table import batch_get
from shared.budgets import (
    METRICS,
    Bucket,
    BudgetCharge,
    BudgetDecision,
    BudgetUsage,
    Counters,
    buckets,
    crossing,
    evaluate,
)
from shared.errors import SigilError
from shared.models import BudgetLimits

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef, UpdateTypeDef

# Each metric's attribute, as an expression name (USD is counted in nano-dollars, an integer).
_NAMES: Final = {"#t": "tokens", "#c": "tool_calls", "#u": "usd_nanos"}
_REF: Final = {"tokens": "#t", "tool_calls": "#c", "usd": "#u"}


def _n(value: int) -> dict[str, str]:
    return {"N": str(value)}


def counter_key(workspace_id: str, key: str) -> dict[str, Any]:
    """The item key of counter `key` (a bucket key) of the workspace, in the sessions table."""
    return {"pk": {"S": f"WS#{workspace_id}#BUDGET"}, "sk": {"S": key}}


def counters_of(item: Any) -> Counters:
    return Counters(
        tokens=int(item.get("tokens", {}).get("N", "0")),
        tool_calls=int(item.get("tool_calls", {}).get("N", "0")),
        usd_nanos=int(item.get("usd_nanos", {}).get("N", "0")),
    )


def charge_update(
    table: str, workspace_id: str, bucket: Bucket, amounts: Counters, *, conditional: bool = False
) -> TransactWriteItemTypeDef:
    """One bucket's Update of a charge: ADD the amounts, SET the ttl; `conditional`: only if the
    bucket stays under each of its limits after it."""
    names = {**_NAMES, "#ttl": "ttl"}
    values: dict[str, Any] = {
        ":t": _n(amounts.tokens),
        ":c": _n(amounts.tool_calls),
        ":u": _n(amounts.usd_nanos),
        ":ttl": _n(int(bucket.expires_at.timestamp())),
    }
    update: UpdateTypeDef = {
        "TableName": table,
        "Key": counter_key(workspace_id, bucket.key),
        "UpdateExpression": "ADD #t :t, #c :c, #u :u SET #ttl = :ttl",
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }
    if conditional and bucket.limited:
        # "total + amount < limit" as "total < limit - amount": conditions cannot add. A bucket
        # not written yet holds 0, which is under every bound here (`crossing` excluded the
        # bounds <= 0 before this was built).
        clauses = []
        for metric in METRICS:
            limit = bucket.limits.get(metric)
            if limit is None:
                continue
            ref = _REF[metric]
            bound = f":max_{metric}"
            values[bound] = _n(limit - amounts.get(metric))
            clauses.append(f"(attribute_not_exists({ref}) OR {ref} < {bound})")
        update["ConditionExpression"] = " AND ".join(clauses)
    return {"Update": update}


def charge_updates(table: str, charge: BudgetCharge) -> list[TransactWriteItemTypeDef]:
    """A turn's charge as the unconditional Updates its commit transaction carries (none when it
    charges nothing): the spending is recorded whatever the limits, as BudgetStore.charge does."""
    if charge.amounts.empty:
        return []
    return [charge_update(table, charge.workspace_id, b, charge.amounts) for b in charge.buckets]


class DynamoBudgetStore:
    def __init__(
        self, table_name: str, *, client: DynamoDBClient | None = None, region: str | None = None
    ) -> None:
        self.table = table_name
        self.client = client if client is not None else clients.dynamodb(region)

    # ------------------------------------------------------------------ check

    def check(
        self, workspace_id: str, user_id: str | None, limits: BudgetLimits | None, now: datetime
    ) -> BudgetDecision:
        limited = [b for b in buckets(user_id, limits, now) if b.limited]
        if not limited:
            return evaluate(now, [])
        totals = self.totals(workspace_id, [b.key for b in limited])
        return evaluate(now, [(b, totals.get(b.key, Counters())) for b in limited])

    def totals(self, workspace_id: str, counters: Sequence[str]) -> dict[str, Counters]:
        if not counters:
            return {}
        # Consistent: a check right after a charge (another Lambda's) must see it. At most four
        # keys, far under BatchGetItem's hundred.
        items = batch_get(
            self.client,
            self.table,
            [counter_key(workspace_id, key) for key in counters],
            ProjectionExpression="sk, #t, #c, #u",
            ExpressionAttributeNames=_NAMES,
        )
        return {item["sk"]["S"]: counters_of(item) for item in items}

    # ------------------------------------------------------------------ charge

    def charge(
        self,
        workspace_id: str,
        user_id: str | None,
        usage: BudgetUsage,
        limits: BudgetLimits | None,
        now: datetime,
    ) -> BudgetDecision:
        amounts = usage.counters
        if amounts.empty:
            return self.check(workspace_id, user_id, limits, now)
        plan = buckets(user_id, limits, now)
        # A charge that alone reaches a limit cannot pass its condition: skip straight to the
        # unconditional write instead of sending a transaction that is sure to be cancelled.
        if not any(crossing(b, amounts) for b in plan) and self._transact(
            workspace_id, plan, amounts, conditional=True
        ):
            return evaluate(now, [])
        self._transact(workspace_id, plan, amounts, conditional=False)
        return self.check(workspace_id, user_id, limits, now)

    def _transact(
        self, workspace_id: str, plan: Sequence[Bucket], amounts: Counters, *, conditional: bool
    ) -> bool:
        """Apply the charge to every bucket in one transaction; False when a condition failed."""
        actions = [charge_update(self.table, workspace_id, b, amounts, conditional=conditional) for b in plan]
        allowed = True

        def attempt() -> Next:
            nonlocal allowed
            try:
                self.client.transact_write_items(TransactItems=actions)
            except ClientError as exc:
                if error_code(exc) != "TransactionCanceledException":
                    raise
                if "ConditionalCheckFailed" in cancellation_codes(exc):
                    allowed = False
                    return Next.DONE
                # TransactionConflict (another transaction on a bucket at that moment) or
                # throttling: nothing was applied, and botocore does not retry a cancellation.
                return Next.BACK_OFF
            return Next.DONE

        if not until_done(attempt, wait_initial=0.02):
            raise SigilError(
                f"DynamoDB did not accept a budget charge after {RETRIES} attempts", code="store_unavailable"
            )
        return allowed

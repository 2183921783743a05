"""BudgetStore on DynamoDB: counters in the sessions table, spread over shards so that no item is hot.

Items: pk `WS#{ws}#BUDGET` (shard 0) or `WS#{ws}#BUDGET#{n}` (shard n of COUNTER_SHARDS), sk the
bucket key of shared.budgets (`workspace#-#day#2026-03-17`, `user#V#alice#month#2026-03`),
numbers `tokens`, `tool_calls`, `usd_nanos` and `ttl` (epoch seconds, the period's end +
shared.budgets.BUCKET_RETENTION). A bucket's total is the sum of its item in every shard. No
decision reads a past period's item, so nothing depends on when DynamoDB's TTL sweeper passes.

Why shards (issue 30): every turn of a workspace adds to the workspace/day and workspace/month
buckets. On one item, that is one partition's 1,000 write units a second, and two transactions on
the item at once cancel one another. A turn adds to the shard of its session
(`counter_shard(session_id)`), after its commit and outside it (DynamoSessionStore.save), so the
commit's transaction holds only the session's own items and never conflicts with another
session's; the charges of sessions on different shards touch different partitions.

check: one BatchGetItem, strongly consistent, of every shard of the buckets that have a limit
(none: no request).

charge (compaction, extraction, a failed turn's settle): one TransactWriteItems with an Update per
bucket of shard 0 (`ADD` the amounts, `SET ttl`), all or none, then, when a bucket has a limit,
the totals read back for the decision. ADD is applied by DynamoDB itself, so concurrent charges
never lose an update; the transaction's ClientRequestToken, which botocore fills in and keeps
across its own retries, makes a retried request apply once. No limit condition on the write: a
shard's item holds part of a total, so a condition on it could not tell whether the total stays
under the limit; and the spending happened whatever the limit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import ClientError

from shared.adapters.aws import clients
from shared.adapters.aws.dynamodb.retry import (
    RETRIES,
    Next,
    error_code,
    until_done,
)
from shared.adapters.aws.dynamodb.table import batch_get, shard_of, sharded
from shared.budgets import (
    Bucket,
    BudgetCharge,
    BudgetDecision,
    BudgetUsage,
    Counters,
    buckets,
    evaluate,
)
from shared.errors import SigilError
from shared.models import BudgetLimits

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef, UpdateTypeDef

log = logging.getLogger("sigil.budgets")

# How many items hold each bucket's total. Each is its own partition, good for about 1,000 write
# units a second (a transactional write of one item costs two), so 8 carry a workspace's turns at
# some 4,000 commits a second; a check reads 8 items a bucket (33 keys for four buckets and the
# session: one BatchGetItem). Only ever raise it: a lowered count would leave shards unread.
COUNTER_SHARDS: Final = 8

# Each metric's attribute, as an expression name (USD is counted in nano-dollars, an integer).
_NAMES: Final = {"#t": "tokens", "#c": "tool_calls", "#u": "usd_nanos"}


def _n(value: int) -> dict[str, str]:
    return {"N": str(value)}


def counter_shard(session_id: str) -> int:
    """The shard a session's turns charge: a stable hash, so a workspace's sessions spread evenly
    over the shards."""
    return shard_of(session_id, COUNTER_SHARDS)


def counter_pk(workspace_id: str, shard: int = 0) -> str:
    # Shard 0 keeps the key the counters had before they were sharded: their totals still count.
    return sharded(f"WS#{workspace_id}#BUDGET", shard)


def is_counter(item: Any, workspace_id: str) -> bool:
    pk = str(item["pk"]["S"])
    return pk == counter_pk(workspace_id) or pk.startswith(counter_pk(workspace_id) + "#")


def counter_key(workspace_id: str, key: str, shard: int = 0) -> dict[str, Any]:
    """The item key of counter `key` (a bucket key) of the workspace in `shard`, in the sessions table."""
    return {"pk": {"S": counter_pk(workspace_id, shard)}, "sk": {"S": key}}


def counter_keys(workspace_id: str, keys: Iterable[str]) -> list[dict[str, Any]]:
    """Every shard's item of each counter `keys` names: what a total is summed from."""
    shards = range(COUNTER_SHARDS)
    return [counter_key(workspace_id, key, shard) for key in dict.fromkeys(keys) for shard in shards]


def counters_of(item: Any) -> Counters:
    return Counters(
        tokens=int(item.get("tokens", {}).get("N", "0")),
        tool_calls=int(item.get("tool_calls", {}).get("N", "0")),
        usd_nanos=int(item.get("usd_nanos", {}).get("N", "0")),
    )


def sum_counters(items: Iterable[Any]) -> dict[str, Counters]:
    """Each bucket's total over the shard items read (a bucket none of whose items exists is missing)."""
    totals: dict[str, Counters] = {}
    for item in items:
        key = str(item["sk"]["S"])
        totals[key] = totals.get(key, Counters()) + counters_of(item)
    return totals


def charge_update(
    table: str, workspace_id: str, bucket: Bucket, amounts: Counters, shard: int = 0
) -> TransactWriteItemTypeDef:
    """One bucket's Update of a charge, in `shard`: ADD the amounts, SET the ttl."""
    update: UpdateTypeDef = {
        "TableName": table,
        "Key": counter_key(workspace_id, bucket.key, shard),
        "UpdateExpression": "ADD #t :t, #c :c, #u :u SET #ttl = :ttl",
        "ExpressionAttributeNames": {**_NAMES, "#ttl": "ttl"},
        "ExpressionAttributeValues": {
            ":t": _n(amounts.tokens),
            ":c": _n(amounts.tool_calls),
            ":u": _n(amounts.usd_nanos),
            ":ttl": _n(int(bucket.expires_at.timestamp())),
        },
    }
    return {"Update": update}


def apply_charge(
    client: DynamoDBClient,
    table: str,
    workspace_id: str,
    plan: Sequence[Bucket],
    *,
    amounts: Counters,
    shard: int,
) -> bool:
    """Add `amounts` to every bucket of `plan` in `shard`, in one transaction (the buckets move
    together). A TransactionConflict (another charge on the shard at that moment) or throttling
    applied nothing and is sent again after a backoff; False when it never went through."""
    actions = [charge_update(table, workspace_id, b, amounts, shard) for b in plan]

    def attempt() -> Next:
        try:
            client.transact_write_items(TransactItems=actions)
        except ClientError as exc:
            # Nothing here has a condition, so a cancellation is a conflict or throttling;
            # botocore does not retry a cancellation.
            if error_code(exc) != "TransactionCanceledException":
                raise
            return Next.BACK_OFF
        return Next.DONE

    return until_done(attempt, wait_initial=0.02)


def charge_turn(client: DynamoDBClient, table: str, charge: BudgetCharge, session_id: str) -> None:
    """A committed turn's charge, on its session's shard. The commit has landed, so a charge that
    never goes through is logged rather than raised: failing the turn now would not undo it
    (docs/budgets.md: what such a loss adds to the overshoot bound)."""
    if charge.amounts.empty:
        return
    if not apply_charge(
        client,
        table,
        charge.workspace_id,
        charge.buckets,
        amounts=charge.amounts,
        shard=counter_shard(session_id),
    ):
        log.warning(
            "budget charge not recorded after the commit",
            extra={"workspace_id": charge.workspace_id, "session_id": session_id, "attempts": RETRIES},
        )


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
        # Consistent: a check right after a charge (another Lambda's) must see it. Four buckets
        # of eight shards, 32 keys, under BatchGetItem's hundred.
        items = batch_get(
            self.client,
            self.table,
            counter_keys(workspace_id, counters),
            ProjectionExpression="sk, #t, #c, #u",
            ExpressionAttributeNames=_NAMES,
        )
        return sum_counters(items)

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
        if not apply_charge(self.client, self.table, workspace_id, plan, amounts=amounts, shard=0):
            raise SigilError(
                f"DynamoDB did not accept a budget charge after {RETRIES} attempts", code="store_unavailable"
            )
        return self.check(workspace_id, user_id, limits, now)

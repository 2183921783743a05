"""What the consolidate function does in the sessions table, by IAM action and kind of partition.

One statement of it for two tests, so neither side can drift from the other:
tests/integration/test_consolidate_handler.py records every request a real run sends to the table
(on moto) and checks each is listed here; tests/infra/test_consolidator_partitions.py checks the
stack's grant (infra.constructs.memory.CONSOLIDATOR_SESSIONS_ACCESS) allows everything listed here
against keys the adapters build, and nothing of the table's other partitions.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

# (IAM action, partition kind). A TransactWriteItems is authorised per item, by that item's
# action (Put: PutItem, Update: UpdateItem, ...), which is how it is recorded.
SESSIONS_TABLE_REACH: Final = frozenset(
    {
        # A session read (CompactionDue, per-turn extraction), listed (the hourly catch-up) and
        # saved with its rolling summary
        ("dynamodb:GetItem", "session"),
        ("dynamodb:Query", "session"),
        ("dynamodb:BatchGetItem", "session"),
        ("dynamodb:PutItem", "session"),
        # Its leases and checkpoints (shared.adapters.aws.dynamodb.consolidation_state)
        ("dynamodb:GetItem", "consolidation"),
        ("dynamodb:PutItem", "consolidation"),
        ("dynamodb:DeleteItem", "consolidation"),
        # The workspace's budget counters: every shard checked, and shard 0 charged with what the
        # model used (shared.adapters.aws.dynamodb.budgets)
        ("dynamodb:BatchGetItem", "budget"),
        ("dynamodb:BatchGetItem", "budget shard"),
        ("dynamodb:UpdateItem", "budget"),
        # The task sweep (shared.tasks.sweep): the active tasks listed (their pointers, then the
        # tasks), an overdue one ended (the task put, its pointer and the two active counters
        # updated, in one TransactWriteItems)
        ("dynamodb:Query", "tasks"),
        ("dynamodb:BatchGetItem", "tasks"),
        ("dynamodb:PutItem", "tasks"),
        ("dynamodb:UpdateItem", "tasks"),
    }
)

_KINDS: Final = (
    ("session", re.compile(r"WS#[^#]+")),
    ("consolidation", re.compile(r"WS#[^#]+#CONSOLIDATION")),
    ("budget", re.compile(r"WS#[^#]+#BUDGET")),
    ("budget shard", re.compile(r"WS#[^#]+#BUDGET#[0-9]+")),
    ("tasks", re.compile(r"WS#[^#]+#TASKS")),
)


def partition_kind(pk: str) -> str:
    """The kind of a sessions-table partition key; any other partition is named as itself."""
    return next((kind for kind, pattern in _KINDS if pattern.fullmatch(pk)), pk)


def _requests(operation: str, params: dict[str, Any], table: str) -> Iterator[tuple[str, str]]:
    """(IAM action, partition key) of every item of `table` one request names."""
    if operation == "TransactWriteItems":
        for item in params["TransactItems"]:
            for kind, body in item.items():
                if body["TableName"] == table:
                    key = body.get("Key") or body["Item"]
                    action = "ConditionCheckItem" if kind == "ConditionCheck" else f"{kind}Item"
                    yield f"dynamodb:{action}", key["pk"]["S"]
    elif operation == "BatchGetItem":
        for key in params["RequestItems"].get(table, {}).get("Keys", []):
            yield "dynamodb:BatchGetItem", key["pk"]["S"]
    elif operation == "BatchWriteItem":
        for request in params["RequestItems"].get(table, []):
            for body in request.values():
                yield "dynamodb:BatchWriteItem", (body.get("Item") or body["Key"])["pk"]["S"]
    elif params.get("TableName") == table:
        key = params.get("Key") or params.get("Item")
        if key is not None:
            yield f"dynamodb:{operation}", key["pk"]["S"]
        elif operation == "Query":
            yield "dynamodb:Query", params["ExpressionAttributeValues"][":pk"]["S"]
        else:  # Scan, DescribeTable...: no partition at all
            yield f"dynamodb:{operation}", "*"


@contextmanager
def recorded(client: Any, table: str) -> Iterator[set[tuple[str, str]]]:
    """Every (IAM action, partition kind) `client` sends to `table` inside the block."""
    seen: set[tuple[str, str]] = set()

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        seen.update((action, partition_kind(pk)) for action, pk in _requests(model.name, params, table))

    client.meta.events.register("provide-client-params.dynamodb", record)
    try:
        yield seen
    finally:
        client.meta.events.unregister("provide-client-params.dynamodb", record)

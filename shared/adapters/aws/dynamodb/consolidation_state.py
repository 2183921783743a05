"""ConsolidationState on DynamoDB: leases and checkpoints in the sessions table.

Items: pk `WS#{ws}#CONSOLIDATION`, sk `LEASE#{name}` (attributes `owner`, `expires_at` in epoch
seconds) or `CHECKPOINT#{name}` (attribute `value`). The sessions table is the one whose items are
written under conditions (sessions, outbox, budget counters), and its (pk, sk) schema fits; the
`#CONSOLIDATION` suffix keeps these items out of the session Query (`begins_with(sk, SESSION#)`
on pk `WS#{ws}`).

A lease is one conditional PutItem: it succeeds when the item is absent, expired, or already this
owner's, so of two racing takers DynamoDB lets exactly one through. Release is a conditional
DeleteItem, so a run whose lease expired and was taken over cannot end its successor's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from shared.adapters.aws import clients
from shared.adapters.aws.dynamodb.retry import error_code

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

_CONDITION_FAILED = "ConditionalCheckFailedException"


def _pk(workspace_id: str) -> dict[str, str]:
    return {"S": f"WS#{workspace_id}#CONSOLIDATION"}


def _failed_condition(exc: ClientError) -> bool:
    return error_code(exc) == _CONDITION_FAILED


class DynamoConsolidationState:
    def __init__(
        self,
        table_name: str,
        *,
        client: DynamoDBClient | None = None,
        region: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.table = table_name
        self.client = client if client is not None else clients.dynamodb(region)
        self.clock = clock  # epoch seconds, as stored in expires_at

    def acquire_lease(self, workspace_id: str, name: str, owner: str, ttl_s: float) -> bool:
        now = self.clock()
        item: dict[str, Any] = {
            "pk": _pk(workspace_id),
            "sk": {"S": f"LEASE#{name}"},
            "owner": {"S": owner},
            "expires_at": {"N": repr(now + ttl_s)},
        }
        try:
            self.client.put_item(
                TableName=self.table,
                Item=item,
                # OWNER is a DynamoDB reserved word, hence the name placeholder.
                ConditionExpression="attribute_not_exists(pk) OR expires_at < :now OR #owner = :me",
                ExpressionAttributeNames={"#owner": "owner"},
                ExpressionAttributeValues={":now": {"N": repr(now)}, ":me": {"S": owner}},
            )
        except ClientError as exc:
            if _failed_condition(exc):
                return False
            raise
        return True

    def release_lease(self, workspace_id: str, name: str, owner: str) -> None:
        try:
            self.client.delete_item(
                TableName=self.table,
                Key={"pk": _pk(workspace_id), "sk": {"S": f"LEASE#{name}"}},
                ConditionExpression="#owner = :me",
                ExpressionAttributeNames={"#owner": "owner"},
                ExpressionAttributeValues={":me": {"S": owner}},
            )
        except ClientError as exc:
            if not _failed_condition(exc):
                raise

    def get_checkpoint(self, workspace_id: str, name: str) -> str | None:
        # Consistent: the run that resumes may start right after the one that wrote it.
        item = self.client.get_item(
            TableName=self.table,
            Key={"pk": _pk(workspace_id), "sk": {"S": f"CHECKPOINT#{name}"}},
            ConsistentRead=True,
        ).get("Item")
        return None if item is None else str(item["value"]["S"])

    def put_checkpoint(self, workspace_id: str, name: str, value: str) -> None:
        self.client.put_item(
            TableName=self.table,
            Item={"pk": _pk(workspace_id), "sk": {"S": f"CHECKPOINT#{name}"}, "value": {"S": value}},
        )

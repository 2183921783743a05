"""MediaUsage on DynamoDB: a workspace's fetched media bytes per UTC day, in the sessions table.

pk `WS#{ws}#MEDIA_USAGE`, sk the day (`2026-03-17`), number `bytes` (ADDed by DynamoDB itself, so
concurrent turns never lose an update) and `ttl` a week after the day: nothing reads an older day.
One item per workspace and day, written once per fetched file: far below a partition's limits.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from shared.adapters.aws.dynamodb.table import Table, item_key, ws_prefix

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

KEEP_DAYS = 7


class DynamoMediaUsage(Table):
    def __init__(
        self, table_name: str, *, client: DynamoDBClient | None = None, region: str | None = None
    ) -> None:
        super().__init__(table_name, client, region)

    @staticmethod
    def _key(workspace_id: str, day: str) -> dict[str, dict[str, str]]:
        return item_key(f"{ws_prefix(workspace_id)}#MEDIA_USAGE", day)

    def add(self, workspace_id: str, day: str, size: int) -> int:
        expires = datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC) + timedelta(days=KEEP_DAYS)
        answer = self.client.update_item(
            TableName=self.table,
            Key=self._key(workspace_id, day),
            UpdateExpression="ADD #b :n SET #t = :t",
            ExpressionAttributeNames={"#b": "bytes", "#t": "ttl"},
            ExpressionAttributeValues={":n": {"N": str(size)}, ":t": {"N": str(int(expires.timestamp()))}},
            ReturnValues="UPDATED_NEW",
        )
        return int(answer["Attributes"]["bytes"]["N"])

    def total(self, workspace_id: str, day: str) -> int:
        item = self.client.get_item(
            TableName=self.table, Key=self._key(workspace_id, day), ConsistentRead=True
        ).get("Item")
        return 0 if item is None else int(item["bytes"]["N"])

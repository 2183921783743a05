"""Scratchpad on DynamoDB: one item per entry, in the sessions table.

pk `WS#{ws}#SCRATCH#{session}`, sk `KEY#{key}`, attribute `text`. An entry's text is at most
SCRATCHPAD_MAX_BYTES (256 KB, under the 400 KB item limit with its keys), checked before the
write with the embedded adapter's rule (shared.models.tasks.check_scratchpad_entry), so a too
large output is a clear BadRequest on both backends. Keys hold no `#` (the key pattern).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.adapters.aws.dynamodb.table import Table, item_key, string, ws_prefix
from shared.models.tasks import check_scratchpad_entry

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

_KEY = "KEY#"


class DynamoScratchpad(Table):
    def __init__(
        self, table_name: str, *, client: DynamoDBClient | None = None, region: str | None = None
    ) -> None:
        super().__init__(table_name, client, region)

    @staticmethod
    def _pk(workspace_id: str, session_id: str) -> str:
        return f"{ws_prefix(workspace_id)}#SCRATCH#{session_id}"

    def put(self, workspace_id: str, session_id: str, key: str, text: str) -> None:
        check_scratchpad_entry(key, text)
        self.client.put_item(
            TableName=self.table,
            Item=item_key(self._pk(workspace_id, session_id), _KEY + key) | {"text": string(text)},
        )

    def get(self, workspace_id: str, session_id: str, key: str) -> str | None:
        item = self.client.get_item(
            TableName=self.table,
            Key=item_key(self._pk(workspace_id, session_id), _KEY + key),
            ConsistentRead=True,
        ).get("Item")
        return item["text"]["S"] if item else None

    def _sort_keys(self, workspace_id: str, session_id: str, prefix: str = "") -> list[str]:
        items = self.query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={
                ":pk": string(self._pk(workspace_id, session_id)),
                ":prefix": string(_KEY + prefix),
            },
            ProjectionExpression="sk",
            ConsistentRead=True,
        )
        return [item["sk"]["S"] for item in items]

    def list_keys(self, workspace_id: str, session_id: str, *, prefix: str = "") -> list[str]:
        # Sort keys come back in byte order, the order SQLite's text comparison gives too.
        return [sk[len(_KEY) :] for sk in self._sort_keys(workspace_id, session_id, prefix)]

    def delete_session(self, workspace_id: str, session_id: str) -> int:
        pk = self._pk(workspace_id, session_id)
        keys = [
            {"DeleteRequest": {"Key": item_key(pk, sk)}} for sk in self._sort_keys(workspace_id, session_id)
        ]
        self.batch_write(keys)
        return len(keys)

"""Workspace configs in the memory table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared import serde
from shared.adapters.aws.dynamodb.table import GSI1, Table, dump_doc, item_key, load_docs, string, ws_prefix
from shared.models import WorkspaceConfig

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient


class DynamoWorkspaceStore(Table):
    """Workspace configs in the memory table: pk `WS#{ws}`, sk `CONFIG`.

    GSI1 `WORKSPACES` / `WS#{ws}` lists them in id order. It is the one partition not scoped to a
    workspace, and it exists only in an index: the list of tenants is cross-tenant by nature, and
    no base-table key is built from it.
    """

    def __init__(
        self, table_name: str, *, client: DynamoDBClient | None = None, region: str | None = None
    ) -> None:
        super().__init__(table_name, client, region)

    def get(self, workspace_id: str) -> WorkspaceConfig | None:
        item = self.client.get_item(
            TableName=self.table, Key=item_key(ws_prefix(workspace_id), "CONFIG")
        ).get("Item")
        return None if item is None else serde.loads(WorkspaceConfig, item["doc"]["S"])

    def put(self, config: WorkspaceConfig) -> None:
        item = item_key(ws_prefix(config.id), "CONFIG") | {
            "doc": dump_doc(config),
            "gsi1pk": string("WORKSPACES"),
            "gsi1sk": string(ws_prefix(config.id)),
        }
        self.client.put_item(TableName=self.table, Item=item)

    def list_workspaces(self) -> list[WorkspaceConfig]:
        items = self.query(
            IndexName=GSI1,
            KeyConditionExpression="gsi1pk = :pk",
            ExpressionAttributeValues={":pk": string("WORKSPACES")},
        )
        return load_docs(items, WorkspaceConfig)

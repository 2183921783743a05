"""Channel routes in the sessions table."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from shared import serde
from shared.adapters.aws.dynamodb.table import Table, dump_doc, item_key, load_docs, string
from shared.models import ChannelRoute

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

# The deployment's one partition outside every workspace: a route names the workspace it feeds,
# so it cannot live under one. `WS#` never prefixes it, and workspace ids cannot contain `#`,
# so no workspace's key can reach it (docs/dynamodb.md).
ROUTES_PK: Final = "ROUTES"


def _sk(platform: str, name: str) -> str:
    return f"{platform}#{name}"


class DynamoRouteStore(Table):
    """Routes in the sessions table: pk `ROUTES`, sk `{platform}#{name}`.

    The sessions table because the webhook reads one route per request, and the webhook already
    reaches that table (the outbox); one partition, read by key, a handful of items.
    """

    def __init__(
        self, table_name: str, *, client: DynamoDBClient | None = None, region: str | None = None
    ) -> None:
        super().__init__(table_name, client, region)

    def get(self, platform: str, name: str) -> ChannelRoute | None:
        item = self.client.get_item(
            TableName=self.table, Key=item_key(ROUTES_PK, _sk(platform, name)), ConsistentRead=True
        ).get("Item")
        return None if item is None else serde.loads(ChannelRoute, item["doc"]["S"])

    def put(self, route: ChannelRoute) -> None:
        item = item_key(ROUTES_PK, _sk(route.platform, route.name)) | {"doc": dump_doc(route)}
        self.client.put_item(TableName=self.table, Item=item)

    def delete(self, platform: str, name: str) -> bool:
        old = self.client.delete_item(
            TableName=self.table, Key=item_key(ROUTES_PK, _sk(platform, name)), ReturnValues="ALL_OLD"
        ).get("Attributes")
        return bool(old)

    def list_routes(self) -> list[ChannelRoute]:
        """Ordered by (platform, name): the sort key's order."""
        items = self.query(
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": string(ROUTES_PK)},
            ConsistentRead=True,
        )
        return load_docs(items, ChannelRoute)

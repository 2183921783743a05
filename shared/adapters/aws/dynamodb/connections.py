"""The WebSocket API's connections in the sessions table (ports.Connections)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from shared import serde
from shared.adapters.aws.dynamodb.table import Table, dump_doc, item_key, number, string, ws_prefix
from shared.channels.web_frames import MAX_SUBSCRIPTIONS
from shared.ports import WebConnection

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

# $disconnect and every frame name the connection by its id alone (API Gateway passes the token's
# query string to $connect only), so the connection item is found by that id: the one partition
# family besides ROUTES that does not begin with `WS#`. It names its workspace but holds none of
# its data, and no workspace's key can reach it (workspace ids cannot contain `#`).
CONNECTION_PREFIX: Final = "CONN#"
TTL: Final = "ttl"


def connection_pk(connection_id: str) -> str:
    return f"{CONNECTION_PREFIX}{connection_id}"


def listeners_pk(workspace_id: str, session: str) -> str:
    return f"{ws_prefix(workspace_id)}#LISTEN#{session}"


class DynamoConnections(Table):
    """Connections: pk `CONN#{id}` / sk `CONNECTION` (the doc), and one listener item per session
    it listens to, pk `WS#{ws}#LISTEN#{session}` / sk `{id}`, which the agent queries. Both carry
    `ttl` (the token's expiry, or API Gateway's two-hour limit, whichever is first), so a
    connection whose $disconnect never ran is forgotten by itself; reads skip expired items before
    TTL deletes them (which may take days)."""

    def __init__(
        self, table_name: str, *, client: DynamoDBClient | None = None, region: str | None = None
    ) -> None:
        super().__init__(table_name, client, region)

    def open(self, connection: WebConnection) -> None:
        item = item_key(connection_pk(connection.connection_id), "CONNECTION") | {
            "doc": dump_doc(connection),
            TTL: number(connection.ttl_at),
        }
        self.client.put_item(TableName=self.table, Item=item)

    def get(self, connection_id: str) -> WebConnection | None:
        item = self.client.get_item(
            TableName=self.table,
            Key=item_key(connection_pk(connection_id), "CONNECTION"),
            ConsistentRead=True,
        ).get("Item")
        return None if item is None else serde.loads(WebConnection, item["doc"]["S"])

    def subscribe(self, connection: WebConnection, session: str) -> WebConnection:
        if session in connection.subscribed:
            return connection
        if len(connection.subscribed) >= MAX_SUBSCRIPTIONS:
            # The oldest subscription makes room (the protocol's cap, the same locally); the cap
            # also bounds the connection's item and $disconnect's work.
            self._unlisten(connection.workspace_id, connection.subscribed[0], connection.connection_id)
            connection = connection.model_copy(update={"subscribed": connection.subscribed[1:]})
        updated = connection.model_copy(update={"subscribed": [*connection.subscribed, session]})
        # The listener item first: a connection item that names a session is then always one
        # $disconnect can clean up after.
        listener = item_key(listeners_pk(connection.workspace_id, session), connection.connection_id)
        self.client.put_item(TableName=self.table, Item=listener | {TTL: number(connection.ttl_at)})
        self.open(updated)
        return updated

    def listeners(self, workspace_id: str, session: str, *, now: int) -> list[str]:
        items = self.query(
            KeyConditionExpression="pk = :pk",
            FilterExpression="#ttl > :now",
            ExpressionAttributeNames={"#ttl": TTL},
            ExpressionAttributeValues={
                ":pk": string(listeners_pk(workspace_id, session)),
                ":now": number(now),
            },
        )
        return [str(item["sk"]["S"]) for item in items]

    def close(self, connection_id: str) -> None:
        connection = self.get(connection_id)
        if connection is None:
            return
        for session in connection.subscribed:
            self._unlisten(connection.workspace_id, session, connection_id)
        self.client.delete_item(
            TableName=self.table, Key=item_key(connection_pk(connection_id), "CONNECTION")
        )

    def _unlisten(self, workspace_id: str, session: str, connection_id: str) -> None:
        self.client.delete_item(
            TableName=self.table, Key=item_key(listeners_pk(workspace_id, session), connection_id)
        )

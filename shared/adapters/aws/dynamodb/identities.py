"""Identities in the memory table, a pending one found by its pairing code through GSI1."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from shared import serde
from shared.adapters.aws.dynamodb.retry import error_code
from shared.adapters.aws.dynamodb.table import (
    GSI1,
    Item,
    Table,
    dump_doc,
    item_key,
    load_docs,
    string,
    ws_prefix,
)
from shared.errors import ConcurrencyConflict
from shared.models import Identity, IdentityStatus

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient


class DynamoIdentityStore(Table):
    """Identities in the memory table: pk `WS#{ws}#IDENTITY`, sk `{channel}#{channel_user_id}`.

    A pending identity's pairing code is its GSI1 key, `WS#{ws}#PAIRING` / `{code}`: finding a
    code is one Query of the index, not a scan, and putting the identity without a code (approved,
    blocked) takes it out of the index, with no second item to keep in step. GSI reads are
    eventually consistent, so a hit is read again from the base table, consistently, and must
    still hold the code: approving a code cleared a moment ago finds nothing rather than
    resurrecting a stale identity.
    """

    def __init__(
        self, table_name: str, *, client: DynamoDBClient | None = None, region: str | None = None
    ) -> None:
        super().__init__(table_name, client, region)

    @staticmethod
    def _key(workspace_id: str, channel: str, channel_user_id: str) -> Item:
        # The channel user id is the sort key's last part, so a '#' in it cannot reach another
        # identity's key; the workspace is the partition, as everywhere.
        return item_key(f"{ws_prefix(workspace_id)}#IDENTITY", f"{channel}#{channel_user_id}")

    def _item(self, identity: Identity) -> Item:
        item = self._key(identity.workspace_id, identity.channel, identity.channel_user_id) | {
            "doc": dump_doc(identity),
            "status": string(identity.status),
        }
        if identity.pairing_code is not None:
            item["gsi1pk"] = string(f"{ws_prefix(identity.workspace_id)}#PAIRING")
            item["gsi1sk"] = string(identity.pairing_code)
        return item

    def get(self, workspace_id: str, channel: str, channel_user_id: str) -> Identity | None:
        # Consistent: a sender's next message right after an admin approved them must see it.
        item = self.client.get_item(
            TableName=self.table, Key=self._key(workspace_id, channel, channel_user_id), ConsistentRead=True
        ).get("Item")
        return None if item is None else serde.loads(Identity, item["doc"]["S"])

    def put(self, identity: Identity) -> None:
        self.client.put_item(TableName=self.table, Item=self._item(identity))

    def create(self, identity: Identity) -> Identity:
        try:
            self.client.put_item(
                TableName=self.table,
                Item=self._item(identity),
                ConditionExpression="attribute_not_exists(pk)",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            # The identity that won comes back with the failure (ALL_OLD), so no second read.
            held = exc.response.get("Item")
            if isinstance(held, dict):
                winner: Identity = serde.loads(Identity, held["doc"]["S"])
                return winner
            found = self.get(identity.workspace_id, identity.channel, identity.channel_user_id)
            if found is None:
                raise ConcurrencyConflict(
                    f"identity {identity.channel}:{identity.channel_user_id} was deleted while it was created"
                ) from exc
            return found
        return identity

    def list_identities(self, workspace_id: str, *, status: IdentityStatus | None = None) -> list[Identity]:
        # Key order is (channel, channel user): no channel name is a prefix of another.
        params: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": string(f"{ws_prefix(workspace_id)}#IDENTITY")},
            "ConsistentRead": True,
        }
        if status is not None:
            params["FilterExpression"] = "#status = :status"
            params["ExpressionAttributeNames"] = {"#status": "status"}
            params["ExpressionAttributeValues"][":status"] = string(status)
        return load_docs(self.query(**params), Identity)

    def find_by_pairing_code(self, workspace_id: str, code: str) -> Identity | None:
        hits = self.query(
            IndexName=GSI1,
            KeyConditionExpression="gsi1pk = :pk AND gsi1sk = :code",
            ExpressionAttributeValues={
                ":pk": string(f"{ws_prefix(workspace_id)}#PAIRING"),
                ":code": string(code),
            },
        )
        for hit in load_docs(hits, Identity):
            current = self.get(workspace_id, hit.channel, hit.channel_user_id)
            if current is not None and current.pairing_code == code:
                return current
        return None

    def delete(self, workspace_id: str, channel: str, channel_user_id: str) -> None:
        self.client.delete_item(TableName=self.table, Key=self._key(workspace_id, channel, channel_user_id))

"""DynamoSendLedger: the send ledger of shared.channels.ledger, in the sessions table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from shared.adapters.aws.dynamodb.retry import error_code
from shared.adapters.aws.dynamodb.table import Item, Table, item_key, key_part, number, string, ws_prefix
from shared.channels.ledger import LEDGER_TTL_S, Clock
from shared.clock import epoch_seconds
from shared.ports import SentPiece

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient


class DynamoSendLedger(Table):
    """The ledger in the sessions table, next to the session and outbox it belongs with.

    pk `WS#{ws}#LEDGER#{turn}` (one partition per turn: its pieces are read together, and a
    workspace prefix like every other key in the table), sk `PART#{part:06}#{chunk:04}`,
    attributes `message_id`, `digest` and `ttl` (epoch seconds). The table's TTL must be
    enabled on `ttl` for DynamoDB to delete expired entries; reads ignore them either way.
    """

    def __init__(
        self,
        table_name: str,
        *,
        client: DynamoDBClient | None = None,
        region: str | None = None,
        ttl_s: int = LEDGER_TTL_S,
        now: Clock = epoch_seconds,
    ) -> None:
        super().__init__(table_name, client, region)
        self._ttl_s = ttl_s
        self._now = now

    def _expires(self, now: float) -> dict[str, str]:
        return number(int(now + self._ttl_s))

    @staticmethod
    def _key(workspace_id: str, turn_id: str, part: int, chunk: int) -> Item:
        # The turn id is free text from the platform: literal when short, a digest when not.
        return item_key(
            f"{ws_prefix(workspace_id)}#LEDGER#{key_part(turn_id)}", f"PART#{part:06d}#{chunk:04d}"
        )

    def get(self, workspace_id: str, turn_id: str, part: int, chunk: int = 0) -> SentPiece | None:
        # Strongly consistent: a retry that runs right after a crash must see the last record.
        item = self.client.get_item(
            TableName=self.table, Key=self._key(workspace_id, turn_id, part, chunk), ConsistentRead=True
        ).get("Item")
        if item is None or int(item["ttl"]["N"]) <= self._now():
            return None
        return SentPiece(item["message_id"]["S"], item["digest"]["S"])

    def record(
        self, workspace_id: str, turn_id: str, part: int, chunk: int, *, message_id: str, text_digest: str
    ) -> SentPiece:
        now = self._now()
        item = self._key(workspace_id, turn_id, part, chunk) | {
            "message_id": string(message_id),
            "digest": string(text_digest),
            "ttl": self._expires(now),
        }
        try:
            self.client.put_item(
                TableName=self.table,
                Item=item,
                # New, or expired but not yet swept (TTL deletion runs up to days late).
                ConditionExpression="attribute_not_exists(pk) OR #ttl <= :now",
                ExpressionAttributeNames={"#ttl": "ttl"},
                ExpressionAttributeValues={":now": number(int(now))},
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            existing = self.get(workspace_id, turn_id, part, chunk)
            if existing is not None:
                return existing
        return SentPiece(message_id, text_digest)

    def update_digest(
        self, workspace_id: str, turn_id: str, part: int, chunk: int, *, text_digest: str
    ) -> None:
        try:
            self.client.update_item(
                TableName=self.table,
                Key=self._key(workspace_id, turn_id, part, chunk),
                UpdateExpression="SET digest = :digest, #ttl = :ttl",
                # Only an entry that exists: an update must not create one without a message id.
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeNames={"#ttl": "ttl"},
                ExpressionAttributeValues={
                    ":digest": string(text_digest),
                    ":ttl": self._expires(self._now()),
                },
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise

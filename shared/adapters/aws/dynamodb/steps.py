"""StepLog on DynamoDB: one item per saved step, in the sessions table.

pk `WS#{ws}#STEPS#{key}` (the key, a turn's or a task's id, through key_part: literal when short,
a digest when not), sk `SEQ#{seq:012}`, attributes `doc` (the message) and `ttl` (epoch seconds,
STEP_TTL_S after the write). An append is one PutItem conditioned on the seq being new (or
expired but not yet swept: TTL deletion runs up to days late), so a redelivered invocation that
repeats a saved step stores nothing; load is one consistent Query and skips expired items.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from shared import serde
from shared.adapters.aws.dynamodb.retry import error_code
from shared.adapters.aws.dynamodb.table import (
    TTL_ATTRIBUTE,
    Table,
    dump_doc,
    item_key,
    key_part,
    number,
    seq_key,
    string,
    ws_prefix,
)
from shared.clock import epoch_seconds
from shared.models import Message
from shared.models.tasks import STEP_TTL_S

if TYPE_CHECKING:
    from collections.abc import Callable

    from mypy_boto3_dynamodb.client import DynamoDBClient


class DynamoStepLog(Table):
    def __init__(
        self,
        table_name: str,
        *,
        client: DynamoDBClient | None = None,
        region: str | None = None,
        ttl_s: int = STEP_TTL_S,
        now: Callable[[], float] = epoch_seconds,
    ) -> None:
        super().__init__(table_name, client, region)
        self._ttl_s = ttl_s
        self._now = now

    @staticmethod
    def _pk(workspace_id: str, key: str) -> str:
        return f"{ws_prefix(workspace_id)}#STEPS#{key_part(key)}"

    def append(self, workspace_id: str, key: str, seq: int, message: Message) -> bool:
        if seq < 0:
            raise ValueError(f"step seq must be >= 0, not {seq}")
        now = int(self._now())
        item = item_key(self._pk(workspace_id, key), f"SEQ#{seq_key(seq)}") | {
            # A member of the union serialises as the union does: its `kind` is a field.
            "doc": dump_doc(message),
            TTL_ATTRIBUTE: number(now + self._ttl_s),
        }
        try:
            self.client.put_item(
                TableName=self.table,
                Item=item,
                ConditionExpression="attribute_not_exists(pk) OR #ttl <= :now",
                ExpressionAttributeNames={"#ttl": TTL_ATTRIBUTE},
                ExpressionAttributeValues={":now": number(now)},
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            return False
        return True

    def _items(self, workspace_id: str, key: str, **params: Any) -> list[dict[str, Any]]:
        return list(
            self.query(
                KeyConditionExpression="pk = :pk AND begins_with(sk, :seq)",
                ExpressionAttributeValues={
                    ":pk": string(self._pk(workspace_id, key)),
                    ":seq": string("SEQ#"),
                },
                ConsistentRead=True,
                **params,
            )
        )

    def load(self, workspace_id: str, key: str) -> list[Message]:
        now = self._now()
        return [
            serde.loads(Message, item["doc"]["S"])
            for item in self._items(workspace_id, key)
            if int(item[TTL_ATTRIBUTE]["N"]) > now
        ]

    def clear(self, workspace_id: str, key: str) -> int:
        keys = [
            {"DeleteRequest": {"Key": item_key(item["pk"]["S"], item["sk"]["S"])}}
            for item in self._items(workspace_id, key, ProjectionExpression="pk, sk")
        ]
        self.batch_write(keys)
        return len(keys)

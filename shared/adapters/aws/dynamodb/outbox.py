"""The web outbox in the sessions table: its seq is its send ledger."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from botocore.exceptions import ClientError

from shared import serde
from shared.adapters.aws.dynamodb.retry import error_code
from shared.adapters.aws.dynamodb.table import (
    Item,
    Table,
    dump_doc,
    item_key,
    load_docs,
    seq_key,
    string,
    ws_prefix,
)
from shared.errors import ConcurrencyConflict, SigilError
from shared.models import OutboundMessage, OutboxEntry

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient


class DynamoOutbox(Table):
    """A session's web replies in the sessions table: pk `WS#{ws}#OUTBOX#{session}`, sk `SEQ#{seq:012}`.

    A message carries its position (`message.seq`, set by the turn; see ports.Outbox), so an
    append is one PutItem conditioned on `attribute_not_exists(pk)`: no counter to read, no ledger
    item. The seq is the send ledger: a retried turn asks for the same seq, the condition fails,
    and the item it gets back (ReturnValuesOnConditionCheckFailure, no extra request) is its own
    (turn, part), so nothing is stored and append returns None. When the item is another turn's
    part, one consistent Query of the seqs after it finds the first free one (or this part, stored
    there by an earlier attempt); that happens only after a turn sent without committing.

    Partitions written before this design also hold `COUNTER` and `SENT#...` items; nothing reads
    them any more, and `read` only ranges over `SEQ#`.
    """

    _MAX_ATTEMPTS: Final = 8
    # Positions looked at from the one asked for, as in the SQLite outbox.
    MAX_PROBES: Final = 1_000

    def __init__(
        self, table_name: str, *, client: DynamoDBClient | None = None, region: str | None = None
    ) -> None:
        super().__init__(table_name, client, region)

    @staticmethod
    def _pk(workspace_id: str, session_id: str) -> str:
        return f"{ws_prefix(workspace_id)}#OUTBOX#{session_id}"

    @staticmethod
    def _is(item: Item, message: OutboundMessage) -> bool:
        held: OutboxEntry = serde.loads(OutboxEntry, item["doc"]["S"])
        return (held.message.turn_id, held.message.part) == (message.turn_id, message.part)

    def append(self, message: OutboundMessage) -> OutboxEntry | None:
        pk = self._pk(message.workspace_id, message.session_id)
        seq = message.seq
        for _ in range(self._MAX_ATTEMPTS):
            entry = OutboxEntry(seq=seq, message=message.model_copy(update={"seq": seq}))
            try:
                self.client.put_item(
                    TableName=self.table,
                    Item=item_key(pk, f"SEQ#{seq_key(seq)}") | {"doc": dump_doc(entry)},
                    ConditionExpression="attribute_not_exists(pk)",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise
                # botocore's error type names only the common keys; ALL_OLD adds "Item".
                held = exc.response.get("Item")
                if isinstance(held, dict) and self._is(held, message):
                    return None  # this (turn, part) was stored before: a retried turn
                free = self._first_free(pk, message)
                if free is None:
                    return None  # stored further on by an earlier attempt of this turn
                # Another writer may take `free` first: the next attempt sees that and looks again.
                seq = free
                continue
            return entry
        raise ConcurrencyConflict(
            f"outbox of session {message.session_id}: no free seq after {self._MAX_ATTEMPTS} attempts"
        )

    def _first_free(self, pk: str, message: OutboundMessage) -> int | None:
        """The first seq from message.seq that no entry holds; None if this part holds one."""
        items = self.query(
            KeyConditionExpression="pk = :pk AND sk BETWEEN :lo AND :hi",
            ExpressionAttributeValues={
                ":pk": string(pk),
                ":lo": string(f"SEQ#{seq_key(message.seq)}"),
                ":hi": string(f"SEQ#{seq_key(message.seq + self.MAX_PROBES)}"),
            },
            ConsistentRead=True,
        )
        taken: set[int] = set()
        for item in items:
            if self._is(item, message):
                return None
            taken.add(int(str(item["sk"]["S"]).removeprefix("SEQ#")))
        for seq in range(message.seq, message.seq + self.MAX_PROBES):
            if seq not in taken:
                return seq
        raise SigilError(
            f"outbox of session {message.session_id}: no free seq after {message.seq}", code="outbox_full"
        )

    def read(
        self, workspace_id: str, session_id: str, *, after_seq: int = 0, limit: int = 100
    ) -> list[OutboxEntry]:
        # Consistent: a client polling right after a reply was stored must see it.
        items = self.query(
            limit,
            KeyConditionExpression="pk = :pk AND sk BETWEEN :lo AND :hi",
            ExpressionAttributeValues={
                ":pk": string(self._pk(workspace_id, session_id)),
                ":lo": string(f"SEQ#{seq_key(max(after_seq, -1) + 1)}"),
                ":hi": string("SEQ#~"),  # '~' sorts after every digit
            },
            ConsistentRead=True,
        )
        return load_docs(items, OutboxEntry)

    def delete_session(self, workspace_id: str, session_id: str) -> int:
        # Every item of the session's partition, legacy COUNTER / SENT# items included: one
        # keys-only Query, then BatchWriteItem.
        keys = [
            item_key(str(item["pk"]["S"]), str(item["sk"]["S"]))
            for item in self.query(
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": string(self._pk(workspace_id, session_id))},
                ProjectionExpression="pk, sk",
                ConsistentRead=True,
            )
        ]
        self.batch_write([{"DeleteRequest": {"Key": key}} for key in keys])
        return sum(1 for key in keys if str(key["sk"]["S"]).startswith("SEQ#"))

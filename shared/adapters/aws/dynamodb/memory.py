"""Memory tiers 1-3 in the memory table."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from shared import serde
from shared.adapters.aws.dynamodb.retry import error_code
from shared.adapters.aws.dynamodb.table import (
    GSI1,
    GSI2,
    Item,
    Table,
    check_workspace,
    dump_doc,
    item_key,
    key_part,
    load_docs,
    newest_first,
    seq_key,
    string,
    ts,
    ws_prefix,
)
from shared.memory.keys import normalize_key
from shared.models import MemoryRecord, Summary, Triple

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient


def tier1_pk(workspace_id: str, session_id: str) -> str:
    return f"{ws_prefix(workspace_id)}#SESSION#{session_id}"


def tier1_items(workspace_id: str, records: Sequence[MemoryRecord]) -> list[Item]:
    """Tier-1 items (DynamoMemoryStore.append_messages and DynamoSessionStore.save write them)."""
    for record in records:
        check_workspace(workspace_id, record.workspace_id, f"memory record {record.id}")
    items: dict[tuple[str, str], Item] = {}
    for record in records:
        pk = tier1_pk(workspace_id, record.session_id)
        sk = f"MSG#{seq_key(record.seq)}#{record.id}"
        # A transaction may not name one key twice; the first occurrence wins, as in storage.
        items.setdefault((pk, sk), item_key(pk, sk) | {"doc": dump_doc(record)})
    return list(items.values())


class DynamoMemoryStore(Table):
    """Tiers 1-3 in the memory table.

    - Tier 1: pk `WS#{ws}#SESSION#{s}`, sk `MSG#{seq:012}#{id}`: a session's messages in seq order,
      read with strong consistency.
    - Tier 2: pk `WS#{ws}#SUMMARY#{id}` (upsert by id); GSI1 `WS#{ws}#SUMMARIES` and GSI2
      `WS#{ws}#SESSION#{s}#SUMMARIES`, both sorted `SUM#{start_at}#{id}`.
    - Tier 3: pk `WS#{ws}#TRIPLES`, sk `TRIPLE#{id}`: one item collection per workspace, so
      upsert and delete by id are single-key writes and `list_triples` pages through it in id
      order. Only an active triple carries GSI1 `WS#{ws}#SUBJECT#{key}` and GSI2
      `WS#{ws}#OBJECT#{key}` (keys normalised by shared.memory.keys, sorted newest first): the
      indexes are sparse, so merged and pruned triples drop out of recall in the same PutItem
      that changes their status, with no filter on the read.

    Batched writes (put_triples, delete_triples, delete_summaries, delete_messages) go through
    BatchWriteItem, 25 requests a call, resubmitting what DynamoDB leaves unprocessed.
    """

    def __init__(
        self, table_name: str, *, client: DynamoDBClient | None = None, region: str | None = None
    ) -> None:
        super().__init__(table_name, client, region)

    @staticmethod
    def _session_pk(workspace_id: str, session_id: str) -> str:
        return tier1_pk(workspace_id, session_id)

    # ---- Tier 1

    def append_messages(self, workspace_id: str, records: Sequence[MemoryRecord]) -> None:
        # First write wins: a redelivered turn re-appending its roll-out neither duplicates nor
        # rewrites what was stored.
        self.put_new(tier1_items(workspace_id, records))

    def get_messages(
        self, workspace_id: str, session_id: str, *, after_seq: int = -1, limit: int = 100
    ) -> list[MemoryRecord]:
        items = self.query(
            limit,
            KeyConditionExpression="pk = :pk AND sk BETWEEN :lo AND :hi",
            ExpressionAttributeValues={
                ":pk": string(self._session_pk(workspace_id, session_id)),
                ":lo": string(f"MSG#{seq_key(max(after_seq, -1) + 1)}"),
                ":hi": string("MSG#~"),
            },
            ConsistentRead=True,
        )
        return load_docs(items, MemoryRecord)

    def recent_messages(self, workspace_id: str, session_id: str, *, limit: int = 20) -> list[MemoryRecord]:
        items = self.query(
            limit,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={
                ":pk": string(self._session_pk(workspace_id, session_id)),
                ":prefix": string("MSG#"),
            },
            ScanIndexForward=False,
            ConsistentRead=True,
        )
        return load_docs(items, MemoryRecord)[::-1]

    def count_messages(self, workspace_id: str, session_id: str) -> int:
        # Select=COUNT still reads the items (Tier 1 keeps ~1000 a session: one or two pages).
        params: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :prefix)",
            "ExpressionAttributeValues": {
                ":pk": string(self._session_pk(workspace_id, session_id)),
                ":prefix": string("MSG#"),
            },
            "Select": "COUNT",
            "ConsistentRead": True,
        }
        total = 0
        while True:
            page = self.client.query(**params)
            total += page["Count"]
            if "LastEvaluatedKey" not in page:
                return total
            params["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    # ---- Tier 2

    def put_summary(self, summary: Summary) -> None:
        ws = ws_prefix(summary.workspace_id)
        order = f"SUM#{ts(summary.start_at)}#{summary.id}"
        item = item_key(f"{ws}#SUMMARY#{summary.id}", "SUMMARY") | {
            "doc": dump_doc(summary),
            "end_at": string(ts(summary.end_at)),
            "gsi1pk": string(f"{ws}#SUMMARIES"),
            "gsi1sk": string(order),
            "gsi2pk": string(f"{self._session_pk(summary.workspace_id, summary.session_id)}#SUMMARIES"),
            "gsi2sk": string(order),
        }
        self.client.put_item(TableName=self.table, Item=item)

    def list_summaries(
        self,
        workspace_id: str,
        *,
        session_id: str | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        limit: int = 50,
    ) -> list[Summary]:
        # Both indexes sort by start_at, so "oldest first" is key order and the range's end bounds
        # the key. The range's start can only filter on end_at (a summary that began long before
        # may still overlap it), so a range far from the beginning reads the older summaries too:
        # Tier 2 holds one summary per ~50 messages, a few thousand for a long-lived workspace.
        if session_id is None:
            index, pk_name, sk_name = GSI1, "gsi1pk", "gsi1sk"
            pk_value = f"{ws_prefix(workspace_id)}#SUMMARIES"
        else:
            index, pk_name, sk_name = GSI2, "gsi2pk", "gsi2sk"
            pk_value = f"{self._session_pk(workspace_id, session_id)}#SUMMARIES"
        # '~' sorts after the '#' that follows the timestamp, so a summary starting at `end` is in.
        values: dict[str, Any] = {
            ":pk": string(pk_value),
            ":lo": string("SUM#"),
            ":hi": string(f"SUM#{ts(end)}~" if end is not None else "SUM#~"),
        }
        params: dict[str, Any] = {
            "IndexName": index,
            "KeyConditionExpression": f"{pk_name} = :pk AND {sk_name} BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": values,
        }
        if start is not None:
            params["FilterExpression"] = "#end_at >= :start"
            params["ExpressionAttributeNames"] = {"#end_at": "end_at"}
            values[":start"] = string(ts(start))
        return load_docs(self.query(limit, **params), Summary)

    def delete_summaries(self, workspace_id: str, ids: Sequence[str]) -> None:
        ws = ws_prefix(workspace_id)
        self.batch_write([{"DeleteRequest": {"Key": item_key(f"{ws}#SUMMARY#{i}", "SUMMARY")}} for i in ids])

    def delete_messages(self, workspace_id: str, session_id: str, ids: Sequence[str] | None = None) -> int:
        # The sort key holds the id after `MSG#{seq:012}#`, so one keys-only Query of the session's
        # partition finds what to delete without reading a document.
        wanted = None if ids is None else set(ids)
        keys = [
            item_key(str(item["pk"]["S"]), str(item["sk"]["S"]))
            for item in self.query(
                KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
                ExpressionAttributeValues={
                    ":pk": string(self._session_pk(workspace_id, session_id)),
                    ":prefix": string("MSG#"),
                },
                ProjectionExpression="pk, sk",
                ConsistentRead=True,
            )
            if wanted is None or str(item["sk"]["S"])[len("MSG#") + 13 :] in wanted
        ]
        self.batch_write([{"DeleteRequest": {"Key": key}} for key in keys])
        return len(keys)

    # ---- Tier 3

    @staticmethod
    def _triple_key(workspace_id: str, triple_id: str) -> Item:
        return item_key(f"{ws_prefix(workspace_id)}#TRIPLES", f"TRIPLE#{triple_id}")

    def _triple_item(self, triple: Triple) -> Item:
        ws = ws_prefix(triple.workspace_id)
        item = self._triple_key(triple.workspace_id, triple.id) | {"doc": dump_doc(triple)}
        if triple.status == "active":
            order = f"{newest_first(triple.updated_at)}#{triple.id}"
            item |= {
                "gsi1pk": string(f"{ws}#SUBJECT#{key_part(normalize_key(triple.subject))}"),
                "gsi1sk": string(order),
                "gsi2pk": string(f"{ws}#OBJECT#{key_part(normalize_key(triple.object))}"),
                "gsi2sk": string(order),
            }
        return item

    def put_triple(self, triple: Triple) -> None:
        self.client.put_item(TableName=self.table, Item=self._triple_item(triple))

    def replace_triple(self, expected: Triple, new: Triple) -> bool:
        check_workspace(expected.workspace_id, new.workspace_id, f"triple {new.id}")
        if new.id != expected.id:
            raise ValueError(f"replacing triple {expected.id} with another id, {new.id}")
        # The stored document as it is now, compared as a model (a document stored before a field
        # was added still matches what was read from it); then the put is conditional on that
        # exact text, so a change in between (a merge, a prune, another recall) fails it.
        item = self.client.get_item(
            TableName=self.table,
            Key=self._triple_key(expected.workspace_id, expected.id),
            ConsistentRead=True,
        ).get("Item")
        if item is None or serde.loads(Triple, item["doc"]["S"]) != expected:
            return False
        try:
            self.client.put_item(
                TableName=self.table,
                Item=self._triple_item(new),
                ConditionExpression="#doc = :stored",
                ExpressionAttributeNames={"#doc": "doc"},
                ExpressionAttributeValues={":stored": item["doc"]},
            )
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def put_triples(self, workspace_id: str, triples: Sequence[Triple]) -> None:
        for triple in triples:
            check_workspace(workspace_id, triple.workspace_id, f"triple {triple.id}")
        # BatchWriteItem refuses two requests for one key: the last version of a triple wins, as
        # it would with one put after another.
        latest = {triple.id: triple for triple in triples}
        self.batch_write([{"PutRequest": {"Item": self._triple_item(t)}} for t in latest.values()])

    def list_triples(self, workspace_id: str, *, after: str | None = None, limit: int = 500) -> list[Triple]:
        pk = string(f"{ws_prefix(workspace_id)}#TRIPLES")
        if after is None:
            condition, values = "pk = :pk AND begins_with(sk, :lo)", {":pk": pk, ":lo": string("TRIPLE#")}
        else:
            # Every sort key of the partition starts with TRIPLE#, and DynamoDB compares keys as
            # UTF-8 bytes, the order of SQLite's BINARY collation and of Python's str: one order.
            condition, values = "pk = :pk AND sk > :lo", {":pk": pk, ":lo": string(f"TRIPLE#{after}")}
        items = self.query(
            limit, KeyConditionExpression=condition, ExpressionAttributeValues=values, ConsistentRead=True
        )
        return load_docs(items, Triple)

    def triples_by_subject(self, workspace_id: str, subject: str, *, limit: int = 50) -> list[Triple]:
        return self._triples(GSI1, "gsi1pk", f"{ws_prefix(workspace_id)}#SUBJECT#", subject, limit)

    def triples_by_object(self, workspace_id: str, obj: str, *, limit: int = 50) -> list[Triple]:
        return self._triples(GSI2, "gsi2pk", f"{ws_prefix(workspace_id)}#OBJECT#", obj, limit)

    def _triples(self, index: str, pk_name: str, prefix: str, value: str, limit: int) -> list[Triple]:
        key = normalize_key(value)
        if not key:
            return []
        items = self.query(
            limit,
            IndexName=index,
            KeyConditionExpression=f"{pk_name} = :pk",
            ExpressionAttributeValues={":pk": string(prefix + key_part(key))},
        )
        return load_docs(items, Triple)

    def delete_triple(self, workspace_id: str, triple_id: str) -> None:
        self.client.delete_item(TableName=self.table, Key=self._triple_key(workspace_id, triple_id))

    def delete_triples(self, workspace_id: str, ids: Sequence[str]) -> None:
        unique = dict.fromkeys(ids)
        self.batch_write([{"DeleteRequest": {"Key": self._triple_key(workspace_id, i)}} for i in unique])

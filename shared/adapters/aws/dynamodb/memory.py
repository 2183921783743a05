"""Memory tiers 1-3 in the memory table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
from shared.models import MemoryRecord, MemoryScope, MemoryTier, RecallScope, Summary, Triple

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient


# Message keys remembered from `unscoped` for `stamp_scopes` (a message's key needs its session
# and seq, which the port's id -> scope mapping does not carry); bounded, as a Lambda lives long.
_KEYS_REMEMBERED = 10_000


def scope_attributes(scope: MemoryScope | None) -> Item:
    """The attributes `scope_filter` matches: `scoped` marks a record written with a scope (its
    absence is what `unscoped` finds), and each clause's attribute is present only when it can
    match (DynamoDB refuses an empty string set)."""
    if scope is None:
        return {}
    item: Item = {"scoped": {"BOOL": True}}
    if scope.conversation is not None:
        item["scope_conv"] = string(scope.conversation)
    if scope.users:
        item["scope_users"] = {"SS": list(scope.users)}
    if scope.shared:
        item["scope_shared"] = {"BOOL": True}
    return item


def scope_filter(scope: RecallScope, session_clause: str) -> tuple[str, dict[str, Any]] | None:
    """shared.memory.scope.visible as a FilterExpression: (condition, its values); ("", {}) for a
    workspace-wide scope; None when the scope admits nothing. `session_clause` compares the
    item's session with `:scope_sid`.

    A FilterExpression is applied by DynamoDB to each page before it is returned: the store's own
    query, and `Table.query` reads on until `limit` items passed it or the key range ends.
    """
    if scope.workspace_wide:
        return "", {}
    clauses: list[str] = []
    values: dict[str, Any] = {}
    if scope.session_id is not None:
        clauses.append(session_clause)
        values[":scope_sid"] = string(scope.session_id)
    if scope.conversation is not None:
        clauses.append("scope_conv = :scope_conv")
        values[":scope_conv"] = string(scope.conversation)
    for i, user in enumerate(scope.users):
        clauses.append(f"contains(scope_users, :scope_u{i})")
        values[f":scope_u{i}"] = string(user)
    if scope.shared:
        clauses.append("scope_shared = :scope_true")
        values[":scope_true"] = {"BOOL": True}
    if not clauses:
        return None
    return "(" + " OR ".join(clauses) + ")", values


def _with_filter(params: dict[str, Any], condition: str, values: Mapping[str, Any]) -> None:
    if not condition:
        return
    existing = params.get("FilterExpression")
    params["FilterExpression"] = f"({existing}) AND {condition}" if existing else condition
    params.setdefault("ExpressionAttributeValues", {}).update(values)


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
        items.setdefault(
            (pk, sk), item_key(pk, sk) | {"doc": dump_doc(record)} | scope_attributes(record.scope)
        )
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

    Scopes: summaries and triples carry `scoped`, `scope_conv`, `scope_users` (a string set),
    `scope_shared` and their session (`sid`; a summary's is also in its GSI2 key), and every read
    across sessions sends shared.memory.scope.visible as a FilterExpression (`scope_filter`).
    Records written before scopes have none of these: their own session and workspace-wide reads
    reach them (a triple's own session only once the backfill gives it `sid`).

    Batched writes (put_triples, delete_triples, delete_summaries, delete_messages) go through
    BatchWriteItem, 25 requests a call, resubmitting what DynamoDB leaves unprocessed.
    """

    def __init__(
        self, table_name: str, *, client: DynamoDBClient | None = None, region: str | None = None
    ) -> None:
        super().__init__(table_name, client, region)
        self._unscoped_cursor: dict[str, Item] = {}
        self._message_keys: dict[tuple[str, str], Item] = {}

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
        self.client.put_item(TableName=self.table, Item=self._summary_item(summary))

    def _summary_item(self, summary: Summary) -> Item:
        ws = ws_prefix(summary.workspace_id)
        order = f"SUM#{ts(summary.start_at)}#{summary.id}"
        return (
            item_key(f"{ws}#SUMMARY#{summary.id}", "SUMMARY")
            | scope_attributes(summary.scope)
            | {
                "doc": dump_doc(summary),
                "end_at": string(ts(summary.end_at)),
                "gsi1pk": string(f"{ws}#SUMMARIES"),
                "gsi1sk": string(order),
                "gsi2pk": string(f"{self._session_pk(summary.workspace_id, summary.session_id)}#SUMMARIES"),
                "gsi2sk": string(order),
            }
        )

    def list_summaries(
        self,
        workspace_id: str,
        *,
        scope: RecallScope,
        session_id: str | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        limit: int = 50,
    ) -> list[Summary]:
        # A summary's session is in its GSI2 key, written before scopes existed too.
        visible = scope_filter(scope, "gsi2pk = :scope_sid")
        if visible is None:
            return []
        if scope.session_id is not None:
            visible[1][":scope_sid"] = string(f"{self._session_pk(workspace_id, scope.session_id)}#SUMMARIES")
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
        _with_filter(params, *visible)
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
        item |= scope_attributes(triple.scope)
        if triple.session_id is not None:
            item["sid"] = string(triple.session_id)
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

    def list_triples(
        self, workspace_id: str, *, scope: RecallScope, after: str | None = None, limit: int = 500
    ) -> list[Triple]:
        visible = scope_filter(scope, "sid = :scope_sid")
        if visible is None:
            return []
        pk = string(f"{ws_prefix(workspace_id)}#TRIPLES")
        if after is None:
            condition, values = "pk = :pk AND begins_with(sk, :lo)", {":pk": pk, ":lo": string("TRIPLE#")}
        else:
            # Every sort key of the partition starts with TRIPLE#, and DynamoDB compares keys as
            # UTF-8 bytes, the order of SQLite's BINARY collation and of Python's str: one order.
            condition, values = "pk = :pk AND sk > :lo", {":pk": pk, ":lo": string(f"TRIPLE#{after}")}
        params: dict[str, Any] = {
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ConsistentRead": True,
        }
        _with_filter(params, *visible)
        return load_docs(self.query(limit, **params), Triple)

    def triples_by_subject(
        self, workspace_id: str, subject: str, *, scope: RecallScope, limit: int = 50
    ) -> list[Triple]:
        return self._triples(
            GSI1, "gsi1pk", f"{ws_prefix(workspace_id)}#SUBJECT#", subject, scope=scope, limit=limit
        )

    def triples_by_object(
        self, workspace_id: str, obj: str, *, scope: RecallScope, limit: int = 50
    ) -> list[Triple]:
        return self._triples(
            GSI2, "gsi2pk", f"{ws_prefix(workspace_id)}#OBJECT#", obj, scope=scope, limit=limit
        )

    def _triples(
        self, index: str, pk_name: str, prefix: str, value: str, *, scope: RecallScope, limit: int
    ) -> list[Triple]:
        key = normalize_key(value)
        visible = scope_filter(scope, "sid = :scope_sid")
        if not key or visible is None:
            return []
        params: dict[str, Any] = {
            "IndexName": index,
            "KeyConditionExpression": f"{pk_name} = :pk",
            "ExpressionAttributeValues": {":pk": string(prefix + key_part(key))},
        }
        _with_filter(params, *visible)
        return load_docs(self.query(limit, **params), Triple)

    def delete_triple(self, workspace_id: str, triple_id: str) -> None:
        self.client.delete_item(TableName=self.table, Key=self._triple_key(workspace_id, triple_id))

    def delete_triples(self, workspace_id: str, ids: Sequence[str]) -> None:
        unique = dict.fromkeys(ids)
        self.batch_write([{"DeleteRequest": {"Key": self._triple_key(workspace_id, i)}} for i in unique])

    # ---- scopes

    def unscoped(self, workspace_id: str, *, limit: int = 200) -> list[MemoryRecord | Summary | Triple]:
        ws = ws_prefix(workspace_id)
        found: list[MemoryRecord | Summary | Triple] = []
        # Triples and summaries each have a workspace-wide key: a Query with a filter.
        found += load_docs(
            self.query(
                limit,
                KeyConditionExpression="pk = :pk",
                FilterExpression="attribute_not_exists(scoped)",
                ExpressionAttributeValues={":pk": string(f"{ws}#TRIPLES")},
                ConsistentRead=True,
            ),
            Triple,
        )
        if len(found) < limit:
            found += load_docs(
                self.query(
                    limit - len(found),
                    IndexName=GSI1,
                    KeyConditionExpression="gsi1pk = :pk",
                    FilterExpression="attribute_not_exists(scoped)",
                    ExpressionAttributeValues={":pk": string(f"{ws}#SUMMARIES")},
                ),
                Summary,
            )
        if len(found) < limit:
            found += self._unscoped_messages(workspace_id, limit - len(found))
        return found

    def _unscoped_messages(self, workspace_id: str, limit: int) -> list[MemoryRecord]:
        """Tier-1 messages without a scope. They have no workspace-wide key, so this is a Scan of
        the table, filtered: a one-off for a deployment's backfill. Where a call stopped is
        remembered per workspace, so paging through the backfill scans the table about once, not
        once per page; a page cut short is read again from its start (its stamped items then
        drop out of the filter)."""
        params: dict[str, Any] = {
            "TableName": self.table,
            "FilterExpression": (
                "begins_with(pk, :pk) AND begins_with(sk, :msg) AND attribute_not_exists(scoped)"
            ),
            "ExpressionAttributeValues": {
                ":pk": string(f"{ws_prefix(workspace_id)}#SESSION#"),
                ":msg": string("MSG#"),
            },
        }
        cursors = self._unscoped_cursor
        start = cursors.pop(workspace_id, None)
        from_beginning = start is None
        keys = self._message_keys
        found: list[MemoryRecord] = []
        while True:
            if start is not None:
                params["ExclusiveStartKey"] = start
            else:
                params.pop("ExclusiveStartKey", None)
            page = self.client.scan(**params)
            items = page.get("Items", [])
            if len(found) + len(items) > limit:
                items = items[: limit - len(found)]
                if start is not None:
                    cursors[workspace_id] = start
            for item in items:
                record: MemoryRecord = serde.loads(MemoryRecord, item["doc"]["S"])
                if len(keys) >= _KEYS_REMEMBERED:
                    keys.clear()
                keys[(workspace_id, record.id)] = item_key(str(item["pk"]["S"]), str(item["sk"]["S"]))
                found.append(record)
            if len(found) >= limit:
                return found
            last = page.get("LastEvaluatedKey")
            if last is not None:
                start = last
                continue
            if from_beginning:
                return found
            # Reached the end from a remembered cursor: what lies before it is read once more.
            from_beginning, start = True, None

    def stamp_scopes(self, workspace_id: str, scopes: Mapping[str, tuple[MemoryTier, MemoryScope]]) -> int:
        ws = ws_prefix(workspace_id)
        remembered = self._message_keys
        keys: list[Item] = []
        for record_id, (tier, _) in scopes.items():
            if tier == "fact":
                keys.append(self._triple_key(workspace_id, record_id))
            elif tier == "summary":
                keys.append(item_key(f"{ws}#SUMMARY#{record_id}", "SUMMARY"))
            elif (key := remembered.get((workspace_id, record_id))) is not None:
                keys.append(key)
            else:
                keys.extend(self._find_message_keys(workspace_id, [record_id]))
        stamped = 0
        for item in self.batch_get(keys) if keys else []:
            if not str(item["pk"]["S"]).startswith(f"{ws}#"):
                continue
            new = self._stamped(item, scopes)
            if new is None:
                continue
            try:
                # Conditional on the document read: a write in between wins, and the record is
                # found again by the next backfill pass if it is still without a scope.
                self.client.put_item(
                    TableName=self.table,
                    Item=new,
                    ConditionExpression="#doc = :stored",
                    ExpressionAttributeNames={"#doc": "doc"},
                    ExpressionAttributeValues={":stored": item["doc"]},
                )
            except ClientError as exc:
                if error_code(exc) == "ConditionalCheckFailedException":
                    continue
                raise
            stamped += 1
        return stamped

    def _stamped(self, item: Item, scopes: Mapping[str, tuple[MemoryTier, MemoryScope]]) -> Item | None:
        sk = str(item["sk"]["S"])
        if sk.startswith("TRIPLE#"):
            triple: Triple = serde.loads(Triple, item["doc"]["S"])
            tier_scope = scopes.get(triple.id)
            if tier_scope is None or tier_scope[0] != "fact":
                return None
            return self._triple_item(triple.model_copy(update={"scope": tier_scope[1]}))
        if sk == "SUMMARY":
            summary: Summary = serde.loads(Summary, item["doc"]["S"])
            tier_scope = scopes.get(summary.id)
            if tier_scope is None or tier_scope[0] != "summary":
                return None
            return self._summary_item(summary.model_copy(update={"scope": tier_scope[1]}))
        record: MemoryRecord = serde.loads(MemoryRecord, item["doc"]["S"])
        tier_scope = scopes.get(record.id)
        if tier_scope is None or tier_scope[0] != "message":
            return None
        stamped = record.model_copy(update={"scope": tier_scope[1]})
        return dict(item) | {"doc": dump_doc(stamped)} | scope_attributes(stamped.scope)

    def _find_message_keys(self, workspace_id: str, ids: Sequence[str]) -> list[Item]:
        """The keys of Tier-1 messages by id alone: a Scan (their key needs session and seq).
        Only for ids `unscoped` did not hand out in this process."""
        # DynamoDB has no ends_with: the keys are read (projected) and the id after `MSG#{seq}#`
        # compared here.
        wanted = set(ids)
        found: list[Item] = []
        scan: dict[str, Any] = {
            "TableName": self.table,
            "FilterExpression": "begins_with(pk, :pk) AND begins_with(sk, :msg)",
            "ExpressionAttributeValues": {
                ":pk": string(f"{ws_prefix(workspace_id)}#SESSION#"),
                ":msg": string("MSG#"),
            },
            "ProjectionExpression": "pk, sk",
        }
        while wanted:
            page = self.client.scan(**scan)
            for item in page.get("Items", []):
                sk = str(item["sk"]["S"])
                record_id = sk[len("MSG#") + 13 :]
                if record_id in wanted:
                    wanted.discard(record_id)
                    found.append(item_key(str(item["pk"]["S"]), sk))
            last = page.get("LastEvaluatedKey")
            if not last:
                break
            scan["ExclusiveStartKey"] = last
        return found

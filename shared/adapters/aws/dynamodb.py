"""DynamoDB adapters: sessions, memory tiers 1-3, the web outbox (send ledger), workspaces, audit,
identities.

Two tables, one per concern (docs/dynamodb.md has the whole key design):

- the sessions table (pk, sk; no index) holds what a turn reads and writes under a condition:
  sessions (optimistic concurrency on `version`) and the outbox with its send ledger;
- the memory table (pk, sk, GSI1, GSI2, TTL on `ttl`) holds what has secondary access paths or
  expires: Tier-1 messages, Tier-2 summaries, Tier-3 triples, workspace configs, audit records,
  identities (a pending one's pairing code is its GSI1 key).

Every base-table partition key begins with `WS#{workspace}`, and workspace ids cannot contain
`#` (shared.models.ID_PATTERN), so no key built for one workspace can address another's items.
Each item stores its document as serde JSON text in `doc` plus only the attributes a key,
condition or filter needs; the document, not those attributes, is what a read returns.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, TypeVar

from botocore.exceptions import ClientError

from shared import serde
from shared.adapters.aws import clients
from shared.adapters.aws.budgets import charge_updates, counter_key, counters_of
from shared.budgets import BudgetCharge, Counters
from shared.clock import epoch_seconds
from shared.errors import ConcurrencyConflict, SigilError
from shared.memory.keys import normalize_key
from shared.models import (
    AuditRecord,
    Identity,
    IdentityStatus,
    MemoryRecord,
    OutboundMessage,
    OutboxEntry,
    Session,
    Summary,
    Triple,
    WorkspaceConfig,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import PutTypeDef, TransactWriteItemTypeDef

Item = dict[str, Any]
T = TypeVar("T")

GSI1: Final = "GSI1"
GSI2: Final = "GSI2"
TTL_ATTRIBUTE: Final = "ttl"


def _key_schema(pk: str, sk: str) -> list[dict[str, str]]:
    return [{"AttributeName": pk, "KeyType": "HASH"}, {"AttributeName": sk, "KeyType": "RANGE"}]


def _gsi(name: str, pk: str, sk: str) -> dict[str, Any]:
    # ALL: a GSI query returns the `doc` itself, so no read goes back to the base table.
    return {"IndexName": name, "KeySchema": _key_schema(pk, sk), "Projection": {"ProjectionType": "ALL"}}


# The key schema of both tables, in the shape `create_table` takes (plus TableName). The CDK stack
# declares the same keys; tests build their moto tables from this dict so the two cannot drift
# apart unnoticed. TTL is not a create_table argument: see `create_tables`.
TABLE_SCHEMAS: Final[dict[str, dict[str, Any]]] = {
    "sessions": {
        "KeySchema": _key_schema("pk", "sk"),
        "AttributeDefinitions": [
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        "BillingMode": "PAY_PER_REQUEST",
    },
    "memory": {
        "KeySchema": _key_schema("pk", "sk"),
        "AttributeDefinitions": [
            {"AttributeName": name, "AttributeType": "S"}
            for name in ("pk", "sk", "gsi1pk", "gsi1sk", "gsi2pk", "gsi2sk")
        ],
        "GlobalSecondaryIndexes": [_gsi(GSI1, "gsi1pk", "gsi1sk"), _gsi(GSI2, "gsi2pk", "gsi2sk")],
        "BillingMode": "PAY_PER_REQUEST",
    },
}
TABLE_TTL: Final[dict[str, str | None]] = {"sessions": None, "memory": TTL_ATTRIBUTE}

# DynamoDB's item limit is 400 KB including attribute names and key values. A session's active
# window (20 messages by default) is far below it unless tool results are huge; keep headroom for
# the keys and say clearly what happened instead of surfacing a ValidationException.
MAX_DOC_BYTES: Final = 390 * 1024
AUDIT_RETENTION_DAYS: Final = 400
# Key parts longer than this are replaced by a digest: partition keys may be 2048 bytes and sort
# keys 1024, and a triple's object may be 2048 characters.
_MAX_KEY_PART_BYTES: Final = 512
# TransactWriteItems takes at most 100 actions and 4 MB; BatchGetItem at most 100 keys.
_TRANSACT_MAX_ITEMS: Final = 100
_TRANSACT_MAX_BYTES: Final = 3 * 1024 * 1024
_BATCH_GET_MAX: Final = 100
_BATCH_WRITE_MAX: Final = 25
_RETRIES: Final = 8


def create_tables(client: DynamoDBClient, *, sessions_table: str, memory_table: str) -> None:
    """Create both tables from TABLE_SCHEMAS (moto in tests and the local stack; CDK in the cloud)."""
    for kind, name in (("sessions", sessions_table), ("memory", memory_table)):
        client.create_table(TableName=name, **TABLE_SCHEMAS[kind])
        ttl = TABLE_TTL[kind]
        if ttl is not None:
            client.update_time_to_live(
                TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl}
            )


# ---------------------------------------------------------------- key helpers


def _ws(workspace_id: str) -> str:
    return f"WS#{workspace_id}"


def _part(value: str) -> str:
    """A free-text key part (triple subject/object, turn id): itself when short, a digest when not.

    The `V#` / `H#` prefix keeps a literal value from ever equalling another value's digest.
    """
    raw = value.encode()
    if len(raw) <= _MAX_KEY_PART_BYTES:
        return f"V#{value}"
    return f"H#{hashlib.sha256(raw).hexdigest()}"


def _utc(value: datetime) -> datetime:
    # Models carry aware datetimes; a naive one read from old data is taken as UTC, as in SQLite.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _ts(value: datetime) -> str:
    """Fixed-width UTC text, so string order in a sort key is time order."""
    return _utc(value).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _newest_first(value: datetime) -> str:
    """A sort-key prefix that sorts newest first in an ascending Query.

    Ascending on this and then on the id gives "newest first, ties by id ascending", the order the
    embedded store uses; a descending Query would reverse the tie-break too.
    """
    micros = int(_utc(value).timestamp() * 1_000_000)
    return f"{10**17 - micros:017d}"


def _seq(value: int) -> str:
    return f"{value:012d}"


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def _n(value: int) -> dict[str, str]:
    return {"N": str(value)}


def _key(pk: str, sk: str) -> Item:
    return {"pk": _s(pk), "sk": _s(sk)}


def _doc(value: Any) -> dict[str, str]:
    text = serde.dumps(value)
    size = len(text.encode())
    if size > MAX_DOC_BYTES:
        raise SigilError(
            f"{type(value).__name__} is {size} bytes serialised; a DynamoDB item holds at most 400 KB",
            code="item_too_large",
        )
    return _s(text)


def _docs(items: Iterator[Item] | list[Item], tp: type[T]) -> list[T]:
    return [serde.loads(tp, item["doc"]["S"]) for item in items]


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _cancellation_codes(exc: ClientError) -> list[str]:
    """Per-action reasons of a cancelled transaction, in the order the actions were sent."""
    reasons: list[Any] = list(exc.response.get("CancellationReasons", []))
    return [str(reason.get("Code", "None")) for reason in reasons]


def _size(item: Mapping[str, Any]) -> int:
    # An estimate (the JSON text dominates an item), well inside the 4 MB transaction limit.
    return sum(len(str(v)) for v in item.values())


def _check_workspace(expected: str, actual: str, what: str) -> None:
    # A record carrying another workspace's id is a caller bug that would leak data across
    # workspaces if stored under the caller's scope, so it is refused (as the embedded store does).
    if actual != expected:
        raise ValueError(f"{what} belongs to workspace {actual!r}, not {expected!r}")


class _Table:
    """One table's name and client, and the paging and batching every store needs."""

    def __init__(self, table_name: str, client: DynamoDBClient | None, region: str | None) -> None:
        self.table = table_name
        self.client = client if client is not None else clients.dynamodb(region)

    def query(self, limit: int | None = None, **params: Any) -> Iterator[Item]:
        """Items of a Query, following LastEvaluatedKey; stops after `limit` items when given.

        A page Limit counts items before a FilterExpression drops them, so with a filter no page
        Limit is sent and paging continues until `limit` items passed it or the range ends.
        """
        if limit is not None and limit <= 0:
            return
        params["TableName"] = self.table
        if limit is not None and "FilterExpression" not in params:
            params["Limit"] = limit
        yielded = 0
        while True:
            page = self.client.query(**params)
            for item in page.get("Items", []):
                yield item
                yielded += 1
                if limit is not None and yielded >= limit:
                    return
            last = page.get("LastEvaluatedKey")
            if not last:
                return
            params["ExclusiveStartKey"] = last

    def put_new(self, items: Sequence[Item]) -> None:
        """Write each item unless its key exists already: the first write of a key wins.

        One TransactWriteItems per chunk (up to 100 items, one round trip for a turn's roll-out)
        with `attribute_not_exists(pk)` on every Put. A transaction is all-or-nothing, so when it
        is cancelled the items whose condition failed are dropped (they are stored already) and
        the rest are sent again.
        """
        for chunk in self._chunks(items):
            pending = chunk
            for attempt in range(_RETRIES):
                try:
                    self.client.transact_write_items(
                        TransactItems=[
                            {
                                "Put": {
                                    "TableName": self.table,
                                    "Item": item,
                                    "ConditionExpression": "attribute_not_exists(pk)",
                                }
                            }
                            for item in pending
                        ]
                    )
                    break
                except ClientError as exc:
                    if _error_code(exc) != "TransactionCanceledException":
                        raise
                    codes = _cancellation_codes(exc)
                    if len(codes) == len(pending):
                        kept = [
                            item
                            for item, code in zip(pending, codes, strict=True)
                            if code != "ConditionalCheckFailed"
                        ]
                    else:
                        kept = pending  # no per-item reasons: send them all again
                    if len(kept) == len(pending):
                        # No condition failed: a conflicting transaction or throttling. Back off.
                        time.sleep(min(0.05 * 2**attempt, 1.0))
                    pending = kept
                    if not pending:
                        break
            else:
                raise SigilError(
                    f"DynamoDB did not accept {len(pending)} items after {_RETRIES} attempts",
                    code="store_unavailable",
                )

    @staticmethod
    def _chunks(items: Sequence[Item]) -> Iterator[list[Item]]:
        chunk: list[Item] = []
        size = 0
        for item in items:
            item_size = _size(item)
            if chunk and (len(chunk) == _TRANSACT_MAX_ITEMS or size + item_size > _TRANSACT_MAX_BYTES):
                yield chunk
                chunk, size = [], 0
            chunk.append(item)
            size += item_size
        if chunk:
            yield chunk

    def batch_write(self, requests: Sequence[Item]) -> None:
        """BatchWriteItem, 25 requests a call; what comes back unprocessed is sent again after a
        backoff (throttling), up to _RETRIES times."""
        for start in range(0, len(requests), _BATCH_WRITE_MAX):
            pending: list[Any] = list(requests[start : start + _BATCH_WRITE_MAX])
            for attempt in range(_RETRIES):
                result = self.client.batch_write_item(RequestItems={self.table: pending})
                pending = list(result.get("UnprocessedItems", {}).get(self.table, []))
                if not pending:
                    break
                time.sleep(min(0.05 * 2**attempt, 1.0))
            else:
                raise SigilError(
                    f"DynamoDB left {len(pending)} writes unprocessed after {_RETRIES} attempts",
                    code="store_unavailable",
                )

    def batch_get(self, keys: Sequence[Item]) -> list[Item]:
        """BatchGetItem in chunks of 100 (consistent reads), resubmitting UnprocessedKeys."""
        found: list[Item] = []
        for start in range(0, len(keys), _BATCH_GET_MAX):
            request: Any = {"Keys": list(keys[start : start + _BATCH_GET_MAX]), "ConsistentRead": True}
            for attempt in range(_RETRIES):
                result = self.client.batch_get_item(RequestItems={self.table: request})
                found.extend(result.get("Responses", {}).get(self.table, []))
                unprocessed = result.get("UnprocessedKeys", {}).get(self.table)
                if not unprocessed:
                    break
                request = unprocessed
                # Unprocessed keys mean the partition is throttled: back off before asking again.
                time.sleep(min(0.05 * 2**attempt, 1.0))
            else:
                raise SigilError(
                    f"DynamoDB left keys unprocessed after {_RETRIES} attempts", code="store_unavailable"
                )
        return found


# ---------------------------------------------------------------- sessions


class DynamoSessionStore(_Table):
    """Sessions in the sessions table: pk `WS#{ws}`, sk `SESSION#{id}`, one item per session.

    The workspace is the partition so that `list_sessions` is one Query on a table without
    indexes; DynamoDB splits a hot item collection by sort key, so a busy workspace is not capped
    at one partition's throughput. `get` and `save` are one request each.

    A save that carries Tier-1 records or an audit record writes them with the session in one
    TransactWriteItems across both tables, so the store needs the memory table's name too
    (`memory_table`); the items are those DynamoMemoryStore and DynamoAuditLog write.

    A turn's budget counters live in this table (DynamoBudgetStore's items, pk `WS#{ws}#BUDGET`):
    `get_with_budget` reads them with the session in one BatchGetItem, and a save's `charge` adds
    to them in its transaction, so a budgeted turn makes no more round trips than any other.
    """

    def __init__(
        self,
        table_name: str,
        *,
        memory_table: str | None = None,
        client: DynamoDBClient | None = None,
        region: str | None = None,
        audit_retention_days: int = AUDIT_RETENTION_DAYS,
    ) -> None:
        super().__init__(table_name, client, region)
        # Same client: one connection pool, and the writes to both tables share a transaction.
        self.memory = None if memory_table is None else _Table(memory_table, self.client, region)
        self.audit_retention = timedelta(days=audit_retention_days)

    @staticmethod
    def _key(workspace_id: str, session_id: str) -> Item:
        return _key(_ws(workspace_id), f"SESSION#{session_id}")

    def get(self, workspace_id: str, session_id: str) -> Session | None:
        # Strongly consistent: a turn reads the version it will condition its save on.
        result = self.client.get_item(
            TableName=self.table, Key=self._key(workspace_id, session_id), ConsistentRead=True
        )
        item = result.get("Item")
        return None if item is None else serde.loads(Session, item["doc"]["S"])

    def get_with_budget(
        self, workspace_id: str, session_id: str, counters: Sequence[str]
    ) -> tuple[Session | None, dict[str, Counters]]:
        if not counters:
            return self.get(workspace_id, session_id), {}
        # One strongly consistent BatchGetItem where `get` is one GetItem: the session (whose
        # version the save is conditioned on) and the counters, for the turn's budget check.
        session_key = self._key(workspace_id, session_id)
        budget_pk = counter_key(workspace_id, "")["pk"]["S"]
        keys = [session_key, *(counter_key(workspace_id, key) for key in dict.fromkeys(counters))]
        session: Session | None = None
        totals: dict[str, Counters] = {}
        for item in self.batch_get(keys):
            if item["pk"]["S"] == budget_pk:
                totals[item["sk"]["S"]] = counters_of(item)
            elif item["sk"] == session_key["sk"]:
                session = serde.loads(Session, item["doc"]["S"])
        return session, totals

    def save(
        self,
        session: Session,
        *,
        expected_version: int,
        archive: Sequence[MemoryRecord] = (),
        audit: AuditRecord | None = None,
        charge: BudgetCharge | None = None,
    ) -> Session:
        if expected_version < 0:
            raise ValueError("expected_version must be >= 0")
        if charge is not None:
            _check_workspace(session.workspace_id, charge.workspace_id, "a budget charge")
        stored = session.model_copy(update={"version": expected_version + 1}, deep=True)
        put: PutTypeDef = {
            "TableName": self.table,
            "Item": self._key(session.workspace_id, session.id)
            | {
                "doc": _doc(stored),
                "version": _n(stored.version),
                "updated_at": _s(_ts(stored.updated_at)),
            },
        }
        if expected_version == 0:
            put["ConditionExpression"] = "attribute_not_exists(pk)"
        else:
            put["ConditionExpression"] = "#version = :expected"
            put["ExpressionAttributeNames"] = {"#version": "version"}
            put["ExpressionAttributeValues"] = {":expected": _n(expected_version)}
        # Unconditional ADDs on the counters: the spending is recorded whatever the limits (the
        # check was made before the model calls), and it lands once, with the session's version.
        updates = [] if charge is None else charge_updates(self.table, charge)
        extras = self._extras(session, put, archive, audit, reserved=len(updates))
        if not extras and not updates:
            try:
                self.client.put_item(**put)
            except ClientError as exc:
                if _error_code(exc) == "ConditionalCheckFailedException":
                    raise self._conflict(session, expected_version) from exc
                raise
        else:
            self._transact(session, expected_version, put, extras, updates)
        return stored

    def _extras(
        self,
        session: Session,
        put: PutTypeDef,
        archive: Sequence[MemoryRecord],
        audit: AuditRecord | None,
        *,
        reserved: int = 0,
    ) -> list[Item]:
        """The memory-table items to write with the session, after any archive too large for that
        (with `reserved` actions of the transaction taken by other writes: the budget updates)."""
        if not archive and audit is None:
            return []
        if self.memory is None:
            raise SigilError(
                "this session store was built without the memory table, so it cannot archive or audit",
                code="misconfigured",
            )
        tier1 = _tier1_items(session.workspace_id, archive)
        audits = [] if audit is None else [_audit_item(session.workspace_id, audit, self.audit_retention)]
        items = [put["Item"], *tier1, *audits]
        if len(items) + reserved > _TRANSACT_MAX_ITEMS or sum(map(_size, items)) > _TRANSACT_MAX_BYTES:
            # One transaction holds 100 items and 4 MB. A turn rolls out a few messages of a
            # 20-message window, so only an unusual save gets here: its archive goes first, on its
            # own (first write wins, as append_messages), then the session and audit together.
            # A crash or conflict in between leaves records that the retry finds stored.
            self.memory.put_new(tier1)
            tier1 = []
        return [*tier1, *audits]

    def _transact(
        self,
        session: Session,
        expected_version: int,
        put: PutTypeDef,
        extras: list[Item],
        updates: Sequence[TransactWriteItemTypeDef] = (),
    ) -> None:
        """One TransactWriteItems: the session Put (with its version condition), `extras`, and
        `updates` (a budget charge's unconditional ADDs), last.

        Each extra is conditioned on `attribute_not_exists(pk)`: the first write of a Tier-1 or
        audit record wins, as in their own stores. DynamoDB cannot skip one Put of a transaction,
        so when only those conditions failed (the records are stored already) the transaction is
        sent again without them; the session's condition failing is a ConcurrencyConflict. A
        cancelled transaction applied nothing, so the budget updates count once, with the save
        that lands.
        """
        memory_table = self.memory.table if self.memory is not None else None
        pending = extras
        for attempt in range(_RETRIES):
            actions: list[TransactWriteItemTypeDef] = [{"Put": put}]
            if pending:
                assert memory_table is not None  # _extras returned items, so the table is known
                actions += [
                    {
                        "Put": {
                            "TableName": memory_table,
                            "Item": item,
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    }
                    for item in pending
                ]
            actions += updates
            try:
                self.client.transact_write_items(TransactItems=actions)
                return
            except ClientError as exc:
                if _error_code(exc) != "TransactionCanceledException":
                    raise
                codes = _cancellation_codes(exc)
                if codes and codes[0] == "ConditionalCheckFailed":
                    raise self._conflict(session, expected_version) from exc
                if len(codes) == len(actions):
                    kept = [
                        item
                        for item, code in zip(pending, codes[1 : 1 + len(pending)], strict=True)
                        if code != "ConditionalCheckFailed"
                    ]
                else:
                    kept = pending  # no per-item reasons: send them all again
                if len(kept) == len(pending):
                    # No condition failed: a conflicting transaction or throttling. Back off.
                    time.sleep(min(0.05 * 2**attempt, 1.0))
                pending = kept
        raise SigilError(
            f"DynamoDB did not accept the save of session {session.id} after {_RETRIES} attempts",
            code="store_unavailable",
        )

    @staticmethod
    def _conflict(session: Session, expected_version: int) -> ConcurrencyConflict:
        return ConcurrencyConflict(f"session {session.id} is no longer at version {expected_version}")

    def list_sessions(self, workspace_id: str, *, limit: int = 100) -> list[Session]:
        """Most recently updated first (ties by id), like the embedded store.

        The sort key is the session id, so the order is made here: one Query projecting only
        (sk, updated_at) over the workspace's sessions, then one BatchGetItem for the `limit`
        newest. Read capacity is charged on whole items either way; what the projection saves is
        moving every session document into the function. An admin path, not a turn's.
        """
        if limit <= 0:
            return []
        heads = self.query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={":pk": _s(_ws(workspace_id)), ":prefix": _s("SESSION#")},
            ProjectionExpression="sk, updated_at",
        )
        # Stable sorts: by id, then by updated_at descending.
        ordered = sorted(heads, key=lambda head: str(head["sk"]["S"]))
        ordered.sort(key=lambda head: str(head["updated_at"]["S"]), reverse=True)
        chosen = [_key(_ws(workspace_id), str(head["sk"]["S"])) for head in ordered[:limit]]
        by_sk = {str(item["sk"]["S"]): item for item in self.batch_get(chosen)}
        # A session deleted between the two requests is simply not listed.
        return _docs([by_sk[key["sk"]["S"]] for key in chosen if key["sk"]["S"] in by_sk], Session)

    def delete(self, workspace_id: str, session_id: str) -> None:
        self.client.delete_item(TableName=self.table, Key=self._key(workspace_id, session_id))


# ---------------------------------------------------------------- outbox (send ledger)


class DynamoOutbox(_Table):
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
        return f"{_ws(workspace_id)}#OUTBOX#{session_id}"

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
                    Item=_key(pk, f"SEQ#{_seq(seq)}") | {"doc": _doc(entry)},
                    ConditionExpression="attribute_not_exists(pk)",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
            except ClientError as exc:
                if _error_code(exc) != "ConditionalCheckFailedException":
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
                ":pk": _s(pk),
                ":lo": _s(f"SEQ#{_seq(message.seq)}"),
                ":hi": _s(f"SEQ#{_seq(message.seq + self.MAX_PROBES)}"),
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
                ":pk": _s(self._pk(workspace_id, session_id)),
                ":lo": _s(f"SEQ#{_seq(max(after_seq, -1) + 1)}"),
                ":hi": _s("SEQ#~"),  # '~' sorts after every digit
            },
            ConsistentRead=True,
        )
        return _docs(items, OutboxEntry)

    def delete_session(self, workspace_id: str, session_id: str) -> int:
        # Every item of the session's partition, legacy COUNTER / SENT# items included: one
        # keys-only Query, then BatchWriteItem.
        keys = [
            _key(str(item["pk"]["S"]), str(item["sk"]["S"]))
            for item in self.query(
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": _s(self._pk(workspace_id, session_id))},
                ProjectionExpression="pk, sk",
                ConsistentRead=True,
            )
        ]
        self.batch_write([{"DeleteRequest": {"Key": key}} for key in keys])
        return sum(1 for key in keys if str(key["sk"]["S"]).startswith("SEQ#"))


# ---------------------------------------------------------------- memory tiers


def _tier1_pk(workspace_id: str, session_id: str) -> str:
    return f"{_ws(workspace_id)}#SESSION#{session_id}"


def _tier1_items(workspace_id: str, records: Sequence[MemoryRecord]) -> list[Item]:
    """Tier-1 items (DynamoMemoryStore.append_messages and DynamoSessionStore.save write them)."""
    for record in records:
        _check_workspace(workspace_id, record.workspace_id, f"memory record {record.id}")
    items: dict[tuple[str, str], Item] = {}
    for record in records:
        pk = _tier1_pk(workspace_id, record.session_id)
        sk = f"MSG#{_seq(record.seq)}#{record.id}"
        # A transaction may not name one key twice; the first occurrence wins, as in storage.
        items.setdefault((pk, sk), _key(pk, sk) | {"doc": _doc(record)})
    return list(items.values())


class DynamoMemoryStore(_Table):
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
        return _tier1_pk(workspace_id, session_id)

    # ---- Tier 1

    def append_messages(self, workspace_id: str, records: Sequence[MemoryRecord]) -> None:
        # First write wins: a redelivered turn re-appending its roll-out neither duplicates nor
        # rewrites what was stored.
        self.put_new(_tier1_items(workspace_id, records))

    def get_messages(
        self, workspace_id: str, session_id: str, *, after_seq: int = -1, limit: int = 100
    ) -> list[MemoryRecord]:
        items = self.query(
            limit,
            KeyConditionExpression="pk = :pk AND sk BETWEEN :lo AND :hi",
            ExpressionAttributeValues={
                ":pk": _s(self._session_pk(workspace_id, session_id)),
                ":lo": _s(f"MSG#{_seq(max(after_seq, -1) + 1)}"),
                ":hi": _s("MSG#~"),
            },
            ConsistentRead=True,
        )
        return _docs(items, MemoryRecord)

    def recent_messages(self, workspace_id: str, session_id: str, *, limit: int = 20) -> list[MemoryRecord]:
        items = self.query(
            limit,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={
                ":pk": _s(self._session_pk(workspace_id, session_id)),
                ":prefix": _s("MSG#"),
            },
            ScanIndexForward=False,
            ConsistentRead=True,
        )
        return _docs(items, MemoryRecord)[::-1]

    def count_messages(self, workspace_id: str, session_id: str) -> int:
        # Select=COUNT still reads the items (Tier 1 keeps ~1000 a session: one or two pages).
        params: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :prefix)",
            "ExpressionAttributeValues": {
                ":pk": _s(self._session_pk(workspace_id, session_id)),
                ":prefix": _s("MSG#"),
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
        ws = _ws(summary.workspace_id)
        order = f"SUM#{_ts(summary.start_at)}#{summary.id}"
        item = _key(f"{ws}#SUMMARY#{summary.id}", "SUMMARY") | {
            "doc": _doc(summary),
            "end_at": _s(_ts(summary.end_at)),
            "gsi1pk": _s(f"{ws}#SUMMARIES"),
            "gsi1sk": _s(order),
            "gsi2pk": _s(f"{self._session_pk(summary.workspace_id, summary.session_id)}#SUMMARIES"),
            "gsi2sk": _s(order),
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
            pk_value = f"{_ws(workspace_id)}#SUMMARIES"
        else:
            index, pk_name, sk_name = GSI2, "gsi2pk", "gsi2sk"
            pk_value = f"{self._session_pk(workspace_id, session_id)}#SUMMARIES"
        # '~' sorts after the '#' that follows the timestamp, so a summary starting at `end` is in.
        values: dict[str, Any] = {
            ":pk": _s(pk_value),
            ":lo": _s("SUM#"),
            ":hi": _s(f"SUM#{_ts(end)}~" if end is not None else "SUM#~"),
        }
        params: dict[str, Any] = {
            "IndexName": index,
            "KeyConditionExpression": f"{pk_name} = :pk AND {sk_name} BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": values,
        }
        if start is not None:
            params["FilterExpression"] = "#end_at >= :start"
            params["ExpressionAttributeNames"] = {"#end_at": "end_at"}
            values[":start"] = _s(_ts(start))
        return _docs(self.query(limit, **params), Summary)

    def delete_summaries(self, workspace_id: str, ids: Sequence[str]) -> None:
        ws = _ws(workspace_id)
        self.batch_write([{"DeleteRequest": {"Key": _key(f"{ws}#SUMMARY#{i}", "SUMMARY")}} for i in ids])

    def delete_messages(self, workspace_id: str, session_id: str, ids: Sequence[str] | None = None) -> int:
        # The sort key holds the id after `MSG#{seq:012}#`, so one keys-only Query of the session's
        # partition finds what to delete without reading a document.
        wanted = None if ids is None else set(ids)
        keys = [
            _key(str(item["pk"]["S"]), str(item["sk"]["S"]))
            for item in self.query(
                KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
                ExpressionAttributeValues={
                    ":pk": _s(self._session_pk(workspace_id, session_id)),
                    ":prefix": _s("MSG#"),
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
        return _key(f"{_ws(workspace_id)}#TRIPLES", f"TRIPLE#{triple_id}")

    def _triple_item(self, triple: Triple) -> Item:
        ws = _ws(triple.workspace_id)
        item = self._triple_key(triple.workspace_id, triple.id) | {"doc": _doc(triple)}
        if triple.status == "active":
            order = f"{_newest_first(triple.updated_at)}#{triple.id}"
            item |= {
                "gsi1pk": _s(f"{ws}#SUBJECT#{_part(normalize_key(triple.subject))}"),
                "gsi1sk": _s(order),
                "gsi2pk": _s(f"{ws}#OBJECT#{_part(normalize_key(triple.object))}"),
                "gsi2sk": _s(order),
            }
        return item

    def put_triple(self, triple: Triple) -> None:
        self.client.put_item(TableName=self.table, Item=self._triple_item(triple))

    def replace_triple(self, expected: Triple, new: Triple) -> bool:
        _check_workspace(expected.workspace_id, new.workspace_id, f"triple {new.id}")
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
            if _error_code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def put_triples(self, workspace_id: str, triples: Sequence[Triple]) -> None:
        for triple in triples:
            _check_workspace(workspace_id, triple.workspace_id, f"triple {triple.id}")
        # BatchWriteItem refuses two requests for one key: the last version of a triple wins, as
        # it would with one put after another.
        latest = {triple.id: triple for triple in triples}
        self.batch_write([{"PutRequest": {"Item": self._triple_item(t)}} for t in latest.values()])

    def list_triples(self, workspace_id: str, *, after: str | None = None, limit: int = 500) -> list[Triple]:
        pk = _s(f"{_ws(workspace_id)}#TRIPLES")
        if after is None:
            condition, values = "pk = :pk AND begins_with(sk, :lo)", {":pk": pk, ":lo": _s("TRIPLE#")}
        else:
            # Every sort key of the partition starts with TRIPLE#, and DynamoDB compares keys as
            # UTF-8 bytes, the order of SQLite's BINARY collation and of Python's str: one order.
            condition, values = "pk = :pk AND sk > :lo", {":pk": pk, ":lo": _s(f"TRIPLE#{after}")}
        items = self.query(
            limit, KeyConditionExpression=condition, ExpressionAttributeValues=values, ConsistentRead=True
        )
        return _docs(items, Triple)

    def triples_by_subject(self, workspace_id: str, subject: str, *, limit: int = 50) -> list[Triple]:
        return self._triples(GSI1, "gsi1pk", f"{_ws(workspace_id)}#SUBJECT#", subject, limit)

    def triples_by_object(self, workspace_id: str, obj: str, *, limit: int = 50) -> list[Triple]:
        return self._triples(GSI2, "gsi2pk", f"{_ws(workspace_id)}#OBJECT#", obj, limit)

    def _triples(self, index: str, pk_name: str, prefix: str, value: str, limit: int) -> list[Triple]:
        key = normalize_key(value)
        if not key:
            return []
        items = self.query(
            limit,
            IndexName=index,
            KeyConditionExpression=f"{pk_name} = :pk",
            ExpressionAttributeValues={":pk": _s(prefix + _part(key))},
        )
        return _docs(items, Triple)

    def delete_triple(self, workspace_id: str, triple_id: str) -> None:
        self.client.delete_item(TableName=self.table, Key=self._triple_key(workspace_id, triple_id))

    def delete_triples(self, workspace_id: str, ids: Sequence[str]) -> None:
        unique = dict.fromkeys(ids)
        self.batch_write([{"DeleteRequest": {"Key": self._triple_key(workspace_id, i)}} for i in unique])


# ---------------------------------------------------------------- workspaces


class DynamoWorkspaceStore(_Table):
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
        item = self.client.get_item(TableName=self.table, Key=_key(_ws(workspace_id), "CONFIG")).get("Item")
        return None if item is None else serde.loads(WorkspaceConfig, item["doc"]["S"])

    def put(self, config: WorkspaceConfig) -> None:
        item = _key(_ws(config.id), "CONFIG") | {
            "doc": _doc(config),
            "gsi1pk": _s("WORKSPACES"),
            "gsi1sk": _s(_ws(config.id)),
        }
        self.client.put_item(TableName=self.table, Item=item)

    def list_workspaces(self) -> list[WorkspaceConfig]:
        items = self.query(
            IndexName=GSI1,
            KeyConditionExpression="gsi1pk = :pk",
            ExpressionAttributeValues={":pk": _s("WORKSPACES")},
        )
        return _docs(items, WorkspaceConfig)


# ---------------------------------------------------------------- identities


class DynamoIdentityStore(_Table):
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
        return _key(f"{_ws(workspace_id)}#IDENTITY", f"{channel}#{channel_user_id}")

    def _item(self, identity: Identity) -> Item:
        item = self._key(identity.workspace_id, identity.channel, identity.channel_user_id) | {
            "doc": _doc(identity),
            "status": _s(identity.status),
        }
        if identity.pairing_code is not None:
            item["gsi1pk"] = _s(f"{_ws(identity.workspace_id)}#PAIRING")
            item["gsi1sk"] = _s(identity.pairing_code)
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
            if _error_code(exc) != "ConditionalCheckFailedException":
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
            "ExpressionAttributeValues": {":pk": _s(f"{_ws(workspace_id)}#IDENTITY")},
            "ConsistentRead": True,
        }
        if status is not None:
            params["FilterExpression"] = "#status = :status"
            params["ExpressionAttributeNames"] = {"#status": "status"}
            params["ExpressionAttributeValues"][":status"] = _s(status)
        return _docs(self.query(**params), Identity)

    def find_by_pairing_code(self, workspace_id: str, code: str) -> Identity | None:
        hits = self.query(
            IndexName=GSI1,
            KeyConditionExpression="gsi1pk = :pk AND gsi1sk = :code",
            ExpressionAttributeValues={":pk": _s(f"{_ws(workspace_id)}#PAIRING"), ":code": _s(code)},
        )
        for hit in _docs(hits, Identity):
            current = self.get(workspace_id, hit.channel, hit.channel_user_id)
            if current is not None and current.pairing_code == code:
                return current
        return None

    def delete(self, workspace_id: str, channel: str, channel_user_id: str) -> None:
        self.client.delete_item(TableName=self.table, Key=self._key(workspace_id, channel, channel_user_id))


# ---------------------------------------------------------------- audit


def _audit_item(workspace_id: str, record: AuditRecord, retention: timedelta) -> Item:
    """An audit item (DynamoAuditLog.append and DynamoSessionStore.save write them).

    Its `ttl` is the time of writing + retention: expiry counts from the write, not from
    created_at, so a record written late (a backfill) is not deleted the moment it lands.
    """
    _check_workspace(workspace_id, record.workspace_id, f"audit record {record.id}")
    expires = int(epoch_seconds() + retention.total_seconds())
    return _key(f"{_ws(record.workspace_id)}#AUDIT", f"AUDIT#{_ts(record.created_at)}#{record.id}") | {
        "doc": _doc(record),
        TTL_ATTRIBUTE: _n(expires),
    }


class DynamoAuditLog(_Table):
    """Audit records in the memory table: pk `WS#{ws}#AUDIT`, sk `AUDIT#{created_at}#{id}`.

    Each record carries `ttl` = write time + retention (400 days), so DynamoDB deletes it without a
    job. Expiry counts from the write, not from created_at, so a record written late (a backfill)
    is not deleted the moment it lands. Idempotent by record: the first write wins.
    """

    def __init__(
        self,
        table_name: str,
        *,
        client: DynamoDBClient | None = None,
        region: str | None = None,
        retention_days: int = AUDIT_RETENTION_DAYS,
    ) -> None:
        super().__init__(table_name, client, region)
        self.retention = timedelta(days=retention_days)

    def append(self, record: AuditRecord) -> None:
        item = _audit_item(record.workspace_id, record, self.retention)
        try:
            self.client.put_item(
                TableName=self.table, Item=item, ConditionExpression="attribute_not_exists(pk)"
            )
        except ClientError as exc:
            # Stored before: a retried turn's audit write must not count the turn twice.
            if _error_code(exc) != "ConditionalCheckFailedException":
                raise

    def list_records(self, workspace_id: str, *, limit: int = 100) -> list[AuditRecord]:
        """Newest first. TTL deletion runs up to a few days late, so expired records are filtered
        out: a read never depends on when the sweeper passed."""
        items = self.query(
            limit,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            FilterExpression="#ttl > :now",
            ExpressionAttributeNames={"#ttl": TTL_ATTRIBUTE},
            ExpressionAttributeValues={
                ":pk": _s(f"{_ws(workspace_id)}#AUDIT"),
                ":prefix": _s("AUDIT#"),
                ":now": _n(int(epoch_seconds())),
            },
            ScanIndexForward=False,
        )
        return _docs(items, AuditRecord)

    def anonymise(self, workspace_id: str, *, user_id: str, session_ids: Sequence[str] = ()) -> int:
        """One Query of the workspace's audit partition (an admin operation), then the changed
        records put back under their keys, `ttl` kept, in BatchWriteItem calls."""
        sessions = set(session_ids)
        puts: list[Item] = []
        for item in self.query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={":pk": _s(f"{_ws(workspace_id)}#AUDIT"), ":prefix": _s("AUDIT#")},
            ConsistentRead=True,
        ):
            record: AuditRecord = serde.loads(AuditRecord, item["doc"]["S"])
            if record.user_id == user_id or record.session_id in sessions:
                puts.append({"PutRequest": {"Item": item | {"doc": _doc(record.anonymised())}}})
        self.batch_write(puts)
        return len(puts)

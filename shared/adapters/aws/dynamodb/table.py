"""The two tables: their key schema, the key and item helpers, and the paging and batching every
store shares (`Table`).

Every base-table partition key begins with `WS#{workspace}` (`ws_prefix`), and workspace ids cannot
contain `#` (shared.models.ID_PATTERN), so no key built for one workspace can address another's
items. Each item stores its document as serde JSON text in `doc` (`dump_doc`, `load_docs`) plus
only the attributes a key, condition or filter needs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, TypeVar

from botocore.exceptions import ClientError

from shared import serde
from shared.adapters.aws import clients
from shared.adapters.aws.dynamodb.retry import RETRIES, Next, cancellation_codes, error_code, until_done
from shared.errors import SigilError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

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
# Both tables expire items by `ttl`, as the stack declares them: the sessions table's send
# ledger and durable steps set it (their reads skip what is past it either way).
TABLE_TTL: Final[dict[str, str | None]] = {"sessions": TTL_ATTRIBUTE, "memory": TTL_ATTRIBUTE}

# DynamoDB's item limit is 400 KB including attribute names and key values. A session's active
# window (20 messages by default) is far below it unless tool results are huge; keep headroom for
# the keys and say clearly what happened instead of surfacing a ValidationException.
MAX_DOC_BYTES: Final = 390 * 1024
AUDIT_RETENTION_DAYS: Final = 400
# Key parts longer than this are replaced by a digest: partition keys may be 2048 bytes and sort
# keys 1024, and a triple's object may be 2048 characters.
_MAX_KEY_PART_BYTES: Final = 512
# TransactWriteItems takes at most 100 actions and 4 MB; BatchGetItem at most 100 keys.
TRANSACT_MAX_ITEMS: Final = 100
TRANSACT_MAX_BYTES: Final = 3 * 1024 * 1024
_BATCH_GET_MAX: Final = 100
_BATCH_WRITE_MAX: Final = 25


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


def ws_prefix(workspace_id: str) -> str:
    return f"WS#{workspace_id}"


def shard_of(key: str, shards: int) -> int:
    """A stable shard in [0, shards) for `key` (a session id): how a workspace's hot key range
    (its budget counters, its audit records) is spread over partitions (docs/scale.md)."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def sharded(pk: str, shard: int) -> str:
    """Shard `shard` of partition `pk`; shard 0 keeps `pk` itself, so what was written before a
    partition was sharded is read with shard 0."""
    return pk if shard == 0 else f"{pk}#{shard}"


def key_part(value: str) -> str:
    """A free-text key part (triple subject/object, turn id): itself when short, a digest when not.

    The `V#` / `H#` prefix keeps a literal value from ever equalling another value's digest.
    """
    raw = value.encode()
    if len(raw) <= _MAX_KEY_PART_BYTES:
        return f"V#{value}"
    return f"H#{hashlib.sha256(raw).hexdigest()}"


def utc(value: datetime) -> datetime:
    # Models carry aware datetimes; a naive one read from old data is taken as UTC, as in SQLite.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def ts(value: datetime) -> str:
    """Fixed-width UTC text, so string order in a sort key is time order."""
    return utc(value).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def newest_first(value: datetime) -> str:
    """A sort-key prefix that sorts newest first in an ascending Query.

    Ascending on this and then on the id gives "newest first, ties by id ascending", the order the
    embedded store uses; a descending Query would reverse the tie-break too.
    """
    micros = int(utc(value).timestamp() * 1_000_000)
    return f"{10**17 - micros:017d}"


def seq_key(value: int) -> str:
    return f"{value:012d}"


def string(value: str) -> dict[str, str]:
    return {"S": value}


def number(value: int) -> dict[str, str]:
    return {"N": str(value)}


def item_key(pk: str, sk: str) -> Item:
    return {"pk": string(pk), "sk": string(sk)}


def dump_doc(value: Any) -> dict[str, str]:
    text = serde.dumps(value)
    size = len(text.encode())
    if size > MAX_DOC_BYTES:
        raise SigilError(
            f"{type(value).__name__} is {size} bytes serialised; a DynamoDB item holds at most 400 KB",
            code="item_too_large",
        )
    return string(text)


def load_docs(items: Iterator[Item] | list[Item], tp: type[T]) -> list[T]:
    return [serde.loads(tp, item["doc"]["S"]) for item in items]


def approx_size(item: Mapping[str, Any]) -> int:
    # An estimate (the JSON text dominates an item), well inside the 4 MB transaction limit.
    return sum(len(str(v)) for v in item.values())


def check_workspace(expected: str, actual: str, what: str) -> None:
    # A record carrying another workspace's id is a caller bug that would leak data across
    # workspaces if stored under the caller's scope, so it is refused (as the embedded store does).
    if actual != expected:
        raise ValueError(f"{what} belongs to workspace {actual!r}, not {expected!r}")


class Table:
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
            self._put_chunk(chunk)

    def _put_chunk(self, chunk: list[Item]) -> None:
        pending = chunk

        def attempt() -> Next:
            nonlocal pending
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
            except ClientError as exc:
                if error_code(exc) != "TransactionCanceledException":
                    raise
                codes = cancellation_codes(exc)
                if len(codes) != len(pending):
                    # No per-item reasons: send them all again.
                    return Next.BACK_OFF
                kept = [
                    item
                    for item, code in zip(pending, codes, strict=True)
                    if code != "ConditionalCheckFailed"
                ]
                if len(kept) == len(pending):
                    # No condition failed: a conflicting transaction or throttling.
                    return Next.BACK_OFF
                pending = kept
                return Next.AGAIN if pending else Next.DONE
            return Next.DONE

        if not until_done(attempt):
            raise SigilError(
                f"DynamoDB did not accept {len(pending)} items after {RETRIES} attempts",
                code="store_unavailable",
            )

    @staticmethod
    def _chunks(items: Sequence[Item]) -> Iterator[list[Item]]:
        chunk: list[Item] = []
        size = 0
        for item in items:
            item_size = approx_size(item)
            if chunk and (len(chunk) == TRANSACT_MAX_ITEMS or size + item_size > TRANSACT_MAX_BYTES):
                yield chunk
                chunk, size = [], 0
            chunk.append(item)
            size += item_size
        if chunk:
            yield chunk

    def batch_write(self, requests: Sequence[Item]) -> None:
        """BatchWriteItem, 25 requests a call; what comes back unprocessed is sent again after a
        backoff (throttling), up to RETRIES times."""
        for start in range(0, len(requests), _BATCH_WRITE_MAX):
            pending: list[Any] = list(requests[start : start + _BATCH_WRITE_MAX])

            def attempt() -> Next:
                nonlocal pending
                result = self.client.batch_write_item(RequestItems={self.table: pending})
                pending = list(result.get("UnprocessedItems", {}).get(self.table, []))
                return Next.BACK_OFF if pending else Next.DONE

            if not until_done(attempt):
                raise SigilError(
                    f"DynamoDB left {len(pending)} writes unprocessed after {RETRIES} attempts",
                    code="store_unavailable",
                )

    def batch_get(self, keys: Sequence[Item]) -> list[Item]:
        """BatchGetItem in chunks of 100 (consistent reads), resubmitting UnprocessedKeys."""
        return batch_get(self.client, self.table, keys)


def batch_get(client: DynamoDBClient, table: str, keys: Sequence[Item], **request: Any) -> list[Item]:
    """BatchGetItem of `keys` on `table` in chunks of 100, consistent reads, resubmitting
    UnprocessedKeys; `request` adds to each chunk's request (a ProjectionExpression, say)."""
    found: list[Item] = []
    for start in range(0, len(keys), _BATCH_GET_MAX):
        pending: Any = {"Keys": list(keys[start : start + _BATCH_GET_MAX]), "ConsistentRead": True, **request}

        def attempt() -> Next:
            nonlocal pending
            result = client.batch_get_item(RequestItems={table: pending})
            found.extend(result.get("Responses", {}).get(table, []))
            unprocessed = result.get("UnprocessedKeys", {}).get(table)
            if not unprocessed:
                return Next.DONE
            pending = unprocessed
            # Unprocessed keys mean the partition is throttled: back off before asking again.
            return Next.BACK_OFF

        if not until_done(attempt):
            raise SigilError(
                f"DynamoDB left keys unprocessed after {RETRIES} attempts", code="store_unavailable"
            )
    return found

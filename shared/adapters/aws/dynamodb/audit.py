"""Audit records in the memory table, expiring by its TTL, spread over AUDIT_SHARDS partitions."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Final

from botocore.exceptions import ClientError

from shared import serde
from shared.adapters.aws.dynamodb.retry import error_code
from shared.adapters.aws.dynamodb.table import (
    AUDIT_RETENTION_DAYS,
    TTL_ATTRIBUTE,
    Item,
    Table,
    check_workspace,
    dump_doc,
    item_key,
    load_docs,
    number,
    shard_of,
    sharded,
    string,
    ts,
    ws_prefix,
)
from shared.clock import epoch_seconds
from shared.models import AuditRecord

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

# A workspace's audit records go to one of these partitions by their session (every turn writes
# one, so a single partition would cap a busy workspace at its 1,000 writes a second). A read
# queries every shard and merges. Only ever raise it: a lowered count would leave shards unread.
AUDIT_SHARDS: Final = 8


def audit_pk(workspace_id: str, shard: int = 0) -> str:
    return sharded(f"{ws_prefix(workspace_id)}#AUDIT", shard)


def audit_item(workspace_id: str, record: AuditRecord, retention: timedelta) -> Item:
    """An audit item (DynamoAuditLog.append and DynamoSessionStore.save write them).

    Its `ttl` is the time of writing + retention: expiry counts from the write, not from
    created_at, so a record written late (a backfill) is not deleted the moment it lands.
    """
    check_workspace(workspace_id, record.workspace_id, f"audit record {record.id}")
    expires = int(epoch_seconds() + retention.total_seconds())
    shard = shard_of(record.session_id, AUDIT_SHARDS)
    return item_key(audit_pk(record.workspace_id, shard), f"AUDIT#{ts(record.created_at)}#{record.id}") | {
        "doc": dump_doc(record),
        TTL_ATTRIBUTE: number(expires),
    }


class DynamoAuditLog(Table):
    """Audit records in the memory table: pk `WS#{ws}#AUDIT` (shard 0) or `WS#{ws}#AUDIT#{n}`,
    the shard a hash of the record's session, sk `AUDIT#{created_at}#{id}`.

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
        item = audit_item(record.workspace_id, record, self.retention)
        try:
            self.client.put_item(
                TableName=self.table, Item=item, ConditionExpression="attribute_not_exists(pk)"
            )
        except ClientError as exc:
            # Stored before: a retried turn's audit write must not count the turn twice.
            if error_code(exc) != "ConditionalCheckFailedException":
                raise

    def list_records(self, workspace_id: str, *, limit: int = 100) -> list[AuditRecord]:
        """Newest first: the `limit` newest of each shard, merged by key (created_at, then id).
        TTL deletion runs up to a few days late, so expired records are filtered out: a read never
        depends on when the sweeper passed."""
        now = number(int(epoch_seconds()))
        shards = [
            self.query(
                limit,
                KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
                FilterExpression="#ttl > :now",
                ExpressionAttributeNames={"#ttl": TTL_ATTRIBUTE},
                ExpressionAttributeValues={
                    ":pk": string(audit_pk(workspace_id, shard)),
                    ":prefix": string("AUDIT#"),
                    ":now": now,
                },
                ScanIndexForward=False,
            )
            for shard in range(AUDIT_SHARDS)
        ]
        merged = heapq.merge(*shards, key=lambda item: str(item["sk"]["S"]), reverse=True)
        return load_docs(list(itertools.islice(merged, limit)), AuditRecord)

    def anonymise(self, workspace_id: str, *, user_id: str, session_ids: Sequence[str] = ()) -> int:
        """One Query of each of the workspace's audit shards (an admin operation), then the changed
        records put back under their keys, `ttl` kept, in BatchWriteItem calls."""
        sessions = set(session_ids)
        puts: list[Item] = []
        items = itertools.chain.from_iterable(
            self.query(
                KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
                ExpressionAttributeValues={
                    ":pk": string(audit_pk(workspace_id, shard)),
                    ":prefix": string("AUDIT#"),
                },
                ConsistentRead=True,
            )
            for shard in range(AUDIT_SHARDS)
        )
        for item in items:
            record: AuditRecord = serde.loads(AuditRecord, item["doc"]["S"])
            if record.user_id == user_id or record.session_id in sessions:
                puts.append({"PutRequest": {"Item": item | {"doc": dump_doc(record.anonymised())}}})
        self.batch_write(puts)
        return len(puts)

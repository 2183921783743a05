"""Sessions in the sessions table, saved with their Tier-1 records and audit record in one
transaction, and the turn's budget charge after it (docs/dynamodb.md)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from shared import serde
from shared.adapters.aws.dynamodb.audit import audit_item
from shared.adapters.aws.dynamodb.budgets import charge_turn, counter_keys, is_counter, sum_counters
from shared.adapters.aws.dynamodb.memory import tier1_items
from shared.adapters.aws.dynamodb.retry import RETRIES, Next, cancellation_codes, error_code, until_done
from shared.adapters.aws.dynamodb.table import (
    AUDIT_RETENTION_DAYS,
    TRANSACT_MAX_BYTES,
    TRANSACT_MAX_ITEMS,
    Item,
    Table,
    approx_size,
    check_workspace,
    dump_doc,
    item_key,
    load_docs,
    number,
    string,
    ts,
    ws_prefix,
)
from shared.budgets import BudgetCharge, Counters
from shared.errors import ConcurrencyConflict, SigilError
from shared.models import AuditRecord, MemoryRecord, Session

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import PutTypeDef, TransactWriteItemTypeDef


class DynamoSessionStore(Table):
    """Sessions in the sessions table: pk `WS#{ws}`, sk `SESSION#{id}`, one item per session.

    The workspace is the partition so that `list_sessions` is one Query on a table without
    indexes; DynamoDB splits a hot item collection by sort key, so a busy workspace is not capped
    at one partition's throughput. `get` and `save` are one request each.

    A save that carries Tier-1 records or an audit record writes them with the session in one
    TransactWriteItems across both tables, so the store needs the memory table's name too
    (`memory_table`); the items are those DynamoMemoryStore and DynamoAuditLog write.

    A turn's budget counters live in this table (DynamoBudgetStore's sharded items, pk
    `WS#{ws}#BUDGET[#n]`): `get_with_budget` reads them with the session in one BatchGetItem, and
    a save's `charge` adds to its session's shard once the commit has landed, in a transaction of
    its own: the commit's transaction holds only this session's items, so commits of one
    workspace's sessions never conflict (issue 30).
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
        self.memory = None if memory_table is None else Table(memory_table, self.client, region)
        self.audit_retention = timedelta(days=audit_retention_days)

    @staticmethod
    def _key(workspace_id: str, session_id: str) -> Item:
        return item_key(ws_prefix(workspace_id), f"SESSION#{session_id}")

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
        keys = [session_key, *counter_keys(workspace_id, counters)]
        session: Session | None = None
        shards: list[Item] = []
        for item in self.batch_get(keys):
            if is_counter(item, workspace_id):
                shards.append(item)
            elif item["sk"] == session_key["sk"]:
                session = serde.loads(Session, item["doc"]["S"])
        return session, sum_counters(shards)

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
            check_workspace(session.workspace_id, charge.workspace_id, "a budget charge")
        stored = session.model_copy(update={"version": expected_version + 1}, deep=True)
        put: PutTypeDef = {
            "TableName": self.table,
            "Item": self._key(session.workspace_id, session.id)
            | {
                "doc": dump_doc(stored),
                "version": number(stored.version),
                "updated_at": string(ts(stored.updated_at)),
            },
        }
        if expected_version == 0:
            put["ConditionExpression"] = "attribute_not_exists(pk)"
        else:
            put["ConditionExpression"] = "#version = :expected"
            put["ExpressionAttributeNames"] = {"#version": "version"}
            put["ExpressionAttributeValues"] = {":expected": number(expected_version)}
        extras = self._extras(session, put, archive, audit)
        if not extras:
            try:
                self.client.put_item(**put)
            except ClientError as exc:
                if error_code(exc) == "ConditionalCheckFailedException":
                    raise self._conflict(session, expected_version) from exc
                raise
        else:
            self._transact(session, expected_version, put, extras)
        if charge is not None:
            # After the commit, outside it: the spending is recorded whatever the limits (the
            # check was made before the model calls), once, by the save that landed; a shared
            # counter item in the commit would let two sessions' commits cancel each other.
            charge_turn(self.client, self.table, charge, session.id)
        return stored

    def _extras(
        self,
        session: Session,
        put: PutTypeDef,
        archive: Sequence[MemoryRecord],
        audit: AuditRecord | None,
    ) -> list[Item]:
        """The memory-table items to write with the session, after any archive too large for that."""
        if not archive and audit is None:
            return []
        if self.memory is None:
            raise SigilError(
                "this session store was built without the memory table, so it cannot archive or audit",
                code="misconfigured",
            )
        tier1 = tier1_items(session.workspace_id, archive)
        audits = [] if audit is None else [audit_item(session.workspace_id, audit, self.audit_retention)]
        items = [put["Item"], *tier1, *audits]
        if len(items) > TRANSACT_MAX_ITEMS or sum(map(approx_size, items)) > TRANSACT_MAX_BYTES:
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
    ) -> None:
        """One TransactWriteItems: the session Put (with its version condition) and `extras`.

        Each extra is conditioned on `attribute_not_exists(pk)`: the first write of a Tier-1 or
        audit record wins, as in their own stores. DynamoDB cannot skip one Put of a transaction,
        so when only those conditions failed (the records are stored already) the transaction is
        sent again without them; the session's condition failing is a ConcurrencyConflict.
        """
        memory_table = self.memory.table if self.memory is not None else None
        pending = extras

        def attempt() -> Next:
            nonlocal pending
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
            try:
                self.client.transact_write_items(TransactItems=actions)
            except ClientError as exc:
                if error_code(exc) != "TransactionCanceledException":
                    raise
                codes = cancellation_codes(exc)
                if codes and codes[0] == "ConditionalCheckFailed":
                    raise self._conflict(session, expected_version) from exc
                if len(codes) != len(actions):
                    # No per-item reasons: send them all again.
                    return Next.BACK_OFF
                kept = [
                    item
                    for item, code in zip(pending, codes[1 : 1 + len(pending)], strict=True)
                    if code != "ConditionalCheckFailed"
                ]
                if len(kept) == len(pending):
                    # No condition failed: a conflicting transaction or throttling.
                    return Next.BACK_OFF
                pending = kept
                return Next.AGAIN
            return Next.DONE

        if not until_done(attempt):
            raise SigilError(
                f"DynamoDB did not accept the save of session {session.id} after {RETRIES} attempts",
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
            ExpressionAttributeValues={":pk": string(ws_prefix(workspace_id)), ":prefix": string("SESSION#")},
            ProjectionExpression="sk, updated_at",
        )
        # Stable sorts: by id, then by updated_at descending.
        ordered = sorted(heads, key=lambda head: str(head["sk"]["S"]))
        ordered.sort(key=lambda head: str(head["updated_at"]["S"]), reverse=True)
        chosen = [item_key(ws_prefix(workspace_id), str(head["sk"]["S"])) for head in ordered[:limit]]
        by_sk = {str(item["sk"]["S"]): item for item in self.batch_get(chosen)}
        # A session deleted between the two requests is simply not listed.
        return load_docs([by_sk[key["sk"]["S"]] for key in chosen if key["sk"]["S"] in by_sk], Session)

    def delete(self, workspace_id: str, session_id: str) -> None:
        self.client.delete_item(TableName=self.table, Key=self._key(workspace_id, session_id))

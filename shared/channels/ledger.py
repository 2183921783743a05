"""The send ledger: which platform message carries each piece of a turn's reply.

A turn is retried after a crash or a provider failure with the same turn id (derived from the
platform event), so before posting piece `chunk` of reply part `part` a sender asks the ledger.
If a platform message id is recorded there, the piece was posted by an earlier attempt: the
sender edits that message (or does nothing when the text is the same, which the digest tells)
instead of posting a second copy.

The web channel needs none of this: its outbox is keyed by (turn_id, part) itself.

Adapters: `SqliteSendLedger` (embedded), `DynamoSendLedger` (the sessions table, items
`WS#{ws}#LEDGER#{turn}` / `PART#{part}#{chunk}`, conditional put, `ttl` seven days out) and
`MemorySendLedger` (one process, for tests and tools). Entries expire after seven days: a
platform redelivers an event for minutes or hours, never for a week, and every read ignores an
expired entry, so no behaviour depends on when a sweeper last ran.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import ClientError

from shared.clock import epoch_seconds
from shared.ports import SentPiece

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

    from shared.adapters.embedded.db import Database

LEDGER_TTL_S: Final = 7 * 24 * 3600
# Key parts longer than this are replaced by a digest (DynamoDB partition keys hold 2048 bytes).
_MAX_KEY_PART_BYTES: Final = 512

Clock = Callable[[], float]


def digest(text: str) -> str:
    """What the ledger stores instead of the text: enough to tell "same text", nothing to leak."""
    return hashlib.sha256(text.encode()).hexdigest()[:32]


# ---------------------------------------------------------------- in memory


class MemorySendLedger:
    """A ledger in one process's memory: for tests, and for tools that never retry a turn."""

    def __init__(self, *, ttl_s: int = LEDGER_TTL_S, now: Clock = epoch_seconds) -> None:
        self._ttl_s = ttl_s
        self._now = now
        self._lock = threading.Lock()
        self._items: dict[tuple[str, str, int, int], tuple[SentPiece, float]] = {}

    def get(self, workspace_id: str, turn_id: str, part: int, chunk: int = 0) -> SentPiece | None:
        with self._lock:
            found = self._items.get((workspace_id, turn_id, part, chunk))
        if found is None or found[1] <= self._now():
            return None
        return found[0]

    def record(
        self, workspace_id: str, turn_id: str, part: int, chunk: int, *, message_id: str, text_digest: str
    ) -> SentPiece:
        key = (workspace_id, turn_id, part, chunk)
        now = self._now()
        with self._lock:
            found = self._items.get(key)
            if found is not None and found[1] > now:
                return found[0]
            piece = SentPiece(message_id, text_digest)
            self._items[key] = (piece, now + self._ttl_s)
            return piece

    def update_digest(
        self, workspace_id: str, turn_id: str, part: int, chunk: int, *, text_digest: str
    ) -> None:
        key = (workspace_id, turn_id, part, chunk)
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items[key] = (SentPiece(found[0].message_id, text_digest), self._now() + self._ttl_s)


# ---------------------------------------------------------------- SQLite

_MIGRATIONS = [
    """
    CREATE TABLE send_ledger (
        workspace_id TEXT NOT NULL,
        turn_id TEXT NOT NULL,
        part INTEGER NOT NULL,
        chunk INTEGER NOT NULL,
        message_id TEXT NOT NULL,
        digest TEXT NOT NULL,
        expires_at REAL NOT NULL,
        PRIMARY KEY (workspace_id, turn_id, part, chunk)
    ) WITHOUT ROWID;
    CREATE INDEX send_ledger_expiry ON send_ledger (expires_at);
    """,
]


class SqliteSendLedger:
    def __init__(self, db: Database, *, ttl_s: int = LEDGER_TTL_S, now: Clock = epoch_seconds) -> None:
        self._db = db
        self._ttl_s = ttl_s
        self._now = now
        db.migrate("send_ledger", _MIGRATIONS)

    def get(self, workspace_id: str, turn_id: str, part: int, chunk: int = 0) -> SentPiece | None:
        row = self._db.query_one(
            "SELECT message_id, digest FROM send_ledger WHERE workspace_id = ? AND turn_id = ? "
            "AND part = ? AND chunk = ? AND expires_at > ?",
            (workspace_id, turn_id, part, chunk, self._now()),
        )
        return None if row is None else SentPiece(str(row[0]), str(row[1]))

    def record(
        self, workspace_id: str, turn_id: str, part: int, chunk: int, *, message_id: str, text_digest: str
    ) -> SentPiece:
        now = self._now()
        with self._db.transaction() as conn:
            # Expired entries go on the way: the local gateway has no TTL sweeper, and the index
            # makes this a range delete of what few rows a week produces.
            conn.execute("DELETE FROM send_ledger WHERE expires_at <= ?", (now,))
            conn.execute(
                "INSERT INTO send_ledger "
                "(workspace_id, turn_id, part, chunk, message_id, digest, expires_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (workspace_id, turn_id, part, chunk, message_id, text_digest, now + self._ttl_s),
            )
            rows = list(
                conn.execute(
                    "SELECT message_id, digest FROM send_ledger WHERE workspace_id = ? AND turn_id = ? "
                    "AND part = ? AND chunk = ?",
                    (workspace_id, turn_id, part, chunk),
                )
            )
        return SentPiece(str(rows[0][0]), str(rows[0][1]))

    def update_digest(
        self, workspace_id: str, turn_id: str, part: int, chunk: int, *, text_digest: str
    ) -> None:
        self._db.execute(
            "UPDATE send_ledger SET digest = ?, expires_at = ? WHERE workspace_id = ? AND turn_id = ? "
            "AND part = ? AND chunk = ?",
            (text_digest, self._now() + self._ttl_s, workspace_id, turn_id, part, chunk),
        )


# ---------------------------------------------------------------- DynamoDB


def _key_part(value: str) -> str:
    # Same rule as the outbox's keys: literal when short, a digest when not, prefixed so that a
    # literal can never equal another value's digest.
    raw = value.encode()
    return f"V#{value}" if len(raw) <= _MAX_KEY_PART_BYTES else f"H#{hashlib.sha256(raw).hexdigest()}"


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def _n(value: float) -> dict[str, str]:
    return {"N": str(int(value))}


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class DynamoSendLedger:
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
        if client is None:
            from shared.adapters.aws import clients

            client = clients.dynamodb(region)
        self.client = client
        self.table = table_name
        self._ttl_s = ttl_s
        self._now = now

    @staticmethod
    def _key(workspace_id: str, turn_id: str, part: int, chunk: int) -> dict[str, Any]:
        return {
            "pk": _s(f"WS#{workspace_id}#LEDGER#{_key_part(turn_id)}"),
            "sk": _s(f"PART#{part:06d}#{chunk:04d}"),
        }

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
            "message_id": _s(message_id),
            "digest": _s(text_digest),
            "ttl": _n(now + self._ttl_s),
        }
        try:
            self.client.put_item(
                TableName=self.table,
                Item=item,
                # New, or expired but not yet swept (TTL deletion runs up to days late).
                ConditionExpression="attribute_not_exists(pk) OR #ttl <= :now",
                ExpressionAttributeNames={"#ttl": "ttl"},
                ExpressionAttributeValues={":now": _n(now)},
            )
        except ClientError as exc:
            if _error_code(exc) != "ConditionalCheckFailedException":
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
                    ":digest": _s(text_digest),
                    ":ttl": _n(self._now() + self._ttl_s),
                },
            )
        except ClientError as exc:
            if _error_code(exc) != "ConditionalCheckFailedException":
                raise

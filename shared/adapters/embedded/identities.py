"""IdentityStore on SQLite (sigil.db): one row per (workspace, channel, channel user).

The pairing code is a column with a partial index over the rows that have one, so looking a code
up is an index seek, and a row whose code is cleared (approved, blocked) leaves the index.
"""

from __future__ import annotations

from shared import serde
from shared.adapters.embedded.db import Database, first
from shared.models import Identity, IdentityStatus

_MIGRATIONS = [
    """
    CREATE TABLE identities (
        workspace_id TEXT NOT NULL,
        channel TEXT NOT NULL,
        channel_user_id TEXT NOT NULL,
        status TEXT NOT NULL,
        pairing_code TEXT,
        doc TEXT NOT NULL,
        PRIMARY KEY (workspace_id, channel, channel_user_id)
    ) WITHOUT ROWID;
    CREATE INDEX identities_by_code ON identities (workspace_id, pairing_code)
        WHERE pairing_code IS NOT NULL;
    """,
]

_COLUMNS = "workspace_id, channel, channel_user_id, status, pairing_code, doc"


def _row(identity: Identity) -> tuple[str, str, str, str, str | None, str]:
    return (
        identity.workspace_id,
        identity.channel,
        identity.channel_user_id,
        identity.status,
        identity.pairing_code,
        serde.dumps(identity),
    )


class SqliteIdentityStore:
    def __init__(self, db: Database) -> None:
        self._db = db
        db.migrate("identities", _MIGRATIONS)

    def get(self, workspace_id: str, channel: str, channel_user_id: str) -> Identity | None:
        row = self._db.query_one(
            "SELECT doc FROM identities WHERE workspace_id = ? AND channel = ? AND channel_user_id = ?",
            (workspace_id, channel, channel_user_id),
        )
        return serde.loads(Identity, row[0]) if row else None

    def put(self, identity: Identity) -> None:
        self._db.execute(
            f"INSERT INTO identities ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (workspace_id, channel, channel_user_id) DO UPDATE SET "
            "status = excluded.status, pairing_code = excluded.pairing_code, doc = excluded.doc",
            _row(identity),
        )

    def create(self, identity: Identity) -> Identity:
        # Insert and read back in one write transaction: of two racing creators, the second reads
        # the first's row.
        with self._db.transaction() as conn:
            conn.execute(
                f"INSERT INTO identities ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (workspace_id, channel, channel_user_id) DO NOTHING",
                _row(identity),
            )
            row = first(
                conn,
                "SELECT doc FROM identities WHERE workspace_id = ? AND channel = ? AND channel_user_id = ?",
                (identity.workspace_id, identity.channel, identity.channel_user_id),
            )
        assert row is not None  # inserted just now, or there already
        stored: Identity = serde.loads(Identity, row[0])
        return stored

    def list_identities(self, workspace_id: str, *, status: IdentityStatus | None = None) -> list[Identity]:
        if status is None:
            rows = self._db.query(
                "SELECT doc FROM identities WHERE workspace_id = ? ORDER BY channel, channel_user_id",
                (workspace_id,),
            )
        else:
            rows = self._db.query(
                "SELECT doc FROM identities WHERE workspace_id = ? AND status = ? "
                "ORDER BY channel, channel_user_id",
                (workspace_id, status),
            )
        return [serde.loads(Identity, r[0]) for r in rows]

    def find_by_pairing_code(self, workspace_id: str, code: str) -> Identity | None:
        # Codes are unique per workspace by construction (shared.identity checks that a new one
        # is free); should two rows ever share one, the first by key answers.
        row = self._db.query_one(
            "SELECT doc FROM identities WHERE workspace_id = ? AND pairing_code = ? "
            "ORDER BY channel, channel_user_id LIMIT 1",
            (workspace_id, code),
        )
        return serde.loads(Identity, row[0]) if row else None

    def delete(self, workspace_id: str, channel: str, channel_user_id: str) -> None:
        self._db.execute(
            "DELETE FROM identities WHERE workspace_id = ? AND channel = ? AND channel_user_id = ?",
            (workspace_id, channel, channel_user_id),
        )

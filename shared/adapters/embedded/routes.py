"""RouteStore on SQLite: the channel routes `sigil config apply` writes, in sigil.db."""

from __future__ import annotations

from shared import serde
from shared.adapters.embedded.db import Database
from shared.models import ChannelRoute

_ROUTE_MIGRATIONS = [
    """
    CREATE TABLE routes (
        platform TEXT NOT NULL,
        name TEXT NOT NULL,
        doc TEXT NOT NULL,
        PRIMARY KEY (platform, name)
    ) WITHOUT ROWID;
    """,
]


class SqliteRouteStore:
    def __init__(self, db: Database) -> None:
        self._db = db
        db.migrate("routes", _ROUTE_MIGRATIONS)

    def get(self, platform: str, name: str) -> ChannelRoute | None:
        row = self._db.query_one("SELECT doc FROM routes WHERE platform = ? AND name = ?", (platform, name))
        return serde.loads(ChannelRoute, row[0]) if row else None

    def put(self, route: ChannelRoute) -> None:
        self._db.execute(
            "INSERT INTO routes (platform, name, doc) VALUES (?, ?, ?) "
            "ON CONFLICT (platform, name) DO UPDATE SET doc = excluded.doc",
            (route.platform, route.name, serde.dumps(route)),
        )

    def delete(self, platform: str, name: str) -> bool:
        return self._db.execute("DELETE FROM routes WHERE platform = ? AND name = ?", (platform, name)) > 0

    def list_routes(self) -> list[ChannelRoute]:
        """Ordered by (platform, name)."""
        rows = self._db.query("SELECT doc FROM routes ORDER BY platform, name")
        return [serde.loads(ChannelRoute, r[0]) for r in rows]

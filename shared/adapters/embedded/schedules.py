"""Schedules on SQLite, and their firing: the embedded counterpart of EventBridge Scheduler.

A row holds the schedule, the lane item of its next occurrence and when that is due (`next_at`,
epoch seconds). The local scheduler calls `fire_due` every second (shared.local.gateway): each
due row's item goes on its session's lane, then the row moves to its next occurrence (a one-time
schedule is finished). Submit first, then move: a crash in between submits the same occurrence
again at the next start, with the same event id, and the lane's dedup drops it. The rows are in
queue.db with the lanes, so they survive a restart; an occurrence due while the gateway was down
fires once when it starts, late, and a recurring schedule then goes on from the next occurrence
after now (missed ones are not replayed one by one).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from shared import serde
from shared.adapters.embedded.db import Database
from shared.models import LaneItem, Schedule
from shared.ports import Lanes
from shared.schedules import occurrence
from shared.schedules.timing import next_occurrence

logger = logging.getLogger(__name__)

_MIGRATIONS = [
    """
    CREATE TABLE schedules (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        doc TEXT NOT NULL,
        item TEXT NOT NULL,
        next_at REAL,
        status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'done', 'cancelled')),
        created_at REAL NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX schedules_by_owner ON schedules (workspace_id, user_id, status);
    CREATE INDEX schedules_due ON schedules (status, next_at);
    """,
]


class SqliteSchedules:
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self.clock = clock
        db.migrate("schedules", _MIGRATIONS)

    def create(self, schedule: Schedule, item: LaneItem, first_at: datetime) -> None:
        self._db.execute(
            "INSERT INTO schedules (id, workspace_id, user_id, doc, item, next_at, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                schedule.id,
                schedule.workspace_id,
                schedule.user_id,
                serde.dumps(schedule),
                serde.dumps(item),
                first_at.timestamp(),
                self.clock(),
            ),
        )

    def get(self, workspace_id: str, schedule_id: str) -> Schedule | None:
        row = self._db.query_one(
            "SELECT doc FROM schedules WHERE workspace_id = ? AND id = ? AND status = 'active'",
            (workspace_id, schedule_id),
        )
        return serde.loads(Schedule, row[0]) if row else None

    def list_schedules(self, workspace_id: str, *, user_id: str | None = None) -> list[Schedule]:
        where, params = _owner(workspace_id, user_id)
        rows = self._db.query(f"SELECT doc FROM schedules WHERE {where} ORDER BY created_at, id", params)
        return [serde.loads(Schedule, r[0]) for r in rows]

    def count(self, workspace_id: str, *, user_id: str | None = None) -> int:
        where, params = _owner(workspace_id, user_id)
        row = self._db.query_one(f"SELECT COUNT(*) FROM schedules WHERE {where}", params)
        return int(row[0]) if row else 0

    def cancel(self, workspace_id: str, schedule_id: str) -> bool:
        return (
            self._db.execute(
                "UPDATE schedules SET status = 'cancelled', next_at = NULL "
                "WHERE workspace_id = ? AND id = ? AND status = 'active'",
                (workspace_id, schedule_id),
            )
            > 0
        )

    # ------------------------------------------------------------------ the engine

    def next_due_at(self) -> float | None:
        row = self._db.query_one("SELECT MIN(next_at) FROM schedules WHERE status = 'active'")
        return float(row[0]) if row and row[0] is not None else None

    def fire_due(self, lanes: Lanes) -> int:
        """Put every due occurrence on its lane and move its schedule on; returns how many fired."""
        now = self.clock()
        rows = self._db.query(
            "SELECT id, doc, item FROM schedules WHERE status = 'active' AND next_at <= ? ORDER BY next_at",
            (now,),
        )
        for schedule_id, doc, body in rows:
            schedule: Schedule = serde.loads(Schedule, doc)
            item: LaneItem = serde.loads(LaneItem, body)
            lanes.submit(item)
            logger.info(
                "schedule fired",
                extra={"workspace_id": schedule.workspace_id, "schedule_id": schedule.id},
            )
            if schedule.recurrence is None:
                self._db.execute(
                    "UPDATE schedules SET status = 'done', next_at = NULL WHERE id = ? AND status = 'active'",
                    (schedule_id,),
                )
                continue
            after = max(now, item.fired.at.timestamp() if item.fired else now)
            last = datetime.fromtimestamp(after, UTC)
            following = next_occurrence(schedule.recurrence, schedule.timezone, last)
            # The next occurrence's item: the same inbound, its own time and event id.
            nxt = occurrence(schedule, item.inbound, following)
            self._db.execute(
                "UPDATE schedules SET item = ?, next_at = ? WHERE id = ? AND status = 'active'",
                (serde.dumps(nxt), following.timestamp(), schedule_id),
            )
        return len(rows)


def _owner(workspace_id: str, user_id: str | None) -> tuple[str, list[str]]:
    if user_id is None:
        return "workspace_id = ? AND status = 'active'", [workspace_id]
    return "workspace_id = ? AND user_id = ? AND status = 'active'", [workspace_id, user_id]

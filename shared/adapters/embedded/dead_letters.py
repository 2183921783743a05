"""The embedded lanes' dead letters (the `lane_dead` table of queue.db) as the DeadLetters port.

SqliteLanes buries an item there with its queue position (seq), lane, dedup id, body, attempts,
the last error and when: everything the port shows. A redrive moves an item back into
`lane_items` and out of `lane_dead` in one transaction, so it is in exactly one of the two
whatever happens; the lane runner (another process, the local gateway) finds it at its next poll.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from itertools import groupby

import apsw
import pydantic

from shared import serde
from shared.adapters.embedded.db import Database, first
from shared.agent.redrive import held_back
from shared.models import LaneItem
from shared.ports import PREVIEW_CHARS, DeadLetterEntry, RedriveOutcome, RedriveReport, Requeue

_COLUMNS = "seq, group_id, dedup_id, body, attempts, error, failed_at"


class SqliteDeadLetters:
    def __init__(self, db: Database, *, notify: Callable[[], None] = lambda: None) -> None:
        # The lanes' database: SqliteLanes created (and migrates) the tables before this is built.
        self._db = db
        self._notify = notify  # wakes a runner in this process at once

    def list_entries(self, workspace_id: str | None = None, *, limit: int = 100) -> list[DeadLetterEntry]:
        rows = self._db.query(f"SELECT {_COLUMNS} FROM lane_dead ORDER BY seq")
        entries = [_entry(row) for row in rows]
        if workspace_id is not None:
            entries = [e for e in entries if e.workspace_id == workspace_id]
        return _in_order(entries)[: max(0, limit)]

    def show(self, entry_id: str) -> DeadLetterEntry | None:
        seq = _seq(entry_id)
        if seq is None:
            return None
        row = self._db.query_one(f"SELECT {_COLUMNS} FROM lane_dead WHERE seq = ?", (seq,))
        return _entry(row) if row is not None else None

    def redrive(
        self, requeue: Requeue, *, ids: Sequence[str] = (), session: tuple[str, str] | None = None
    ) -> RedriveReport:
        report = RedriveReport()
        if session is not None:
            workspace_id, session_id = session
            chosen = [
                e for e in self.list_entries(workspace_id, limit=1_000_000) if e.session_id == session_id
            ]
        else:
            chosen = []
            for entry_id in dict.fromkeys(ids):
                entry = self.show(entry_id)
                if entry is None:
                    report.outcomes.append(RedriveOutcome(id=entry_id, group_id="", outcome="not_found"))
                else:
                    chosen.append(entry)
        for _, group in groupby(_in_order(chosen), key=lambda e: e.group_id):
            held = False
            for entry in group:
                if held:
                    report.outcomes.append(held_back(entry))
                    continue
                outcome = self._redrive_one(entry, requeue)
                report.outcomes.append(outcome)
                held = outcome.outcome == "failed"
        self._notify()
        return report

    def _redrive_one(self, entry: DeadLetterEntry, requeue: Requeue) -> RedriveOutcome:
        if entry.item is None:
            return RedriveOutcome(
                id=entry.id, group_id=entry.group_id, outcome="failed", detail="its body does not decode"
            )
        try:
            again = requeue(entry.item)
        # The session could not be read: this item stays, and the rest of its session with it.
        except apsw.Error as exc:
            return RedriveOutcome(
                id=entry.id, group_id=entry.group_id, outcome="failed", detail=f"{type(exc).__name__}: {exc}"
            )
        seq = int(entry.id)
        with self._db.transaction() as conn:
            if first(conn, "SELECT 1 FROM lane_dead WHERE seq = ?", (seq,)) is None:
                # Redriven meanwhile by another operator: theirs stands.
                return RedriveOutcome(id=entry.id, group_id=entry.group_id, outcome="not_found")
            if again is not None:
                conn.execute(
                    "INSERT INTO lane_items (group_id, dedup_id, body, enqueued_at) VALUES (?, ?, ?, ?)",
                    (again.group_id, again.dedup_id, serde.dumps(again), time.time()),
                )
            conn.execute("DELETE FROM lane_dead WHERE seq = ?", (seq,))
        if again is None:
            return RedriveOutcome(
                id=entry.id, group_id=entry.group_id, outcome="skipped", detail="its turn already committed"
            )
        return RedriveOutcome(
            id=entry.id, group_id=entry.group_id, outcome="redriven", detail=again.inbound.event_id
        )


def _seq(entry_id: str) -> int | None:
    try:
        return int(entry_id)
    except ValueError:
        return None


def _in_order(entries: list[DeadLetterEntry]) -> list[DeadLetterEntry]:
    """By lane, each lane's items in their original order (first queued, then queue position)."""
    never = datetime.max.replace(tzinfo=UTC)
    return sorted(entries, key=lambda e: (e.group_id, e.enqueued_at or never, int(e.id)))


def _entry(row: Sequence[object]) -> DeadLetterEntry:
    seq, group_id, _dedup_id, body, attempts, error, failed_at = row
    try:
        item: LaneItem | None = serde.loads(LaneItem, str(body))
    except pydantic.ValidationError:
        item = None
    inbound = item.inbound if item is not None else None
    return DeadLetterEntry(
        id=str(seq),
        group_id=str(group_id),
        workspace_id=inbound.workspace_id if inbound else None,
        session_id=inbound.session_id if inbound else None,
        channel=inbound.channel if inbound else None,
        event_id=inbound.event_id if inbound else None,
        preview=inbound.text[:PREVIEW_CHARS] if inbound else "",
        attempts=int(str(attempts)),
        enqueued_at=item.enqueued_at if item is not None else None,
        failed_at=datetime.fromtimestamp(float(str(failed_at)), UTC),
        reason=str(error),
        item=item,
    )

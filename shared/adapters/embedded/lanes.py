"""Durable per-session lanes on SQLite: the local stand-in for the SQS FIFO queue.

`SqliteLanes` is the producer side (the `Lanes` port) and owns the queue tables; the consumer is
`EmbeddedLaneRunner`, which keeps SQS FIFO's guarantees: one item at a time per group (session),
in submit order, groups in parallel; a failing item is retried with the group held behind it, and
after `max_attempts` moves to a dead-letter table so the group goes on. Items are claimed before
their handler runs and removed only after it returns, so a crash loses nothing: on start, items
left in flight go back to pending (delivery is at least once, as with SQS).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

import apsw
import pydantic

from shared import serde
from shared.adapters.embedded.db import Database, DatabaseClosed, first
from shared.agent.steps import redelivered
from shared.errors import SigilError
from shared.models import LaneItem
from shared.ports import SubmitResult

logger = logging.getLogger(__name__)

DEFAULT_DEDUP_WINDOW_S = 7 * 24 * 3600.0

_MIGRATIONS = [
    """
    CREATE TABLE lane_items (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        group_id TEXT NOT NULL,
        dedup_id TEXT NOT NULL,
        body TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'inflight')),
        attempts INTEGER NOT NULL DEFAULT 0,
        not_before REAL NOT NULL DEFAULT 0,
        enqueued_at REAL NOT NULL,
        claimed_at REAL,
        last_error TEXT
    );
    CREATE INDEX lane_items_by_group ON lane_items (group_id, seq);

    CREATE TABLE lane_dedup (
        dedup_id TEXT PRIMARY KEY,
        seen_at REAL NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX lane_dedup_by_time ON lane_dedup (seen_at);

    CREATE TABLE lane_dead (
        seq INTEGER PRIMARY KEY,
        group_id TEXT NOT NULL,
        dedup_id TEXT NOT NULL,
        body TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        error TEXT NOT NULL,
        failed_at REAL NOT NULL
    );
    """,
    # Deduplicated per lane (session), as SQS FIFO with DeduplicationScope=messageGroup: one
    # client's event id must not drop another session's message. Rows seen before this step do
    # not know their lane; they keep the empty group_id, which still matches in every lane (as
    # they did) until the window expires them.
    """
    CREATE TABLE lane_dedup_by_group (
        group_id TEXT NOT NULL,
        dedup_id TEXT NOT NULL,
        seen_at REAL NOT NULL,
        PRIMARY KEY (group_id, dedup_id)
    ) WITHOUT ROWID;
    INSERT INTO lane_dedup_by_group (group_id, dedup_id, seen_at)
        SELECT '', dedup_id, seen_at FROM lane_dedup;
    DROP TABLE lane_dedup;
    ALTER TABLE lane_dedup_by_group RENAME TO lane_dedup;
    CREATE INDEX lane_dedup_by_time ON lane_dedup (seen_at);
    """,
]

# The group_id of dedup rows written before dedup was per lane: they match in any lane.
_ANY_LANE = ""

_MAX_ERROR_CHARS = 2000


@dataclass(frozen=True)
class DeadLetter:
    """An item that failed `max_attempts` times, kept for inspection and redrive."""

    seq: int
    group_id: str
    dedup_id: str
    body: str
    attempts: int
    error: str
    failed_at: datetime

    @property
    def item(self) -> LaneItem | None:
        """The item, or None when its body no longer decodes (which may be why it died)."""
        try:
            return serde.loads(LaneItem, self.body)
        except pydantic.ValidationError:
            return None


@dataclass(frozen=True)
class _Head:
    seq: int
    group_id: str
    status: str
    not_before: float


@dataclass(frozen=True)
class _Claim:
    seq: int
    group_id: str
    dedup_id: str
    attempts: int
    item: LaneItem
    # Dead-lettered as it was claimed: its attempts were used up by runs that never returned.
    buried: bool = False


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:_MAX_ERROR_CHARS]


class SqliteLanes:
    """The queue. Producers call submit(); an `EmbeddedLaneRunner` consumes it."""

    def __init__(
        self,
        db: Database,
        *,
        dedup_window_s: float = DEFAULT_DEDUP_WINDOW_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self._dedup_window_s = dedup_window_s
        self.clock = clock
        # Runners and wait_idle() sleep on this; submit() and finished items wake them, so an
        # item starts as soon as it is queued rather than at the next poll.
        self.condition = threading.Condition()
        self._generation = 0
        db.migrate("lanes", _MIGRATIONS)

    # ------------------------------------------------------------------ producer (the port)

    def submit(self, item: LaneItem) -> SubmitResult:
        now = self.clock()
        with self._db.transaction() as conn:
            conn.execute("DELETE FROM lane_dedup WHERE seen_at < ?", (now - self._dedup_window_s,))
            seen = first(
                conn,
                "SELECT 1 FROM lane_dedup WHERE dedup_id = ? AND group_id IN (?, ?)",
                (item.dedup_id, item.group_id, _ANY_LANE),
            )
            if seen is not None:
                return SubmitResult(status="duplicate")
            conn.execute(
                "INSERT INTO lane_dedup (group_id, dedup_id, seen_at) VALUES (?, ?, ?)",
                (item.group_id, item.dedup_id, now),
            )
            conn.execute(
                "INSERT INTO lane_items (group_id, dedup_id, body, enqueued_at) VALUES (?, ?, ?, ?)",
                (item.group_id, item.dedup_id, serde.dumps(item), now),
            )
        self.notify()
        return SubmitResult(status="queued")

    # ------------------------------------------------------------------ inspection

    def pending_count(self) -> int:
        """Items queued or in flight (dead letters excluded)."""
        row = self._db.query_one("SELECT COUNT(*) FROM lane_items")
        return int(row[0]) if row else 0

    def dead_letters(self, *, limit: int = 100) -> list[DeadLetter]:
        """Newest first."""
        rows = self._db.query(
            "SELECT seq, group_id, dedup_id, body, attempts, error, failed_at FROM lane_dead "
            "ORDER BY failed_at DESC, seq DESC LIMIT ?",
            (max(0, limit),),
        )
        return [
            DeadLetter(
                seq=int(r[0]),
                group_id=str(r[1]),
                dedup_id=str(r[2]),
                body=str(r[3]),
                attempts=int(r[4]),
                error=str(r[5]),
                failed_at=datetime.fromtimestamp(float(r[6]), UTC),
            )
            for r in rows
        ]

    def redrive(self, seq: int) -> bool:
        """Queue a dead letter again, at the end of its group, with its attempts reset."""
        with self._db.transaction() as conn:
            row = first(conn, "SELECT group_id, dedup_id, body FROM lane_dead WHERE seq = ?", (seq,))
            if row is None:
                return False
            conn.execute(
                "INSERT INTO lane_items (group_id, dedup_id, body, enqueued_at) VALUES (?, ?, ?, ?)",
                (row[0], row[1], row[2], self.clock()),
            )
            conn.execute("DELETE FROM lane_dead WHERE seq = ?", (seq,))
        self.notify()
        return True

    # ------------------------------------------------------------------ consumer side (runner)

    def notify(self) -> None:
        with self.condition:
            self._generation += 1
            self.condition.notify_all()

    @property
    def generation(self) -> int:
        """Bumped by every change a waiting consumer should look at (read under `condition`)."""
        return self._generation

    def recover_inflight(self) -> int:
        """Put items a crashed consumer left in flight back to pending; returns how many."""
        changed = self._db.execute("UPDATE lane_items SET status = 'pending' WHERE status = 'inflight'")
        if changed:
            logger.warning("lanes: %d item(s) were in flight at the last stop; queued again", changed)
            self.notify()
        return changed

    def _heads(self) -> list[_Head]:
        """The oldest item of every group, oldest group first."""
        rows = self._db.query(
            "SELECT i.seq, i.group_id, i.status, i.not_before FROM lane_items i "
            "JOIN (SELECT group_id, MIN(seq) AS seq FROM lane_items GROUP BY group_id) h ON i.seq = h.seq "
            "ORDER BY i.seq"
        )
        return [_Head(int(r[0]), str(r[1]), str(r[2]), float(r[3])) for r in rows]

    def _claim(self, seq: int, max_attempts: int) -> _Claim | None:
        """Mark a pending item in flight and count the attempt; None if it is no longer claimable.

        The attempt is counted before the handler runs, as SQS counts receives, so an item that
        kills the process every time it runs still reaches the dead-letter table: the claim that
        finds its attempts used up buries it and returns it with `buried` set, so the runner
        tells the dead-letter callback as it does for an item whose last attempt raised.
        """
        now = self.clock()
        with self._db.transaction() as conn:
            # Only a group's oldest item may start: re-checked here, under the write lock, so a
            # stale view of the heads can never run an item ahead of its group.
            row = first(
                conn,
                "SELECT group_id, dedup_id, body, attempts, last_error FROM lane_items i "
                "WHERE seq = ? AND status = 'pending' "
                "AND seq = (SELECT MIN(seq) FROM lane_items j WHERE j.group_id = i.group_id)",
                (seq,),
            )
            if row is None:
                return None
            group_id, dedup_id, body, attempts = str(row[0]), str(row[1]), str(row[2]), int(row[3])
            try:
                item: LaneItem = serde.loads(LaneItem, body)
            except pydantic.ValidationError as exc:
                self._bury(conn, seq, attempts, f"undecodable item: {_describe(exc)}", now)
                logger.error("lanes: item %s of group %s does not decode; dead-lettered", dedup_id, group_id)
                return None
            if attempts >= max_attempts:
                reason = f"interrupted after {attempts} attempt(s); last error: {row[4] or 'none recorded'}"
                self._bury(conn, seq, attempts, reason, now)
                logger.error("lanes: item %s of group %s dead-lettered: %s", dedup_id, group_id, reason)
                return _Claim(seq, group_id, dedup_id, attempts, item, buried=True)
            conn.execute(
                "UPDATE lane_items SET status = 'inflight', attempts = attempts + 1, claimed_at = ? "
                "WHERE seq = ?",
                (now, seq),
            )
        return _Claim(seq=seq, group_id=group_id, dedup_id=dedup_id, attempts=attempts + 1, item=item)

    def _complete(self, seq: int) -> None:
        self._db.execute("DELETE FROM lane_items WHERE seq = ?", (seq,))

    def _fail(self, claim: _Claim, error: str, *, max_attempts: int, retry_in_s: float) -> bool:
        """Record a failed attempt; True when the item was dead-lettered, False when it will retry."""
        now = self.clock()
        with self._db.transaction() as conn:
            if claim.attempts >= max_attempts:
                self._bury(conn, claim.seq, claim.attempts, error, now)
                return True
            conn.execute(
                "UPDATE lane_items SET status = 'pending', not_before = ?, last_error = ? WHERE seq = ?",
                (now + retry_in_s, error, claim.seq),
            )
            return False

    @staticmethod
    def _bury(conn: apsw.Connection, seq: int, attempts: int, error: str, now: float) -> None:
        conn.execute(
            "INSERT INTO lane_dead (seq, group_id, dedup_id, body, attempts, error, failed_at) "
            "SELECT seq, group_id, dedup_id, body, ?, ?, ? FROM lane_items WHERE seq = ?",
            (attempts, error[:_MAX_ERROR_CHARS], now, seq),
        )
        conn.execute("DELETE FROM lane_items WHERE seq = ?", (seq,))


class EmbeddedLaneRunner:
    """Consumes `SqliteLanes` on a thread pool: serial inside a group, parallel across groups.

    A dispatcher thread picks the head item of each group that is not running, claims it and
    hands it to a worker; a group gets its next item only after the previous one finished,
    succeeded or was dead-lettered, which is what keeps a session's turns in order.

    Run one runner per queue file: start() takes back every in-flight item, on the assumption
    that whoever claimed it is gone.
    """

    def __init__(
        self,
        lanes: SqliteLanes,
        handler: Callable[[LaneItem], None],
        workers: int = 4,
        max_attempts: int = 5,
        *,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        poll_interval_s: float = 1.0,
        on_dead_letter: Callable[[LaneItem], object] | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.lanes = lanes
        self.handler = handler
        self.workers = workers
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        # Told when a handler's item is dead-lettered, so the user hears something, not silence.
        # What it returns (give_up_turn's audit record) is the application's, not the lane's.
        self.on_dead_letter = on_dead_letter
        # Submits in this process wake the dispatcher at once; the poll only catches items
        # queued by another process (a CLI command) and retries coming due.
        self.poll_interval_s = poll_interval_s
        self._cond = lanes.condition
        self._active: set[str] = set()
        self._stopping = False
        self._dispatcher: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._dispatcher is not None:
            raise RuntimeError("runner already started")
        self.lanes.recover_inflight()
        self._stopping = False
        self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="lane-worker")
        self._dispatcher = threading.Thread(target=self._loop, name="lane-dispatcher", daemon=True)
        self._dispatcher.start()

    def stop(self, timeout: float | None = 30.0) -> None:
        """Stop taking items and wait for the running handlers to return."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._dispatcher is not None:
            self._dispatcher.join(timeout)
            self._dispatcher = None
        if self._pool is not None:
            # No queued futures exist (a worker is only given an item when one is free), so
            # this waits just for handlers already running.
            self._pool.shutdown(wait=True)
            self._pool = None

    def __enter__(self) -> EmbeddedLaneRunner:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_idle(self, timeout: float) -> bool:
        """True once nothing is queued or running (dead letters aside); False after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            with self._cond:
                generation = self.lanes.generation
                running = bool(self._active)
            # A claimed item is in the table until its worker deletes it and only then leaves
            # `_active`, so "not running, then nothing in the table" cannot miss an item.
            if not running and self.lanes.pending_count() == 0:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with self._cond:
                if self.lanes.generation == generation:
                    self._cond.wait(min(remaining, 0.05))

    # ------------------------------------------------------------------ dispatching

    def _loop(self) -> None:
        while True:
            with self._cond:
                if self._stopping:
                    return
                generation = self.lanes.generation
            try:
                delay = self._dispatch()
            except DatabaseClosed:
                logger.error("lanes: the queue was closed while the runner was running; dispatcher stops")
                return
            except apsw.Error:
                logger.exception("lanes: dispatcher could not read the queue; retrying")
                delay = self.poll_interval_s
            with self._cond:
                if self._stopping:
                    return
                if self.lanes.generation == generation and delay > 0:
                    self._cond.wait(delay)

    def _dispatch(self) -> float:
        """Start every runnable group's head; returns how long to sleep before looking again."""
        with self._cond:
            free = self.workers - len(self._active)
            active = set(self._active)
        delay = self.poll_interval_s
        if free <= 0:
            return delay
        now = self.lanes.clock()
        for head in self.lanes._heads():
            if free <= 0 or self._stopping:
                break
            # An in-flight head belongs to a running worker (or another consumer process).
            if head.group_id in active or head.status != "pending":
                continue
            if head.not_before > now:
                delay = min(delay, head.not_before - now)
                continue
            claim = self.lanes._claim(head.seq, self.max_attempts)
            if claim is None:
                # Not claimable after all, or undecodable and dead-lettered: that group may have a
                # new head, look again at once.
                delay = 0.0
                continue
            with self._cond:
                self._active.add(claim.group_id)
            active.add(claim.group_id)
            free -= 1
            assert self._pool is not None
            # A buried claim still takes its group's turn on a worker: the user hears the
            # callback's apology before the group's next item runs, as after a last attempt.
            self._pool.submit(self._tell_buried if claim.buried else self._work, claim)
        return max(0.0, delay)

    def _tell_buried(self, claim: _Claim) -> None:
        try:
            self._tell_dead_letter(claim)
        finally:
            with self._cond:
                self._active.discard(claim.group_id)
            self.lanes.notify()

    def _tell_dead_letter(self, claim: _Claim) -> None:
        if self.on_dead_letter is None:
            return
        try:
            self.on_dead_letter(claim.item)
        # Application code again: its failure is logged and must not stop the lane.
        except Exception:
            logger.exception("lanes: dead-letter callback failed for item %s", claim.dedup_id)

    def _work(self, claim: _Claim) -> None:
        # As the agent's batch sets it from SQS's ApproximateReceiveCount (shared.agent.steps).
        again = redelivered.set(claim.attempts > 1)
        try:
            try:
                self.handler(claim.item)
            # The handler is arbitrary application code: whatever it raises fails this item,
            # which is retried and finally dead-lettered, never the runner.
            except Exception as exc:
                delay = min(self.max_backoff_s, self.backoff_s * 2 ** (claim.attempts - 1))
                buried = self.lanes._fail(
                    claim, _describe(exc), max_attempts=self.max_attempts, retry_in_s=delay
                )
                # A SigilError is a failure the code expected (a model server that does not
                # answer, a platform that refuses): its message says the cause, on the same line,
                # and a traceback per attempt would only bury it. Anything else is a bug and
                # keeps its traceback.
                expected = isinstance(exc, SigilError)
                if buried:
                    logger.error(
                        "lanes: item %s of group %s failed %d time(s); dead-lettered: %s",
                        claim.dedup_id,
                        claim.group_id,
                        claim.attempts,
                        _describe(exc),
                        exc_info=None if expected else exc,
                    )
                    self._tell_dead_letter(claim)
                else:
                    logger.warning(
                        "lanes: item %s of group %s failed (attempt %d of %d); retrying in %.2fs: %s",
                        claim.dedup_id,
                        claim.group_id,
                        claim.attempts,
                        self.max_attempts,
                        delay,
                        _describe(exc),
                        exc_info=None if expected else exc,
                    )
            else:
                self.lanes._complete(claim.seq)
        except (apsw.Error, DatabaseClosed):
            # The queue itself failed (disk full, database closed under us): the item stays in
            # flight and is delivered again after the next start.
            logger.exception("lanes: could not record the outcome of item %s", claim.dedup_id)
        finally:
            redelivered.reset(again)
            with self._cond:
                self._active.discard(claim.group_id)
            self.lanes.notify()

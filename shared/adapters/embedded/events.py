"""EventBus on SQLite and the local scheduler that stands in for EventBridge.

publish() only stores the event, so it is durable before the caller goes on (an event published
while no scheduler runs, by a CLI command say, waits for the gateway). `LocalScheduler` delivers
stored events to the handlers of their type, oldest first and at least once, and runs periodic
jobs whose last run is persisted, so a job that fell due while the gateway was down runs once
when it starts (one catch-up run, not one per missed interval).

publish_after() stores an event with an available-at time (the per-turn extraction's debounce):
the scheduler delivers it once that time has passed, and meanwhile it holds back no other event
and does not count as pending work for wait_idle().
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import apsw
import pydantic

from shared import serde
from shared.adapters.embedded.db import Database, DatabaseClosed
from shared.models import DomainEvent

logger = logging.getLogger(__name__)

EventHandler = Callable[[DomainEvent], None]
Job = Callable[[], None]

_MIGRATIONS = [
    """
    CREATE TABLE events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        type TEXT NOT NULL,
        workspace_id TEXT NOT NULL,
        doc TEXT NOT NULL,
        published_at REAL NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done', 'dead')),
        attempts INTEGER NOT NULL DEFAULT 0,
        not_before REAL NOT NULL DEFAULT 0,
        finished_at REAL,
        last_error TEXT
    );
    CREATE INDEX events_by_status ON events (status, seq);

    CREATE TABLE scheduler_jobs (
        name TEXT PRIMARY KEY,
        last_run_at REAL NOT NULL
    ) WITHOUT ROWID;
    """,
    # A delayed event (publish_after) is held until its available_at; unlike a retry's not_before
    # it holds nothing behind it: a debounce must not delay other sessions' events.
    """
    ALTER TABLE events ADD COLUMN available_at REAL NOT NULL DEFAULT 0;
    """,
]

_MAX_ERROR_CHARS = 2000


@dataclass(frozen=True)
class StoredEvent:
    seq: int
    status: str
    attempts: int
    event: DomainEvent
    last_error: str | None


class SqliteEventBus:
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self.clock = clock
        self.condition = threading.Condition()
        self._generation = 0
        db.migrate("events", _MIGRATIONS)

    @property
    def db(self) -> Database:
        return self._db

    @property
    def generation(self) -> int:
        return self._generation

    def publish(self, event: DomainEvent) -> None:
        self._db.execute(
            "INSERT INTO events (type, workspace_id, doc, published_at) VALUES (?, ?, ?, ?)",
            (event.type, event.workspace_id, serde.dumps(event), self.clock()),
        )
        with self.condition:
            self._generation += 1
            self.condition.notify_all()

    def publish_after(self, event: DomainEvent, delay_s: float) -> None:
        now = self.clock()
        self._db.execute(
            "INSERT INTO events (type, workspace_id, doc, published_at, available_at) VALUES (?, ?, ?, ?, ?)",
            (event.type, event.workspace_id, serde.dumps(event), now, now + max(0.0, delay_s)),
        )
        with self.condition:
            self._generation += 1
            self.condition.notify_all()

    def forget_session(self, workspace_id: str, session_id: str) -> int:
        """Every event of the session, delivered or not (a delivered one is kept a while)."""
        return self._db.execute(
            "DELETE FROM events WHERE workspace_id = ? AND json_extract(doc, '$.session_id') = ?",
            (workspace_id, session_id),
        )

    def list_events(self, *, status: str | None = None, limit: int = 100) -> list[StoredEvent]:
        """Oldest first; `status` is pending, done or dead."""
        where, params = ("WHERE status = ?", [status]) if status else ("", [])
        rows = self._db.query(
            f"SELECT seq, status, attempts, doc, last_error FROM events {where} ORDER BY seq LIMIT ?",
            [*params, max(0, limit)],
        )
        return [
            StoredEvent(
                seq=int(r[0]),
                status=str(r[1]),
                attempts=int(r[2]),
                event=serde.loads(DomainEvent, r[3]),
                last_error=r[4],
            )
            for r in rows
        ]

    def pending_count(self) -> int:
        row = self._db.query_one("SELECT COUNT(*) FROM events WHERE status = 'pending'")
        return int(row[0]) if row else 0

    def due_count(self) -> int:
        """Pending events that may be delivered now (a delayed one counts once it falls due)."""
        row = self._db.query_one(
            "SELECT COUNT(*) FROM events WHERE status = 'pending' AND available_at <= ?", (self.clock(),)
        )
        return int(row[0]) if row else 0

    def next_available_at(self) -> float | None:
        """When the earliest delayed event falls due (epoch seconds); None when none waits."""
        row = self._db.query_one(
            "SELECT MIN(available_at) FROM events WHERE status = 'pending' AND available_at > ?",
            (self.clock(),),
        )
        return float(row[0]) if row and row[0] is not None else None


@dataclass
class _PeriodicJob:
    name: str
    interval_s: float
    fn: Job


class LocalScheduler:
    """Delivers the bus's events and runs periodic jobs on one daemon thread.

    Register handlers (`on`) and jobs (`every`) before start(): an event whose type has no
    handler when it comes up is marked done. A handler that raises is retried after a backoff
    with the events behind it held, to keep order, and after `max_attempts` the event is marked
    dead (kept, listable) so one poison event cannot stop the bus.
    """

    def __init__(
        self,
        bus: SqliteEventBus,
        *,
        poll_interval_s: float = 1.0,
        max_attempts: int = 3,
        retry_backoff_s: float = 1.0,
        keep_done_s: float = 7 * 24 * 3600.0,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.bus = bus
        self.poll_interval_s = poll_interval_s
        self.max_attempts = max_attempts
        self.retry_backoff_s = retry_backoff_s
        self.keep_done_s = keep_done_s
        self._handlers: dict[str, list[EventHandler]] = {}
        self._jobs: dict[str, _PeriodicJob] = {}
        # One delivery pass at a time, whether from the thread or run_pending(): two passes
        # would hand the same event to a handler twice and could reorder.
        self._pass_lock = threading.Lock()
        self._stopping = False
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ registration

    def on(self, event_type: str, handler: EventHandler) -> None:
        self._handlers.setdefault(event_type, []).append(handler)

    def every(self, name: str, interval_s: float, fn: Job) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be > 0")
        self._jobs[name] = _PeriodicJob(name, interval_s, fn)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("scheduler already started")
        self._stopping = False
        self._prune()
        self._thread = threading.Thread(target=self._loop, name="local-scheduler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 10.0) -> None:
        cond = self.bus.condition
        with cond:
            self._stopping = True
            cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def wait_idle(self, timeout: float) -> bool:
        """True once no event is due (a delayed one not yet due does not count); False after
        `timeout` (for tests)."""
        deadline = time.monotonic() + timeout
        while True:
            with self.bus.condition:
                generation = self.bus.generation
            if self.bus.due_count() == 0 and not self._pass_lock.locked():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with self.bus.condition:
                if self.bus.generation == generation:
                    self.bus.condition.wait(min(remaining, 0.05))

    def _loop(self) -> None:
        cond = self.bus.condition
        while True:
            with cond:
                if self._stopping:
                    return
                generation = self.bus.generation
            try:
                delay = self._pass()
            except DatabaseClosed:
                logger.error("scheduler: the event store was closed while running; scheduler stops")
                return
            except apsw.Error:
                logger.exception("scheduler: could not read the event store; retrying")
                delay = self.poll_interval_s
            with cond:
                if self._stopping:
                    return
                if self.bus.generation == generation and delay > 0:
                    cond.wait(delay)

    # ------------------------------------------------------------------ one pass

    def run_pending(self) -> int:
        """Deliver due events and run due jobs now, in this thread; returns how many ran."""
        with self._pass_lock:
            return self._deliver_events()[0] + self._run_jobs()[0]

    def _pass(self) -> float:
        with self._pass_lock:
            _, event_delay = self._deliver_events()
            _, job_delay = self._run_jobs()
        # wait_idle() sleeps on the same condition: let it look again now the pass is over.
        with self.bus.condition:
            self.bus.condition.notify_all()
        return max(0.0, min(self.poll_interval_s, event_delay, job_delay))

    def _deliver_events(self) -> tuple[int, float]:
        delivered = 0
        while not self._stopping:
            rows = self.bus.db.query(
                "SELECT seq, doc, attempts, not_before FROM events WHERE status = 'pending' "
                "AND available_at <= ? ORDER BY seq LIMIT 50",
                (self.bus.clock(),),
            )
            if not rows:
                return delivered, self._until_delayed()
            for seq, doc, attempts, not_before in rows:
                now = self.bus.clock()
                if float(not_before) > now:
                    # Events behind a retrying one wait for it: delivery stays in order.
                    return delivered, float(not_before) - now
                if not self._deliver_one(int(seq), str(doc), int(attempts)):
                    return delivered, self.retry_backoff_s
                delivered += 1
                if self._stopping:
                    break
        return delivered, self.poll_interval_s

    def _until_delayed(self) -> float:
        """How long until the next delayed event falls due (the poll interval at most)."""
        due = self.bus.next_available_at()
        return (
            self.poll_interval_s
            if due is None
            else min(self.poll_interval_s, max(0.0, due - self.bus.clock()))
        )

    def _deliver_one(self, seq: int, doc: str, attempts: int) -> bool:
        """Hand one event to its handlers; False when it is to be retried later."""
        try:
            event: DomainEvent = serde.loads(DomainEvent, doc)
        except pydantic.ValidationError as exc:
            self._finish(seq, "dead", attempts, f"undecodable event: {exc}")
            logger.error("scheduler: event %d does not decode; marked dead", seq)
            return True
        handlers = self._handlers.get(event.type, [])
        if not handlers:
            logger.debug("scheduler: no handler for %s; event %d dropped", event.type, seq)
        attempt = attempts + 1
        try:
            for handler in handlers:
                handler(event)
        # Handlers are application code (compaction, maintenance); whatever one raises fails
        # this delivery, which is retried and finally marked dead, never the scheduler.
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"[:_MAX_ERROR_CHARS]
            if attempt >= self.max_attempts:
                self._finish(seq, "dead", attempt, error)
                logger.error(
                    "scheduler: %s event %d failed %d time(s); marked dead",
                    event.type,
                    seq,
                    attempt,
                    exc_info=exc,
                )
                return True
            delay = self.retry_backoff_s * 2 ** (attempt - 1)
            self.bus.db.execute(
                "UPDATE events SET attempts = ?, not_before = ?, last_error = ? WHERE seq = ?",
                (attempt, self.bus.clock() + delay, error, seq),
            )
            logger.warning(
                "scheduler: %s event %d failed (attempt %d of %d); retrying in %.2fs",
                event.type,
                seq,
                attempt,
                self.max_attempts,
                delay,
                exc_info=exc,
            )
            return False
        self._finish(seq, "done", attempt, None)
        return True

    def _finish(self, seq: int, status: str, attempts: int, error: str | None) -> None:
        self.bus.db.execute(
            "UPDATE events SET status = ?, attempts = ?, finished_at = ?, last_error = ? WHERE seq = ?",
            (status, attempts, self.bus.clock(), error, seq),
        )

    def _run_jobs(self) -> tuple[int, float]:
        ran = 0
        delay = self.poll_interval_s
        for job in list(self._jobs.values()):
            if self._stopping:
                break
            now = self.bus.clock()
            last = self.last_run(job.name)
            due_at = now if last is None else last + job.interval_s
            if due_at > now:
                delay = min(delay, due_at - now)
                continue
            try:
                job.fn()
            # A periodic job failing must not stop the other jobs or the event delivery; it is
            # logged and tried again at its next interval.
            except Exception:
                logger.exception("scheduler: job %s failed", job.name)
            # Recorded after the run, from its start: a crash mid-run leaves the job due, so the
            # next start runs it again (catch-up), and intervals are measured start to start.
            self.bus.db.execute(
                "INSERT INTO scheduler_jobs (name, last_run_at) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET last_run_at = excluded.last_run_at",
                (job.name, now),
            )
            ran += 1
            delay = min(delay, job.interval_s)
        return ran, delay

    def last_run(self, name: str) -> float | None:
        """When job `name` last started (epoch seconds), as persisted."""
        row = self.bus.db.query_one("SELECT last_run_at FROM scheduler_jobs WHERE name = ?", (name,))
        return float(row[0]) if row else None

    def last_run_at(self, name: str) -> datetime | None:
        last = self.last_run(name)
        return datetime.fromtimestamp(last, UTC) if last is not None else None

    def _prune(self) -> None:
        removed = self.bus.db.execute(
            "DELETE FROM events WHERE status = 'done' AND finished_at < ?",
            (self.bus.clock() - self.keep_done_s,),
        )
        if removed:
            logger.debug("scheduler: pruned %d delivered event(s)", removed)

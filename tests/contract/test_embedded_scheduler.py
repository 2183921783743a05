"""The local scheduler: durable events delivered in order at least once, periodic jobs with catch-up."""

from __future__ import annotations

import pathlib
import threading
from collections.abc import Iterator

import pytest

from shared.adapters.embedded import Database, LocalScheduler, SqliteEventBus
from shared.models import DomainEvent


class FakeClock:
    """Wall-clock time the test moves by hand (jobs are persisted in epoch seconds)."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def queue_path(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "queue.db"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def bus(queue_path: pathlib.Path, clock: FakeClock) -> Iterator[SqliteEventBus]:
    db = Database(queue_path)
    yield SqliteEventBus(db, clock=clock)
    db.close()


def _event(n: int, event_type: str = "CompactionDue") -> DomainEvent:
    return DomainEvent.model_validate(
        {"type": event_type, "workspace_id": "w1", "session_id": "s1", "detail": {"n": n}}
    )


def test_events_reach_their_handlers_in_publish_order(bus: SqliteEventBus) -> None:
    compaction: list[int] = []
    maintenance: list[int] = []
    scheduler = LocalScheduler(bus, retry_backoff_s=0.01)
    scheduler.on("CompactionDue", lambda e: compaction.append(e.detail["n"]))
    scheduler.on("MaintenanceDue", lambda e: maintenance.append(e.detail["n"]))

    for n in range(5):
        bus.publish(_event(n, "MaintenanceDue" if n == 2 else "CompactionDue"))
    assert scheduler.run_pending() == 5

    assert compaction == [0, 1, 3, 4]
    assert maintenance == [2]
    assert bus.pending_count() == 0
    assert scheduler.run_pending() == 0  # delivered events are not delivered again


def test_the_running_scheduler_delivers_a_published_event_promptly(bus: SqliteEventBus) -> None:
    got = threading.Event()
    scheduler = LocalScheduler(bus, poll_interval_s=30.0)
    scheduler.on("CompactionDue", lambda _: got.set())
    scheduler.start()
    try:
        assert scheduler.wait_idle(5)
        bus.publish(_event(1))
        assert got.wait(5)
        assert scheduler.wait_idle(5)
    finally:
        scheduler.stop()


def test_a_failing_handler_is_retried_and_later_events_wait(bus: SqliteEventBus, clock: FakeClock) -> None:
    seen: list[int] = []
    fail_first = [True]

    def handler(event: DomainEvent) -> None:
        if event.detail["n"] == 0 and fail_first[0]:
            fail_first[0] = False
            raise RuntimeError("model provider down")
        seen.append(event.detail["n"])

    scheduler = LocalScheduler(bus, max_attempts=3, retry_backoff_s=10.0)
    scheduler.on("CompactionDue", handler)
    bus.publish(_event(0))
    bus.publish(_event(1))

    assert scheduler.run_pending() == 0
    assert seen == []  # event 1 is held behind the retrying event 0
    assert scheduler.run_pending() == 0  # not due before its backoff
    clock.now += 10
    assert scheduler.run_pending() == 2
    assert seen == [0, 1]
    assert [e.attempts for e in bus.list_events(status="done")] == [2, 1]


def test_a_poison_event_is_marked_dead_and_the_bus_goes_on(bus: SqliteEventBus, clock: FakeClock) -> None:
    seen: list[int] = []

    def handler(event: DomainEvent) -> None:
        if event.detail["n"] == 0:
            raise ValueError("bad event")
        seen.append(event.detail["n"])

    scheduler = LocalScheduler(bus, max_attempts=2, retry_backoff_s=1.0)
    scheduler.on("CompactionDue", handler)
    bus.publish(_event(0))
    bus.publish(_event(1))

    scheduler.run_pending()
    clock.now += 5
    scheduler.run_pending()

    assert seen == [1]
    (dead,) = bus.list_events(status="dead")
    assert dead.event.detail == {"n": 0}
    assert dead.attempts == 2
    assert dead.last_error is not None and "ValueError: bad event" in dead.last_error


def test_events_published_while_no_scheduler_runs_are_delivered_after_a_restart(
    queue_path: pathlib.Path, clock: FakeClock
) -> None:
    db = Database(queue_path)
    SqliteEventBus(db, clock=clock).publish(_event(7))
    db.close()

    db = Database(queue_path)
    seen: list[int] = []
    scheduler = LocalScheduler(SqliteEventBus(db, clock=clock))
    scheduler.on("CompactionDue", lambda e: seen.append(e.detail["n"]))
    scheduler.start()
    try:
        assert scheduler.wait_idle(5)
    finally:
        scheduler.stop()
        db.close()
    assert seen == [7]


def test_a_job_runs_at_first_start_then_every_interval(bus: SqliteEventBus, clock: FakeClock) -> None:
    runs: list[float] = []
    scheduler = LocalScheduler(bus)
    scheduler.every("maintenance", 3600, lambda: runs.append(clock.now))

    assert scheduler.run_pending() == 1
    clock.now += 1800
    assert scheduler.run_pending() == 0
    clock.now += 1800
    assert scheduler.run_pending() == 1
    assert runs == [clock.now - 3600, clock.now]
    assert scheduler.last_run("maintenance") == clock.now


def test_a_job_missed_while_down_runs_once_at_start(queue_path: pathlib.Path, clock: FakeClock) -> None:
    runs: list[str] = []

    def gateway(label: str) -> tuple[Database, LocalScheduler]:
        db = Database(queue_path)
        scheduler = LocalScheduler(SqliteEventBus(db, clock=clock), poll_interval_s=30.0)
        scheduler.every("maintenance", 3600, lambda: runs.append(label))
        return db, scheduler

    db, scheduler = gateway("first start")
    scheduler.run_pending()
    db.close()

    # Restarted soon after: not due, nothing runs.
    clock.now += 600
    db, scheduler = gateway("quick restart")
    assert scheduler.run_pending() == 0
    db.close()

    # Down for five intervals: one catch-up run at start, not five.
    clock.now += 5 * 3600
    db, scheduler = gateway("after downtime")
    done = threading.Event()
    scheduler.every("marker", 10**6, done.set)
    scheduler.start()
    try:
        assert done.wait(5)
    finally:
        scheduler.stop()
        db.close()
    assert runs == ["first start", "after downtime"]


def test_a_failing_job_does_not_stop_the_others(bus: SqliteEventBus) -> None:
    ran: list[str] = []

    def broken() -> None:
        raise RuntimeError("disk full")

    scheduler = LocalScheduler(bus)
    scheduler.every("broken", 60, broken)
    scheduler.every("healthy", 60, lambda: ran.append("healthy"))
    bus.publish(_event(1))
    scheduler.on("CompactionDue", lambda _: ran.append("event"))

    assert scheduler.run_pending() == 3
    assert ran == ["event", "healthy"]
    assert scheduler.last_run("broken") is not None


def test_a_delayed_event_waits_for_its_time_without_holding_back_the_others(
    bus: SqliteEventBus, clock: FakeClock
) -> None:
    seen: list[int] = []
    scheduler = LocalScheduler(bus, retry_backoff_s=0.01)
    scheduler.on("TurnCommitted", lambda e: seen.append(e.detail["n"]))
    scheduler.on("CompactionDue", lambda e: seen.append(e.detail["n"]))
    # Given a delayed event, then an immediate one published after it
    bus.publish_after(_event(1, "TurnCommitted"), 5.0)
    bus.publish(_event(2))
    # Then the immediate one is delivered at once; the delayed one is not due, and not pending work
    assert scheduler.run_pending() == 1 and seen == [2]
    assert bus.due_count() == 0 and bus.pending_count() == 1
    assert bus.next_available_at() == clock.now + 5.0
    assert scheduler.wait_idle(0.1)
    # When its time comes, it is delivered, once
    clock.now += 4.9
    assert scheduler.run_pending() == 0
    clock.now += 0.1
    assert scheduler.run_pending() == 1 and seen == [2, 1]
    assert scheduler.run_pending() == 0 and bus.pending_count() == 0


def test_the_scheduler_thread_wakes_for_a_delayed_event(bus: SqliteEventBus, clock: FakeClock) -> None:
    delivered = threading.Event()
    scheduler = LocalScheduler(bus, poll_interval_s=0.05)
    scheduler.on("TurnCommitted", lambda e: delivered.set())
    scheduler.start()
    try:
        bus.publish_after(_event(1, "TurnCommitted"), 30.0)
        clock.now += 30.0  # not a second waited: the thread's next poll finds it due
        assert delivered.wait(5.0)
        assert scheduler.wait_idle(5.0)  # the pass that delivered it has marked it done
        assert [e.event.type for e in bus.list_events(status="done")] == ["TurnCommitted"]
    finally:
        scheduler.stop()


def test_forgetting_a_session_deletes_its_events_delivered_or_not_and_no_other(bus: SqliteEventBus) -> None:
    # The right to erasure: an event names its session, whose id names the person in a DM
    mine = DomainEvent(type="TurnCommitted", workspace_id="ws", session_id="telegram.7350011")
    bus.publish_after(mine, 5.0)
    bus.publish(mine.model_copy(update={"type": "CompactionDue"}))
    bus.publish(mine.model_copy(update={"session_id": "telegram.42"}))
    bus.publish(mine.model_copy(update={"workspace_id": "other"}))
    assert bus.forget_session("ws", "telegram.7350011") == 2
    left = [(e.event.workspace_id, e.event.session_id) for e in bus.list_events()]
    assert sorted(left) == [("other", "telegram.7350011"), ("ws", "telegram.42")]

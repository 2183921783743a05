"""The embedded lane runner: serial per group, parallel across groups, retries, dead letters, crashes."""

from __future__ import annotations

import logging
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator

import pytest

from shared.adapters.embedded import Database, EmbeddedLaneRunner, SqliteLanes
from shared.agent.steps import redelivered
from shared.errors import ProviderError
from shared.models import LaneItem

from .builders import lane_item

Handler = Callable[[LaneItem], None]


@pytest.fixture
def queue_path(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "queue.db"


@pytest.fixture
def lanes(queue_path: pathlib.Path) -> Iterator[SqliteLanes]:
    db = Database(queue_path)
    yield SqliteLanes(db)
    db.close()


def _runner(lanes: SqliteLanes, handler: Handler, **kw: object) -> EmbeddedLaneRunner:
    options: dict[str, object] = {"workers": 4, "max_attempts": 3, "backoff_s": 0.01, "poll_interval_s": 0.2}
    options.update(kw)
    return EmbeddedLaneRunner(lanes, handler, **options)  # type: ignore[arg-type]


class Recorder:
    """A handler that records what ran, and how many ran at once overall and per group."""

    def __init__(self, work: Callable[[LaneItem], None] | None = None) -> None:
        self.lock = threading.Lock()
        self.order: dict[str, list[str]] = defaultdict(list)
        self.running: dict[str, int] = defaultdict(int)
        self.max_per_group = 0
        self.max_overall = 0
        self._overall = 0
        self.work = work

    def __call__(self, item: LaneItem) -> None:
        group = item.group_id
        with self.lock:
            self.running[group] += 1
            self._overall += 1
            self.max_per_group = max(self.max_per_group, self.running[group])
            self.max_overall = max(self.max_overall, self._overall)
        try:
            if self.work is not None:
                self.work(item)
            with self.lock:
                self.order[group].append(item.inbound.event_id)
        finally:
            with self.lock:
                self.running[group] -= 1
                self._overall -= 1


def test_a_group_runs_one_item_at_a_time_in_order_while_groups_run_in_parallel(lanes: SqliteLanes) -> None:
    # The first item of each group waits at a barrier that only opens when both groups' first
    # items run at the same time: proof of parallelism that cannot pass by luck.
    barrier = threading.Barrier(2, timeout=10)

    def work(item: LaneItem) -> None:
        if item.inbound.event_id.endswith("-0"):
            barrier.wait()
        time.sleep(0.005)

    recorder = Recorder(work)
    expected: dict[str, list[str]] = defaultdict(list)
    for i in range(8):
        for session in ("s1", "s2"):
            item = lane_item("w1", session, event_id=f"{session}-{i}")
            lanes.submit(item)
            expected[item.group_id].append(item.inbound.event_id)

    with _runner(lanes, recorder) as runner:
        assert runner.wait_idle(15)

    assert dict(recorder.order) == dict(expected)
    assert recorder.max_per_group == 1
    assert recorder.max_overall == 2


def test_more_groups_than_workers_all_complete(lanes: SqliteLanes) -> None:
    recorder = Recorder(lambda _: time.sleep(0.002))
    for i in range(5):
        for g in range(6):
            lanes.submit(lane_item("w1", f"g{g}", event_id=f"g{g}-{i}"))

    with _runner(lanes, recorder, workers=2) as runner:
        assert runner.wait_idle(15)

    assert recorder.max_overall <= 2
    assert recorder.max_per_group == 1
    assert {g: ids for g, ids in recorder.order.items()} == {
        f"w1.g{g}": [f"g{g}-{i}" for i in range(5)] for g in range(6)
    }


def test_a_failing_item_is_retried_and_the_group_waits_for_it(lanes: SqliteLanes) -> None:
    failures = {"a-1": 2}  # fails twice, then succeeds
    again: dict[str, list[bool]] = defaultdict(list)  # what the handler read as `redelivered`

    def work(item: LaneItem) -> None:
        again[item.inbound.event_id].append(redelivered.get())
        left = failures.get(item.inbound.event_id, 0)
        if left:
            failures[item.inbound.event_id] = left - 1
            raise RuntimeError("flaky downstream")

    recorder = Recorder(work)
    for i in range(3):
        lanes.submit(lane_item("w1", "a", event_id=f"a-{i}"))

    with _runner(lanes, recorder, max_attempts=3) as runner:
        assert runner.wait_idle(15)

    assert recorder.order["w1.a"] == ["a-0", "a-1", "a-2"]
    assert lanes.dead_letters() == []
    # And the handler knew a redelivery from a first delivery (as the agent's batch knows from
    # SQS's ApproximateReceiveCount): a task's step hands over on one (shared.tasks.runner)
    assert dict(again) == {"a-0": [False], "a-1": [False, True, True], "a-2": [False]}


def test_an_expected_failure_is_one_line_with_its_cause_and_a_bug_keeps_its_traceback(
    lanes: SqliteLanes, caplog: pytest.LogCaptureFixture
) -> None:
    # Given one item failing as a stopped model server fails a turn (a SigilError, whose message
    # is the cause), and one failing with a bug
    def work(item: LaneItem) -> None:
        if item.inbound.event_id == "down":
            raise ProviderError("the model provider failed (APIConnectionError: Connection refused)")
        raise KeyError("a bug")

    lanes.submit(lane_item("w1", "a", event_id="down"))
    lanes.submit(lane_item("w1", "b", event_id="bug"))
    with (
        caplog.at_level(logging.WARNING, logger="shared.adapters.embedded.lanes"),
        _runner(lanes, work, max_attempts=2) as runner,
    ):
        assert runner.wait_idle(15)

    # Then each attempt of the first is one line that says why, with no traceback; the bug's
    # attempts keep theirs
    down = [r for r in caplog.records if "group w1.a " in r.getMessage()]
    bug = [r for r in caplog.records if "group w1.b " in r.getMessage()]
    assert [r.levelno for r in down] == [logging.WARNING, logging.ERROR]
    assert all(r.exc_info is None for r in down)
    assert all(
        r.getMessage().endswith(
            "ProviderError: the model provider failed (APIConnectionError: Connection refused)"
        )
        for r in down
    )
    assert len(bug) == 2 and all(r.exc_info is not None for r in bug)


def test_a_poison_item_is_dead_lettered_and_its_group_goes_on(lanes: SqliteLanes) -> None:
    attempts: dict[str, int] = defaultdict(int)

    def work(item: LaneItem) -> None:
        attempts[item.inbound.event_id] += 1
        if item.inbound.event_id == "a-1":
            raise ValueError("cannot parse this one")

    recorder = Recorder(work)
    for i in range(3):
        lanes.submit(lane_item("w1", "a", event_id=f"a-{i}"))
        lanes.submit(lane_item("w1", "b", event_id=f"b-{i}"))

    told: list[str] = []
    with _runner(
        lanes, recorder, max_attempts=3, on_dead_letter=lambda it: told.append(it.inbound.event_id)
    ) as runner:
        assert runner.wait_idle(15)

    assert attempts["a-1"] == 3
    assert told == ["a-1"]  # the dead-letter callback heard about it exactly once
    assert recorder.order["w1.a"] == ["a-0", "a-2"]
    assert recorder.order["w1.b"] == ["b-0", "b-1", "b-2"]
    assert lanes.pending_count() == 0

    (dead,) = lanes.dead_letters()
    assert (dead.group_id, dead.attempts) == ("w1.a", 3)
    assert "ValueError: cannot parse this one" in dead.error
    assert dead.item is not None and dead.item.inbound.event_id == "a-1"

    # Redrive puts it back; a fixed handler then processes it.
    assert lanes.redrive(dead.seq)
    assert lanes.dead_letters() == []
    fixed = Recorder()
    with _runner(lanes, fixed) as runner:
        assert runner.wait_idle(10)
    assert fixed.order["w1.a"] == ["a-1"]


def test_a_submit_wakes_an_idle_runner_at_once(lanes: SqliteLanes) -> None:
    done = threading.Event()
    with _runner(lanes, lambda _: done.set(), poll_interval_s=30.0):
        time.sleep(0.05)  # let the dispatcher go to sleep on an empty queue
        lanes.submit(lane_item("w1", "s1"))
        # Well inside the 30 s poll interval: only the submit's wake-up can have run it.
        assert done.wait(15)


def test_wait_idle_is_false_while_an_item_is_running(lanes: SqliteLanes) -> None:
    release = threading.Event()

    def blocked(item: LaneItem) -> None:
        release.wait(10)

    with _runner(lanes, blocked) as runner:
        lanes.submit(lane_item("w1", "s1"))
        assert not runner.wait_idle(0.2)
        release.set()
        assert runner.wait_idle(5)


def test_stop_waits_for_the_running_handler_and_keeps_the_rest(queue_path: pathlib.Path) -> None:
    db = Database(queue_path)
    lanes = SqliteLanes(db)
    started, release = threading.Event(), threading.Event()
    seen: list[str] = []

    def slow(item: LaneItem) -> None:
        started.set()
        release.wait(10)
        seen.append(item.inbound.event_id)

    for i in range(3):
        lanes.submit(lane_item("w1", "s1", event_id=f"e{i}"))
    runner = _runner(lanes, slow)
    runner.start()
    assert started.wait(5)
    threading.Timer(0.1, release.set).start()
    runner.stop()

    assert seen == ["e0"]
    assert lanes.pending_count() == 2
    db.close()


def test_submit_reports_duplicates_and_forgets_them_after_the_window(queue_path: pathlib.Path) -> None:
    now = [1_000_000.0]
    db = Database(queue_path)
    lanes = SqliteLanes(db, dedup_window_s=3600, clock=lambda: now[0])
    item = lane_item("w1", "s1", event_id="evt-1")

    assert lanes.submit(item).status == "queued"
    assert lanes.submit(item).status == "duplicate"
    now[0] += 3599
    assert lanes.submit(item).status == "duplicate"
    now[0] += 2
    assert lanes.submit(item).status == "queued"
    assert lanes.pending_count() == 2
    db.close()


_CRASHING_CONSUMER = textwrap.dedent(
    """
    import pathlib, sys, threading
    from shared.adapters.embedded import Database, EmbeddedLaneRunner, SqliteLanes

    lanes = SqliteLanes(Database(pathlib.Path(sys.argv[1])))

    def handler(item):
        # Mid-turn on the first item: tell the test, then hang until killed.
        pathlib.Path(sys.argv[2]).write_text(item.inbound.event_id)
        threading.Event().wait()

    EmbeddedLaneRunner(lanes, handler, workers=2, max_attempts=3).start()
    threading.Event().wait()
    """
)


def test_items_in_flight_at_a_crash_are_delivered_after_restart(tmp_path: pathlib.Path) -> None:
    queue_path, marker = tmp_path / "queue.db", tmp_path / "claimed"
    db = Database(queue_path)
    lanes = SqliteLanes(db)
    for i in range(3):
        lanes.submit(lane_item("w1", "s1", event_id=f"e{i}"))
    db.close()

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", _CRASHING_CONSUMER, str(queue_path), str(marker)], env=env)
    try:
        deadline = time.monotonic() + 30
        # The consumer creates the file before it writes to it: wait for the content, not the file.
        while not (marker.exists() and marker.read_text()):
            assert proc.poll() is None, "the consumer process died before claiming an item"
            assert time.monotonic() < deadline, "the consumer process never claimed an item"
            time.sleep(0.02)
        assert marker.read_text() == "e0"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    db = Database(queue_path)
    lanes = SqliteLanes(db)
    recorder = Recorder()
    with _runner(lanes, recorder) as runner:
        assert runner.wait_idle(10)
    db.close()

    # The interrupted item runs again, first: nothing lost, order kept.
    assert recorder.order["w1.s1"] == ["e0", "e1", "e2"]


def test_an_item_that_keeps_crashing_the_consumer_is_dead_lettered(queue_path: pathlib.Path) -> None:
    # Each "crash" is a runner abandoned mid-item with the database closed under it, so the
    # outcome is never recorded: the attempt counted at claim time is all that remains.
    db = Database(queue_path)
    SqliteLanes(db).submit(lane_item("w1", "s1", event_id="killer"))
    SqliteLanes(db).submit(lane_item("w1", "s1", event_id="after"))
    db.close()

    for _ in range(2):
        db = Database(queue_path)
        lanes = SqliteLanes(db)
        claimed, release = threading.Event(), threading.Event()

        def hang(
            item: LaneItem, claimed: threading.Event = claimed, release: threading.Event = release
        ) -> None:
            claimed.set()
            release.wait(10)

        runner = _runner(lanes, hang)
        runner.start()
        assert claimed.wait(5)
        db.close()  # the crash: the handler's outcome can no longer be written
        release.set()
        runner.stop()

    db = Database(queue_path)
    lanes = SqliteLanes(db)
    recorder = Recorder()
    with _runner(lanes, recorder, max_attempts=2) as runner:
        assert runner.wait_idle(10)

    assert recorder.order["w1.s1"] == ["after"]
    (dead,) = lanes.dead_letters()
    assert dead.item is not None and dead.item.inbound.event_id == "killer"
    assert dead.attempts == 2
    assert "interrupted" in dead.error
    db.close()

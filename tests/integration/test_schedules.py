"""Things done later on the embedded backend (docs/schedules.md): a reminder set in a turn arrives
once at its time in the user's zone, across a gateway restart and a redelivery; a recurring one
fires on each occurrence; cancelling stops it; a user at the cap is told; /schedules lists and
cancels. The gateway is the real LocalGateway over the fake OpenAI server; the schedules' clock
is moved by the test (epoch seconds), never waited for.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shared import serde
from shared.adapters.embedded import Database, SqliteLanes, SqliteSchedules
from shared.agent.turn import run_turn
from shared.config import Settings
from shared.local.gateway import LocalGateway
from shared.models import (
    ChatCommand,
    HeartbeatConfig,
    InboundMessage,
    LaneItem,
    Recurrence,
    ScheduleLimits,
    Sender,
    new_workspace,
)
from shared.schedules import REMINDER_PREFIX, ScheduleCapReached, create, occurrence
from tests.support.fake_openai import FakeOpenAI, FakeReply, Json
from tests.support.local_gateway import AMBIENT

WS = "default"
SESSION = "web.demo"
# Monday 7 January 2030, 09:00 in Paris: 08:00 UTC (CET, UTC+1).
AT_LOCAL = "2030-01-07T09:00"
AT_UTC = datetime(2030, 1, 7, 8, 0, tzinfo=UTC)
WAIT_S = 30.0


class Clock:
    """The schedules' clock (epoch seconds), moved by the test."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def model(body: Json) -> str | FakeReply:
    """Sets a reminder when asked; hands back what the schedule tool said; echoes anything else."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return f"Tool said: {last['content']}"
    text = str(last.get("content"))
    if "remind me at 9" in text:
        args = {"text": "call mom", "at": AT_LOCAL, "timezone": "Europe/Paris"}
        return FakeReply(tool_calls=[("schedule", args)])
    return f"echo: {text}"


def inbound(event_id: str, text: str, command: ChatCommand | None = None) -> LaneItem:
    return LaneItem(
        inbound=InboundMessage(
            event_id=event_id,
            channel="web",
            workspace_id=WS,
            session_id=SESSION,
            sender=Sender(id="alice"),
            chat_id="demo",
            text=text,
            command=command,
        )
    )


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    for name in AMBIENT:
        monkeypatch.delenv(name, raising=False)
    with FakeOpenAI(model) as served:
        yield served


def settings(data_dir: Path, fake: FakeOpenAI) -> Settings:
    return Settings(
        data_dir=data_dir,
        model="openai/fake-model",
        OPENAI_BASE_URL=fake.base_url,
        OPENAI_API_KEY="sk-test",
        provider_max_retries=0,
    )


def replies(gw: LocalGateway) -> list[str]:
    return [e.message.text for e in gw.backend.outbox.read(WS, SESSION)]


def wait_for(gw: LocalGateway, done: Callable[[list[str]], bool]) -> list[str]:
    """The session's replies once `done` holds of them (polled on the outbox's own store)."""
    deadline = time.monotonic() + WAIT_S
    while not done(texts := replies(gw)):
        assert time.monotonic() < deadline, f"timed out; replies so far: {texts}"
        threading.Event().wait(0.05)
    return texts


def test_a_reminder_set_in_a_turn_arrives_once_at_its_time_after_a_restart(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    data_dir = tmp_path / "state"
    # Given a turn that sets "remind me at 9" for a user in Paris
    gw = LocalGateway(settings(data_dir, fake))
    gw.start()
    try:
        gw.backend.lanes.submit(inbound("e1", "remind me at 9 to call mom"))
        said = wait_for(gw, lambda texts: any(t.startswith("Tool said:") for t in texts))
        assert "sch-" in said[-1] and "2030-01-07T09:00:00+01:00" in said[-1]
        (made,) = gw.backend.schedules.list_schedules(WS) if gw.backend.schedules else []
        assert made.at == AT_UTC and made.timezone == "Europe/Paris"
        # and the person's zone is remembered on their identity
        identity = gw.backend.identities.get(WS, "web", "alice")
        assert identity is not None and identity.timezone == "Europe/Paris"
    finally:
        gw.stop()

    # When the gateway restarts, and its clock reaches 09:00 in Paris (08:00 UTC)
    gw = LocalGateway(settings(data_dir, fake))
    schedules = gw.backend.schedules
    assert isinstance(schedules, SqliteSchedules)
    clock = Clock(AT_UTC.timestamp() - 60)
    schedules.clock = clock
    gw.start()
    try:
        assert gw.scheduler.wait_idle(WAIT_S)
        gw.scheduler.run_pending()
        assert not any(t.startswith(REMINDER_PREFIX) for t in replies(gw)), "fired before its time"
        clock.now = AT_UTC.timestamp() + 1
        texts = wait_for(gw, lambda texts: any(t.startswith(REMINDER_PREFIX) for t in texts))
        # Then the reminder arrives, as it was set, on the same session's outbox
        assert texts[-1] == f"{REMINDER_PREFIX}call mom"

        # and a redelivery of the occurrence (the lane's, then straight to the turn) adds nothing
        lanes = gw.backend.lanes
        again = occurrence(made, inbound("e1", "").inbound, AT_UTC)
        assert lanes.submit(again).status == "duplicate"
        record = run_turn(gw.deps, again)
        assert record.outcome == "skipped_duplicate"
        clock.now += 3600
        gw.scheduler.run_pending()
        assert [t for t in replies(gw) if t.startswith(REMINDER_PREFIX)] == [f"{REMINDER_PREFIX}call mom"]
        # and the one-time schedule is finished: nothing is left to list
        assert schedules.list_schedules(WS) == []
        audits = [r.outcome for r in gw.backend.audit.list_records(WS)]
        assert audits.count("scheduled") == 1
    finally:
        gw.stop()


# ---------------------------------------------------------------- the engine on its own


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[tuple[SqliteSchedules, SqliteLanes, Clock]]:
    db = Database(tmp_path / "queue.db")
    clock = Clock(datetime(2030, 3, 1, tzinfo=UTC).timestamp())
    try:
        yield SqliteSchedules(db, clock=clock), SqliteLanes(db), clock
    finally:
        db.close()


def queued(lanes: SqliteLanes) -> list[LaneItem]:
    """The items on the lanes, in submit order (nothing consumes them here)."""
    db = lanes._db
    return [serde.loads(LaneItem, r[0]) for r in db.query("SELECT body FROM lane_items ORDER BY seq")]


def test_a_weekly_schedule_fires_on_each_occurrence_in_its_zone_and_cancelling_stops_it(
    engine: tuple[SqliteSchedules, SqliteLanes, Clock],
) -> None:
    store, lanes, clock = engine
    origin = inbound("e1", "every Monday send me the week's plan").inbound
    # Given "every Monday at 09:00" in Paris, set on Friday 1 March 2030, across the DST change
    # of 31 March (09:00 is 08:00 UTC before it, 07:00 UTC after)
    weekly = Recurrence(every="week", days=["mon"], time="09:00")
    schedule, first = create(
        store,
        new_workspace(WS),
        origin,
        user_id="alice",
        kind="task",
        text="send me the week's plan",
        at=None,
        recurrence=weekly,
        tz_name="Europe/Paris",
        now=datetime.fromtimestamp(clock.now, UTC),
    )
    assert first == datetime(2030, 3, 4, 8, 0, tzinfo=UTC)
    # When the clock passes five Mondays, firing at each
    mondays = [datetime(2030, 3, d, tzinfo=UTC) for d in (4, 11, 18, 25)] + [datetime(2030, 4, 1, tzinfo=UTC)]
    for monday in mondays:
        clock.now = monday.replace(hour=9).timestamp()
        assert store.fire_due(lanes) == 1
        assert store.fire_due(lanes) == 0  # once per occurrence
    items = queued(lanes)
    # Then each occurrence is its own lane item, at 09:00 Paris time, with its own event id
    assert [i.fired.at.hour for i in items if i.fired] == [8, 8, 8, 8, 7]
    assert len({i.inbound.event_id for i in items}) == 5
    assert all(i.inbound.session_id == SESSION and i.inbound.sender.id == "alice" for i in items)
    assert "A scheduled task is due now" in items[0].inbound.text
    # When it is cancelled, the next Monday brings nothing
    assert store.cancel(WS, schedule.id)
    clock.now = datetime(2030, 4, 8, 9, tzinfo=UTC).timestamp()
    assert store.fire_due(lanes) == 0
    assert len(queued(lanes)) == 5
    assert store.list_schedules(WS, user_id="alice") == []


def test_a_user_at_the_cap_is_refused_with_the_reason(
    engine: tuple[SqliteSchedules, SqliteLanes, Clock],
) -> None:
    store, _, clock = engine
    workspace = new_workspace(WS).model_copy(update={"schedules": ScheduleLimits(per_user=2)})
    origin = inbound("e1", "remind me").inbound
    now = datetime.fromtimestamp(clock.now, UTC)

    def make(user: str) -> None:
        create(
            store,
            workspace,
            origin,
            user_id=user,
            kind="message",
            text="stretch",
            at=None,
            recurrence=Recurrence(every="day"),
            tz_name="UTC",
            now=now,
        )

    make("alice")
    make("alice")
    with pytest.raises(ScheduleCapReached, match="most this workspace allows \\(2\\)"):
        make("alice")
    make("bob")  # the cap is per user
    assert store.count(WS, user_id="alice") == 2 and store.count(WS) == 3


def test_the_cap_and_the_schedules_command_in_chat(tmp_path: Path, fake: FakeOpenAI) -> None:
    gw = LocalGateway(settings(tmp_path / "state", fake))
    gw.ensure_workspace(WS)
    stored = gw.backend.workspaces.get(WS)
    assert stored is not None
    gw.backend.workspaces.put(stored.model_copy(update={"schedules": ScheduleLimits(per_user=1)}))
    gw.start()
    try:
        # Given one reminder set
        gw.backend.lanes.submit(inbound("e1", "remind me at 9 to call mom"))
        wait_for(gw, lambda texts: len(texts) == 1)
        # When the user asks for another, at their cap of one
        gw.backend.lanes.submit(inbound("e2", "and remind me at 9 to call mom again"))
        texts = wait_for(gw, lambda texts: len(texts) == 2)
        # Then the model is handed the reason, and tells them
        assert "You already have 1 schedules" in texts[-1]
        # /schedules lists the one they have, and cancels it
        gw.backend.lanes.submit(inbound("e3", "/schedules", ChatCommand(name="schedules")))
        texts = wait_for(gw, lambda texts: len(texts) == 3)
        assert "call mom" in texts[-1] and "at 2030-01-07 09:00 (Europe/Paris)" in texts[-1]
        schedules = gw.backend.schedules
        assert schedules is not None
        (mine,) = schedules.list_schedules(WS)
        cancel = ChatCommand(name="schedules", args=f"cancel {mine.id}")
        gw.backend.lanes.submit(inbound("e4", f"/schedules cancel {mine.id}", cancel))
        texts = wait_for(gw, lambda texts: len(texts) == 4)
        assert texts[-1] == f"Cancelled {mine.id}."
        assert schedules.list_schedules(WS) == []
    finally:
        gw.stop()


# ---------------------------------------------------------------- the heartbeat (spec 003)


def test_the_heartbeat_is_off_by_default_and_once_enabled_checks_the_tasks_on_its_recurrence(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    gw = LocalGateway(settings(tmp_path / "state", fake))
    schedules = gw.backend.schedules
    assert isinstance(schedules, SqliteSchedules)
    clock = Clock(time.time())
    schedules.clock = clock
    gw.ensure_workspace(WS)
    gw.start()
    try:
        # Given a workspace that has not enabled it: /heartbeat on is refused, with the reason
        gw.backend.lanes.submit(inbound("e1", "/heartbeat on", ChatCommand(name="heartbeat", args="on")))
        texts = wait_for(gw, lambda texts: len(texts) == 1)
        assert "heartbeat is off in this workspace's configuration" in texts[-1]
        assert schedules.list_schedules(WS) == []

        # When its config enables it with a task list, and someone turns it on here
        stored = gw.backend.workspaces.get(WS)
        assert stored is not None
        heartbeat = HeartbeatConfig(
            enabled=True,
            recurrence=Recurrence(every="day", time="07:30"),
            tasks="- renew the TLS certificate",
        )
        gw.backend.workspaces.put(stored.model_copy(update={"heartbeat": heartbeat}))
        gw.backend.lanes.submit(inbound("e2", "/heartbeat on", ChatCommand(name="heartbeat", args="on")))
        texts = wait_for(gw, lambda texts: len(texts) == 2)
        assert texts[-1] == "Heartbeat on: every day at 07:30 (UTC), answered here."

        # Then at each occurrence the model is asked to check the tasks, in this conversation
        for n in (1, 2):
            due = schedules.next_due_at()
            assert due is not None
            clock.now = due + 1
            texts = wait_for(gw, lambda texts, n=n: len([t for t in texts if "renew the TLS" in t]) == n)
            assert "Heartbeat: check these proactive tasks" in texts[-1]
        # and /heartbeat off stops it
        gw.backend.lanes.submit(inbound("e3", "/heartbeat off", ChatCommand(name="heartbeat", args="off")))
        texts = wait_for(gw, lambda texts: texts[-1] == "Heartbeat off.")
        assert schedules.list_schedules(WS) == []
    finally:
        gw.stop()


def test_erasing_a_user_cancels_their_schedules_and_no_one_elses(tmp_path: Path) -> None:
    from shared.adapters import build_backend
    from shared.memory.erasure import erase_user

    backend = build_backend(Settings(data_dir=tmp_path / "state"))
    try:
        store = backend.schedules
        for user in ("alice", "bob"):
            create(
                store,
                new_workspace(WS),
                inbound("e1", "x").inbound,
                user_id=user,
                kind="message",
                text=f"{user}'s private reminder",
                at=None,
                recurrence=Recurrence(every="day"),
                tz_name="UTC",
                now=datetime.now(UTC),
            )
        report = erase_user(backend, WS, "alice")
        assert report.schedules_cancelled == 1
        assert store is not None and [s.user_id for s in store.list_schedules(WS)] == ["bob"]
    finally:
        backend.close()


def test_an_occurrence_is_never_merged_into_a_burst_of_the_same_senders_messages() -> None:
    from shared.agent.coalesce import coalesce
    from shared.models import Schedule

    schedule = Schedule(
        id="sch-0123456789ab", workspace_id=WS, session_id=SESSION, user_id="alice", text="call", at=AT_UTC
    )
    fired = occurrence(schedule, inbound("e0", "x").inbound, AT_UTC)
    burst = [inbound("e1", "hi"), fired, inbound("e2", "there")]
    # Each item is its own turn: the reminder keeps its schedule and its own event id.
    assert [indexes for _, indexes in coalesce(burst)] == [[0], [1], [2]]
    assert coalesce(burst)[1][0].fired is not None

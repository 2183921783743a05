"""TaskStore, StepLog and Scratchpad contract (delegation, docs/delegation.md): every adapter keeps
the same rules: round trips, workspace isolation, the caps, optimistic saves, idempotent steps,
ordering and filters, and a session's erasure."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from shared.adapters.aws.dynamodb import DynamoScratchpad, DynamoStepLog, DynamoTaskStore, create_tables
from shared.adapters.embedded import build_embedded_backend
from shared.adapters.embedded.db import Database
from shared.adapters.embedded.scratchpad import SqliteScratchpad
from shared.adapters.embedded.steps import SqliteStepLog
from shared.adapters.embedded.tasks import SqliteTaskStore
from shared.config import Settings
from shared.errors import BadRequest, StaleTask, TaskCapReached
from shared.models import AssistantMessage
from shared.models.tasks import SCRATCHPAD_MAX_BYTES, STEP_TTL_S, TaskResult, TaskUsage
from shared.ports import Scratchpad, StepLog, TaskStore
from tests.support import moto_aws

from .builders import at, conversation, task

SESSION_CAP = 3
WORKSPACE_CAP = 20


class Now:
    """The step log's wall clock, moved by the tests."""

    def __init__(self) -> None:
        self.value = 1_700_000_000.0

    def __call__(self) -> float:
        return self.value


@dataclass
class Stores:
    tasks: TaskStore
    steps: StepLog
    scratchpad: Scratchpad
    now: Now


@contextlib.contextmanager
def sqlite_stores(tmp_path: Path) -> Iterator[Stores]:
    db = Database(tmp_path / "sigil.db")
    now = Now()
    try:
        yield Stores(SqliteTaskStore(db), SqliteStepLog(db, now=now), SqliteScratchpad(db), now)
    finally:
        db.close()


@contextlib.contextmanager
def dynamo_stores(tmp_path: Path) -> Iterator[Stores]:
    # moto_like_aws: in-process moto runs a transaction on the caller's thread and restores a
    # snapshot when a condition fails, so racing writers (the cap and version tests) could pass a
    # cap DynamoDB enforces; serialised per request, as DynamoDB's transactions are.
    with mock_aws(), moto_aws.moto_like_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        # The tables exactly as the stack and the other adapters define them.
        create_tables(client, sessions_table="sigil-sessions", memory_table="sigil-memory")
        now = Now()
        yield Stores(
            DynamoTaskStore("sigil-sessions", client=client),
            DynamoStepLog("sigil-sessions", client=client, now=now),
            DynamoScratchpad("sigil-sessions", client=client),
            now,
        )


FACTORIES: dict[str, Callable[[Path], contextlib.AbstractContextManager[Stores]]] = {
    "embedded": sqlite_stores,
    "aws": dynamo_stores,
}


@pytest.fixture(params=sorted(FACTORIES))
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    with FACTORIES[request.param](tmp_path) as opened:
        yield opened


def _create(
    store: TaskStore, ws: str, session_id: str = "s1", task_id: str | None = None, created: float = 0
) -> None:
    store.create(
        task(ws, session_id, task_id, created=created),
        max_per_session=SESSION_CAP,
        max_per_workspace=WORKSPACE_CAP,
    )


# ---------------------------------------------------------------- TaskStore


def test_a_created_task_reads_back_whole(stores: Stores, ws_a: str) -> None:
    made = task(ws_a, task_id="t1")
    created = stores.tasks.create(made, max_per_session=SESSION_CAP, max_per_workspace=WORKSPACE_CAP)
    assert created == made
    assert stores.tasks.get(ws_a, "t1") == made
    assert stores.tasks.get(ws_a, "t-none") is None


def test_a_saved_task_keeps_every_field_and_moves_its_version(stores: Stores, ws_a: str) -> None:
    created = stores.tasks.create(
        task(ws_a, task_id="t1"), max_per_session=SESSION_CAP, max_per_workspace=WORKSPACE_CAP
    )
    result = TaskResult(
        summary="Zürich came up twice 🌦",
        confidence=0.8,
        usage=TaskUsage(model_calls=3, tokens_in=1200, usd="0.0042"),
        scratchpad_keys=["task/t1/output"],
    )
    done = stores.tasks.save(created.model_copy(update={"status": "done", "result": result, "steps": 4}))
    assert done.version == created.version + 1
    again = stores.tasks.get(ws_a, "t1")
    assert again == done
    assert again is not None and again.result == result and again.terminal


def test_a_retried_create_returns_the_task_it_made(stores: Stores, ws_a: str) -> None:
    first = stores.tasks.create(
        task(ws_a, task_id="t1"), max_per_session=SESSION_CAP, max_per_workspace=WORKSPACE_CAP
    )
    stores.tasks.save(first.model_copy(update={"status": "running"}))
    retried = stores.tasks.create(
        task(ws_a, task_id="t1", brief="another brief"),
        max_per_session=SESSION_CAP,
        max_per_workspace=WORKSPACE_CAP,
    )
    assert retried.status == "running" and retried.brief == first.brief
    assert len(stores.tasks.list_tasks(ws_a)) == 1


def test_a_save_over_a_newer_version_is_stale(stores: Stores, ws_a: str) -> None:
    created = stores.tasks.create(
        task(ws_a, task_id="t1"), max_per_session=SESSION_CAP, max_per_workspace=WORKSPACE_CAP
    )
    stores.tasks.save(created.model_copy(update={"status": "running"}))
    with pytest.raises(StaleTask):
        stores.tasks.save(created.model_copy(update={"cancel_requested": True}))
    stored = stores.tasks.get(ws_a, "t1")
    assert stored is not None and stored.status == "running" and not stored.cancel_requested


def test_of_two_concurrent_saves_exactly_one_wins(stores: Stores, ws_a: str) -> None:
    created = stores.tasks.create(
        task(ws_a, task_id="t1"), max_per_session=SESSION_CAP, max_per_workspace=WORKSPACE_CAP
    )
    outcomes: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(4)

    def writer(i: int) -> None:
        barrier.wait()
        try:
            stores.tasks.save(created.model_copy(update={"answer": f"writer {i}"}))
            with lock:
                outcomes.append(f"saved {i}")
        except StaleTask:
            with lock:
                outcomes.append("stale")

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    saved = [o for o in outcomes if o.startswith("saved")]
    assert len(saved) == 1 and outcomes.count("stale") == 3
    stored = stores.tasks.get(ws_a, "t1")
    assert stored is not None and stored.version == created.version + 1
    assert stored.answer == f"writer {saved[0].split()[1]}"


def test_saving_a_task_that_was_never_created_is_stale(stores: Stores, ws_a: str) -> None:
    with pytest.raises(StaleTask):
        stores.tasks.save(task(ws_a, task_id="t-ghost"))
    assert stores.tasks.get(ws_a, "t-ghost") is None


def test_the_session_cap_refuses_the_fourth_active_task(stores: Stores, ws_a: str) -> None:
    for _ in range(SESSION_CAP):
        _create(stores.tasks, ws_a, "s1")
    with pytest.raises(TaskCapReached):
        _create(stores.tasks, ws_a, "s1")
    # Another session of the workspace still has its own slots.
    _create(stores.tasks, ws_a, "s2")
    assert len(stores.tasks.list_tasks(ws_a, session_id="s1")) == SESSION_CAP


def test_the_workspace_cap_counts_every_session(stores: Stores, ws_a: str, ws_b: str) -> None:
    for i in range(WORKSPACE_CAP):
        _create(stores.tasks, ws_a, f"s{i % 10}")
    with pytest.raises(TaskCapReached):
        _create(stores.tasks, ws_a, "s-new")
    # Another workspace's tasks count against its own cap only.
    _create(stores.tasks, ws_b, "s-new")
    assert len(stores.tasks.list_tasks(ws_a, active=True)) == WORKSPACE_CAP


def test_a_task_that_ends_frees_its_slot(stores: Stores, ws_a: str) -> None:
    made = [
        stores.tasks.create(task(ws_a, "s1"), max_per_session=SESSION_CAP, max_per_workspace=WORKSPACE_CAP)
        for _ in range(SESSION_CAP)
    ]
    running = stores.tasks.save(made[0].model_copy(update={"status": "running"}))
    waiting = stores.tasks.save(running.model_copy(update={"status": "waiting_user"}))
    with pytest.raises(TaskCapReached):
        _create(stores.tasks, ws_a, "s1")
    # A save that ends a task frees one slot, once: saving it again (still terminal) frees no more.
    ended = stores.tasks.save(waiting.model_copy(update={"status": "cancelled"}))
    stores.tasks.save(ended.model_copy(update={"outcome_delivered": True}))
    _create(stores.tasks, ws_a, "s1")
    with pytest.raises(TaskCapReached):
        _create(stores.tasks, ws_a, "s1")


def test_the_workspace_slot_is_freed_too(stores: Stores, ws_a: str) -> None:
    made = [
        stores.tasks.create(task(ws_a, f"s{i}"), max_per_session=SESSION_CAP, max_per_workspace=WORKSPACE_CAP)
        for i in range(WORKSPACE_CAP)
    ]
    stores.tasks.save(made[7].model_copy(update={"status": "timed_out"}))
    _create(stores.tasks, ws_a, "s-late")
    with pytest.raises(TaskCapReached):
        _create(stores.tasks, ws_a, "s-later")


def test_concurrent_creates_never_pass_the_cap(stores: Stores, ws_a: str) -> None:
    outcomes: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(6)

    def delegate() -> None:
        barrier.wait()
        try:
            _create(stores.tasks, ws_a, "s1")
            result = "created"
        except TaskCapReached:
            result = "capped"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=delegate) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("created") == SESSION_CAP and outcomes.count("capped") == 6 - SESSION_CAP
    assert len(stores.tasks.list_tasks(ws_a, session_id="s1", active=True)) == SESSION_CAP


def test_a_cap_of_zero_refuses_every_task(stores: Stores, ws_a: str) -> None:
    with pytest.raises(TaskCapReached):
        stores.tasks.create(task(ws_a), max_per_session=0, max_per_workspace=WORKSPACE_CAP)
    with pytest.raises(TaskCapReached):
        stores.tasks.create(task(ws_a), max_per_session=SESSION_CAP, max_per_workspace=0)
    assert stores.tasks.list_tasks(ws_a) == []


def test_an_ended_task_is_never_live_again(stores: Stores, ws_a: str) -> None:
    created = stores.tasks.create(
        task(ws_a, task_id="t1"), max_per_session=SESSION_CAP, max_per_workspace=WORKSPACE_CAP
    )
    ended = stores.tasks.save(created.model_copy(update={"status": "failed", "error": "boom"}))
    with pytest.raises(ValueError, match="has ended"):
        stores.tasks.save(ended.model_copy(update={"status": "running"}))
    stored = stores.tasks.get(ws_a, "t1")
    assert stored == ended
    # It holds no slot: the session's three are free.
    for _ in range(SESSION_CAP):
        _create(stores.tasks, ws_a, "s1")


def test_a_task_cannot_move_to_another_session(stores: Stores, ws_a: str) -> None:
    created = stores.tasks.create(
        task(ws_a, "s1", "t1"), max_per_session=SESSION_CAP, max_per_workspace=WORKSPACE_CAP
    )
    with pytest.raises(ValueError, match="belongs to session s1"):
        stores.tasks.save(created.model_copy(update={"session_id": "s2", "status": "done"}))
    # Nor its creation time, which orders the list.
    for status in ("running", "done"):
        with pytest.raises(ValueError, match="created_at changed"):
            stores.tasks.save(created.model_copy(update={"created_at": at(30), "status": status}))
    assert stores.tasks.get(ws_a, "t1") == created
    assert [t.id for t in stores.tasks.list_tasks(ws_a, active=True)] == ["t1"]


def test_list_is_newest_first_and_filters(stores: Stores, ws_a: str) -> None:
    for minute, (tid, sid) in enumerate([("t0", "s1"), ("t1", "s2"), ("t2", "s1"), ("t3", "s1")]):
        _create(stores.tasks, ws_a, sid, task_id=tid, created=minute)
    t2 = stores.tasks.get(ws_a, "t2")
    assert t2 is not None
    stores.tasks.save(t2.model_copy(update={"status": "done"}))

    def ids(**filters: object) -> list[str]:
        return [t.id for t in stores.tasks.list_tasks(ws_a, **filters)]  # type: ignore[arg-type]

    assert ids() == ["t3", "t2", "t1", "t0"]
    assert ids(session_id="s1") == ["t3", "t2", "t0"]
    assert ids(active=True) == ["t3", "t1", "t0"]
    assert ids(active=False) == ["t2"]
    assert ids(session_id="s1", active=True) == ["t3", "t0"]
    assert ids(limit=2) == ["t3", "t2"]
    assert ids(session_id="s-none") == []


def test_a_workspace_never_sees_or_changes_anothers_task(stores: Stores, ws_a: str, ws_b: str) -> None:
    mine = stores.tasks.create(
        task(ws_a, "s1", task_id="t1"), max_per_session=SESSION_CAP, max_per_workspace=WORKSPACE_CAP
    )
    assert stores.tasks.get(ws_b, "t1") is None
    assert stores.tasks.list_tasks(ws_b) == []
    # The same ids in another workspace are another task.
    theirs = stores.tasks.create(
        task(ws_b, "s1", task_id="t1", brief="theirs"),
        max_per_session=SESSION_CAP,
        max_per_workspace=WORKSPACE_CAP,
    )
    stores.tasks.save(theirs.model_copy(update={"status": "failed", "error": "boom"}))
    assert stores.tasks.delete_session(ws_b, "s1") == 1
    assert stores.tasks.get(ws_a, "t1") == mine
    assert [t.id for t in stores.tasks.list_tasks(ws_a, active=True)] == ["t1"]


def test_delete_session_removes_its_tasks_only(stores: Stores, ws_a: str) -> None:
    for sid in ("s1", "s1", "s2"):
        _create(stores.tasks, ws_a, sid)
    assert stores.tasks.delete_session(ws_a, "s1") == 2
    assert stores.tasks.list_tasks(ws_a, session_id="s1") == []
    assert len(stores.tasks.list_tasks(ws_a, session_id="s2")) == 1
    # Its slots are free again.
    for _ in range(SESSION_CAP):
        _create(stores.tasks, ws_a, "s1")
    assert stores.tasks.delete_session(ws_a, "s-none") == 0


# ---------------------------------------------------------------- StepLog


def test_steps_load_back_in_order(stores: Stores, ws_a: str) -> None:
    messages = conversation()
    # Written out of order (a retry of an earlier step after a later one): read back by seq.
    for seq in (2, 0, 1, 4, 3):
        assert stores.steps.append(ws_a, "task-1", seq, messages[seq]) is True
    assert stores.steps.load(ws_a, "task-1") == messages
    assert stores.steps.load(ws_a, "task-none") == []


def test_an_appended_step_is_never_overwritten(stores: Stores, ws_a: str) -> None:
    messages = conversation()
    assert stores.steps.append(ws_a, "turn-1", 0, messages[0]) is True
    assert stores.steps.append(ws_a, "turn-1", 0, AssistantMessage(content="a retry's answer")) is False
    assert stores.steps.load(ws_a, "turn-1") == [messages[0]]


def test_clear_removes_one_keys_steps(stores: Stores, ws_a: str) -> None:
    messages = conversation()
    for seq, message in enumerate(messages):
        stores.steps.append(ws_a, "task-1", seq, message)
    stores.steps.append(ws_a, "task-2", 0, messages[0])
    assert stores.steps.clear(ws_a, "task-1") == len(messages)
    assert stores.steps.load(ws_a, "task-1") == []
    assert stores.steps.load(ws_a, "task-2") == [messages[0]]
    assert stores.steps.clear(ws_a, "task-1") == 0
    # A cleared key starts again from seq 0.
    assert stores.steps.append(ws_a, "task-1", 0, messages[1]) is True


def test_steps_are_per_workspace(stores: Stores, ws_a: str, ws_b: str) -> None:
    messages = conversation()
    stores.steps.append(ws_a, "k", 0, messages[0])
    assert stores.steps.load(ws_b, "k") == []
    assert stores.steps.append(ws_b, "k", 0, messages[1]) is True
    assert stores.steps.clear(ws_b, "k") == 1
    assert stores.steps.load(ws_a, "k") == [messages[0]]


def test_steps_expire(stores: Stores, ws_a: str) -> None:
    messages = conversation()
    stores.steps.append(ws_a, "k", 0, messages[0])
    stores.now.value += STEP_TTL_S - 1
    stores.steps.append(ws_a, "k", 1, messages[1])
    assert stores.steps.load(ws_a, "k") == messages[:2]
    stores.now.value += 2
    assert stores.steps.load(ws_a, "k") == [messages[1]]
    # An expired step's seq can be written again (not yet swept or already swept alike).
    assert stores.steps.append(ws_a, "k", 0, messages[2]) is True
    assert stores.steps.load(ws_a, "k") == [messages[2], messages[1]]


def test_a_negative_seq_is_refused(stores: Stores, ws_a: str) -> None:
    with pytest.raises(ValueError):
        stores.steps.append(ws_a, "k", -1, conversation()[0])


# ---------------------------------------------------------------- Scratchpad


def test_scratchpad_round_trip_and_overwrite(stores: Stores, ws_a: str) -> None:
    text = "Zürich 🌦\n" + "line\n" * 1000
    stores.scratchpad.put(ws_a, "s1", "task/t1/output", text)
    assert stores.scratchpad.get(ws_a, "s1", "task/t1/output") == text
    stores.scratchpad.put(ws_a, "s1", "task/t1/output", "shorter")
    assert stores.scratchpad.get(ws_a, "s1", "task/t1/output") == "shorter"
    assert stores.scratchpad.get(ws_a, "s1", "task/none") is None
    assert stores.scratchpad.get(ws_a, "s2", "task/t1/output") is None


def test_scratchpad_keys_are_sorted_and_filtered_by_prefix(stores: Stores, ws_a: str) -> None:
    for key in ("task/t2/output", "notes", "task/t1/output", "task/t1/sources", "task_x"):
        stores.scratchpad.put(ws_a, "s1", key, key)
    stores.scratchpad.put(ws_a, "s2", "task/t9/output", "other session")
    assert stores.scratchpad.list_keys(ws_a, "s1") == [
        "notes",
        "task/t1/output",
        "task/t1/sources",
        "task/t2/output",
        "task_x",
    ]
    assert stores.scratchpad.list_keys(ws_a, "s1", prefix="task/t1/") == [
        "task/t1/output",
        "task/t1/sources",
    ]
    assert stores.scratchpad.list_keys(ws_a, "s1", prefix="zzz") == []
    assert stores.scratchpad.list_keys(ws_a, "s-none") == []


def test_scratchpad_is_per_workspace(stores: Stores, ws_a: str, ws_b: str) -> None:
    stores.scratchpad.put(ws_a, "s1", "k", "mine")
    assert stores.scratchpad.get(ws_b, "s1", "k") is None
    assert stores.scratchpad.list_keys(ws_b, "s1") == []
    stores.scratchpad.put(ws_b, "s1", "k", "theirs")
    assert stores.scratchpad.delete_session(ws_b, "s1") == 1
    assert stores.scratchpad.get(ws_a, "s1", "k") == "mine"


def test_scratchpad_delete_session(stores: Stores, ws_a: str) -> None:
    for key in ("a", "b", "c"):
        stores.scratchpad.put(ws_a, "s1", key, key)
    stores.scratchpad.put(ws_a, "s2", "a", "kept")
    assert stores.scratchpad.delete_session(ws_a, "s1") == 3
    assert stores.scratchpad.list_keys(ws_a, "s1") == []
    assert stores.scratchpad.get(ws_a, "s2", "a") == "kept"


def test_scratchpad_bounds_are_clear_errors(stores: Stores, ws_a: str) -> None:
    at_limit = "é" * (SCRATCHPAD_MAX_BYTES // 2)
    stores.scratchpad.put(ws_a, "s1", "big", at_limit)
    assert stores.scratchpad.get(ws_a, "s1", "big") == at_limit
    with pytest.raises(BadRequest, match=f"limit is {SCRATCHPAD_MAX_BYTES} bytes"):
        stores.scratchpad.put(ws_a, "s1", "bigger", at_limit + "x")
    for bad in ("", "/leading", "has space", "x" * 201):
        with pytest.raises(BadRequest, match="scratchpad key"):
            stores.scratchpad.put(ws_a, "s1", bad, "text")
    assert stores.scratchpad.list_keys(ws_a, "s1") == ["big"]


# ---------------------------------------------------------------- wiring


def test_the_embedded_backend_provides_the_three_stores(tmp_path: Path) -> None:
    backend = build_embedded_backend(Settings(data_dir=tmp_path / "data"))
    try:
        assert isinstance(backend.tasks, SqliteTaskStore)
        assert isinstance(backend.steps, SqliteStepLog)
        assert isinstance(backend.scratchpad, SqliteScratchpad)
    finally:
        backend.close()


def test_the_aws_backend_provides_the_three_stores(tmp_path: Path) -> None:
    with moto_aws.contract_backend(tmp_path / "aws") as (backend, _drain):
        assert isinstance(backend.tasks, DynamoTaskStore)
        assert isinstance(backend.steps, DynamoStepLog)
        assert isinstance(backend.scratchpad, DynamoScratchpad)
        # In the sessions table the stack declares, reached with the functions' settings.
        made = backend.tasks.create(task("ws1"), max_per_session=1, max_per_workspace=1)
        assert backend.tasks.get("ws1", made.id) == made

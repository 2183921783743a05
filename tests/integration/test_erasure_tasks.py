"""The right to erasure reaches delegated tasks, their steps and the scratchpads (docs/delegation.md),
on both adapter sets: the person's own sessions lose all of it; in another's session, a task they
delegated loses their words and stops, and what names them is scrubbed; another user's tasks are
exactly as they were."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from shared.backend import Backend
from shared.clock import new_id
from shared.memory.erasure import ERASED_TEXT, erase_user
from shared.models import AssistantMessage, Identity, InboundMessage, Message, Sender, Session, UserMessage
from shared.models.tasks import Task, TaskResult
from shared.ports import Scratchpad, StepLog, TaskStore
from tests.contract.builders import task
from tests.contract.factories import BACKEND_FACTORIES

ALICE, BOB = "alice", "bob"
ALICE_TG, BOB_TG = "111", "222"


@pytest.fixture(params=sorted(BACKEND_FACTORIES))
def backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Backend]:
    with BACKEND_FACTORIES[request.param](tmp_path / "backend") as contract:
        yield contract.backend


def _parent(ws: str, session_id: str, sender: str, text: str) -> InboundMessage:
    return InboundMessage(
        event_id=new_id("ev"),
        channel="telegram",
        workspace_id=ws,
        session_id=session_id,
        sender=Sender(id=sender, name="Alice" if sender == ALICE_TG else "Bob"),
        chat_id=f"chat-{session_id}",
        chat_type="group" if session_id == "grp" else "dm",
        text=text,
    )


def _stores(b: Backend) -> tuple[TaskStore, StepLog, Scratchpad]:
    assert b.tasks is not None and b.steps is not None and b.scratchpad is not None
    return b.tasks, b.steps, b.scratchpad


def _delegate(b: Backend, ws: str, task_id: str, session_id: str, sender: str, brief: str) -> Task:
    tasks, _, _ = _stores(b)
    made = task(ws, session_id, task_id, brief=brief, parent=_parent(ws, session_id, sender, brief))
    return tasks.create(made, max_per_session=3, max_per_workspace=20)


def _steps(texts: list[str]) -> list[Message]:
    messages: list[Message] = [UserMessage(content=texts[0])]
    return messages + [AssistantMessage(content=t) for t in texts[1:]]


def populate(b: Backend, ws: str) -> dict[str, list[Message]]:
    """Alice's DM, Bob's DM and Bob's group, each with tasks, steps and scratchpad entries."""
    tasks, steps, pad = _stores(b)
    for channel_user, user in ((ALICE_TG, ALICE), (BOB_TG, BOB)):
        b.identities.put(
            Identity(
                workspace_id=ws,
                channel="telegram",
                channel_user_id=channel_user,
                user_id=user,
                status="approved",
            )
        )
    for session_id, user in (("dm-a", ALICE), ("dm-b", BOB), ("grp", BOB)):
        b.sessions.save(
            Session(id=session_id, workspace_id=ws, user_id=user, channel="telegram"), expected_version=0
        )
    logs = {
        "t-alice-dm": _steps(["research my zanzibar passport", "found zanzibar"]),
        "t-alice-grp": _steps(["look up zanzibar flights", "searching"]),
        "t-bob-grp": _steps(["what did alice plan?", "alice plans zanzibar"]),
        "t-bob-dm": _steps(["plan my kilimanjaro trip", "kilimanjaro in june"]),
    }
    _delegate(b, ws, "t-alice-dm", "dm-a", ALICE_TG, "research my zanzibar passport")
    _delegate(b, ws, "t-alice-grp", "grp", ALICE_TG, "look up zanzibar flights")
    bob_grp = _delegate(b, ws, "t-bob-grp", "grp", BOB_TG, "summarise what alice planned")
    tasks.save(
        bob_grp.model_copy(
            update={"status": "done", "result": TaskResult(summary="alice plans a trip to zanzibar")}
        )
    )
    _delegate(b, ws, "t-bob-dm", "dm-b", BOB_TG, "plan my kilimanjaro trip")
    for task_id, log in logs.items():
        for seq, message in enumerate(log):
            steps.append(ws, task_id, seq, message)
    pad.put(ws, "dm-a", "task/t-alice-dm/output", "passport zanzibar 123")
    pad.put(ws, "grp", "task/t-bob-grp/output", "alice plans a trip to zanzibar")
    pad.put(ws, "dm-b", "task/t-bob-dm/output", "kilimanjaro in june")
    return logs


def test_erasure_reaches_tasks_steps_and_scratchpads(backend: Backend) -> None:
    ws = new_id("ws")
    tasks, steps, pad = _stores(backend)
    logs = populate(backend, ws)
    bob_before = tasks.get(ws, "t-bob-dm")

    report = erase_user(backend, ws, ALICE)

    # Her DM: its tasks, their steps and its scratchpad are gone.
    assert tasks.list_tasks(ws, session_id="dm-a") == []
    assert steps.load(ws, "t-alice-dm") == []
    assert pad.list_keys(ws, "dm-a") == []
    # The task she delegated in Bob's group keeps no word of hers, and stops.
    hers = tasks.get(ws, "t-alice-grp")
    assert hers is not None
    assert hers.brief == ERASED_TEXT and hers.parent.text == ERASED_TEXT
    assert hers.parent.sender.id == ERASED_TEXT and hers.parent.sender.name is None
    assert hers.cancel_requested
    assert steps.load(ws, "t-alice-grp") == []
    # Bob's finished group task named her: scrubbed, and its steps that quoted her deleted.
    bobs = tasks.get(ws, "t-bob-grp")
    assert bobs is not None and bobs.result is not None
    assert "alice" not in bobs.brief.lower() and ERASED_TEXT in bobs.brief
    assert "alice" not in bobs.result.summary.lower()
    assert steps.load(ws, "t-bob-grp") == []
    assert "alice" not in (pad.get(ws, "grp", "task/t-bob-grp/output") or "").lower()
    # Bob's own DM: exactly as it was.
    assert tasks.get(ws, "t-bob-dm") == bob_before
    assert steps.load(ws, "t-bob-dm") == logs["t-bob-dm"]
    assert pad.get(ws, "dm-b", "task/t-bob-dm/output") == "kilimanjaro in june"

    assert report.tasks_deleted == 1 and report.tasks_redacted == 2
    assert report.task_steps_deleted == 6
    assert report.scratchpad_entries_deleted == 1 and report.scratchpad_entries_scrubbed == 1

    # Running it again finds nothing more to do.
    again = erase_user(backend, ws, ALICE)
    assert (again.tasks_deleted, again.tasks_redacted, again.task_steps_deleted) == (0, 0, 0)
    assert again.scratchpad_entries_scrubbed == 0

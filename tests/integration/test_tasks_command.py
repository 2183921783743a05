"""`/tasks` in chat (docs/commands.md, docs/delegation.md#control) through the real web webhook, on
both backends (test_chat_commands' `stack`: the local gateway, and the functions on moto): the
session's own tasks only, a task's detail with its spend beside its parent turn's, and a cancel
stored for the runner to honour before the task's next step.

The tasks are stored as the delegate tool stores them, through the backend's real TaskStore; the
parent turn is a real model turn of the same conversation, found in the audit log by its turn id.
"""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from shared.channels.commands import from_text
from shared.local.gateway import LocalGateway
from shared.models import AuditRecord, InboundMessage, LaneItem, Sender
from shared.models.tasks import Task, TaskUsage
from tests.integration import test_delegation as delegation
from tests.integration.test_chat_commands import (  # noqa: F401 - the fixtures `stack` draws on
    WS,
    Deployment,
    WebChat,
    answer,
    local_gateway,
    on_lambda,
)
from tests.integration.test_cli_tasks import a_task
from tests.integration.test_delegation import gateway, script  # noqa: F401 - their fixtures


@pytest.fixture(params=["local", "lambda"])
def stack(request: pytest.FixtureRequest) -> Deployment:
    found: Deployment = request.getfixturevalue("local_gateway" if request.param == "local" else "on_lambda")
    if found.backend.tasks is None:
        pytest.fail(f"the {request.param} backend has no TaskStore")
    return found


def store(stack: Deployment, task: Task) -> Task:
    assert stack.backend.tasks is not None
    return stack.backend.tasks.create(task, max_per_session=3, max_per_workspace=20)


def parent_turn(stack: Deployment, chat: WebChat) -> AuditRecord:
    """A model turn of the conversation: the turn that delegates (its audit record)."""
    assert answer(chat, lambda: chat.say("look into the offsite")) == "look into the offsite"
    [record] = [r for r in stack.backend.audit.list_records(WS) if r.outcome == "ok"]
    return record


def test_tasks_lists_shows_and_cancels_only_this_sessions_tasks(stack: Deployment) -> None:
    chat = WebChat(stack)
    parent = parent_turn(stack, chat)
    usage = TaskUsage(model_calls=3, tool_calls=5, tokens_in=9000, tokens_out=700, usd=Decimal("0.0042"))
    mine = store(
        stack,
        a_task(
            "tsk-mine", chat.session, turn=parent.turn_id, workspace=WS, status="running", usage=usage
        ).model_copy(update={"correlation_id": parent.correlation_id}),
    )
    store(stack, a_task("tsk-theirs", "another-session", workspace=WS, status="running"))

    # /tasks: this conversation's task, with its role, status, age and spend; never another's
    listed = answer(chat, lambda: chat.command("tasks"))
    assert listed.splitlines()[0] == "Tasks (id, role, status, age, spend):"
    assert re.match(
        r"- tsk-mine  researcher  running  \d+ min  \$0\.0042  Find what the team", listed.splitlines()[1]
    )
    assert "tsk-theirs" not in listed and len(listed.splitlines()) == 2

    # /tasks show: the detail, the task's spend beside the parent turn's
    shown = answer(chat, lambda: chat.command("tasks", "show tsk-mine"))
    assert "Task tsk-mine: researcher, running" in shown
    assert f"parent turn {parent.turn_id} est. $0.0000" in shown and "task est. $0.0042" in shown
    other = answer(chat, lambda: chat.command("tasks", "show tsk-theirs"))
    assert other == "no task tsk-theirs in this conversation."

    # /tasks cancel: stored for the runner, which stops the task before its next step
    cancelled = answer(chat, lambda: chat.command("tasks", "cancel tsk-mine"))
    assert cancelled == "Cancelling tsk-mine: it stops before its next step, and you will be told here."
    assert stack.backend.tasks is not None
    stored = stack.backend.tasks.get(WS, mine.id)
    assert stored is not None and stored.cancel_requested and stored.version == mine.version + 1
    assert "running (cancel requested)" in answer(chat, lambda: chat.command("tasks"))
    # another session's task cannot be cancelled from here
    refused = answer(chat, lambda: chat.command("tasks", "cancel tsk-theirs"))
    assert refused == "no task tsk-theirs in this conversation."
    theirs = stack.backend.tasks.get(WS, "tsk-theirs")
    assert theirs is not None and not theirs.cancel_requested
    assert answer(chat, lambda: chat.command("tasks", "stop it")) == (
        "Use /tasks, /tasks show <id> or /tasks cancel <id>."
    )
    # and none of it reached the model: one model turn, the rest commands, audited as such
    assert len(stack.model.requests) == 1
    records = stack.backend.audit.list_records(WS)
    assert sorted(r.outcome for r in records).count("command") == 7
    assert {r.error for r in records if r.outcome == "command"} == {None, "not_found", "bad /tasks arguments"}


def test_tasks_says_when_the_conversation_has_none(stack: Deployment) -> None:
    chat = WebChat(stack)
    assert answer(chat, lambda: chat.command("tasks")) == "No delegated tasks in this conversation."
    assert "/tasks [show|cancel <id>]" in answer(chat, lambda: chat.command("help"))


# ---------------------------------------------------------------- against a running task


def command(gw: LocalGateway, event_id: str, text: str) -> None:
    """`text` typed on the web channel: a command, as the webhook recognises it."""
    found = from_text(text)
    assert found is not None
    inbound = InboundMessage(
        event_id=event_id,
        channel="web",
        workspace_id=delegation.WS,
        session_id=delegation.SESSION,
        sender=Sender(id="alice"),
        chat_id="demo",
        text=text,
        command=found,
    )
    gw.backend.lanes.submit(LaneItem(inbound=inbound, correlation_id=f"req-{event_id}"))


def test_tasks_cancel_stops_a_running_task_before_its_next_step_and_the_user_is_told(
    gateway: LocalGateway,  # noqa: F811
    script: delegation.Script,  # noqa: F811
) -> None:
    gw = gateway
    replies = delegation.replies
    # Given a researcher that has made its first lookup and is held in its second model call
    delegation.say(gw.backend, "e1", "Please research the tides, I may cancel")
    delegation.wait_for(
        lambda: len(replies(gw.backend)) == 1 and delegation.LOOKUPS, lambda: replies(gw.backend)
    )
    task = delegation.only_task(gw)
    # When the user lists their tasks and cancels it
    command(gw, "e2", "/tasks")
    delegation.wait_for(lambda: len(replies(gw.backend)) == 2, lambda: replies(gw.backend))
    assert f"- {task.id}  researcher  running" in replies(gw.backend)[1]
    command(gw, "e3", f"/tasks cancel {task.id}")
    delegation.wait_for(lambda: len(replies(gw.backend)) == 3, lambda: replies(gw.backend))
    assert (
        replies(gw.backend)[2]
        == f"Cancelling {task.id}: it stops before its next step, and you will be told here."
    )
    script.release.set()
    # Then the task stops after the step in flight: no lookup after the cancel
    delegation.wait_for(lambda: delegation.only_task(gw).outcome_delivered, lambda: delegation.only_task(gw))
    ended = delegation.only_task(gw)
    assert ended.status == "cancelled" and delegation.LOOKUPS == ["tides 1", "tides 2"]
    # And the user is told once, in the same conversation
    delegation.wait_for(lambda: len(replies(gw.backend)) == 4, lambda: replies(gw.backend))
    assert replies(gw.backend)[3].startswith(
        f"Update on your task: [Task {task.id} (researcher) was cancelled"
    )
    # And /tasks then shows it ended, and a second cancel says so
    command(gw, "e4", f"/tasks cancel {task.id}")
    delegation.wait_for(lambda: len(replies(gw.backend)) == 5, lambda: replies(gw.backend))
    assert replies(gw.backend)[4] == f"Task {task.id} has already ended (cancelled)."
    assert len([r for r in replies(gw.backend) if task.id in r and "was cancelled" in r]) == 1

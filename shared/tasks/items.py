"""A task's lane items (TaskEvent, docs/delegation.md) and the texts the parent's turn reads.

- a step runs on the task's own lane (LaneItem.group_id); its inbound is the delegating turn's, so
  the task has the parent's sender, conversation and recall scope; seq numbers the continuations;
- the outcome goes on the parent session's lane with the derived event id `task.<id>.outcome`:
  a second submission is dropped by the lane, and a redelivery by the session's event ids;
- a question (an interactive task) likewise, `task.<id>.q<n>`, n its invocation.

The texts put the task's words (its summary, its question) in a fence, as untrusted data: the
task read web pages and memories, and its output is no instruction to the agent.
"""

from __future__ import annotations

from shared.clock import utcnow
from shared.models import InboundMessage, LaneItem, TaskEvent
from shared.models.tasks import Task
from shared.safety.guard import guard_untrusted

ENDINGS = {
    "done": "finished",
    "failed": "failed",
    "cancelled": "was cancelled",
    "timed_out": "ran out of time",
    "budget_exhausted": "stopped: the budget ran out",
}


def step_item(task: Task, seq: int) -> LaneItem:
    return LaneItem(
        inbound=task.parent,
        correlation_id=task.correlation_id,
        task=TaskEvent(task_id=task.id, kind="step", seq=seq),
    )


def outcome_item(task: Task, *, pii: bool) -> LaneItem:
    return _parent_item(task, f"task.{task.id}.outcome", outcome_text(task, pii=pii), "outcome")


def question_item(task: Task, *, pii: bool) -> LaneItem:
    question = _fenced(task, task.question or "", pii=pii)
    text = (
        f"[Task {task.id} ({task.role}) asks the user a question: {question}]\n"
        "Ask the user this question in your own words. When they answer, call answer_task with "
        "the task's id and their answer."
    )
    return _parent_item(task, f"task.{task.id}.q{task.invocations}", text, "question")


def outcome_text(task: Task, *, pii: bool) -> str:
    """The user-side message of the parent's turn for a task's outcome: the summary, fenced."""
    ending = ENDINGS.get(task.status, task.status)
    if task.result is not None:
        said = _fenced(task, task.result.summary, pii=pii)
        keys = ", ".join(task.result.scratchpad_keys)
        more = f"\nIts full output is in the scratchpad ({keys}): scratchpad_read." if keys else ""
    else:
        said, more = (task.error or "no result"), ""
    return (
        f"[Task {task.id} ({task.role}) {ending}: {said}]{more}\n"
        "Tell the user what came of the task they asked for, briefly."
    )


def _fenced(task: Task, text: str, *, pii: bool) -> str:
    return guard_untrusted(text, source=f"task {task.id}", pii=pii, quote_all=True).text


def _parent_item(task: Task, event_id: str, text: str, kind: str) -> LaneItem:
    inbound: InboundMessage = task.parent.model_copy(
        update={
            "event_id": event_id,
            "text": text,
            "command": None,
            "attachments": [],
            "merged_event_ids": [],
            "reply_to": None,
            "received_at": utcnow(),
        }
    )
    return LaneItem(
        inbound=inbound,
        correlation_id=task.correlation_id,
        task=TaskEvent.model_validate({"task_id": task.id, "kind": kind}),
    )

"""Durable steps (docs/delegation.md, docs/architecture.md "Delegation"): the agent loop's seam to
a StepLog (shared.ports).

Every message the loop produces (each model call's AssistantMessage, each tool call's
ToolResultMessage, the final reply) is appended as it completes, keyed by the turn's id for an
ordinary turn and the task's id for a delegated task. A run that starts with saved steps continues
after them: the model calls they hold are not made again, and a tool call whose result is saved is
never run again. So a turn cut by the deadline after three of five tool calls runs the fourth and
fifth on its next delivery, and a task continues across as many invocations as it needs.

A tool call that was running when the process died has no saved result and runs again on the next
delivery: a tool with side effects keys them on `ToolContext.turn_id` and the call's id (both the
same on every delivery: the call's id is in the saved AssistantMessage), as the reply is keyed
on the turn.

The saved tool calls carry their arguments as the session stores them (redacted: no secret reaches
the log); a resumed call runs with those.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field

from shared.models import AssistantMessage, Message, ToolCall, ToolResultMessage
from shared.ports import StepLog

# True while the lane delivers an item for the first time (the agent's batch sets it from SQS's
# ApproximateReceiveCount): a turn's steps are keyed by its event, so a first delivery has none
# saved and a warm turn skips the read. Unknown (the default): read.
first_delivery: ContextVar[bool] = ContextVar("sigil_first_delivery", default=False)
# True while the lane delivers an item again (ApproximateReceiveCount above 1): its earlier
# deliveries failed or died. A task's step that makes progress on a redelivery hands over to a
# fresh step item (shared.tasks.runner), so a task is dead-lettered only when deliveries in a row
# make none, not when its one long step is cut by every process that dies under it. Unknown (the
# default): not a redelivery.
redelivered: ContextVar[bool] = ContextVar("sigil_redelivered", default=False)


@dataclass
class DurableSteps:
    """One run's steps: those saved before it (`saved`, loaded once) and those it appends."""

    log: StepLog
    workspace_id: str
    key: str
    # Whether the final reply is a step too. A task's is its answer, kept; a turn's is not, since
    # the turn's commit follows at once (a turn with no tool calls then writes nothing here).
    replies: bool = True
    # Known to have none saved (a turn's first delivery): no read.
    fresh: bool = False
    saved: list[Message] = field(init=False)

    def __post_init__(self) -> None:
        self.saved = [] if self.fresh else self.log.load(self.workspace_id, self.key)

    def record(self, message: Message) -> None:
        """Append the next step; a step another delivery saved first is left as it was."""
        if not self.replies and isinstance(message, AssistantMessage) and not message.tool_calls:
            return
        self.log.append(self.workspace_id, self.key, len(self.saved), message)
        self.saved.append(message)

    def pending(self) -> list[tuple[int, ToolCall]]:
        """The tool calls of the last saved model step that have no saved result (index, call)."""
        for back, message in enumerate(reversed(self.saved)):
            if isinstance(message, AssistantMessage):
                done = {
                    m.tool_call_id
                    for m in self.saved[len(self.saved) - back :]
                    if isinstance(m, ToolResultMessage)
                }
                return [(i, c) for i, c in enumerate(message.tool_calls) if c.id not in done]
        return []

    def answered(self) -> AssistantMessage | None:
        """The saved final reply (a model step without tool calls), when the run got that far."""
        last = self.saved[-1] if self.saved else None
        return last if isinstance(last, AssistantMessage) and not last.tool_calls else None

    def clear(self) -> None:
        self.log.clear(self.workspace_id, self.key)
        self.saved = []

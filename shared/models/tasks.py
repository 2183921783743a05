"""Delegated tasks (spec 001, docs/delegation.md): the records the TaskStore keeps.

A task's conversation is not in its record: each model and tool call is a step in the StepLog
(shared.ports), so a record stays small however long the task runs.
"""

# Annotations are not postponed here: pydantic makes this module's models at import, and would
# evaluate each field's annotation from its text (shared/models/__init__.py).

import re
from datetime import datetime
from decimal import Decimal
from typing import Final, Literal

from pydantic import Field

from shared.clock import utcnow
from shared.errors import BadRequest
from shared.models import Identifier, InboundMessage, Model, WorkspaceId

TaskStatus = Literal[
    "queued", "running", "waiting_user", "done", "failed", "cancelled", "timed_out", "budget_exhausted"
]
TERMINAL: Final[frozenset[str]] = frozenset({"done", "failed", "cancelled", "timed_out", "budget_exhausted"})

SUMMARY_MAX_CHARS: Final = 1500


class Finding(Model):
    """One finding of a task, with the memories or messages it rests on (their ids)."""

    text: str = Field(max_length=1000)
    sources: list[str] = Field(default_factory=list, max_length=20)


class TaskUsage(Model):
    model_calls: int = 0
    tool_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    usd: Decimal = Decimal("0")


class TaskResult(Model):
    """The result contract: what the parent's conversation gets is `summary` (bounded), fenced as
    untrusted; the full output is in the session's scratchpad under `scratchpad_keys`."""

    summary: str = Field(max_length=SUMMARY_MAX_CHARS)
    findings: list[Finding] = Field(default_factory=list, max_length=20)
    confidence: float = Field(default=0.5, ge=0.0, le=1.0)
    usage: TaskUsage = Field(default_factory=TaskUsage)
    scratchpad_keys: list[str] = Field(default_factory=list)


class Task(Model):
    id: Identifier
    workspace_id: WorkspaceId
    session_id: Identifier  # the parent session (whose lane gets the outcome)
    role: str = Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")
    brief: str = Field(max_length=8000)
    status: TaskStatus = "queued"
    # The delegating turn's inbound: the channel and conversation the outcome goes back to, and
    # the sender whose recall scope and budgets the task runs under.
    parent: InboundMessage
    parent_turn_id: str
    correlation_id: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    deadline_at: datetime
    steps: int = 0  # steps in the StepLog so far
    invocations: int = 0
    usage: TaskUsage = Field(default_factory=TaskUsage)
    result: TaskResult | None = None
    error: str | None = None
    cancel_requested: bool = False
    question: str | None = None  # an interactive task waiting for the user
    answer: str | None = None
    outcome_delivered: bool = False
    version: int = 0  # optimistic concurrency: TaskStore.save writes only over this version

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


# ---------------------------------------------------------------- storage bounds (both backends)

# A step is kept this long after it is saved: a task or turn that finishes clears its steps, and
# what a crash leaves behind expires (a DynamoDB TTL in the cloud, a sweep on append embedded).
STEP_TTL_S: Final = 7 * 86_400
# A scratchpad entry's text, in UTF-8 bytes: far under DynamoDB's 400 KB item limit with its key
# and attributes, and more than any one task's output a tool then pages through.
SCRATCHPAD_MAX_BYTES: Final = 256 * 1024
SCRATCHPAD_KEY_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$"


def check_scratchpad_entry(key: str, text: str) -> None:
    """Refuse a key or a text no backend can store the same way: BadRequest, saying which bound."""
    if not re.match(SCRATCHPAD_KEY_PATTERN, key):
        raise BadRequest(
            f"scratchpad key {key[:60]!r} is not valid: 1-200 characters, letters, digits and . _ : / -,"
            " starting with a letter or digit"
        )
    size = len(text.encode())
    if size > SCRATCHPAD_MAX_BYTES:
        raise BadRequest(
            f"scratchpad entry {key!r} is {size} bytes; the limit is {SCRATCHPAD_MAX_BYTES} bytes "
            "(store a summary, or split the output over several keys)"
        )

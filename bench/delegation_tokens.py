"""What a delegated task costs the conversation (docs/delegation.md). Run by `make bench`.

A research task of 20 tool calls (each result ~1 KB, as a search hit or a page extract is) runs
through the real turn and task runner on the embedded backend, with a function-backed model for
the agent and the Researcher. Printed, in characters and tokens:

- the task's transcript: its brief, every model step and every tool result (what the task's own
  context grew to, and what a design that hands the sub-agent's transcript back would carry);
- what the agent's next request carries of the task: the outcome message (the summary, fenced);
- the whole of that next request's messages, for scale.

Tokens are the repo's own estimate (shared.agent.context.estimate: characters / 4, rounded up).
A benchmark, not a test: it prints a table.
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pydantic import BaseModel  # noqa: E402

from shared.adapters.embedded import build_embedded_backend  # noqa: E402
from shared.agent.context import estimate  # noqa: E402
from shared.agent.turn import TurnDeps, run_turn  # noqa: E402
from shared.channels.senders import OutboxSender, SenderRegistry  # noqa: E402
from shared.config import Settings  # noqa: E402
from shared.models import (  # noqa: E402
    AssistantMessage,
    BudgetLimits,
    InboundMessage,
    LaneItem,
    Message,
    RoleConfig,
    ScopeLimits,
    Sender,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    WorkspaceConfig,
)
from shared.models.tasks import Task  # noqa: E402
from shared.providers.base import ChatRequest, ProviderEvent, ToolCallEvent, Usage  # noqa: E402
from shared.providers.function import FunctionProvider  # noqa: E402
from shared.tasks.items import outcome_item, step_item  # noqa: E402
from shared.tasks.runner import TASK_NOTE, TaskRunner  # noqa: E402
from shared.tasks.tools import ORCHESTRATOR_TOOLS  # noqa: E402
from shared.tools import ToolContext, default_registry, tool  # noqa: E402

WS, SESSION = "bench", "web.bench"
CALLS = 20


class Query(BaseModel):
    query: str


@tool
def search_notes(args: Query, ctx: ToolContext) -> str:
    """Searches the notes (read-only)."""
    line = f"Note on {args.query}: the tide tables, moon phases and harbour depths for the week. "
    return (line * 12)[:1000]


def call(name: str, args: dict[str, object], call_id: str) -> list[ProviderEvent]:
    return [ToolCallEvent(call=ToolCall(id=call_id, name=name, arguments=json.dumps(args)))]


def model(request: ChatRequest) -> str | list[ProviderEvent]:
    last = request.messages[-1]
    if TASK_NOTE in request.system:
        done = sum(isinstance(m, ToolResultMessage) for m in request.messages)
        if done < CALLS:
            return call("search_notes", {"query": f"harbour {done + 1}"}, f"s{done + 1}")
        summary = "High tide is 06:12 and 18:40 all week; the harbour keeps 4 m at low water."
        findings = [{"text": "Spring tides on Thursday", "sources": ["s3", "s17"]}]
        return call("finish_task", {"summary": summary, "findings": findings, "confidence": 0.8}, "fin")
    if isinstance(last, ToolResultMessage):
        return "Started; I'll tell you what it finds."
    if isinstance(last, UserMessage) and last.content.startswith("[Task "):
        return "The research is in: high tide 06:12 and 18:40."
    return call(
        "delegate", {"role": "researcher", "brief": "Research this week's tides at the harbour."}, "d1"
    )


def charged(request: ChatRequest) -> str | list[ProviderEvent]:
    """`model`'s answer, with the usage a provider reports for it (the repo's estimate: the prompt
    and the calls' arguments at 4 characters a token), so the budget counts each call's tokens as
    it counts a real provider's (Task.usage, which bench/cost.py prices)."""
    answer = model(request)
    if isinstance(answer, str):
        return answer  # FunctionProvider reports a text answer's usage itself
    prompt = estimate(request.system + "\n" + render(request.messages))
    out = sum(estimate(e.call.arguments) for e in answer if isinstance(e, ToolCallEvent))
    return [*answer, Usage(input_tokens=prompt, output_tokens=out)]


def size(text: str) -> tuple[int, int]:
    return len(text), estimate(text)


def render(messages: list[Message]) -> str:
    parts = []
    for m in messages:
        if isinstance(m, AssistantMessage):
            parts.append(m.content + "".join(f"{c.name}({c.arguments})" for c in m.tool_calls))
        else:
            parts.append(m.content)
    return "\n".join(parts)


@dataclass
class Measured:
    """One research task run through the real turn and runner: the task as it ended, its
    transcript (brief, steps), and the agent's request for the outcome's turn."""

    task: Task
    transcript: str
    next_request: ChatRequest


def measure() -> Measured:
    with tempfile.TemporaryDirectory() as tmp:
        backend = build_embedded_backend(Settings(data_dir=Path(tmp)))
        # A budget far above the run: the runtime counts a task's tokens (Task.usage) as it charges
        # them to the budget, and bench/cost.py prices those.
        config = WorkspaceConfig(id=WS, budget=BudgetLimits(workspace=ScopeLimits(tokens_per_day=10**9)))
        roles = {"researcher": RoleConfig(instructions="Research.", tools=["search_notes"])}
        backend.workspaces.put(
            config.model_copy(update={"delegation": config.delegation.model_copy(update={"roles": roles})})
        )
        provider = FunctionProvider(charged)
        deps = TurnDeps(
            backend=backend,
            settings=Settings(data_dir=Path(tmp)),
            senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
            provider_factory=lambda ref: (provider, "scripted"),
            tools=default_registry().extended(search_notes, *ORCHESTRATOR_TOOLS),
            task_steps=TaskRunner(),
        )
        inbound = InboundMessage(
            event_id="e1",
            channel="web",
            workspace_id=WS,
            session_id=SESSION,
            sender=Sender(id="u1"),
            chat_id="bench",
            text="What are the tides this week?",
        )
        run_turn(deps, LaneItem(inbound=inbound))
        assert backend.tasks is not None and backend.steps is not None
        (task,) = backend.tasks.list_tasks(WS)
        while not task.terminal:
            run_turn(deps, step_item(task, task.invocations))
            found = backend.tasks.get(WS, task.id)
            assert found is not None
            task = found
        run_turn(deps, outcome_item(task, pii=False))
        transcript = f"{task.brief}\n{render(backend.steps.load(WS, task.id))}"
        backend.close()
    return Measured(task, transcript, provider.requests[-1])


def main() -> None:
    found = measure()
    task, transcript, next_request = found.task, found.transcript, found.next_request
    carried = next_request.messages[-1].content
    rows = [
        (f"task transcript ({task.usage.tool_calls - 1} searches and finish_task)", *size(transcript)),
        ("task summary carried by the agent's next request", *size(carried)),
        ("the agent's whole next request (its messages)", *size(render(next_request.messages))),
    ]
    print(f"Delegation: a {CALLS}-tool-call research task, what the conversation carries")
    print(f"{'':52} {'chars':>8} {'tokens':>8}")
    for name, chars, tokens in rows:
        print(f"{name:52} {chars:>8} {tokens:>8}")
    print(f"ratio transcript / summary: {rows[0][2] / max(rows[1][2], 1):.1f}x (tokens)")


if __name__ == "__main__":
    main()

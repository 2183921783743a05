"""The agent loop inside one turn (spec 000, "Multi-Turn Tool Orchestration").

Call the model; while it asks for tools, run them in the order asked, hand the results back and
call it again; stop when it answers in text. A turn runs at most the workspace's
max_tool_calls_per_turn calls (20 by default): calls past the limit are not run, each gets an
error result (providers reject a call without one), and the turn ends with LIMIT_REPLY instead
of another model call. That stop is a typed value, ToolCallLimitExceeded, on the result: the turn
still replies and commits, and audits the outcome as "limited".

Text is streamed through `on_text` as each model call produces it. A stream cannot tell a final
answer from the preamble of a step that ends in tool calls ("Let me look that up") until it
ends, so such a preamble may show for a moment; the next step's text replaces it, because
`on_text` always gets the text of the current call so far, and the reply shows the final answer.

Message ids come from the turn id and the step, so a retried turn writes the same messages.

Safety (docs/safety.md): every tool result is scanned, redacted and quoted as data from
"tool <name>" before the next model call sees it or the turn stores it: always, for a tool that
declares third-party output (Tool.untrusted_output: memory, web pages), and if flagged otherwise.
Everything the model writes is redacted (secrets always, PII per the workspace) where its
AssistantMessages are built: the text, and the stored copy of each tool call's arguments, while
the tool itself runs with the arguments as the model wrote them. What the filters found is kept
on `Safety`, as rule and kind names only, for the turn's log line and its audit record.

A model that declines to answer (Done.refused, whichever provider said so) still ends the turn
with its text or explanation as the reply, and the turn is audited as "refused".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

from shared.agent.steps import DurableSteps
from shared.budgets import TurnBudget
from shared.deadline import current, passed
from shared.errors import BudgetExceeded, DeadlineExceeded, ToolCallLimitExceeded
from shared.models import (
    AssistantMessage,
    Message,
    SandboxUsage,
    ToolCall,
    ToolResultMessage,
    WorkspaceConfig,
)
from shared.providers.base import ChatRequest, Done, Provider, TextDelta, ToolCallEvent, Usage
from shared.safety.guard import guard_untrusted
from shared.safety.redact import redact, redact_json
from shared.tools import ToolContext, ToolRegistry, tool_error

EMPTY_REPLY = "(The model returned an empty reply.)"
LIMIT_REPLY = (
    "I stopped after {limit} tool calls in one turn: that is this workspace's limit, there to keep "
    "one request from running on without end. Ask me to continue and I'll pick up from here."
)


@dataclass
class Safety:
    """What the safety filters did in one turn, for its log line and audit record: names and
    counts, never text."""

    pii: bool = False  # the workspace's pii_redaction
    findings: dict[str, list[str]] = field(default_factory=dict)  # source -> injection rules fired
    quoted: list[str] = field(default_factory=list)  # sources whose text went in quoted
    redacted: Counter[str] = field(default_factory=Counter)  # kind -> replaced, input and output

    def guard(self, text: str, *, source: str, quote_all: bool = False) -> str:
        """Untrusted text (the user's message, a tool result) as the model and the store get it:
        quoted as data if the scan flags it, or always with `quote_all`."""
        guarded = guard_untrusted(text, source=source, pii=self.pii, quote_all=quote_all)
        if guarded.scan.findings:
            self.findings[source] = sorted({*self.findings.get(source, []), *guarded.scan.rules})
        if guarded.quoted and source not in self.quoted:
            self.quoted.append(source)
        self.redacted.update(guarded.redaction.counts)
        return guarded.text

    def redact(self, text: str) -> str:
        """What the model wrote, as the channel shows it and the store keeps it."""
        redaction = redact(text, pii=self.pii)
        self.redacted.update(redaction.counts)
        return redaction.text

    def redact_call(self, call: ToolCall) -> ToolCall:
        """A tool call as stored: its arguments redacted value by value, still JSON."""
        arguments = redact_json(call.arguments, pii=self.pii)
        return call if arguments == call.arguments else call.model_copy(update={"arguments": arguments})


@dataclass
class ModelStep:
    """What one model call produced."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    done: Done = field(default_factory=Done)


@dataclass
class LoopResult:
    """What the turn commits after the user's message, in order, ending with the reply."""

    messages: list[Message] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)  # summed over every model call
    tools_used: list[str] = field(default_factory=list)  # one name per call run, in order
    stopped: ToolCallLimitExceeded | None = None  # set when the tool-call limit ended the turn
    budget_denied: str | None = None  # what ran out, when a budget ended the turn between calls
    refused: bool = False  # the model (or its provider's filter) declined to answer
    safety: Safety = field(default_factory=Safety)
    sandbox: list[SandboxUsage] = field(default_factory=list)  # run_python's use, for the audit

    @property
    def reply(self) -> AssistantMessage:
        last = self.messages[-1]
        assert isinstance(last, AssistantMessage)
        return last

    @property
    def outcome(self) -> Literal["ok", "limited", "budget_denied", "refused"]:
        if self.budget_denied is not None:
            return "budget_denied"
        if self.stopped is not None:
            return "limited"
        return "refused" if self.refused else "ok"


def run_loop(
    provider: Provider,
    request: ChatRequest,
    tools: ToolRegistry,
    ctx: ToolContext,
    workspace: WorkspaceConfig,
    *,
    on_text: Callable[[str], None] | None = None,
    safety: Safety | None = None,
    budget: TurnBudget | None = None,
    steps: DurableSteps | None = None,
    finished: Callable[[], bool] | None = None,
    check_first: bool = False,
) -> LoopResult:
    """Run the model and the tools it calls until it answers, or the tool-call limit stops it.

    `on_text` gets the model's raw text: the caller redacts what it shows (a StreamRedactor).
    `safety` collects what the filters found (a new one, for the workspace, if not given).
    `budget` is checked before every model call but the first (the turn checks that one before it
    starts; `check_first` checks it too, for a task) and before every tool call; a model call is
    charged after it (its tokens are known then), a tool call before it runs. Both are local to the
    turn (TurnBudget): its spending reaches the store with the turn's commit.
    `steps` (shared.agent.steps) saves each message as it completes and resumes after those saved
    before: no saved model call is made again, no tool call with a saved result runs again.
    `finished` is asked after each step's tool calls: True ends the run there (a task's
    finish_task), with no reply. The deadline in scope is checked before each tool call too.
    """
    model_ref, limit = f"{provider.name}/{request.model}", workspace.max_tool_calls_per_turn
    safety = safety if safety is not None else Safety(pii=workspace.pii_redaction)
    result = LoopResult(safety=safety, sandbox=ctx.sandbox_usage, messages=list(steps.saved) if steps else [])
    step = sum(isinstance(m, AssistantMessage) for m in result.messages)
    calls = sum(isinstance(m, ToolResultMessage) for m in result.messages)
    pending = steps.pending() if steps is not None else []

    def keep(message: Message) -> None:
        result.messages.append(message)
        if steps is not None:
            steps.record(message)

    def reply(text: str) -> LoopResult:
        keep(AssistantMessage(id=f"{ctx.turn_id}.a", content=safety.redact(text), model=model_ref))
        return result

    if steps is not None and steps.answered() is not None:
        return result  # the reply was saved: only the commit was left to do
    while True:
        if not pending:
            step += 1
            if budget is not None and (step > 1 or check_first):
                decision = budget.check_model_call()
                if decision.exhausted is not None:
                    result.budget_denied = decision.exhausted.summary
                    return reply(decision.exhausted.message(decision.at))
            sent = request.model_copy(update={"messages": [*request.messages, *result.messages]})
            tools.warm(ctx, workspace)  # e.g. a sandbox instance starts while the model thinks
            answer = call_model(provider, sent, on_text=on_text)
            result.usage = _sum(result.usage, answer.usage)
            _charge(budget, model_ref, answer.usage)
            if not answer.tool_calls:
                result.refused = answer.done.refused
                return reply(answer.text or answer.done.refusal or EMPTY_REPLY)
            stored_calls = [safety.redact_call(call) for call in answer.tool_calls]
            text = safety.redact(answer.text)
            keep(
                AssistantMessage(
                    id=f"{ctx.turn_id}.a{step}", content=text, tool_calls=stored_calls, model=model_ref
                )
            )
            pending = list(enumerate(answer.tool_calls))  # run with the arguments as the model wrote them
        refused = 0
        for i, call in pending:  # parallel calls too: one after the other, in order
            if passed(current()):
                raise DeadlineExceeded("the deadline passed between tool calls; the next delivery continues")
            denied = _budget_denial(budget, call)
            if denied is not None:
                outcome = denied  # charged before it starts: a spent budget runs no tool either
            elif calls < limit:
                calls += 1
                outcome = _run_tool(
                    call, tools=tools, ctx=ctx, workspace=workspace, budget=budget, result=result
                )
            else:
                refused += 1
                outcome = _refused(call, limit)
            keep(outcome.model_copy(update={"id": f"{ctx.turn_id}.a{step}.r{i}"}))
        pending = []
        if refused:
            result.stopped = ToolCallLimitExceeded(LIMIT_REPLY.format(limit=limit))
            return reply(result.stopped.message)
        if finished is not None and finished():
            return result


def _charge(budget: TurnBudget | None, model_ref: str, usage: Usage) -> None:
    """A model call's tokens, charged once they are known."""
    if budget is not None:
        budget.charge_model_call(
            model_ref,
            tokens_in=usage.input_tokens,
            tokens_out=usage.output_tokens,
            cache_read=usage.cache_read_tokens,
            cache_write=usage.cache_write_tokens,
        )


def _run_tool(
    call: ToolCall,
    *,
    tools: ToolRegistry,
    ctx: ToolContext,
    workspace: WorkspaceConfig,
    budget: TurnBudget | None,
    result: LoopResult,
) -> ToolResultMessage:
    if budget is not None:
        budget.charge_tool_call()
    # The arguments as the model wrote them; the call's id on the context, for a tool that keys
    # its side effects on it (shared.agent.steps).
    outcome = tools.execute(call, replace(ctx, call_id=call.id), workspace)
    # Third-party text (memory, a web page) is quoted always; the scan still runs, for the flag
    # and the audit.
    content = result.safety.guard(
        outcome.content, source=f"tool {call.name}", quote_all=tools.untrusted_output(call.name)
    )
    if tools.permits(call.name, workspace):
        result.tools_used.append(call.name)
    return outcome.model_copy(update={"content": content})


def call_model(
    provider: Provider, request: ChatRequest, *, on_text: Callable[[str], None] | None = None
) -> ModelStep:
    """Run one model call; `on_text` sees the text so far after each delta."""
    step = ModelStep()
    parts: list[str] = []
    for event in provider.stream(request):
        if isinstance(event, TextDelta):
            parts.append(event.text)
            if on_text is not None:
                on_text("".join(parts))
        elif isinstance(event, ToolCallEvent):
            step.tool_calls.append(event.call)
        elif isinstance(event, Usage):
            step.usage = _sum(step.usage, event)
        elif isinstance(event, Done):
            step.done = event
    step.text = "".join(parts)
    return step


def _budget_denial(budget: TurnBudget | None, call: ToolCall) -> ToolResultMessage | None:
    """The error result of a tool call the budget no longer allows (a tool may spend money of its
    own: a search API, an MCP server's), or None to run it."""
    decision = budget.check() if budget is not None else None
    if decision is None or decision.exhausted is None:
        return None
    return tool_error(call, BudgetExceeded.code, f"Not run: {decision.exhausted.message(decision.at)}")


def _refused(call: ToolCall, limit: int) -> ToolResultMessage:
    message = f"Not run: this turn reached its limit of {limit} tool calls."
    return tool_error(call, ToolCallLimitExceeded.code, message)


def _sum(a: Usage, b: Usage) -> Usage:
    return a + b

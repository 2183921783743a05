"""The replay report: recorded and replayed turns side by side, and how consistent k runs were.

A pydantic model, so the CLI writes it as JSON (model_dump_json) and the console and the
renderers (shared.replay.render) read the same thing.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, Field

from shared.clock import utcnow
from shared.replay.change import ReplayChange

# A tool result is shown up to this many characters: enough to see what the model read.
RESULT_CHARS = 500


class ToolCallView(BaseModel):
    name: str
    arguments: str  # JSON text as the transcript stores it (redacted)
    # The tool's result as stored, out of its quote as data, cut at RESULT_CHARS; None: no result.
    result: str | None = None
    is_error: bool = False


class PromptView(BaseModel):
    """The system prompt of a replayed turn's first model call: what the model was shown."""

    system: str
    cache_prefix: int = 0  # characters of `system` the providers cache (the static part, the orientation)
    tokens: int = 0  # `system`'s estimated tokens (characters / 4, as the turn budgets them)


class TurnSide(BaseModel):
    """One answer to a user message: the recorded one, or one run of the replay."""

    reply: str = ""
    tool_calls: list[ToolCallView] = Field(default_factory=list)
    model: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    duration_ms: float = 0.0
    outcome: str = "unknown"  # the audit record's outcome; "unknown": no record found
    error: str | None = None
    # Replayed turns only: the system prompt the turn's first model call was sent (None: the
    # turn made no model call, or it was recorded rather than replayed).
    prompt: PromptView | None = None

    @property
    def tool_names(self) -> list[str]:
        return [c.name for c in self.tool_calls]


class TurnComparison(BaseModel):
    session_id: str
    index: int  # the turn's position in its session, from 1
    event_id: str | None
    user_text: str
    received_at: datetime | None = None
    recorded: TurnSide
    replayed: list[TurnSide]  # one per run, in run order
    # Of the first run against the recorded turn.
    reply_diff: str = ""  # unified diff of the reply text, empty when the same
    reply_changed: bool = False
    tools_changed: bool = False  # names or arguments differ
    outcome_changed: bool = False
    # Across the runs (None with one run): every run gave the same answer (normalised text and
    # tool-call names).
    consistent: bool | None = None

    @property
    def changed(self) -> bool:
        return self.reply_changed or self.tools_changed or self.outcome_changed


class Answer(BaseModel):
    """One distinct answer among the runs of a turn, and which runs gave it."""

    runs: list[int]
    reply: str
    tools: list[str]


class Disagreement(BaseModel):
    session_id: str
    index: int
    user_text: str
    answers: list[Answer]


class Consistency(BaseModel):
    """pass^k: the share of turns whose k replayed answers all agree."""

    runs: int
    turns: int
    agreeing: int
    pass_k: float
    disagreements: list[Disagreement] = Field(default_factory=list)


class Totals(BaseModel):
    turns: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    duration_ms: float = 0.0
    tool_calls: int = 0
    outcomes: dict[str, int] = Field(default_factory=dict)


class ReplayReport(BaseModel):
    workspace_id: str
    sessions: list[str]
    change: ReplayChange
    runs: int
    turns: list[TurnComparison]
    recorded: Totals
    replayed: Totals  # of the first run
    changed_turns: int
    consistency: Consistency | None = None  # with more than one run
    created_at: datetime = Field(default_factory=utcnow)


def normalised(text: str) -> str:
    """What two answers must share to agree: the words, case and spacing aside."""
    return re.sub(r"\s+", " ", text).strip().casefold()


def reply_diff(recorded: str, replayed: str) -> str:
    if recorded == replayed:
        return ""
    lines = difflib.unified_diff(
        recorded.splitlines(), replayed.splitlines(), "recorded", "replayed", lineterm=""
    )
    return "\n".join(lines)


def compare(
    recorded: TurnSide,
    replayed: Sequence[TurnSide],
    *,
    session_id: str,
    index: int,
    event_id: str | None,
    user_text: str,
    received_at: datetime | None,
) -> TurnComparison:
    first = replayed[0]
    calls = [(c.name, c.arguments) for c in recorded.tool_calls]
    return TurnComparison(
        session_id=session_id,
        index=index,
        event_id=event_id,
        user_text=user_text,
        received_at=received_at,
        recorded=recorded,
        replayed=list(replayed),
        reply_diff=reply_diff(recorded.reply, first.reply),
        reply_changed=recorded.reply != first.reply,
        tools_changed=calls != [(c.name, c.arguments) for c in first.tool_calls],
        outcome_changed=recorded.outcome != first.outcome,
        consistent=len(_answers(replayed)) == 1 if len(replayed) > 1 else None,
    )


def _answers(sides: Sequence[TurnSide]) -> list[Answer]:
    """The distinct answers, in the order of the first run that gave each."""
    found: dict[tuple[str, tuple[str, ...]], Answer] = {}
    for run, side in enumerate(sides, start=1):
        key = (normalised(side.reply), tuple(side.tool_names))
        if key in found:
            found[key].runs.append(run)
        else:
            found[key] = Answer(runs=[run], reply=side.reply, tools=side.tool_names)
    return list(found.values())


def consistency(turns: Sequence[TurnComparison], runs: int) -> Consistency | None:
    if runs < 2:
        return None
    disagreements = [
        Disagreement(session_id=t.session_id, index=t.index, user_text=t.user_text, answers=answers)
        for t in turns
        if len(answers := _answers(t.replayed)) > 1
    ]
    agreeing = len(turns) - len(disagreements)
    return Consistency(
        runs=runs,
        turns=len(turns),
        agreeing=agreeing,
        pass_k=agreeing / len(turns) if turns else 1.0,
        disagreements=disagreements,
    )


def totals(sides: Sequence[TurnSide]) -> Totals:
    outcomes: dict[str, int] = {}
    for side in sides:
        outcomes[side.outcome] = outcomes.get(side.outcome, 0) + 1
    return Totals(
        turns=len(sides),
        tokens_in=sum(s.tokens_in for s in sides),
        tokens_out=sum(s.tokens_out for s in sides),
        cost_usd=round(sum(s.cost_usd for s in sides), 6),
        duration_ms=round(sum(s.duration_ms for s in sides), 3),
        tool_calls=sum(len(s.tool_calls) for s in sides),
        outcomes=dict(sorted(outcomes.items())),
    )


def build_report(
    workspace_id: str,
    sessions: Sequence[str],
    change: ReplayChange,
    runs: int,
    turns: list[TurnComparison],
) -> ReplayReport:
    return ReplayReport(
        workspace_id=workspace_id,
        sessions=list(sessions),
        change=change,
        runs=runs,
        turns=turns,
        recorded=totals([t.recorded for t in turns]),
        replayed=totals([t.replayed[0] for t in turns]),
        changed_turns=sum(1 for t in turns if t.changed),
        consistency=consistency(turns, runs),
    )

"""The context pipeline's modes side by side on a recorded conversation (`sigil replay
--compare-context`, docs/replay.md): the same turns replayed under `off`, `pointers` and
`inject`, and for each turn what each mode put in the prompt (the pipeline's part, and the
Orientation Document where the conversation starts) with its tokens.

A text table for the terminal (`render_context_text`) and a self-contained HTML page
(`render_context_html`); the JSON is the model itself.
"""

from __future__ import annotations

import html
import textwrap
from collections.abc import Sequence

from pydantic import BaseModel, Field

from shared.agent.context import estimate
from shared.agent.orientation import HEADING as ORIENTATION_HEADING
from shared.agent.pipeline import shown_part
from shared.agent.preflight import ProviderFactory
from shared.backend import Backend
from shared.config import Settings
from shared.models import ContextConfig, ContextMode
from shared.replay.change import ReplayChange
from shared.replay.engine import replay
from shared.replay.report import PromptView, TurnSide

MODES: tuple[ContextMode, ...] = ("off", "pointers", "inject")
COLUMN = 44  # characters of a mode's column in the text table


class ModeTurn(BaseModel):
    """One turn under one mode."""

    tokens_in: int = 0  # the model's prompt tokens, as the provider counted them (all calls)
    system_tokens: int = 0  # the first call's system prompt, estimated
    pipeline: str = ""  # the pipeline's part of that prompt: memory text or pointers, skills
    pipeline_tokens: int = 0
    orientation: str = ""  # the Orientation Document in its cached prefix
    orientation_tokens: int = 0
    outcome: str = "unknown"


class ContextRow(BaseModel):
    session_id: str
    index: int
    user_text: str
    modes: dict[str, ModeTurn]


class ContextComparison(BaseModel):
    workspace_id: str
    budget_tokens: int
    modes: list[str]
    rows: list[ContextRow]
    tokens_in: dict[str, int] = Field(default_factory=dict)  # per mode, over every turn


def compare_context_modes(
    source: Backend,
    settings: Settings,
    workspace_id: str,
    *,
    budget_tokens: int = 1000,
    sessions: Sequence[str] = (),
    provider_factory: ProviderFactory | None = None,
) -> ContextComparison:
    """Replay `sessions` (all, when none is named) once under each mode, the inject mode within
    `budget_tokens`; what else the workspace's ContextConfig says (the gate, the orientation)
    stays as it is. Raises what `replay` raises for bad input."""
    current = source.workspaces.get(workspace_id)
    base = current.context if current is not None else ContextConfig()
    reports = {
        mode: replay(
            source,
            settings,
            workspace_id,
            ReplayChange(context=base.model_copy(update={"mode": mode, "budget_tokens": budget_tokens})),
            sessions=sessions,
            provider_factory=provider_factory,
        )
        for mode in MODES
    }
    first = reports[MODES[0]]
    rows = [
        ContextRow(
            session_id=turn.session_id,
            index=turn.index,
            user_text=turn.user_text,
            modes={mode: _mode_turn(reports[mode].turns[i].replayed[0]) for mode in MODES},
        )
        for i, turn in enumerate(first.turns)
    ]
    return ContextComparison(
        workspace_id=workspace_id,
        budget_tokens=budget_tokens,
        modes=list(MODES),
        rows=rows,
        tokens_in={mode: reports[mode].replayed.tokens_in for mode in MODES},
    )


def _mode_turn(side: TurnSide) -> ModeTurn:
    prompt = side.prompt or PromptView(system="")
    pipeline = shown_part(prompt.system[prompt.cache_prefix :])
    cached = prompt.system[: prompt.cache_prefix]
    at = cached.find(ORIENTATION_HEADING)
    orientation = cached[at:] if at >= 0 else ""
    return ModeTurn(
        tokens_in=side.tokens_in,
        system_tokens=prompt.tokens,
        pipeline=pipeline,
        pipeline_tokens=estimate(pipeline) if pipeline else 0,
        orientation=orientation,
        orientation_tokens=estimate(orientation) if orientation else 0,
        outcome=side.outcome,
    )


# ---------------------------------------------------------------- rendering


def _cell(turn: ModeTurn) -> list[str]:
    """A mode's column for one turn: its figures, then what it showed, wrapped."""
    lines = [
        f"tokens in {turn.tokens_in} (system {turn.system_tokens})",
        f"pipeline +{turn.pipeline_tokens}, orientation +{turn.orientation_tokens}",
    ]
    for text in (turn.orientation, turn.pipeline):
        for paragraph in text.splitlines():
            lines += textwrap.wrap(paragraph, COLUMN, subsequent_indent="  ") or [""]
    if not turn.pipeline and not turn.orientation:
        lines.append("(nothing added)")
    return lines


def render_context_text(comparison: ContextComparison) -> str:
    """A table for the terminal: a row per turn, a column per mode."""
    modes = comparison.modes
    rule = "+" + "+".join("-" * (COLUMN + 2) for _ in modes) + "+"
    out = [
        f"Context modes on workspace {comparison.workspace_id} "
        f"(inject within {comparison.budget_tokens} tokens)",
        "tokens in, all turns: " + ", ".join(f"{m} {comparison.tokens_in.get(m, 0)}" for m in modes),
        "",
    ]
    header = "|" + "|".join(f" {m:<{COLUMN}} " for m in modes) + "|"
    for row in comparison.rows:
        out.append(f"{row.session_id} #{row.index}: {textwrap.shorten(row.user_text, 100)}")
        out += [rule, header, rule]
        cells = [_cell(row.modes[m]) for m in modes]
        height = max(len(c) for c in cells)
        for i in range(height):
            out.append("|" + "|".join(f" {(c[i] if i < len(c) else ''):<{COLUMN}} " for c in cells) + "|")
        out += [rule, ""]
    return "\n".join(out)


def render_context_html(comparison: ContextComparison) -> str:
    """The same as a self-contained page: inline CSS, no script, every value escaped."""
    e = html.escape
    head = "".join(f"<th>{e(m)}</th>" for m in comparison.modes)
    body = []
    for row in comparison.rows:
        cells = []
        for m in comparison.modes:
            t = row.modes[m]
            shown = "\n\n".join(p for p in (t.orientation, t.pipeline) if p) or "(nothing added)"
            cells.append(
                f"<td><p class='n'>tokens in {t.tokens_in} · system {t.system_tokens} · pipeline "
                f"+{t.pipeline_tokens} · orientation +{t.orientation_tokens}</p><pre>{e(shown)}</pre></td>"
            )
        turn = f"{e(row.session_id)} #{row.index}<br>{e(row.user_text)}"
        body.append(f"<tr><th class='u'>{turn}</th>{''.join(cells)}</tr>")
    totals = ", ".join(f"{e(m)} {comparison.tokens_in.get(m, 0)}" for m in comparison.modes)
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Context modes</title><style>"
        "body{font-family:sans-serif;margin:1em}table{border-collapse:collapse;width:100%}"
        "td,th{border:1px solid #ccc;vertical-align:top;padding:4px;text-align:left}"
        "pre{white-space:pre-wrap;font-size:12px;margin:0}.n{font-size:12px;color:#555;margin:0 0 4px}"
        ".u{width:18%;font-weight:normal}</style></head><body>"
        f"<h1>Context modes on {e(comparison.workspace_id)}</h1>"
        f"<p>Inject within {comparison.budget_tokens} tokens. Tokens in, all turns: {totals}.</p>"
        f"<table><tr><th>turn</th>{head}</tr>{''.join(body)}</table></body></html>"
    )

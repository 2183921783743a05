"""The replay report as markdown (for CI) and as HTML (the console; a file to open).

The HTML is self-contained: inline CSS, no script, every value escaped. `render_html` gives a
whole page, or with `page=False` the fragment the console puts inside its own.
"""

from __future__ import annotations

import html
from collections.abc import Iterable

from shared.replay.report import ReplayReport, ToolCallView, Totals, TurnComparison, TurnSide

# Tool arguments and replies beyond this many characters are cut in the tables (the JSON report
# holds them whole).
CELL_CHARS = 300


def _cut(text: str, limit: int = CELL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _calls(calls: Iterable[ToolCallView]) -> list[str]:
    return [f"{c.name}({_cut(c.arguments, 120)})" + (" !error" if c.is_error else "") for c in calls]


def _figures(side: TurnSide) -> dict[str, str]:
    return {
        "outcome": side.outcome + (f" ({_cut(side.error, 120)})" if side.error else ""),
        "model": side.model or "-",
        "tokens in/out": f"{side.tokens_in}/{side.tokens_out}",
        "est. cost USD": f"{side.cost_usd:.6f}",
        "duration ms": f"{side.duration_ms:.1f}",
        "tool calls": "; ".join(_calls(side.tool_calls)) or "-",
    }


def _summary_rows(report: ReplayReport) -> list[tuple[str, str, str]]:
    def row(name: str, pick: object) -> tuple[str, str, str]:
        assert callable(pick)
        return name, str(pick(report.recorded)), str(pick(report.replayed))

    def outcomes(t: Totals) -> str:
        return ", ".join(f"{k} {v}" for k, v in t.outcomes.items()) or "-"

    return [
        row("turns", lambda t: t.turns),
        row("tokens in", lambda t: t.tokens_in),
        row("tokens out", lambda t: t.tokens_out),
        row("est. cost USD", lambda t: f"{t.cost_usd:.6f}"),
        row("duration ms (sum)", lambda t: f"{t.duration_ms:.1f}"),
        row("tool calls", lambda t: t.tool_calls),
        row("outcomes", outcomes),
    ]


def _what_changed(turn: TurnComparison) -> str:
    parts = [
        name
        for name, flag in (
            ("reply", turn.reply_changed),
            ("tool calls", turn.tools_changed),
            ("outcome", turn.outcome_changed),
        )
        if flag
    ]
    return ", ".join(parts) if parts else "unchanged"


# ---------------------------------------------------------------- markdown


def _md(text: str) -> str:
    """A table cell: one line, pipes escaped."""
    return _cut(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ⏎ ")


def render_markdown(report: ReplayReport) -> str:
    out = [
        f"# Replay of workspace {report.workspace_id}",
        "",
        f"Sessions: {', '.join(report.sessions)}. Runs: {report.runs}. "
        f"Turns: {len(report.turns)}, of which {report.changed_turns} changed.",
        "",
        "Change:",
        *(f"- {line}" for line in report.change.describe()),
        "",
        "| | recorded | replayed (run 1) |",
        "|---|---|---|",
        *(f"| {name} | {_md(a)} | {_md(b)} |" for name, a, b in _summary_rows(report)),
        "",
    ]
    if report.consistency is not None:
        c = report.consistency
        out += [
            "## Consistency",
            "",
            f"pass^{c.runs}: {c.pass_k:.3f} ({c.agreeing} of {c.turns} turns gave the same answer "
            f"in all {c.runs} runs)",
            "",
        ]
        for d in c.disagreements:
            out.append(f"- {d.session_id} turn {d.index} ({_md(d.user_text)}):")
            out += [
                f"  - runs {', '.join(map(str, a.runs))}: {_md(a.reply)}"
                + (f" [tools: {', '.join(a.tools)}]" if a.tools else "")
                for a in d.answers
            ]
        out.append("")
    out += ["## Turns", ""]
    for turn in report.turns:
        out += [
            f"### {turn.session_id} turn {turn.index}: {_what_changed(turn)}",
            "",
            f"> {_md(turn.user_text)}",
            "",
            "| | recorded | replayed (run 1) |",
            "|---|---|---|",
        ]
        recorded, replayed = _figures(turn.recorded), _figures(turn.replayed[0])
        out += [f"| {name} | {_md(recorded[name])} | {_md(replayed[name])} |" for name in recorded]
        out.append(f"| reply | {_md(turn.recorded.reply)} | {_md(turn.replayed[0].reply)} |")
        if turn.reply_diff:
            out += ["", "```diff", turn.reply_diff.replace("```", "'''"), "```"]
        if turn.consistent is False:
            out += ["", f"Runs disagree: {len({r.reply for r in turn.replayed})} distinct replies."]
        out.append("")
    return "\n".join(out)


# ---------------------------------------------------------------- HTML

_CSS = """
.sigil-replay { font: 14px/1.4 system-ui, sans-serif; color: #1d1d1f; }
.sigil-replay table { border-collapse: collapse; margin: 0.5em 0 1em; }
.sigil-replay th, .sigil-replay td { border: 1px solid #ccc; padding: 4px 8px; text-align: left;
  vertical-align: top; }
.sigil-replay th { background: #f3f3f3; }
.sigil-replay .changed { border-left: 4px solid #d97706; padding-left: 8px; }
.sigil-replay .same { border-left: 4px solid #16a34a; padding-left: 8px; }
.sigil-replay pre { background: #f8f8f8; padding: 6px; white-space: pre-wrap; }
.sigil-replay .del { background: #fde2e1; }
.sigil-replay .add { background: #dcfce7; }
.sigil-replay blockquote { margin: 0.3em 0; padding-left: 8px; border-left: 3px solid #999; }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _diff_html(diff: str) -> str:
    lines = []
    for line in diff.splitlines():
        kind = "del" if line.startswith("-") and not line.startswith("---") else ""
        kind = "add" if line.startswith("+") and not line.startswith("+++") else kind
        lines.append(f'<span class="{kind}">{_e(line)}</span>' if kind else _e(line))
    return '<pre class="diff">' + "\n".join(lines) + "</pre>"


def _side_table(turn: TurnComparison) -> str:
    recorded, replayed = _figures(turn.recorded), _figures(turn.replayed[0])
    rows = [
        f"<tr><th>{_e(n)}</th><td>{_e(recorded[n])}</td><td>{_e(replayed[n])}</td></tr>" for n in recorded
    ]
    rows.append(
        f"<tr><th>reply</th><td><pre>{_e(turn.recorded.reply)}</pre></td>"
        f"<td><pre>{_e(turn.replayed[0].reply)}</pre></td></tr>"
    )
    head = "<tr><th></th><th>recorded</th><th>replayed (run 1)</th></tr>"
    return f"<table>{head}{''.join(rows)}</table>"


def render_html(report: ReplayReport, *, page: bool = True) -> str:
    parts = [
        f'<section class="sigil-replay"><style>{_CSS}</style>',
        f"<h1>Replay of workspace {_e(report.workspace_id)}</h1>",
        f"<p>Sessions: {_e(', '.join(report.sessions))}. Runs: {report.runs}. Turns: {len(report.turns)}, "
        f"of which {report.changed_turns} changed.</p>",
        "<p>Change:</p><ul>" + "".join(f"<li>{_e(line)}</li>" for line in report.change.describe()) + "</ul>",
        "<table><tr><th></th><th>recorded</th><th>replayed (run 1)</th></tr>"
        + "".join(
            f"<tr><th>{_e(n)}</th><td>{_e(a)}</td><td>{_e(b)}</td></tr>" for n, a, b in _summary_rows(report)
        )
        + "</table>",
    ]
    if report.consistency is not None:
        c = report.consistency
        parts.append(
            f"<h2>Consistency</h2><p>pass^{c.runs}: <strong>{c.pass_k:.3f}</strong> "
            f"({c.agreeing} of {c.turns} turns gave the same answer in all {c.runs} runs)</p>"
        )
        if c.disagreements:
            items = []
            for d in c.disagreements:
                answers = "".join(
                    f"<li>runs {_e(', '.join(map(str, a.runs)))}: {_e(_cut(a.reply))}"
                    + (f" [tools: {_e(', '.join(a.tools))}]" if a.tools else "")
                    + "</li>"
                    for a in d.answers
                )
                items.append(
                    f"<li>{_e(d.session_id)} turn {d.index}: {_e(_cut(d.user_text))}<ul>{answers}</ul></li>"
                )
            parts.append("<ul>" + "".join(items) + "</ul>")
    parts.append("<h2>Turns</h2>")
    for turn in report.turns:
        css = "changed" if turn.changed else "same"
        parts.append(
            f'<div class="turn {css}" id="turn-{_e(turn.session_id)}-{turn.index}">'
            f"<h3>{_e(turn.session_id)} turn {turn.index}: {_e(_what_changed(turn))}</h3>"
            f"<blockquote>{_e(turn.user_text)}</blockquote>{_side_table(turn)}"
            + (_diff_html(turn.reply_diff) if turn.reply_diff else "")
            + "</div>"
        )
    parts.append("</section>")
    fragment = "\n".join(parts)
    if not page:
        return fragment
    title = _e(f"Sigil replay: {report.workspace_id}")
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title></head>'
        f"<body>\n{fragment}\n</body></html>\n"
    )

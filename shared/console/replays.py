"""The console's replay: a form per recorded session, the replay it posts (shared.replay), and the
report it gives, shown in the page and downloadable as JSON and markdown.

A replay only reads the original workspace (it runs in a sandbox copy), so its POST needs the CSRF
token but no confirmation page. The last reports are kept in this process (`Reports`, bounded)
under a random id, so the downloads are the report that was shown, never a second run (a model
may answer differently each time).
"""

from __future__ import annotations

import secrets
import shlex
import threading
from collections import OrderedDict
from collections.abc import Mapping

from pydantic import ValidationError

from shared.console import usage
from shared.console.html import esc, link, seg, table
from shared.console.views import ESTIMATED, MAX_SESSIONS, Ctx, Html
from shared.errors import ModelNotConfigured, SigilError
from shared.models import MemoryConfig
from shared.replay import ReplayChange, ReplayReport, change_problems, render_html, render_markdown, replay
from shared.replay.engine import MAX_RUNS

# The bound on the reports kept for download; the oldest goes first.
KEPT_REPORTS = 20
# A list field of the form holding only this means "none" (blank means "unchanged").
NONE = "-"
RECALLS = ("personal", "workspace", "conversation")


class Reports:
    """The last KEPT_REPORTS reports by id, for their page and downloads."""

    def __init__(self, limit: int = KEPT_REPORTS) -> None:
        self._limit = limit
        self._kept: OrderedDict[str, ReplayReport] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, report: ReplayReport) -> str:
        key = secrets.token_hex(8)
        with self._lock:
            self._kept[key] = report
            while len(self._kept) > self._limit:
                self._kept.popitem(last=False)
        return key

    def get(self, key: str) -> ReplayReport | None:
        with self._lock:
            return self._kept.get(key)


def listing(ctx: Ctx, workspace_id: str | None = None, session_id: str | None = None) -> Html:
    """The recorded sessions, each with its CLI command and a link to its replay form; with a
    session chosen, the form above them."""
    rows = []
    for ws in ctx.workspace_ids():
        per = usage.by_session(usage.records(ctx.backend, ws))
        for s in ctx.backend.sessions.list_sessions(ws, limit=MAX_SESSIONS):
            turns = per.get(s.id, usage.Totals()).turns
            where = f"--workspace {shlex.quote(ws)} --session {shlex.quote(s.id)}"
            command = f"sigil replay {where} {ctx.target}".strip()
            rows.append(
                [
                    esc(ws),
                    link(f"/workspaces/{seg(ws)}/sessions/{seg(s.id)}", s.id),
                    str(turns),
                    link(f"/replay?workspace={seg(ws)}&session={seg(s.id)}", "replay…"),
                    f"<code>{esc(command)}</code>",
                ]
            )
    chosen = ""
    if workspace_id is not None and session_id is not None:
        if ctx.backend.sessions.get(workspace_id, session_id) is None:
            return ctx.not_found(f"no session {session_id!r} in workspace {workspace_id!r}", active="replay")
        chosen = _form(ctx, workspace_id, session_id)
    body = (
        chosen
        + '<p class="hint">Replay re-runs a recorded session\'s user messages against a change (model, '
        "prompt, skills, tools, memory policy) in a sandbox copy of the workspace, never writing to "
        "the original. Choose <em>replay…</em> on a session for the form, or run it from the command "
        "line (<code>sigil replay --help</code>).</p>"
        + table(
            ["workspace", "session", "recorded turns", "", "command"],
            rows,
            cls="replay",
            empty="no recorded sessions",
        )
    )
    return ctx.page("Replay", body, active="replay")


def _form(ctx: Ctx, workspace_id: str, session_id: str) -> str:
    def text(name: str, label: str, hint: str) -> str:
        return f'<label>{esc(label)} <input type="text" name="{name}" placeholder="{esc(hint)}"></label>'

    recall = "".join(f'<option value="{r}">{r}</option>' for r in RECALLS)
    return (
        '<form method="post" action="/replay" class="replay">'
        f"<h2>Replay session {esc(session_id)} of workspace {esc(workspace_id)}</h2>"
        f'<input type="hidden" name="csrf" value="{esc(ctx.csrf)}">'
        f'<input type="hidden" name="workspace" value="{esc(workspace_id)}">'
        f'<input type="hidden" name="session" value="{esc(session_id)}">'
        '<p class="hint">A field left blank keeps what the workspace has; '
        f"<code>{NONE}</code> in a list allows none.</p>"
        + text("model", "Model", "provider/model, e.g. openai/gpt-4.1")
        + '<label>System prompt <textarea name="system_prompt" rows="4"></textarea></label>'
        + text("skills", "Skills", "comma-separated")
        + text("tools_allow", "Allowed tools", "comma-separated")
        + text("tools_deny", "Denied tools", "comma-separated")
        + f'<label>Memory recall <select name="memory_recall"><option value="">(unchanged)</option>{recall}'
        "</select></label>"
        f'<label>Runs <input type="number" name="runs" value="1" min="1" max="{MAX_RUNS}"></label>'
        '<button type="submit">Replay</button></form>'
    )


def _names(value: str) -> list[str] | None:
    if not value.strip():
        return None
    if value.strip() == NONE:
        return []
    return [n.strip() for n in value.split(",") if n.strip()]


def _bad(ctx: Ctx, why: str, status: int = 400) -> Html:
    return ctx.page("Replay refused", f'<p class="error">{esc(why)}</p>', active="replay", status=status)


def run(ctx: Ctx, reports: Reports, fields: Mapping[str, str]) -> Html:
    """Replay what the form asks and show the report; bad input is an error page with its status."""
    workspace_id, session_id = fields.get("workspace", ""), fields.get("session", "")
    if not workspace_id or not session_id:
        return _bad(ctx, "bad replay: the form names no workspace and session")
    try:
        runs = int(fields.get("runs") or "1")
    except ValueError:
        return _bad(ctx, f"bad replay: runs must be a whole number from 1 to {MAX_RUNS}")
    recall = fields.get("memory_recall", "")
    try:
        change = ReplayChange(
            model=fields.get("model", "").strip() or None,
            system_prompt=fields.get("system_prompt") or None,
            skills=_names(fields.get("skills", "")),
            tools_allow=_names(fields.get("tools_allow", "")),
            tools_deny=_names(fields.get("tools_deny", "")),
            memory=MemoryConfig.model_validate({"recall": recall}) if recall else None,
        )
    except ValidationError as exc:
        return _bad(ctx, f"bad change: {change_problems(exc)}")
    try:
        report = replay(ctx.backend, ctx.settings, workspace_id, change, sessions=[session_id], runs=runs)
    except ValidationError as exc:
        # The workspace's config with the change applied, validated again as a whole.
        return _bad(ctx, f"bad change for workspace {workspace_id!r}: {change_problems(exc)}")
    except ModelNotConfigured as exc:
        # In the console the model is the operator's input (the form's, or the workspace's):
        # theirs to fix, not the console being unavailable (the error's own 503).
        return _bad(ctx, f"replay refused: {exc.message}")
    except SigilError as exc:
        return _bad(ctx, f"replay refused: {exc.message}", exc.http_status)
    return show(ctx, reports.add(report), report)


def show(ctx: Ctx, key: str, report: ReplayReport) -> Html:
    downloads = (
        '<p class="downloads">Download this report: '
        f'<a href="/replay/{key}.json" download>JSON</a> · '
        f'<a href="/replay/{key}.md" download>markdown</a> · '
        f'<a href="/replay?workspace={seg(report.workspace_id)}&session={seg(report.sessions[0])}">'
        "replay again…</a></p>"
    )
    body = downloads + ESTIMATED + render_html(report, page=False)
    return ctx.page("Replay report", body, active="replay")


def stored(ctx: Ctx, reports: Reports, key: str) -> Html:
    report = reports.get(key)
    if report is None:
        return ctx.not_found(
            f"no replay report {key!r} (the console keeps its last {KEPT_REPORTS})", active="replay"
        )
    return show(ctx, key, report)


def download(reports: Reports, key: str, kind: str) -> tuple[str, str] | None:
    """The report `key` as (text, file name), JSON or markdown; None when it is not kept."""
    report = reports.get(key)
    if report is None:
        return None
    name = f"replay-{report.workspace_id}-{key}"
    if kind == "json":
        return report.model_dump_json(indent=2), f"{name}.json"
    return render_markdown(report), f"{name}.md"

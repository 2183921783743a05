"""The console's tasks pages (docs/console.md, docs/delegation.md#control): a workspace's delegated
tasks, and one task's detail with its spend beside its parent turn's and a link to that turn in
its session's page. Cancelling goes through its confirmation page like every action here.

Read through the TaskStore and the AuditLog ports (shared.agent.task_control), so both backends
show the same; a backend without a task store says so instead of failing.
"""

from __future__ import annotations

from shared.agent import task_control
from shared.clock import utcnow
from shared.console import usage
from shared.console.html import dl, esc, form, link, seg, table, when
from shared.console.views import ESTIMATED, Ctx, Html, ws_nav
from shared.errors import NotFound

MAX_TASKS = 500


def _base(workspace_id: str) -> str:
    return f"/workspaces/{seg(workspace_id)}/tasks"


def tasks(ctx: Ctx, workspace_id: str) -> Html:
    if ctx.workspace(workspace_id) is None:
        return ctx.not_found(f"no workspace {workspace_id!r}", active="workspaces")
    nav = ws_nav(workspace_id, "tasks")
    store = ctx.backend.tasks
    if store is None:
        return ctx.page(
            f"Tasks of {workspace_id}",
            nav + '<p class="empty">no task store on this backend</p>',
            active="workspaces",
        )
    now = utcnow()
    records = usage.records(ctx.backend, workspace_id)
    rows = []
    for t in store.list_tasks(workspace_id, limit=MAX_TASKS):
        spent = task_control.spend(ctx.backend.audit, t, records=records)
        rows.append(
            [
                link(f"{_base(workspace_id)}/{seg(t.id)}", t.id),
                link(f"/workspaces/{seg(workspace_id)}/sessions/{seg(t.session_id)}", t.session_id),
                esc(t.role),
                f'<span class="status status-{esc(t.status)}">{esc(task_control.status_of(t))}</span>',
                esc(task_control.age(t, now)),
                esc(task_control.usd(spent.task_usd)),
                esc(task_control.usd(spent.parent_usd)),
                esc(t.brief[:80]),
            ]
        )
    body = nav + table(
        ["task", "session", "role", "status", "age", "task est. cost", "parent turn est. cost", "brief"],
        rows,
        cls="tasks",
        empty="no delegated tasks",
    )
    return ctx.page(f"Tasks of {workspace_id}", body + ESTIMATED, active="workspaces")


def task(ctx: Ctx, workspace_id: str, task_id: str, *, confirm: bool = False) -> Html:
    store = ctx.backend.tasks
    if store is None:
        return ctx.not_found("no task store on this backend", active="workspaces")
    try:
        t = task_control.find_task(store, workspace_id, task_id)
    except NotFound:
        return ctx.not_found(f"no task {task_id!r} in workspace {workspace_id!r}", active="workspaces")
    spent = task_control.spend(ctx.backend.audit, t)
    session = f"/workspaces/{seg(workspace_id)}/sessions/{seg(t.session_id)}"
    u = t.usage
    facts = dl(
        [
            ("role", esc(t.role)),
            (
                "status",
                f'<span class="status status-{esc(t.status)}">{esc(task_control.status_of(t))}</span>',
            ),
            ("session", link(session, t.session_id)),
            ("parent turn", link(f"{session}#turn-{t.parent_turn_id}", t.parent_turn_id)),
            ("correlation id", esc(t.correlation_id or "-")),
            ("created", esc(when(t.created_at))),
            ("updated", esc(when(t.updated_at))),
            ("deadline", esc(when(t.deadline_at))),
            ("steps", f"{t.steps} in {t.invocations} invocations"),
            (
                "usage",
                esc(
                    f"{u.model_calls} model calls, {u.tool_calls} tool calls, "
                    f"{u.tokens_in:,} tokens in, {u.tokens_out:,} out"
                ),
            ),
            ("task est. cost", esc(task_control.usd(spent.task_usd))),
            (
                "parent turn est. cost",
                esc(task_control.usd(spent.parent_usd))
                if spent.parent_usd is not None
                else "not in the audit log",
            ),
            ("together est.", esc(task_control.usd(spent.total_usd))),
        ]
    )
    body = (
        ws_nav(workspace_id, "tasks")
        + facts
        + f"<section><h2>Brief</h2><blockquote>{esc(t.brief)}</blockquote></section>"
    )
    if t.question:
        body += f"<section><h2>Question to the user</h2><blockquote>{esc(t.question)}</blockquote></section>"
    if t.result is not None:
        findings = "".join(f"<li>{esc(f.text)}{_sources(f.sources)}</li>" for f in t.result.findings)
        body += (
            f"<section><h2>Result ({t.result.confidence:.0%} confident)</h2>"
            f'<blockquote class="summary">{esc(t.result.summary)}</blockquote>'
            + (f"<ol>{findings}</ol>" if findings else "")
            + (_scratchpad(t.result.scratchpad_keys) if t.result.scratchpad_keys else "")
            + "</section>"
        )
    if t.error:
        body += f'<section><h2>Error</h2><p class="error">{esc(t.error)}</p></section>'
    if not t.terminal and not t.cancel_requested:
        action = f"{_base(workspace_id)}/{seg(t.id)}/cancel"
        if confirm:
            body += (
                f'<section class="confirm"><h2>Cancel {esc(t.id)}?</h2>'
                "<p>It stops before its next step; its session is told it was cancelled.</p>"
                + form(action, ctx.csrf, "Cancel the task", fields={"confirm": t.id}, danger=True)
                + "</section>"
            )
        else:
            body += f"<p>{link(action, 'Cancel this task…')}</p>"
    return ctx.page(f"Task {t.id}", body + ESTIMATED, active="workspaces")


def cancel(ctx: Ctx, workspace_id: str, task_id: str) -> Html:
    store = ctx.backend.tasks
    if store is None:
        return ctx.not_found("no task store on this backend", active="workspaces")
    try:
        t, asked = task_control.request_cancel(store, workspace_id, task_id)
    except NotFound:
        return ctx.not_found(f"no task {task_id!r} in workspace {workspace_id!r}", active="workspaces")
    said = (
        f"Cancel requested for {esc(t.id)}: it stops before its next step."
        if asked
        else f"{esc(t.id)} had already ended ({esc(t.status)})."
    )
    back = link(f"{_base(workspace_id)}/{seg(t.id)}", "Back to the task")
    return ctx.page(f"Task {t.id}", f'<p class="done">{said}</p><p>{back}</p>', active="workspaces")


def _sources(ids: list[str]) -> str:
    return f' <span class="hint">({esc(", ".join(ids))})</span>' if ids else ""


def _scratchpad(keys: list[str]) -> str:
    return f'<p class="hint">Full output in the session\'s scratchpad: {esc(", ".join(keys))}</p>'

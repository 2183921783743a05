"""The console's pages: each reads the Backend through its ports and returns HTML (shared.console.html).

A view is a plain function of (Ctx, arguments) -> (status, html), run by shared.console.app on a
worker thread under one lock (the embedded adapters' connections are not shared between threads).
Unknown workspaces, sessions, facts and dead letters are a 404 page, never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Literal

from shared.backend import Backend
from shared.config import Settings
from shared.console import media, usage
from shared.console.html import dl, esc, form, link, money, page, seg, table, when
from shared.console.svg import bars
from shared.memory.doc_keys import AUTHOR_KEY
from shared.memory.search import MemoryHit, SearchOutcome
from shared.models import (
    WORKSPACE_WIDE,
    AssistantMessage,
    AuditRecord,
    BudgetLimits,
    Message,
    Summary,
    ToolResultMessage,
    Triple,
    UserMessage,
    WorkspaceConfig,
)

Html = tuple[int, str]

# Every USD figure is the price table's estimate (list prices or the operator's overrides,
# docs/budgets.md), never a bill: each is labelled so where it is shown.
EST_COST = "est. cost"
ESTIMATED = (
    '<p class="hint">Costs are estimates at the price table\'s list prices (or its overrides), '
    "not a provider's bill (docs/budgets.md).</p>"
)

_PAGE = 500
MAX_SESSIONS = 1_000
MAX_TIER1 = 1_000


@dataclass
class Ctx:
    backend: Backend
    settings: Settings
    csrf: str
    source: str  # what the header says the console reads: the data dir, or the stack
    # The CLI options naming that backend (`--data-dir D`, `--stack S --region R`), for the
    # commands a page suggests.
    target: str = ""

    def page(self, title: str, body: str, *, active: str, status: int = 200) -> Html:
        return status, page(title, body, active=active, source=self.source)

    def not_found(self, what: str, *, active: str) -> Html:
        return self.page("Not found", f'<p class="error">{esc(what)}</p>', active=active, status=404)

    def workspace(self, workspace_id: str) -> WorkspaceConfig | None:
        config = self.backend.workspaces.get(workspace_id)
        if config is not None and config.model is None:
            # As `sigil workspace show`: the effective model is the gateway's default.
            config = config.model_copy(update={"model": self.settings.resolved_model()})
        return config

    def workspace_ids(self) -> list[str]:
        return sorted(w.id for w in self.backend.workspaces.list_workspaces())


def _ws_nav(workspace_id: str, current: str) -> str:
    tabs = (
        ("overview", "Overview", f"/workspaces/{seg(workspace_id)}"),
        ("sessions", "Sessions", f"/workspaces/{seg(workspace_id)}/sessions"),
        ("memory", "Memory", f"/workspaces/{seg(workspace_id)}/memory"),
        ("tasks", "Tasks", f"/workspaces/{seg(workspace_id)}/tasks"),
    )
    links = "".join(
        f'<a href="{esc(h)}"{" aria-current=page" if k == current else ""}>{esc(label)}</a>'
        for k, label, h in tabs
    )
    return f'<nav class="tabs">{links}</nav>'


ws_nav = _ws_nav  # for the pages of other modules (shared.console.tasks)


def triples(backend: Backend, workspace_id: str) -> Iterator[Triple]:
    after: str | None = None
    while page_ := backend.memory.list_triples(workspace_id, scope=WORKSPACE_WIDE, after=after, limit=_PAGE):
        after = page_[-1].id
        yield from page_


def summaries(backend: Backend, workspace_id: str) -> list[Summary]:
    return backend.memory.list_summaries(workspace_id, scope=WORKSPACE_WIDE, limit=1_000_000)


# ---------------------------------------------------------------- workspaces


def workspaces(ctx: Ctx) -> Html:
    rows = []
    for config in ctx.backend.workspaces.list_workspaces():
        t = usage.total(usage.records(ctx.backend, config.id))
        rows.append(
            [
                link(f"/workspaces/{seg(config.id)}", config.id),
                esc(config.name),
                esc(config.model or f"{ctx.settings.resolved_model() or '-'} (default)"),
                str(t.turns),
                f"{t.tokens:,}",
                money(t.cost_usd),
                esc(when(t.last)),
            ]
        )
    body = (
        '<p class="hint">All time: the turns in each workspace\'s audit log.</p>'
        + table(
            ["workspace", "name", "model", "turns", "tokens", EST_COST, "last turn"],
            rows,
            cls="workspaces",
            empty="no workspaces (`sigil config apply` writes them; `sigil dev` creates its default)",
        )
        + ESTIMATED
    )
    return ctx.page("Workspaces", body, active="workspaces")


def workspace(ctx: Ctx, workspace_id: str, user: str | None = None) -> Html:
    """With `user`, the plots are of that user's turns alone."""
    config = ctx.workspace(workspace_id)
    if config is None:
        return ctx.not_found(f"no workspace {workspace_id!r}", active="workspaces")
    found = usage.records(ctx.backend, workspace_id)
    plotted = [r for r in found if user is None or r.user_id == user]
    days = usage.by_day(sorted(plotted, key=lambda r: r.created_at))
    label = [(d.isoformat(), t) for d, t in days]
    plots = "".join(
        [
            bars("Turns per day", [(d, t.turns) for d, t in label], cls="turns"),
            bars("Tokens per day", [(d, t.tokens) for d, t in label], cls="tokens"),
            bars("Estimated cost per day (USD)", [(d, t.cost_usd) for d, t in label], fmt=money, cls="cost"),
            bars(
                "Mean latency per day (ms)",
                [(d, t.mean_latency_ms) for d, t in label],
                fmt=lambda v: f"{v:,.0f} ms",
                cls="latency",
            ),
            bars("Memory: facts and summaries stored", _memory_size(ctx.backend, workspace_id), cls="memory"),
        ]
    )
    users = usage.by_user(found)
    files = media.counts_by_user(ctx.backend.media, workspace_id)
    user_rows = [
        [
            link(f"/workspaces/{seg(workspace_id)}?user={seg(u)}#usage", u),
            str(t.turns),
            f"{t.tokens:,}",
            money(t.cost_usd),
            f"{t.mean_latency_ms:,.0f} ms",
            esc(when(t.last)),
            str(files.get(u, 0)),
            link(f"/workspaces/{seg(workspace_id)}/users/{seg(u)}/erase", "erase…"),
        ]
        for u, t in users.items()
    ]
    now = datetime.now(UTC)
    if config.budget is None:
        budget = '<p class="empty">budgets are off in this workspace (nothing is counted)</p>'
    else:
        budget = BUDGET_HINT + table(
            ["scope", "period", "metric", "used this period", "limit", "left", "resets"],
            [
                [
                    esc(r.scope if r.scope == "workspace" else f"user {u}"),
                    esc(PERIOD_LABELS.get(r.period, r.period)),
                    esc(METRIC_LABELS.get(r.metric, r.metric)),
                    esc(r.used),
                    esc(r.limit),
                    f"<strong>{esc(r.left)}</strong>",
                    esc(r.resets),
                ]
                for r, u in _with_users(ctx, workspace_id, config.budget, list(users), now)
            ],
            cls="budgets",
            empty="no limits set (usage is counted, nothing is limited)",
        )
    effective = json.dumps(config.model_dump(mode="json"), indent=2, ensure_ascii=False)
    total = usage.total(found)
    body = (
        _ws_nav(workspace_id, "overview")
        + '<p class="hint">All time, from the audit log: what the agent\'s turns used (the newest '
        f"{usage.MAX_RECORDS:,} turns). The budgets below count the current day or month.</p>"
        + dl(
            [
                ("turns, all time", str(total.turns)),
                ("tokens, all time", f"{total.tokens:,}"),
                (f"{EST_COST}, all time", money(total.cost_usd)),
                ("models used", esc(", ".join(sorted(total.models)) or "-")),
            ]
        )
        + f'<section id="usage"><h2>Usage over time{f" of {esc(user)}" if user else ""}</h2>'
        + (f"<p>{link(f'/workspaces/{seg(workspace_id)}#usage', 'All users')}</p>" if user else "")
        + f'<div class="plots">{plots}</div></section>'
        + "<section><h2>Per user</h2>"
        + '<p class="hint">All time, from the audit log, as the totals above.</p>'
        + table(
            ["user", "turns", "tokens", EST_COST, "mean latency", "last turn", "files", ""],
            user_rows,
            cls="users",
            empty="no turns by an identified user",
        )
        + ESTIMATED
        + "</section>"
        + f"<section><h2>Budgets and what remains</h2>{budget}</section>"
        + "<section><h2>Effective configuration</h2>"
        + '<p class="hint">As stored (<code>sigil workspace show</code>), with the gateway\'s default '
        "model when it sets none.</p>" + f'<pre class="config">{esc(effective)}</pre></section>'
    )
    return ctx.page(f"Workspace {workspace_id}", body, active="workspaces")


# The budget store's counters are of the current UTC period, and count more than the turns.
PERIOD_LABELS = {"day": "today (UTC)", "month": "this month (UTC)"}
METRIC_LABELS = {"tokens": "tokens", "tool_calls": "tool calls", "usd": "USD (estimated)"}
BUDGET_HINT = (
    '<p class="hint">Counted by the budget store for the current UTC day or month, as a turn checks '
    "them: the turns' model and tool calls, and consolidation's model calls (compaction, fact "
    "extraction), which are charged to the workspace and have no turn in the audit log. So these "
    "differ from the all-time turn totals above (docs/budgets.md).</p>"
)


def _with_users(
    ctx: Ctx, workspace_id: str, limits: BudgetLimits, users: list[str], now: datetime
) -> list[tuple[usage.Remaining, str]]:
    """The workspace's limited counters, then each user's, with the user each belongs to."""
    out = [(r, "") for r in usage.remaining(ctx.backend, workspace_id, None, limits, now)]
    for u in users:
        out += [(r, u) for r in usage.remaining(ctx.backend, workspace_id, u, limits, now)]
    return out


def _memory_size(backend: Backend, workspace_id: str) -> list[tuple[str, float]]:
    """Facts and summaries stored at the end of each day from the first one's to today, by their
    creation dates (what is stored now: one deleted since is not counted on the days it existed)."""
    created: list[date] = [t.created_at.date() for t in triples(backend, workspace_id)]
    created += [s.created_at.date() for s in summaries(backend, workspace_id)]
    if not created:
        return []
    counts: dict[date, int] = {}
    for d in created:
        counts[d] = counts.get(d, 0) + 1
    out, running = [], 0
    day, last = min(counts), max(*counts, datetime.now(UTC).date())
    while day <= last:
        running += counts.get(day, 0)
        out.append((day.isoformat(), float(running)))
        day += timedelta(days=1)
    return out


# ---------------------------------------------------------------- sessions


def sessions_all(ctx: Ctx) -> Html:
    body = ""
    for workspace_id in ctx.workspace_ids():
        body += f"<section><h2>{link(f'/workspaces/{seg(workspace_id)}/sessions', workspace_id)}</h2>"
        body += _session_table(ctx, workspace_id) + "</section>"
    return ctx.page("Sessions", body or '<p class="empty">no workspaces</p>', active="sessions")


def sessions(ctx: Ctx, workspace_id: str) -> Html:
    if ctx.workspace(workspace_id) is None:
        return ctx.not_found(f"no workspace {workspace_id!r}", active="sessions")
    body = _ws_nav(workspace_id, "sessions") + _session_table(ctx, workspace_id)
    return ctx.page(f"Sessions of {workspace_id}", body, active="sessions")


def _session_table(ctx: Ctx, workspace_id: str) -> str:
    per = usage.by_session(usage.records(ctx.backend, workspace_id))
    found = sorted(
        ctx.backend.sessions.list_sessions(workspace_id, limit=MAX_SESSIONS),
        key=lambda s: s.updated_at,
        reverse=True,
    )
    rows = []
    for s in found:
        t = per.get(s.id, usage.Totals())
        rows.append(
            [
                link(f"/workspaces/{seg(workspace_id)}/sessions/{seg(s.id)}", s.id),
                esc(s.user_id or "-"),
                esc(s.channel),
                str(s.message_count),
                str(t.turns),
                money(t.cost_usd),
                esc(when(s.updated_at)),
            ]
        )
    return table(
        ["session", "user", "channel", "messages", "turns", EST_COST, "updated"],
        rows,
        cls="sessions",
        empty="no sessions",
    )


def session(ctx: Ctx, workspace_id: str, session_id: str) -> Html:
    s = ctx.backend.sessions.get(workspace_id, session_id)
    if s is None:
        return ctx.not_found(f"no session {session_id!r} in workspace {workspace_id!r}", active="sessions")
    audits = sorted(
        (r for r in usage.records(ctx.backend, workspace_id) if r.session_id == session_id),
        key=lambda r: r.created_at,
    )
    rolled = [r.message for r in ctx.backend.memory.get_messages(workspace_id, session_id, limit=MAX_TIER1)]
    shown = [(m, False) for m in rolled if m is not None] + [(m, True) for m in s.active_messages]
    turns, unmatched = _turns(shown, audits)
    facts = dl(
        [
            ("user", esc(s.user_id or "-")),
            ("channel", esc(s.channel)),
            ("status", esc(s.status)),
            (
                "messages",
                f"{s.message_count} ({s.rolled_out_count} rolled out to Tier 1, {len(s.active_messages)} "
                "in the window)",
            ),
            ("model override", esc(s.model_override or "-")),
            ("active task", esc(s.active_task or "-")),
            ("last compaction", esc(when(s.last_compaction))),
        ]
    )
    summary = (
        f'<blockquote class="summary">{esc(s.summary)}</blockquote>'
        if s.summary
        else '<p class="empty">none yet</p>'
    )
    body = (
        _ws_nav(workspace_id, "sessions")
        + facts
        + f"<section><h2>Rolling summary</h2>{summary}</section>"
        + f"<section><h2>Turns ({len(audits)})</h2>"
        + '<p class="hint">Each user message with what followed it and the turn\'s audit record; '
        "messages in the active window are marked, the older ones are Tier 1.</p>"
        + (turns or '<p class="empty">none</p>')
        + "</section>"
    )
    if unmatched:
        body += "<section><h2>Turns that kept no message</h2>" + _audit_table(unmatched) + "</section>"
    body += (
        '<section id="files"><h2>Files</h2><p class="hint">What the senders attached in this session '
        "(docs/media.md): the type is the one sniffed from the bytes; a transcript or extracted text "
        "is shown as the turn stored it, redacted.</p>"
        + media.session_files(ctx.backend.media, workspace_id, session_id)
        + "</section>"
    )
    return ctx.page(f"Session {session_id}", body, active="sessions")


def _turns(shown: list[tuple[Message, bool]], audits: list[AuditRecord]) -> tuple[str, list[AuditRecord]]:
    """The conversation cut at each user message, each part with the audit record of its event;
    and the records no kept message names (refused, denied, given up before anything was kept)."""
    by_event = {r.event_id: r for r in audits if r.event_id}
    parts: list[list[tuple[Message, bool]]] = []
    for m, in_window in shown:
        if isinstance(m, UserMessage) or not parts:
            parts.append([])
        parts[-1].append((m, in_window))
    used: set[str] = set()
    out = []
    for part in parts:
        first = part[0][0]
        audit = by_event.get(first.event_id or "") if isinstance(first, UserMessage) else None
        anchor = f' id="turn-{esc(audit.turn_id)}"' if audit is not None else ""
        if audit is not None:
            used.add(audit.id)
        record = _audit_table([audit]) if audit is not None else '<p class="empty">no audit record</p>'
        messages = "".join(_message(m, in_window) for m, in_window in part)
        out.append(f'<article class="turn"{anchor}>{record}<ol class="messages">{messages}</ol></article>')
    return "".join(out), [r for r in audits if r.id not in used]


def _message(m: Message, in_window: bool) -> str:
    where = '<span class="badge">window</span> ' if in_window else ""
    cls = " in-window" if in_window else ""
    if isinstance(m, UserMessage):
        who = m.sender_name or m.user_id or m.sender_id or "user"
        head = f"{where}{esc(who)} · {esc(when(m.created_at))}"
        text = f'<div class="text">{esc(m.content)}</div>'
        return f'<li class="msg user{cls}"><div class="meta">{head}</div>{text}</li>'
    if isinstance(m, AssistantMessage):
        calls = "".join(
            f'<div class="tool-call"><span class="tool">{esc(c.name)}</span>'
            f"<code>{esc(c.arguments)}</code></div>"
            for c in m.tool_calls
        )
        head = f"{where}assistant{f' ({esc(m.model)})' if m.model else ''} · {esc(when(m.created_at))}"
        return (
            f'<li class="msg assistant{cls}"><div class="meta">{head}</div>'
            f'<div class="text">{esc(m.content)}</div>{calls}</li>'
        )
    assert isinstance(m, ToolResultMessage)
    status = " error" if m.is_error else ""
    return (
        f'<li class="msg tool{status}{cls}"><div class="meta">{where}tool result: {esc(m.name)}</div>'
        f'<pre class="text">{esc(m.content)}</pre></li>'
    )


def _audit_table(records: list[AuditRecord]) -> str:
    rows = []
    for r in records:
        findings = "; ".join(f"{src}: {', '.join(rules)}" for src, rules in r.injection_rules.items())
        error = f" · {esc(r.error)}" if r.error else ""
        rows.append(
            [
                esc(when(r.created_at)),
                esc(r.model or "-"),
                esc(", ".join(r.tools_used) or "none"),
                # Cached prompt tokens cost a tenth or so of the rest (cost_usd prices them so).
                f"{r.tokens_in:,} in{f' ({r.tokens_cached:,} cached)' if r.tokens_cached else ''}, "
                f"{r.tokens_out:,} out",
                money(r.cost_usd),
                f"{r.duration_ms:,.0f} ms",
                f'<span class="outcome outcome-{esc(r.outcome)}">{esc(r.outcome)}</span>{error}',
                esc(", ".join(r.quoted) or "none"),
                esc(findings or "none"),
            ]
        )
    return table(
        [
            "at",
            "model",
            "tools",
            "tokens",
            EST_COST,
            "duration",
            "outcome",
            "quoted as untrusted",
            "injection rules",
        ],
        rows,
        cls="audit",
    )


# ---------------------------------------------------------------- memory


SEARCH_MODES: tuple[Literal["hybrid", "bm25", "vector"], ...] = ("hybrid", "bm25", "vector")


def memory(ctx: Ctx, workspace_id: str, query: str | None, mode: str | None = None) -> Html:
    """With `query`, a search of the whole workspace in `mode` (hybrid unless asked otherwise)."""
    from shared.errors import SigilError
    from shared.memory.search import MemorySearch

    asked: Literal["hybrid", "bm25", "vector"] = next((m for m in SEARCH_MODES if m == mode), "hybrid")

    if ctx.workspace(workspace_id) is None:
        return ctx.not_found(f"no workspace {workspace_id!r}", active="memory")
    base = f"/workspaces/{seg(workspace_id)}"
    search = (
        f'<form class="search" method="get" action="{esc(base)}/memory" role="search">'
        '<label for="q">Search memory</label>'
        f'<input id="q" name="q" type="search" value="{esc(query or "")}">'
        '<select name="mode" aria-label="Search mode">'
        + "".join(f"<option{' selected' if m == asked else ''}>{m}</option>" for m in SEARCH_MODES)
        + "</select><button type=submit>Search</button></form>"
    )
    facts = list(triples(ctx.backend, workspace_id))
    sums = summaries(ctx.backend, workspace_id)
    results = ""
    if query:
        try:
            outcome = MemorySearch(ctx.backend.index, ctx.backend.memory, ctx.backend.embedder).search(
                workspace_id, query, scope=WORKSPACE_WIDE, k=20, mode=asked
            )
        except SigilError as exc:
            results = f'<p class="error">{esc(exc.message)}</p>'
        else:
            owners = {t.id: t.user_id for t in facts} | {s.id: s.user_id for s in sums}
            results = _hits(base, outcome, owners)
    fact_rows = [
        [
            link(f"{base}/facts/{seg(t.id)}", t.id),
            esc(t.subject),
            esc(t.predicate),
            esc(t.object),
            f'<span class="status-{esc(t.status)}">{esc(t.status)}</span>',
            esc(t.source) + (f" {esc(t.run_id)}" if t.run_id else ""),
            esc(t.user_id or "-"),
        ]
        for t in facts
    ]
    summary_rows = [
        [
            esc(s.kind),
            link(f"{base}/sessions/{seg(s.session_id)}", s.session_id),
            esc(s.user_id or "-"),
            f"{s.first_seq}-{s.last_seq}",
            esc(s.text),
            esc(s.run_id or "-"),
        ]
        for s in sums
    ]
    runs = _runs(facts, sums)
    run_rows = [
        [esc(run), str(n), link(f"{base}/runs/{seg(run)}/rollback", "roll back…")]
        for run, n in sorted(runs.items())
    ]
    body = (
        _ws_nav(workspace_id, "memory")
        + f"<section>{search}{results}</section>"
        + f"<section><h2>Facts ({len(facts)})</h2>"
        + table(["id", "subject", "predicate", "object", "status", "source", "user"], fact_rows, cls="facts")
        + "</section>"
        + f"<section><h2>Summaries ({len(sums)})</h2>"
        + table(["kind", "session", "user", "messages", "text", "run"], summary_rows, cls="summaries")
        + "</section>"
        + "<section><h2>Consolidation runs</h2>"
        + table(["run", "facts and summaries it wrote or changed", ""], run_rows, cls="runs", empty="no runs")
        + "</section>"
        + _memory_users(ctx, workspace_id, facts, sums)
    )
    return ctx.page(f"Memory of {workspace_id}", body, active="memory")


def _hits(base: str, outcome: SearchOutcome, owners: dict[str, str | None]) -> str:
    """A search's hits with their author and scores; `owners` gives the user a fact or summary
    belongs to, by id."""
    answered = f'<p class="answered">answered by <strong class="mode">{esc(outcome.mode)}</strong>'
    answered += (
        f' · <span class="degraded">{esc(outcome.degraded)}</span></p>' if outcome.degraded else "</p>"
    )
    return answered + table(
        ["tier", "author", "text", "session", "fused", "BM25", "vector"],
        [
            [
                esc(h.tier),
                f'<span class="author">{esc(_author(h, owners))}</span>',
                esc(h.text),
                link(f"{base}/sessions/{seg(h.session_id)}", h.session_id) if h.session_id else "-",
                f'<span class="score fused">{h.score:.3f}</span>',
                f'<span class="score bm25">{_score(h.bm25)}</span>',
                f'<span class="score vector">{_score(h.vector)}</span>',
            ]
            for h in outcome.hits
        ],
        cls="hits",
        empty="no hits",
    )


def _author(hit: MemoryHit, owners: dict[str, str | None]) -> str:
    """Who a hit is from: a user message's writer (the name they go by, and their user id), the
    assistant or a tool (and whom it answered), or the user a fact or summary belongs to."""
    if hit.tier != "message":
        return owners.get(hit.id) or "-"
    role, user = hit.metadata.get("role", ""), hit.metadata.get("user_id")
    if role != "user":
        return f"{role} to {user}" if user else role or "-"
    name = hit.metadata.get(AUTHOR_KEY)
    if name and user and name != user:
        return f"{name} ({user})"
    return name or user or "user"


def _memory_users(ctx: Ctx, workspace_id: str, facts: list[Triple], sums: list[Summary]) -> str:
    """Each user who opened a session, whose messages are in memory (its window, then Tier 1), or
    whom a fact or summary belongs to: what erasing them removes."""
    base = f"/workspaces/{seg(workspace_id)}"
    counts: dict[str, list[int]] = {}  # user: [sessions, messages, facts, summaries]

    def add(user: str | None, column: int, n: int = 1) -> None:
        if user:
            counts.setdefault(user, [0, 0, 0, 0])[column] += n

    for s in ctx.backend.sessions.list_sessions(workspace_id, limit=MAX_SESSIONS):
        add(s.user_id, 0)
        add(s.user_id, 1, s.message_count)
    for t in facts:
        add(t.user_id, 2)
    for summary in sums:
        add(summary.user_id, 3)
    rows = [
        [esc(u), *(str(n) for n in c), link(f"{base}/users/{seg(u)}/erase", "erase…")]
        for u, c in sorted(counts.items())
    ]
    return (
        "<section><h2>Users with memories</h2>"
        + '<p class="hint">Each user who opened a session (its messages, all of them: the active '
        "window, then Tier 1) or whom a fact or summary belongs to.</p>"
        + table(
            ["user", "sessions opened", "messages in them", "facts", "summaries", ""],
            rows,
            cls="memory-users",
            empty="no user has a session, a fact or a summary",
        )
        + "</section>"
    )


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _runs(facts: list[Triple], sums: list[Summary]) -> dict[str, int]:
    runs: dict[str, int] = {}
    for t in facts:
        for run in {t.run_id} | {c.run_id for c in t.changes}:
            if run:
                runs[run] = runs.get(run, 0) + 1
    for s in sums:
        if s.run_id:
            runs[s.run_id] = runs.get(s.run_id, 0) + 1
    return runs


def fact(ctx: Ctx, workspace_id: str, fact_id: str) -> Html:
    from shared.memory.sharing import find_triple

    t = find_triple(ctx.backend.memory, workspace_id, fact_id)
    if t is None:
        return ctx.not_found(f"no fact {fact_id!r} in workspace {workspace_id!r}", active="memory")
    base = f"/workspaces/{seg(workspace_id)}"
    merged_here = [o for o in triples(ctx.backend, workspace_id) if o.merged_into == t.id]
    sources = []
    if t.session_id and t.message_ids:
        wanted = set(t.message_ids)
        sources = [
            r
            for r in ctx.backend.memory.get_messages(workspace_id, t.session_id, limit=MAX_TIER1)
            if r.id in wanted
        ]
    history = [
        [
            esc(when(t.created_at)),
            "written",
            esc(t.source) + (f" (run {esc(t.run_id)})" if t.run_id else ""),
            "-",
        ]
    ]
    history += [
        [
            esc(when(c.at)),
            esc(c.action),
            f"run {esc(c.run_id)} " + link(f"{base}/runs/{seg(c.run_id)}/rollback", "roll back…"),
            f"was {esc(c.status)}" + (f" → {esc(c.merged_into)}" if c.merged_into else ""),
        ]
        for c in t.changes
    ]
    body = (
        _ws_nav(workspace_id, "memory")
        + f'<p class="triple"><span>{esc(t.subject)}</span> · <span>{esc(t.predicate)}</span> · '
        f"<span>{esc(t.object)}</span></p>"
        + dl(
            [
                (
                    "status",
                    esc(t.status)
                    + (
                        f" into {link(f'{base}/facts/{seg(t.merged_into)}', t.merged_into)}"
                        if t.merged_into
                        else ""
                    ),
                ),
                ("category", esc(t.category)),
                ("confidence", f"{t.confidence:.2f}"),
                ("relevance", f"{t.relevance:.2f}" + (" · long-term" if t.long_term else "")),
                ("user", esc(t.user_id or "workspace-wide")),
                ("scope", esc(t.scope.model_dump_json() if t.scope else "-")),
                ("source", esc(t.source) + (f" · run {esc(t.run_id)}" if t.run_id else "")),
                (
                    "session",
                    link(f"{base}/sessions/{seg(t.session_id)}", t.session_id) if t.session_id else "-",
                ),
                ("learnt from", esc(", ".join(t.message_ids) or "-")),
                ("used", f"{t.access_count} time(s), last {esc(when(t.last_accessed_at))}"),
                ("reinforced", f"{t.reinforced_count} time(s)"),
                ("created", esc(when(t.created_at))),
                ("updated", esc(when(t.updated_at))),
            ]
        )
        + "<section><h2>Provenance: the messages it was learnt from</h2>"
        + table(
            ["seq", "role", "text"],
            [[str(r.seq), esc(r.role), esc(r.text)] for r in sources],
            cls="sources",
            empty="not recorded (stored by a tool, imported, or its messages are gone)",
        )
        + "</section><section><h2>Change history</h2>"
        + table(["at", "what", "by", "before"], history, cls="history")
        + "</section><section><h2>Merged into this fact</h2>"
        + table(
            ["fact", "subject", "predicate", "object"],
            [
                [link(f"{base}/facts/{seg(o.id)}", o.id), esc(o.subject), esc(o.predicate), esc(o.object)]
                for o in merged_here
            ],
            cls="merged",
        )
        + "</section>"
        + (
            f"<p>{link(f'{base}/runs/{seg(t.run_id)}/rollback', f'Roll back run {t.run_id}…')}</p>"
            if t.run_id
            else ""
        )
    )
    return ctx.page(f"Fact {fact_id}", body, active="memory")


def rollback_confirm(ctx: Ctx, workspace_id: str, run_id: str) -> Html:
    from shared.consolidation.rollback import run_exists

    if not run_exists(ctx.backend, workspace_id, run_id):
        return ctx.not_found(
            f"no consolidation run {run_id!r} in workspace {workspace_id!r}", active="memory"
        )
    written = [
        t for t in triples(ctx.backend, workspace_id) if t.source == "consolidation" and t.run_id == run_id
    ]
    changed = [t for t in triples(ctx.backend, workspace_id) if any(c.run_id == run_id for c in t.changes)]
    sums = [s for s in summaries(ctx.backend, workspace_id) if s.run_id == run_id]
    body = (
        f"<p>Roll back consolidation run <strong>{esc(run_id)}</strong> in workspace "
        f"<strong>{esc(workspace_id)}"
        "</strong>? It deletes the facts and summaries the run wrote and restores what it changed "
        "(docs/consolidation.md). Tier-1 messages are never touched.</p>"
        + dl(
            [
                (
                    "facts it wrote",
                    esc(", ".join(f"{t.subject} {t.predicate} {t.object}" for t in written) or "none"),
                ),
                ("facts it changed", str(len(changed))),
                ("summaries it wrote", str(len(sums))),
            ]
        )
        + form(
            f"/workspaces/{seg(workspace_id)}/runs/{seg(run_id)}/rollback",
            ctx.csrf,
            f"Roll back run {run_id}",
            fields={"confirm": run_id},
            danger=True,
        )
        + f"<p>{link(f'/workspaces/{seg(workspace_id)}/memory', 'Cancel')}</p>"
    )
    return ctx.page("Confirm rollback", body, active="memory")


def rollback(ctx: Ctx, workspace_id: str, run_id: str) -> Html:
    from shared.consolidation.rollback import rollback_run

    report = rollback_run(ctx.backend, workspace_id, run_id)
    body = (
        f'<p class="done">Run {esc(run_id)} rolled back.</p>'
        + dl([(k.replace("_", " "), esc(v)) for k, v in report.model_dump().items()])
        + f"<p>{link(f'/workspaces/{seg(workspace_id)}/memory', 'Back to memory')}</p>"
    )
    return ctx.page("Rolled back", body, active="memory")


def erase_confirm(ctx: Ctx, workspace_id: str, user_id: str) -> Html:
    if ctx.workspace(workspace_id) is None:
        return ctx.not_found(f"no workspace {workspace_id!r}", active="workspaces")
    owned = [
        s.id
        for s in ctx.backend.sessions.list_sessions(workspace_id, limit=MAX_SESSIONS)
        if s.user_id == user_id
    ]
    body = (
        f"<p>Erase everything of user <strong>{esc(user_id)}</strong> in workspace "
        f"<strong>{esc(workspace_id)}"
        "</strong>? Their sessions, messages, summaries and facts are deleted, what others said that names "
        "them is scrubbed, their audit records are anonymised and their identities deleted "
        "(docs/memory.md, the right to erasure). <strong>This cannot be undone.</strong></p>"
        + dl([("sessions they own", esc(", ".join(owned) or "none"))])
        + form(
            f"/workspaces/{seg(workspace_id)}/users/{seg(user_id)}/erase",
            ctx.csrf,
            f"Erase {user_id}",
            fields={"confirm": user_id},
            danger=True,
        )
        + f"<p>{link(f'/workspaces/{seg(workspace_id)}', 'Cancel')}</p>"
    )
    return ctx.page("Confirm erasure", body, active="workspaces")


def erase(ctx: Ctx, workspace_id: str, user_id: str) -> Html:
    from shared.memory.erasure import erase_user

    if ctx.workspace(workspace_id) is None:
        return ctx.not_found(f"no workspace {workspace_id!r}", active="workspaces")
    report = erase_user(ctx.backend, workspace_id, user_id)
    body = (
        f'<p class="done">User {esc(user_id)} erased from {esc(workspace_id)}.</p>'
        + dl([(k.replace("_", " "), esc(v)) for k, v in report.model_dump().items()])
        + f"<p>{link(f'/workspaces/{seg(workspace_id)}', 'Back to the workspace')}</p>"
    )
    return ctx.page("Erased", body, active="workspaces")


# ---------------------------------------------------------------- dead letters

_NO_DLQ = (
    '<p class="error">The aws backend needs the dead-letter queue: the stack\'s DeadLettersQueueUrl output '
    "(or SIGIL_DEAD_LETTER_QUEUE_URL).</p>"
)


def dead_letters(ctx: Ctx) -> Html:
    dead = ctx.backend.dead_letters
    if dead is None:
        return ctx.page("Dead letters", _NO_DLQ, active="dead-letters")
    rows = [
        [
            link(f"/dead-letters/{seg(e.id)}", e.id),
            esc(e.workspace_id or "-"),
            link(f"/workspaces/{seg(e.workspace_id)}/sessions/{seg(e.session_id)}", e.session_id)
            if e.workspace_id and e.session_id
            else esc(e.group_id),
            str(e.attempts),
            esc(when(e.failed_at or e.enqueued_at)),
            esc(e.reason or "none recorded"),
            esc(e.preview),
        ]
        for e in dead.list_entries(None, limit=1000)
    ]
    body = table(
        ["id", "workspace", "session", "attempts", "failed", "reason", "text"],
        rows,
        cls="dead-letters",
        empty="no dead letters",
    )
    return ctx.page("Dead letters", body, active="dead-letters")


def dead_letter(ctx: Ctx, entry_id: str, *, confirm: bool = False) -> Html:
    dead = ctx.backend.dead_letters
    if dead is None:
        return ctx.page("Dead letters", _NO_DLQ, active="dead-letters")
    e = dead.show(entry_id)
    if e is None:
        return ctx.not_found(f"no dead letter {entry_id!r}", active="dead-letters")
    item = e.item
    details = dl(
        [
            ("lane", esc(e.group_id)),
            ("workspace", esc(e.workspace_id or "-")),
            ("session", esc(e.session_id or "-")),
            ("channel", esc(e.channel or "-")),
            ("event", esc(e.event_id or "-")),
            ("redrive of", esc(item.redrive_of if item is not None else None) or "-"),
            ("attempts", str(e.attempts)),
            ("queued", esc(when(e.enqueued_at))),
            ("failed", esc(when(e.failed_at))),
            ("reason", f"<pre>{esc(e.reason or 'none recorded')}</pre>"),
            ("text", f"<pre>{esc(item.inbound.text)}</pre>" if item is not None else "does not decode"),
        ]
    )
    action = f"/dead-letters/{seg(e.id)}/redrive"
    if confirm:
        body = (
            f"<p>Put dead letter <strong>{esc(e.id)}</strong> back on its lane? "
            "A turn that already committed "
            "is skipped (docs/dead-letters.md).</p>"
            + details
            + form(action, ctx.csrf, "Redrive", fields={"confirm": e.id})
            + f"<p>{link('/dead-letters', 'Cancel')}</p>"
        )
        return ctx.page("Confirm redrive", body, active="dead-letters")
    body = details + f"<p>{link(action, 'Redrive…')}</p>"
    return ctx.page(f"Dead letter {e.id}", body, active="dead-letters")


def redrive(ctx: Ctx, entry_id: str) -> Html:
    from shared.agent.redrive import requeue_policy

    dead = ctx.backend.dead_letters
    if dead is None:
        return ctx.page("Dead letters", _NO_DLQ, active="dead-letters")
    report = dead.redrive(requeue_policy(ctx.backend.sessions), ids=[entry_id])
    rows = [
        [esc(o.id), f'<span class="outcome">{esc(o.outcome)}</span>', esc(o.detail)] for o in report.outcomes
    ]
    body = (
        table(["dead letter", "outcome", "detail"], rows, cls="redrive")
        + f"<p>{link('/dead-letters', 'Back')}</p>"
    )
    failed = bool(report.ids("failed") or report.ids("not_found"))
    return ctx.page("Redrive", body, active="dead-letters", status=409 if failed else 200)

"""HTML building blocks: every value from a store goes through `esc` (html.escape) on its way in."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from datetime import datetime
from urllib.parse import quote

NAV = (
    ("workspaces", "Workspaces", "/workspaces"),
    ("sessions", "Sessions", "/sessions"),
    ("memory", "Memory", "/memory"),
    ("dead-letters", "Dead letters", "/dead-letters"),
    ("replay", "Replay", "/replay"),
)


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def seg(value: str) -> str:
    """A path segment: ids may hold any character a channel allows."""
    return quote(value, safe="")


def when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "-"


def money(usd: float) -> str:
    return f"${usd:,.4f}" if usd < 1 else f"${usd:,.2f}"


def link(href: str, text: object) -> str:
    return f'<a href="{esc(href)}">{esc(text)}</a>'


def table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], *, cls: str = "", empty: str = "none"
) -> str:
    """`rows` cells are HTML already (escape what comes from a store with `esc`)."""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    if not body:
        return f'<p class="empty">{esc(empty)}</p>'
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    return f'<table class="{esc(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def dl(pairs: Iterable[tuple[str, str]]) -> str:
    """A definition list; values are HTML already."""
    return "<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in pairs) + "</dl>"


def form(
    action: str, csrf: str, button: str, *, fields: dict[str, str] | None = None, danger: bool = False
) -> str:
    hidden = "".join(
        f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">' for k, v in (fields or {}).items()
    )
    cls = "danger" if danger else ""
    return (
        f'<form method="post" action="{esc(action)}"><input type="hidden" name="csrf" value="{esc(csrf)}">'
        f'{hidden}<button type="submit" class="{cls}">{esc(button)}</button></form>'
    )


def page(title: str, body: str, *, active: str, source: str) -> str:
    nav = "".join(
        f'<a href="{href}"{" aria-current=page" if key == active else ""}>{esc(label)}</a>'
        for key, label, href in NAV
    )
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · Sigil console</title>"
        '<link rel="stylesheet" href="/static/console.css"></head><body>'
        f'<header><span class="brand">Sigil console</span><nav>{nav}</nav>'
        f'<span class="source">{esc(source)}</span></header>'
        f"<main><h1>{esc(title)}</h1>{body}</main></body></html>"
    )

"""Plots as server-rendered inline SVG: a bar per day, no chart library and no script."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from shared.console.html import esc

WIDTH, HEIGHT = 560, 170
_LEFT, _RIGHT, _TOP, _BOTTOM = 62, 10, 22, 30


def bars(
    title: str,
    points: Sequence[tuple[str, float]],
    *,
    fmt: Callable[[float], str] = lambda v: f"{v:,.0f}",
    cls: str = "",
) -> str:
    """A bar chart of (label, value) points, labelled with the first, last and largest values;
    every bar carries its own value as a tooltip (<title>)."""
    if not points:
        return f'<figure class="plot empty"><figcaption>{esc(title)}</figcaption><p>no data</p></figure>'
    top = max(v for _, v in points) or 1.0
    inner_w, inner_h = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM
    step = inner_w / len(points)
    # Capped, so a few days' bars stay bars rather than blocks.
    bar_w = max(1.0, min(step * 0.8, 36.0))
    parts = [
        f'<svg class="plot {esc(cls)}" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="{esc(title)}"><title>{esc(title)}</title>',
        f'<line class="axis" x1="{_LEFT}" y1="{_TOP + inner_h}" x2="{WIDTH - _RIGHT}" '
        f'y2="{_TOP + inner_h}"/>',
        f'<line class="axis" x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_TOP + inner_h}"/>',
        f'<text class="tick" x="{_LEFT - 4}" y="{_TOP + 4}" text-anchor="end">{esc(fmt(top))}</text>',
        f'<text class="tick" x="{_LEFT - 4}" y="{_TOP + inner_h}" text-anchor="end">0</text>',
    ]
    for i, (label, value) in enumerate(points):
        h = inner_h * (value / top) if top else 0.0
        x = _LEFT + i * step + (step - bar_w) / 2
        y = _TOP + inner_h - h
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}">'
            f"<title>{esc(label)}: {esc(fmt(value))}</title></rect>"
        )
    first, last = points[0][0], points[-1][0]
    parts.append(f'<text class="tick" x="{_LEFT}" y="{HEIGHT - 8}">{esc(first)}</text>')
    if last != first:
        parts.append(
            f'<text class="tick" x="{WIDTH - _RIGHT}" y="{HEIGHT - 8}" text-anchor="end">{esc(last)}</text>'
        )
    parts.append("</svg>")
    return f'<figure class="plot"><figcaption>{esc(title)}</figcaption>{"".join(parts)}</figure>'

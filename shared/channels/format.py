"""The model's Markdown, rendered for each platform, and split to each platform's size limit.

Models answer in CommonMark. Each platform reads its own dialect, so a reply is parsed once
(markdown-it-py, CommonMark plus GFM strikethrough and tables, raw HTML off so that `<b>` from
the model is text) and written out by a small per-dialect style:

- Telegram: HTML parse mode. HTML rather than MarkdownV2 because HTML needs three characters
  escaped (& < >) with the standard rules, while MarkdownV2 needs eighteen escaped everywhere,
  with different sets inside code and inside link targets; one missed escape makes Telegram
  reject the whole message ("can't parse entities"). Only the tags Telegram accepts are written:
  b, i, s, code, pre (with a language class), a href, blockquote.
- Slack: mrkdwn (*bold*, _italic_, ~strike~, `code`, ```pre```, <url|text>), & < > as entities.
- Discord: Markdown close to CommonMark; text is backslash-escaped and @everyone / @here are
  broken with a zero-width space (the sender also disables mention parsing).
- WhatsApp: *bold*, _italic_, ~strike~, ```mono```; WhatsApp has no escape mechanism.

`split` cuts a reply into pieces whose *rendered* length fits a limit, preferring block, then
line, then word boundaries, and closes a code fence at a cut and reopens it in the next piece.
Lengths are counted in UTF-16 code units: Telegram counts that way, and for every other
platform it is never less than the character count, so a piece that fits here fits there.
"""

from __future__ import annotations

import html
import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import TYPE_CHECKING, Final, Literal

if TYPE_CHECKING:
    # Imported where a message is rendered or split: the web channel's replies never are, and
    # the agent's cold start pays for every module its handler imports.
    from markdown_it import MarkdownIt
    from markdown_it.tree import SyntaxTreeNode

Dialect = Literal["telegram", "slack", "discord", "whatsapp"]

# One message's text limit per platform. Slack truncates at 40,000 characters but recommends
# 4,000 per message, and edits of longer messages are refused, so replies are cut at 4,000.
LIMITS: Final[dict[Dialect, int]] = {
    "telegram": 4096,
    "slack": 4000,
    "discord": 2000,
    "whatsapp": 4096,
}

# Below this a piece cannot hold a reopened fence, a line of code and its closing fence.
MIN_LIMIT: Final = 64
HR: Final = "──────────"
_ZWSP: Final = "\u200b"
_URL = re.compile(r"(?:https?|ftp)://[^\s<>]+")


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units: what Telegram counts, and an upper bound for the others."""
    return len(text.encode("utf-16-le")) // 2


@cache
def _parser() -> MarkdownIt:
    # Built on first use, not at import: a webhook that never renders never pays for it.
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable(["strikethrough", "table"])


# ---------------------------------------------------------------- rendering


@dataclass(frozen=True)
class _Ctx:
    quote_depth: int = 0
    in_link: bool = False


class _Style:
    """How one dialect writes each construct. `raw` arguments are unescaped source text."""

    bullet = "• "

    def text(self, raw: str, *, line_start: bool) -> str:
        return raw

    def strong(self, inner: str) -> str:
        return f"*{inner}*"

    def em(self, inner: str) -> str:
        return f"_{inner}_"

    def strike(self, inner: str) -> str:
        return f"~{inner}~"

    def code(self, raw: str, ctx: _Ctx) -> str:
        return "`" + raw.replace("`", "'") + "`"

    def code_block(self, raw: str, lang: str, ctx: _Ctx) -> str:
        return f"```\n{raw.replace('```', '`' + _ZWSP + '``')}\n```"

    def link(self, href: str, inner: str, plain: str) -> str:
        return href if plain in ("", href) else f"{inner} ({href})"

    def heading(self, inner: str, level: int) -> str:
        return self.strong(inner)

    def quote(self, inner: str, ctx: _Ctx) -> str:
        if ctx.quote_depth:
            return inner  # none of the chat dialects nests quotes
        return "\n".join(f"> {line}" for line in inner.split("\n"))


class _Telegram(_Style):
    def text(self, raw: str, *, line_start: bool) -> str:
        return html.escape(raw, quote=False)

    def strong(self, inner: str) -> str:
        return f"<b>{inner}</b>"

    def em(self, inner: str) -> str:
        return f"<i>{inner}</i>"

    def strike(self, inner: str) -> str:
        return f"<s>{inner}</s>"

    def code(self, raw: str, ctx: _Ctx) -> str:
        # Telegram forbids code inside a link ("other entities can't contain each other").
        escaped = html.escape(raw, quote=False)
        return escaped if ctx.in_link else f"<code>{escaped}</code>"

    def code_block(self, raw: str, lang: str, ctx: _Ctx) -> str:
        escaped = html.escape(raw, quote=False)
        if ctx.quote_depth:
            return escaped  # pre cannot sit inside blockquote: keep the text, lose the box
        lang = re.sub(r"[^A-Za-z0-9_+#.-]", "", lang)[:32]
        if lang:
            return f'<pre><code class="language-{lang}">{escaped}</code></pre>'
        return f"<pre>{escaped}</pre>"

    def link(self, href: str, inner: str, plain: str) -> str:
        if not re.match(r"(?i)(https?|tg|mailto):", href):
            return f"{inner} ({html.escape(href, quote=False)})" if plain else html.escape(href)
        return f'<a href="{html.escape(href, quote=True)}">{inner or html.escape(href)}</a>'

    def heading(self, inner: str, level: int) -> str:
        return f"<b>{inner}</b>"

    def quote(self, inner: str, ctx: _Ctx) -> str:
        return inner if ctx.quote_depth else f"<blockquote>{inner}</blockquote>"


class _Slack(_Style):
    def text(self, raw: str, *, line_start: bool) -> str:
        # Slack's three control characters; everything else is literal.
        return html.escape(raw, quote=False)

    def code(self, raw: str, ctx: _Ctx) -> str:
        return "`" + html.escape(raw.replace("`", "'"), quote=False) + "`"

    def code_block(self, raw: str, lang: str, ctx: _Ctx) -> str:
        body = html.escape(raw.replace("```", "`" + _ZWSP + "``"), quote=False)
        return f"```\n{body}\n```"

    def link(self, href: str, inner: str, plain: str) -> str:
        # `|` ends the URL part and `>` the link; percent-encoding keeps them out of the URL.
        url = html.escape(href.replace("|", "%7C").replace(">", "%3E").replace("<", "%3C"), quote=False)
        label = html.escape(plain, quote=False)
        return f"<{url}>" if plain in ("", href) else f"<{url}|{label}>"


class _Discord(_Style):
    bullet = "- "
    _ESCAPE = re.compile(r"([\\*_~`|<>\[\]])")
    _LINE_START = re.compile(r"^(\s*)([#>+-]|\d+[.)])")

    def text(self, raw: str, *, line_start: bool) -> str:
        out: list[str] = []
        last = 0
        # URLs stay as they are: a backslash inside one would become part of the link.
        for match in _URL.finditer(raw):
            out.append(self._escape(raw[last : match.start()]))
            out.append(match.group())
            last = match.end()
        out.append(self._escape(raw[last:]))
        escaped = "".join(out)
        if line_start:
            escaped = self._LINE_START.sub(r"\1\\\2", escaped, count=1)
        return escaped

    def _escape(self, raw: str) -> str:
        escaped = self._ESCAPE.sub(r"\\\1", raw)
        return re.sub(r"@(everyone|here)\b", "@" + _ZWSP + r"\1", escaped)

    def strong(self, inner: str) -> str:
        return f"**{inner}**"

    def em(self, inner: str) -> str:
        return f"*{inner}*"

    def strike(self, inner: str) -> str:
        return f"~~{inner}~~"

    def code(self, raw: str, ctx: _Ctx) -> str:
        return f"`` {raw} ``" if "`" in raw else f"`{raw}`"

    def code_block(self, raw: str, lang: str, ctx: _Ctx) -> str:
        lang = re.sub(r"[^A-Za-z0-9_+#.-]", "", lang)[:32]
        return f"```{lang}\n{raw.replace('```', '`' + _ZWSP + '``')}\n```"

    def link(self, href: str, inner: str, plain: str) -> str:
        url = href.replace("(", "%28").replace(")", "%29").replace(" ", "%20")
        return url if plain in ("", href) else f"[{inner}]({url})"

    def heading(self, inner: str, level: int) -> str:
        # Discord draws #, ## and ###; deeper levels become bold lines.
        return f"{'#' * level} {inner}" if level <= 3 else f"**{inner}**"


class _WhatsApp(_Style):
    def code_block(self, raw: str, lang: str, ctx: _Ctx) -> str:
        return f"```{raw.replace('```', '`' + _ZWSP + '``')}```"


_STYLES: Final[dict[Dialect, _Style]] = {
    "telegram": _Telegram(),
    "slack": _Slack(),
    "discord": _Discord(),
    "whatsapp": _WhatsApp(),
}


class _Renderer:
    def __init__(self, style: _Style) -> None:
        self.style = style

    def document(self, markdown: str) -> str:
        from markdown_it.tree import SyntaxTreeNode

        root = SyntaxTreeNode(_parser().parse(markdown))
        return self.blocks(root.children, _Ctx(), "\n\n").strip()

    def blocks(self, nodes: Sequence[SyntaxTreeNode], ctx: _Ctx, sep: str) -> str:
        rendered = (self.block(node, ctx) for node in nodes)
        return sep.join(r for r in rendered if r)

    def block(self, node: SyntaxTreeNode, ctx: _Ctx) -> str:
        s = self.style
        kind = node.type
        if kind == "paragraph":
            return self.inline(node.children, ctx)
        if kind == "heading":
            return s.heading(self.inline(node.children, ctx), int(node.tag[1:]))
        if kind in ("fence", "code_block"):
            return s.code_block(node.content.removesuffix("\n"), node.info.split(" ")[0], ctx)
        if kind == "blockquote":
            inner = self.blocks(node.children, replace(ctx, quote_depth=ctx.quote_depth + 1), "\n\n")
            return s.quote(inner, ctx)
        if kind in ("bullet_list", "ordered_list"):
            return self.list(node, ctx)
        if kind == "hr":
            return HR
        if kind == "table":
            return s.code_block(self.table(node), "", ctx)
        if kind == "inline":
            return self.inline(node.children, ctx)
        # html_block cannot occur with html off; any other block is kept as its text.
        return s.text(node.content, line_start=True)

    def list(self, node: SyntaxTreeNode, ctx: _Ctx) -> str:
        items: list[str] = []
        for item in node.children:
            marker = f"{item.info}{node.markup} " if node.type == "ordered_list" else self.style.bullet
            parts: list[str] = []
            for child in item.children:
                rendered = self.block(child, ctx)
                if child.type in ("bullet_list", "ordered_list"):
                    rendered = "\n".join("  " + line for line in rendered.split("\n"))
                parts.append(rendered)
            items.append(marker + "\n".join(parts))
        return "\n".join(items)

    def table(self, node: SyntaxTreeNode) -> str:
        rows = [
            [_plain(cell.children) for cell in row.children]
            for section in node.children
            for row in section.children
        ]
        widths = [max(len(r[i]) if i < len(r) else 0 for r in rows) for i in range(max(map(len, rows)))]
        lines = [" | ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip() for r in rows]
        if len(lines) > 1:
            lines.insert(1, "-+-".join("-" * w for w in widths))
        return "\n".join(lines)

    def inline(self, nodes: Sequence[SyntaxTreeNode], ctx: _Ctx) -> str:
        s = self.style
        out: list[str] = []
        line_start = True
        for node in _inline_children(nodes):
            kind = node.type
            if kind in ("text", "html_inline"):
                piece = s.text(node.content, line_start=line_start)
            elif kind in ("softbreak", "hardbreak"):
                piece = "\n"
            elif kind == "code_inline":
                piece = s.code(node.content, ctx)
            elif kind in ("strong", "em", "s"):
                inner = self.inline(node.children, ctx)
                wrap = {"strong": s.strong, "em": s.em, "s": s.strike}[kind]
                piece = wrap(inner) if inner else ""
            elif kind == "link":
                inner = self.inline(node.children, replace(ctx, in_link=True))
                piece = s.link(str(node.attrs.get("href", "")), inner, _plain(node.children))
            elif kind == "image":
                alt = _plain(node.children) or str(node.attrs.get("alt", ""))
                src = str(node.attrs.get("src", ""))
                piece = s.link(src, s.text(alt, line_start=False) if alt else "", alt)
            else:
                piece = s.text(node.content, line_start=line_start)
            out.append(piece)
            if piece:
                line_start = piece.endswith("\n")
        return "".join(out)


def _inline_children(nodes: Sequence[SyntaxTreeNode]) -> Iterable[SyntaxTreeNode]:
    # A block's children are one `inline` node holding the inline nodes; unwrap it.
    for node in nodes:
        if node.type == "inline":
            yield from node.children
        else:
            yield node


def _plain(nodes: Sequence[SyntaxTreeNode]) -> str:
    out: list[str] = []
    for node in _inline_children(nodes):
        if node.type in ("softbreak", "hardbreak"):
            out.append(" ")
        elif node.children:
            out.append(_plain(node.children))
        else:
            out.append(node.content)
    return "".join(out)


def render(markdown: str, dialect: Dialect) -> str:
    """`markdown` (CommonMark) written in `dialect`, escaped for it."""
    return _Renderer(_STYLES[dialect]).document(markdown)


def to_telegram_html(markdown: str) -> str:
    return render(markdown, "telegram")


def to_slack_mrkdwn(markdown: str) -> str:
    return render(markdown, "slack")


def to_discord(markdown: str) -> str:
    return render(markdown, "discord")


def to_whatsapp(markdown: str) -> str:
    return render(markdown, "whatsapp")


# ---------------------------------------------------------------- splitting


@dataclass(frozen=True)
class Part:
    """One piece of a split reply: `text` is what is sent (fences closed and reopened as needed),
    `source` the exact slice of the original it carries. The sources concatenate to the original."""

    text: str
    source: str


@dataclass(frozen=True)
class _Fence:
    content_start: int  # offset of the first content line
    content_end: int  # offset of the closing fence line (or the end of the text if unclosed)
    reopen: str  # the line that opens the fence again in the next piece, with its newline
    close: str  # the line that closes it at a cut


# Cut preferences, best first. The end of the text is better than any cut.
_END, _BLOCK, _NESTED_BLOCK, _LINE, _WORD = range(5)


def split(
    text: str,
    limit: int,
    *,
    render: Callable[[str], str] | None = None,
    measure: Callable[[str], int] = utf16_len,
) -> list[str]:
    """`text` in pieces whose rendered length is at most `limit` (see `split_parts`)."""
    return [part.text for part in split_parts(text, limit, render=render, measure=measure)]


def split_for(text: str, dialect: Dialect, limit: int | None = None) -> list[str]:
    """`text` rendered for `dialect`, one string per message, each within the platform's limit."""
    to_dialect = _Renderer(_STYLES[dialect]).document
    pieces = split(text, limit or LIMITS[dialect], render=to_dialect)
    return [r for r in (to_dialect(piece) for piece in pieces) if r]


def split_parts(
    text: str,
    limit: int,
    *,
    render: Callable[[str], str] | None = None,
    measure: Callable[[str], int] = utf16_len,
) -> list[Part]:
    """Cut `text` so that `measure(render(part.text)) <= limit` for every part.

    Greedy: each part is the longest prefix of the rest that fits, cut at the best boundary that
    keeps it at least half as long as the longest fitting cut (a block boundary, then a nested
    block such as a list item, then a line, then a word, then any character). A fenced code block
    cut in two is closed at the cut and reopened, with its info string, in the next part.
    """
    if limit < MIN_LIMIT:
        raise ValueError(f"limit {limit} is below the minimum of {MIN_LIMIT}")
    to_text = render or (lambda s: s)
    if not text.strip():
        return []
    cutter = _Cutter(text, limit, to_text, measure)
    parts: list[Part] = []
    start = 0
    while start < len(text):
        end = cutter.cut(start)
        parts.append(Part(cutter.piece(start, end), text[start:end]))
        start = end
    return _merge_blank(parts)


def _merge_blank(parts: list[Part]) -> list[Part]:
    """Fold parts with nothing to show into a neighbour, keeping every source character."""
    merged: list[Part] = []
    pending = ""
    for part in parts:
        if not part.text.strip():
            if merged:
                merged[-1] = Part(merged[-1].text, merged[-1].source + part.source)
            else:
                pending += part.source
            continue
        merged.append(Part(part.text, pending + part.source))
        pending = ""
    return merged


class _Cutter:
    def __init__(
        self, text: str, limit: int, render: Callable[[str], str], measure: Callable[[str], int]
    ) -> None:
        self.text = text
        self.limit = limit
        self.render = render
        self.measure = measure
        self.fences, self.blocked, self.levels = _analyse(text)
        self.candidates = sorted(self.levels)

    def fits(self, start: int, end: int) -> bool:
        return self.measure(self.render(self.piece(start, end))) <= self.limit

    def piece(self, start: int, end: int) -> str:
        """What is sent for text[start:end]: fences reopened at the start and closed at the end."""
        body = self.text[start:end]
        opened = self._fence_at(start)
        closing = self._fence_at(end)
        if opened is None:
            body = body.lstrip("\r\n")
        body = body.rstrip("\r\n") + "\n" + closing.close if closing is not None else body.rstrip()
        return opened.reopen + body if opened is not None else body

    def _fence_at(self, offset: int) -> _Fence | None:
        for fence in self.fences:
            if fence.content_start < offset < fence.content_end:
                return fence
        return None

    def cut(self, start: int) -> int:
        """Where the part beginning at `start` ends."""
        if self.fits(start, len(self.text)):
            return len(self.text)
        reach = self._reach(start)
        fallback: int | None = None
        for level in (_BLOCK, _NESTED_BLOCK, _LINE, _WORD):
            best = self._best(start, reach, level)
            if best is None:
                continue
            # A better kind of boundary wins unless it would leave the part under half as long.
            if (best - start) * 2 >= reach - start:
                return best
            if fallback is None:
                fallback = best
        return fallback if fallback is not None else reach

    def _best(self, start: int, reach: int, level: int) -> int | None:
        """The furthest fitting cut in (start, reach] whose level is `level` or better."""
        lo = bisect_right(self.candidates, start)
        hi = bisect_right(self.candidates, reach)
        for offset in reversed(self.candidates[lo:hi]):
            if self.levels[offset] <= level and self.fits(start, offset):
                return offset
        return None

    def _reach(self, start: int) -> int:
        """The furthest offset a part from `start` can end at and still fit.

        Rendered length grows almost monotonically with the source, so a galloping then binary
        search finds it in O(log n) renders. Every answer is measured, so a non-monotonic spot
        can only make a part shorter than it could be, never longer than the limit.
        """
        n = len(self.text)
        good, bad, step = start, n, 1
        while start + step < n:
            end = self._allowed(start + step)
            if end < n and self.fits(start, end):
                good, step = end, step * 2
            else:
                bad = start + step
                break
        lo, hi = start + step // 2 if good > start else start, bad
        while hi - lo > 1:
            mid = (lo + hi) // 2
            end = self._allowed(mid)
            if end < hi and self.fits(start, end):
                good, lo = max(good, end), end
            else:
                hi = mid
        if good <= start:
            good = self._hard_reach(start)
        return good

    def _hard_reach(self, start: int) -> int:
        """The furthest fitting offset ignoring the blocked ones: text so odd that no allowed cut
        fits (a fence line longer than the limit) is still cut rather than refused."""
        lo, hi = start, len(self.text)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.fits(start, mid):
                lo = mid
            else:
                hi = mid
        if lo <= start:
            raise ValueError(f"a part of at most {self.limit} cannot start at offset {start}")
        return lo

    def _allowed(self, offset: int) -> int:
        """`offset`, or the first offset after it where a cut may fall."""
        while offset in self.blocked:
            offset += 1
        return offset


_LINES = re.compile(r"[^\r\n]*(?:\r\n?|\n)|[^\r\n]+$")


def _analyse(text: str) -> tuple[list[_Fence], set[int], dict[int, int]]:
    """The fences (and how to close and reopen each), offsets no cut may fall at, cut levels."""
    # Lines end as markdown-it ends them (it reads \r\n and \r as \n), so its line numbers
    # index this list.
    lines = [m.group() for m in _LINES.finditer(text)]
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    fences: list[_Fence] = []
    blocked: set[int] = set()
    levels: dict[int, int] = {}

    def mark(offset: int, level: int) -> None:
        if 0 < offset < len(text):
            levels[offset] = min(levels.get(offset, level), level)

    for offset in starts[1:-1]:
        mark(offset, _LINE)
    for match in re.finditer(r"[ \t]+", text):
        mark(match.end(), _WORD)
    for token in _parser().parse(text):
        if token.map is None or token.nesting < 0:
            continue
        first, after = token.map[0], min(token.map[1], len(lines))
        mark(starts[first], _BLOCK if token.level == 0 else _NESTED_BLOCK)
        if token.type != "fence" or first >= len(lines):
            continue
        fence = _fence(lines, starts, (first, after), token.markup, token.info)
        fences.append(fence)
        mark(starts[after], _BLOCK if token.level == 0 else _NESTED_BLOCK)
        # No cut inside a delimiter line, nor at either edge of the content: that would leave
        # an empty code block on one side and an unopened one on the other.
        blocked.update(range(starts[first] + 1, fence.content_start + 1))
        blocked.update(range(fence.content_end, starts[after]))
    # A cut inside a line starts the rest of that line on a new line of the next part, where
    # "```" or "~~~" (inline text here) would open a fence: no cut just before such a run.
    line_starts = set(starts)
    for match in re.finditer(r"[ \t]*(?:`{3,}|~{3,})", text):
        blocked.update(o for o in range(match.start(), match.end() - 2) if o not in line_starts)
    for fence in fences:
        # Inside code, a block start is just another line.
        for offset, level in levels.items():
            if fence.content_start < offset < fence.content_end:
                levels[offset] = max(level, _LINE)
    for offset in blocked:
        levels.pop(offset, None)
    return fences, blocked, levels


def _fence(lines: list[str], starts: list[int], span: tuple[int, int], markup: str, info: str) -> _Fence:
    first, after = span
    opening = lines[first].rstrip("\r\n")
    prefix = opening[: opening.find(markup)]
    # What later lines of the same container start with: a list marker becomes spaces, a quote
    # marker stays. The fence is closed and reopened behind it.
    cont = re.sub(r"[-+*]|\d{1,9}[.)]", lambda m: " " * len(m.group()), prefix)
    info = info.strip()
    last = lines[after - 1] if after - 1 > first else ""
    closed = after - 1 > first and _closes(last[len(cont) :] if last.startswith(cont) else last, markup)
    return _Fence(
        content_start=starts[first + 1],
        # An unclosed fence ends where its container does (the end of the text at top level).
        content_end=starts[after - 1] if closed else starts[after],
        # A long info string is dropped when reopening, so a part always has room for code.
        reopen=f"{cont}{markup}{info if len(info) <= 32 else ''}\n",
        close=f"{cont}{markup}",
    )


def _closes(line: str, markup: str) -> bool:
    stripped = line.strip()
    indent = len(line) - len(line.lstrip(" "))
    return len(stripped) >= len(markup) and set(stripped) == {markup[0]} and indent <= 3

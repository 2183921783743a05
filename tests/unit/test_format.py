"""Dialect rendering (golden examples) and splitting (examples and properties)."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.channels.format import (
    LIMITS,
    Dialect,
    render,
    split,
    split_for,
    split_parts,
    to_discord,
    to_slack_mrkdwn,
    to_telegram_html,
    to_whatsapp,
    utf16_len,
)

DIALECTS: list[Dialect] = ["telegram", "slack", "discord", "whatsapp"]

# ---------------------------------------------------------------- rendering: golden examples


@pytest.mark.parametrize(
    ("markdown", "telegram", "slack", "discord", "whatsapp"),
    [
        pytest.param(
            "**bold** _it_ ~~gone~~ `x < y`",
            "<b>bold</b> <i>it</i> <s>gone</s> <code>x &lt; y</code>",
            "*bold* _it_ ~gone~ `x &lt; y`",
            "**bold** *it* ~~gone~~ `x < y`",
            "*bold* _it_ ~gone~ `x < y`",
            id="inline-styles",
        ),
        pytest.param(
            "Tom & Jerry <script>alert(1)</script> 2 > 1",
            "Tom &amp; Jerry &lt;script&gt;alert(1)&lt;/script&gt; 2 &gt; 1",
            "Tom &amp; Jerry &lt;script&gt;alert(1)&lt;/script&gt; 2 &gt; 1",
            "Tom & Jerry \\<script\\>alert(1)\\</script\\> 2 \\> 1",
            "Tom & Jerry <script>alert(1)</script> 2 > 1",
            id="control-characters-and-raw-html",
        ),
        pytest.param(
            "See [the docs](https://example.com/a?b=1&c=2) or <https://x.io/a_b>",
            'See <a href="https://example.com/a?b=1&amp;c=2">the docs</a> or '
            '<a href="https://x.io/a_b">https://x.io/a_b</a>',
            "See <https://example.com/a?b=1&amp;c=2|the docs> or <https://x.io/a_b>",
            "See [the docs](https://example.com/a?b=1&c=2) or https://x.io/a_b",
            "See the docs (https://example.com/a?b=1&c=2) or https://x.io/a_b",
            id="links",
        ),
        pytest.param(
            "```python\nif a < b and c:\n    print('**not bold**')\n```",
            "<pre><code class=\"language-python\">if a &lt; b and c:\n    print('**not bold**')</code></pre>",
            "```\nif a &lt; b and c:\n    print('**not bold**')\n```",
            "```python\nif a < b and c:\n    print('**not bold**')\n```",
            "```if a < b and c:\n    print('**not bold**')```",
            id="code-block-with-language",
        ),
        pytest.param(
            "# Plan\n\n1. first\n2. second\n   - nested\n\n> quoted *word*",
            "<b>Plan</b>\n\n1. first\n2. second\n  • nested\n\n<blockquote>quoted <i>word</i></blockquote>",
            "*Plan*\n\n1. first\n2. second\n  • nested\n\n> quoted _word_",
            "# Plan\n\n1. first\n2. second\n  - nested\n\n> quoted *word*",
            "*Plan*\n\n1. first\n2. second\n  • nested\n\n> quoted _word_",
            id="heading-lists-quote",
        ),
    ],
)
def test_each_dialect_renders_the_same_markdown(
    markdown: str, telegram: str, slack: str, discord: str, whatsapp: str
) -> None:
    assert to_telegram_html(markdown) == telegram
    assert to_slack_mrkdwn(markdown) == slack
    assert to_discord(markdown) == discord
    assert to_whatsapp(markdown) == whatsapp


def test_discord_breaks_mass_mentions_and_escapes_markdown_in_text() -> None:
    rendered = to_discord("@everyone and @here: snake_case *not* \\*literal\\* `@everyone`")
    assert "@\u200beveryone and @\u200bhere" in rendered
    assert "snake\\_case *not* \\*literal\\*" in rendered
    assert rendered.endswith("`@everyone`")  # code is shown as is, and cannot ping


def test_discord_escapes_a_literal_marker_at_the_start_of_a_line() -> None:
    # "\#" in the source is text; unescaped, Discord would draw a heading.
    assert to_discord("\\# not a heading\n\\- not a list") == "\\# not a heading\n\\- not a list"


def test_telegram_keeps_entities_within_what_telegram_nests() -> None:
    # Code inside a link and pre inside a blockquote are refused by Telegram: text stays, tag goes.
    assert to_telegram_html("[`run`](https://x.io)") == '<a href="https://x.io">run</a>'
    assert to_telegram_html("> ```\n> a < b\n> ```") == "<blockquote>a &lt; b</blockquote>"
    # Nested quotes are one quote.
    assert to_telegram_html("> a\n> > b") == "<blockquote>a\n\nb</blockquote>"


def test_telegram_link_with_an_unsupported_scheme_is_shown_as_text() -> None:
    assert to_telegram_html("[call](ftp://x.io/f)") == "call (ftp://x.io/f)"


def test_slack_link_urls_cannot_break_out_of_the_link() -> None:
    assert to_slack_mrkdwn("[a|b](https://x.io/p|q)") == "<https://x.io/p%7Cq|a|b>"


def test_tables_become_aligned_monospace_blocks() -> None:
    table = "| name | n |\n|---|---|\n| alpha | 1 |\n| b | 22 |"
    assert to_slack_mrkdwn(table) == "```\nname  | n\n------+---\nalpha | 1\nb     | 22\n```"


def test_code_fence_inside_code_cannot_close_the_block() -> None:
    assert to_discord("````\n```\nx\n````") == "```\n`\u200b``\nx\n```"


@pytest.mark.parametrize("dialect", DIALECTS)
def test_empty_and_blank_text_render_empty(dialect: Dialect) -> None:
    assert render("", dialect) == ""
    assert render("  \n\n ", dialect) == ""


# ---------------------------------------------------------------- splitting: examples


def test_short_text_is_one_piece() -> None:
    assert split("Hello **world**", 100) == ["Hello **world**"]
    assert split("", 100) == []


def test_paragraph_boundaries_are_preferred() -> None:
    text = "a " * 30 + "\n\n" + "b " * 30 + "\n\n" + "c " * 30
    assert split(text, 130) == ["a " * 30 + "\n\n" + ("b " * 30).rstrip(), ("c " * 30).rstrip()]


def test_a_long_paragraph_is_cut_at_a_line_then_at_a_word() -> None:
    lines = "\n".join(f"line {i} " + "word " * 8 for i in range(10))
    pieces = split(lines, 100)
    assert len(pieces) > 1  # so the checks below have cuts to look at
    assert all(len(p) <= 100 for p in pieces)
    assert all(p.startswith("line ") for p in pieces)  # every cut fell at a line start
    words = split("word " * 100, 64)
    assert len(words) > 1
    assert all(p.endswith("word") for p in words)  # never mid-word


def test_a_code_block_cut_in_two_is_closed_and_reopened_with_its_language() -> None:
    code = "\n".join(f"x{i} = {i}" for i in range(40))
    pieces = split(f"Intro.\n\n```python\n{code}\n```\n\nAfter.", 120)
    assert len(pieces) > 2
    for piece in pieces:
        assert piece.count("```") % 2 == 0, piece
    assert pieces[1].startswith("```python\n")
    cut_code = [p for p in pieces[:-1] if "```python" in p]
    assert cut_code
    assert all(p.endswith("```") for p in cut_code)


def test_the_limit_is_measured_after_escaping() -> None:
    text = "&" * 300  # 300 characters of source, 1500 of Telegram HTML
    pieces = split_for(text, "telegram", 1000)
    assert [len(p) for p in pieces] == [1000, 500]
    assert "".join(pieces) == "&amp;" * 300


def test_the_limit_is_counted_in_utf16_code_units() -> None:
    emoji = "😀" * 60  # 60 characters, 120 UTF-16 code units
    pieces = split_for(emoji, "whatsapp", 100)
    assert [utf16_len(p) for p in pieces] == [100, 20]


def test_split_for_uses_each_platforms_limit() -> None:
    text = ("word " * 60 + "\n\n") * 40  # about 12,000 characters
    for dialect in DIALECTS:
        pieces = split_for(text, dialect)
        # Cuts at good boundaries cost some room, never more than half a message each.
        assert 1 < len(pieces) <= 2 * -(-utf16_len(render(text, dialect)) // LIMITS[dialect])
        assert all(utf16_len(p) <= LIMITS[dialect] for p in pieces)


def test_a_limit_below_the_minimum_is_refused() -> None:
    with pytest.raises(ValueError, match="minimum"):
        split("text", 10)


# ---------------------------------------------------------------- splitting: properties

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_word = st.text(alphabet="abcdefxyz0123456789&<>*_~`@#[]()!.,:-|\\é😀", min_size=1, max_size=12)
_line = st.lists(_word, min_size=1, max_size=14).map(" ".join).filter(lambda s: not _FENCE.match(s))
_paragraph = st.lists(_line, min_size=1, max_size=5).map("\n".join)
_code = st.tuples(
    st.sampled_from(["", "python", "js", "sh"]),
    # A code line that is itself a fence would end the block early: the source would be unbalanced.
    st.lists(
        st.text(alphabet="abc xyz<>&*_`{}();=", max_size=30).filter(lambda s: not _FENCE.match(s)),
        min_size=1,
        max_size=25,
    ),
).map(lambda c: f"```{c[0]}\n" + "\n".join(c[1]) + "\n```")
_item = _line.map(lambda s: f"- {s}")
# A fence inside a list item: cut inside, it must be closed and reopened behind the indent.
_item_code = st.tuples(_line, _code).map(
    lambda t: f"1. {t[0]}\n" + "\n".join("   " + ln for ln in t[1].split("\n"))
)
_quote = _line.map(lambda s: f"> {s}")
_heading = _line.map(lambda s: f"## {s}")
_block = st.one_of(_paragraph, _paragraph, _code, _item, _item_code, _quote, _heading)
_document = st.lists(_block, min_size=1, max_size=12).map("\n\n".join)


def _fences_balanced(piece: str) -> bool:
    """An independent check: top-level fences open and close in pairs within the piece."""
    opened: str | None = None
    for line in piece.split("\n"):
        match = _FENCE.match(line)
        if not match:
            continue
        run = match.group(1)
        if opened is None:
            opened = run
        elif run[0] == opened[0] and len(run) >= len(opened) and line.strip() == run:
            opened = None
    return opened is None


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=_document,
    limit=st.sampled_from([64, 100, 180, 400]),
    dialect=st.sampled_from([*DIALECTS, None]),
)
def test_every_piece_fits_after_rendering_and_keeps_fences_balanced(
    text: str, limit: int, dialect: Dialect | None
) -> None:
    to_text = (lambda s: render(s, dialect)) if dialect else None
    parts = split_parts(text, limit, render=to_text)

    assert "".join(p.source for p in parts) == text  # nothing lost, nothing added to the source
    for part in parts:
        shown = to_text(part.text) if to_text else part.text
        assert utf16_len(shown) <= limit
        assert part.text.strip()
        assert _fences_balanced(part.text), part.text


@settings(max_examples=60, deadline=None)
@given(
    words=st.lists(st.text(alphabet="abcdefghij", min_size=1, max_size=15), min_size=1, max_size=400),
    dialect=st.sampled_from(DIALECTS),
)
def test_plain_text_pieces_carry_every_word_in_order(words: list[str], dialect: Dialect) -> None:
    text = " ".join(words)
    pieces = split_for(text, dialect, 80)
    assert " ".join(pieces).split() == words

"""Folding text for matching: one canonical spelling of what a reader (human or model) would see.

The injection scan matches its patterns against the folded text, so the obfuscations that cost an
attacker nothing do not slip past: case (lowered), fullwidth or mathematical letters (NFKC),
accents (marks dropped), zero-width and other format characters (removed), Cyrillic and Greek
lookalikes (mapped to Latin), and Unicode tag characters (decoded to the ASCII they smuggle, since
a model reads them). The folded text is for matching only; nobody is shown it.

Findings have to point into the original text, so `Folded.origin` maps a folded index back. ASCII
folds to itself lowered, one character for one, so only the non-ASCII runs that folding changed
in length or content are recorded, and mapping
walks one such run at most: folding a megabyte stays a handful of C-level passes.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from dataclasses import dataclass

# Tag characters U+E0020..U+E007E mirror ASCII 0x20..0x7E; invisible, yet models read them.
TAG_FIRST, TAG_LAST = 0xE0000, 0xE007F
_TAG_ASCII_FIRST, _TAG_ASCII_LAST = 0xE0020, 0xE007E

# Letters that render as blank space (Hangul fillers, the braille blank): not format characters,
# so Unicode's categories do not catch them.
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")

# Lookalikes NFKC leaves alone: the Cyrillic and Greek letters that pass for Latin ones in common
# fonts. Matching is case-insensitive, so lower case Latin is enough for both cases.
# Spelled by name: the characters themselves are what a reviewer (and a linter) can't tell apart.
_CONFUSABLES = {
    unicodedata.lookup(name): latin
    for name, latin in (
        ("CYRILLIC SMALL LETTER A", "a"),
        ("CYRILLIC CAPITAL LETTER A", "a"),
        ("CYRILLIC SMALL LETTER VE", "b"),
        ("CYRILLIC CAPITAL LETTER VE", "b"),
        ("CYRILLIC SMALL LETTER ES", "c"),
        ("CYRILLIC CAPITAL LETTER ES", "c"),
        ("CYRILLIC SMALL LETTER KOMI DE", "d"),
        ("CYRILLIC SMALL LETTER IE", "e"),
        ("CYRILLIC CAPITAL LETTER IE", "e"),
        ("CYRILLIC SMALL LETTER IO", "e"),
        ("CYRILLIC SMALL LETTER SHHA", "h"),
        ("CYRILLIC CAPITAL LETTER EN", "h"),
        ("CYRILLIC SMALL LETTER BYELORUSSIAN-UKRAINIAN I", "i"),
        ("CYRILLIC CAPITAL LETTER BYELORUSSIAN-UKRAINIAN I", "i"),
        ("CYRILLIC SMALL LETTER YI", "i"),
        ("CYRILLIC SMALL LETTER JE", "j"),
        ("CYRILLIC CAPITAL LETTER JE", "j"),
        ("CYRILLIC SMALL LETTER KA", "k"),
        ("CYRILLIC CAPITAL LETTER KA", "k"),
        ("CYRILLIC SMALL LETTER PALOCHKA", "l"),
        ("CYRILLIC SMALL LETTER EM", "m"),
        ("CYRILLIC CAPITAL LETTER EM", "m"),
        ("CYRILLIC SMALL LETTER O", "o"),
        ("CYRILLIC CAPITAL LETTER O", "o"),
        ("CYRILLIC SMALL LETTER ER", "p"),
        ("CYRILLIC CAPITAL LETTER ER", "p"),
        ("CYRILLIC SMALL LETTER QA", "q"),
        ("CYRILLIC SMALL LETTER DZE", "s"),
        ("CYRILLIC CAPITAL LETTER DZE", "s"),
        ("CYRILLIC SMALL LETTER TE", "t"),
        ("CYRILLIC CAPITAL LETTER TE", "t"),
        ("CYRILLIC SMALL LETTER U", "y"),
        ("CYRILLIC CAPITAL LETTER U", "y"),
        ("CYRILLIC SMALL LETTER HA", "x"),
        ("CYRILLIC CAPITAL LETTER HA", "x"),
        ("CYRILLIC SMALL LETTER WE", "w"),
        ("CYRILLIC CAPITAL LETTER WE", "w"),
        ("CYRILLIC SMALL LETTER STRAIGHT U", "y"),
        ("CYRILLIC SMALL LETTER PE", "n"),
        ("GREEK SMALL LETTER ALPHA", "a"),
        ("GREEK CAPITAL LETTER ALPHA", "a"),
        ("GREEK SMALL LETTER BETA", "b"),
        ("GREEK CAPITAL LETTER BETA", "b"),
        ("GREEK SMALL LETTER EPSILON", "e"),
        ("GREEK CAPITAL LETTER EPSILON", "e"),
        ("GREEK CAPITAL LETTER ZETA", "z"),
        ("GREEK SMALL LETTER ETA", "n"),
        ("GREEK CAPITAL LETTER ETA", "h"),
        ("GREEK SMALL LETTER IOTA", "i"),
        ("GREEK CAPITAL LETTER IOTA", "i"),
        ("GREEK SMALL LETTER KAPPA", "k"),
        ("GREEK CAPITAL LETTER KAPPA", "k"),
        ("GREEK CAPITAL LETTER MU", "m"),
        ("GREEK SMALL LETTER NU", "v"),
        ("GREEK CAPITAL LETTER NU", "n"),
        ("GREEK SMALL LETTER OMICRON", "o"),
        ("GREEK CAPITAL LETTER OMICRON", "o"),
        ("GREEK SMALL LETTER RHO", "p"),
        ("GREEK CAPITAL LETTER RHO", "p"),
        ("GREEK SMALL LETTER TAU", "t"),
        ("GREEK CAPITAL LETTER TAU", "t"),
        ("GREEK SMALL LETTER UPSILON", "u"),
        ("GREEK CAPITAL LETTER UPSILON", "y"),
        ("GREEK SMALL LETTER CHI", "x"),
        ("GREEK CAPITAL LETTER CHI", "x"),
        ("GREEK SMALL LETTER OMEGA", "w"),
        ("LATIN SMALL LETTER DOTLESS I", "i"),
        ("LATIN SMALL LETTER DOTLESS J", "j"),
        ("LATIN SMALL LETTER SCRIPT G", "g"),
        ("LATIN SMALL LETTER ALPHA", "a"),
        ("LATIN LETTER SMALL CAPITAL Y", "y"),
        ("LATIN LETTER SMALL CAPITAL I", "i"),
        ("LATIN LETTER SMALL CAPITAL R", "r"),
        ("LATIN LETTER SMALL CAPITAL A", "a"),
        ("LATIN LETTER SMALL CAPITAL E", "e"),
    )
}

_NON_ASCII_RUN = re.compile(r"[^\x00-\x7f]+")
# Distinct code points folded so far. Bounded: a text of a million distinct characters must not
# grow a warm Lambda's memory for good.
_CACHE_LIMIT = 65_536


def fold_char(ch: str) -> str:
    """What one character folds to: usually itself, sometimes several characters or none."""
    cp = ord(ch)
    if _TAG_ASCII_FIRST <= cp <= _TAG_ASCII_LAST:
        return chr(cp - TAG_FIRST).lower()
    if ch in _BLANK_LETTERS or unicodedata.category(ch) == "Cf":
        return ""
    decomposed = unicodedata.normalize("NFKD", ch)
    base = "".join(c for c in decomposed if unicodedata.category(c) not in ("Mn", "Me"))
    composed = unicodedata.normalize("NFKC", base)
    # Lowered character by character, so the mapping back knows each one's width.
    return "".join(_CONFUSABLES.get(c, c) for c in composed).lower()


class _FoldTable(dict[int, str]):
    """A `str.translate` table that folds each code point the first time it is asked for."""

    def __missing__(self, cp: int) -> str:
        if len(self) >= _CACHE_LIMIT:
            self.clear()
        folded = fold_char(chr(cp))
        self[cp] = folded
        return folded


_TABLE = _FoldTable()


@dataclass(frozen=True)
class Folded:
    """The folded text and what is needed to map its indices back to the original."""

    text: str
    source: str
    # (folded start, folded end, original start, original end) of each run folding changed,
    # in order; between runs the two texts agree character for character.
    runs: tuple[tuple[int, int, int, int], ...]
    starts: tuple[int, ...]  # the runs' folded starts, for bisect

    def origin(self, index: int) -> int:
        """The original index of the character at folded `index` (or of the end, at len(text))."""
        k = bisect_right(self.starts, index) - 1
        if k < 0:
            return index
        f_start, f_end, o_start, o_end = self.runs[k]
        if index >= f_end:
            return o_end + (index - f_end)
        at = f_start
        for j in range(o_start, o_end):
            width = len(_TABLE[ord(self.source[j])])
            if at + width > index:
                return j
            at += width
        return o_end

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The original span that folded [start, end) came from."""
        if end <= start:
            at = self.origin(start)
            return at, at
        return self.origin(start), self.origin(end - 1) + 1


def fold(text: str) -> Folded:
    if text.isascii():
        return Folded(text.lower(), text, (), ())
    pieces: list[str] = []
    runs: list[tuple[int, int, int, int]] = []
    last = 0  # end of the original text consumed so far
    size = 0  # length of the folded text built so far
    for m in _NON_ASCII_RUN.finditer(text):
        start, end = m.span()
        pieces.append(text[last:start].lower())
        size += start - last
        run = m.group()
        folded = run.translate(_TABLE)
        pieces.append(folded)
        if folded != run:
            runs.append((size, size + len(folded), start, end))
        size += len(folded)
        last = end
    pieces.append(text[last:].lower())
    return Folded("".join(pieces), text, tuple(runs), tuple(r[0] for r in runs))

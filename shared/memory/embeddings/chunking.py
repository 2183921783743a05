"""Splitting long texts into overlapping chunks for embedding (spec 003, "Text Chunking").

Embedding models see a bounded window (MiniLM truncates at 256 tokens, ~1000 characters of
English), so a long memory is embedded piece by piece and a hit on any piece finds it. Chunks
end at sentence boundaries where they can, and consecutive chunks share up to ~320 characters
(whole sentences), so a fact that straddles a boundary is whole in at least one chunk.

Every chunk is an exact slice of the text: `text[chunk.start:chunk.end] == chunk.text`, which
lets a hit point back at the span it came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CHUNK_CHARS = 1600  # ~400 tokens
OVERLAP_CHARS = 320  # ~80 tokens
# A text a little over one chunk is kept whole: two chunks that mostly overlap would cost a
# second embedding and find nothing the single one would not.
SINGLE_CHUNK_BELOW = 1920

# A sentence ends after terminal punctuation followed by whitespace, or at a blank line. The
# whitespace run after the boundary belongs to the sentence before it, so sentences tile the text.
_BOUNDARY = re.compile(r"[.!?]+\s+|\n[ \t]*\n\s*")


@dataclass(frozen=True)
class Chunk:
    index: int
    start: int  # offset of the first character in the original text
    end: int  # offset one past the last character
    text: str


def chunk_text(
    text: str,
    *,
    chunk_chars: int = CHUNK_CHARS,
    overlap_chars: int = OVERLAP_CHARS,
    single_chunk_below: int = SINGLE_CHUNK_BELOW,
) -> list[Chunk]:
    """Chunks covering all of `text`, in order.

    A blank text has no chunks; a text shorter than `single_chunk_below` is one chunk. Otherwise
    each chunk is at most `chunk_chars` long: whole sentences where they fit, and a sentence
    longer than a chunk is split on its own (at whitespace when there is some in the second half
    of the window, else mid-word).
    """
    if chunk_chars < 1 or not 0 <= overlap_chars < chunk_chars:
        raise ValueError("need chunk_chars >= 1 and 0 <= overlap_chars < chunk_chars")
    if not text.strip():
        return []
    if len(text) < single_chunk_below:
        return [Chunk(index=0, start=0, end=len(text), text=text)]

    spans = [piece for span in _sentence_spans(text) for piece in _hard_split(text, span, chunk_chars)]
    chunks: list[Chunk] = []
    i = 0
    while i < len(spans):
        start = spans[i][0]
        j = i + 1  # every span fits in a chunk, so a chunk takes at least one
        while j < len(spans) and spans[j][1] - start <= chunk_chars:
            j += 1
        end = spans[j - 1][1]
        chunks.append(Chunk(index=len(chunks), start=start, end=end, text=text[start:end]))
        if j == len(spans):
            break
        # Rewind: the next chunk starts with the trailing sentences of this one that fit in the
        # overlap, but always after this chunk's first sentence, so every step moves forward.
        k = j
        while k - 1 > i and end - spans[k - 1][0] <= overlap_chars:
            k -= 1
        i = k
    return chunks


def _sentence_spans(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        spans.append((start, match.end()))
        start = match.end()
    if start < len(text):
        spans.append((start, len(text)))
    return spans


def _hard_split(text: str, span: tuple[int, int], limit: int) -> list[tuple[int, int]]:
    start, end = span
    pieces: list[tuple[int, int]] = []
    while end - start > limit:
        cut = start + limit
        # Prefer to cut after whitespace, unless that would leave a piece under half the limit.
        space = max(text.rfind(" ", start, cut), text.rfind("\n", start, cut))
        if space >= start + limit // 2:
            cut = space + 1
        pieces.append((start, cut))
        start = cut
    pieces.append((start, end))
    return pieces

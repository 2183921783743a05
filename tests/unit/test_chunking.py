"""shared.memory.embeddings.chunking: spec 003's sentence-aware chunker with overlap."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.memory.embeddings.chunking import (
    CHUNK_CHARS,
    OVERLAP_CHARS,
    SINGLE_CHUNK_BELOW,
    Chunk,
    chunk_text,
)


def _sentence(i: int, length: int = 100) -> str:
    return f"Sentence {i} talks about item {i}".ljust(length - 2, "z") + ". "


def _assert_exact_slices(text: str, chunks: list[Chunk]) -> None:
    for n, c in enumerate(chunks):
        assert c.index == n
        assert text[c.start : c.end] == c.text


def test_blank_text_has_no_chunks() -> None:
    assert chunk_text("") == []
    assert chunk_text(" \n\t ") == []


def test_short_text_is_one_chunk_even_above_the_chunk_size() -> None:
    text = "x. " * ((SINGLE_CHUNK_BELOW - 1) // 3)
    assert CHUNK_CHARS < len(text) < SINGLE_CHUNK_BELOW
    assert chunk_text(text) == [Chunk(index=0, start=0, end=len(text), text=text)]


def test_long_text_splits_at_sentence_ends_with_overlap() -> None:
    sentences = [_sentence(i) for i in range(40)]  # 4000 chars of 100-char sentences
    text = "".join(sentences)
    chunks = chunk_text(text)
    _assert_exact_slices(text, chunks)

    # 16 sentences of 100 chars fill a chunk; the next starts 3 sentences (300 <= 320) back.
    assert [(c.start, c.end) for c in chunks] == [(0, 1600), (1300, 2900), (2600, 4000)]
    for c in chunks:
        assert len(c.text) <= CHUNK_CHARS
        assert c.text.startswith("Sentence ")
        assert c.text.endswith(". ")
    for prev, nxt in itertools.pairwise(chunks):
        assert 0 < prev.end - nxt.start <= OVERLAP_CHARS


def test_question_and_exclamation_marks_and_blank_lines_are_boundaries() -> None:
    part = "Why did it fail? Nobody knows! It just did.\n\nNew paragraph without a full stop\n\n"
    text = part * 60
    chunks = chunk_text(text)
    _assert_exact_slices(text, chunks)
    assert len(chunks) > 1
    for c in chunks:
        assert c.text.startswith(("Why", "Nobody", "It ", "New"))


def test_a_sentence_longer_than_a_chunk_is_split_at_whitespace() -> None:
    words = "word " * 1000  # 5000 chars, no sentence end
    chunks = chunk_text(words)
    _assert_exact_slices(words, chunks)
    assert all(len(c.text) <= CHUNK_CHARS for c in chunks)
    assert all(c.text.endswith(" ") for c in chunks)
    assert "".join(c.text for c in chunks) == words  # no overlap inside one long sentence


def test_an_unbroken_run_is_split_mid_word() -> None:
    blob = "a" * 4000
    chunks = chunk_text(blob)
    assert [(c.start, c.end) for c in chunks] == [(0, 1600), (1600, 3200), (3200, 4000)]


def test_parameters_are_validated() -> None:
    with pytest.raises(ValueError):
        chunk_text("x", chunk_chars=100, overlap_chars=100)
    with pytest.raises(ValueError):
        chunk_text("x", chunk_chars=0)


_pieces = st.sampled_from(
    ["Hello there. ", "What? ", "Wow!\n", "\n\n", "a", "bb ", "word ", "no-stop-here", "x" * 50, ". ", "  "]
)


@settings(max_examples=200, deadline=None)
@given(
    parts=st.lists(_pieces, max_size=120),
    chunk_chars=st.integers(min_value=10, max_value=300),
    overlap_ratio=st.floats(min_value=0.0, max_value=0.9),
    single_below=st.integers(min_value=0, max_value=400),
)
def test_chunks_cover_the_text_in_order_and_respect_the_limit(
    parts: list[str], chunk_chars: int, overlap_ratio: float, single_below: int
) -> None:
    text = "".join(parts)
    overlap = int(chunk_chars * overlap_ratio)
    chunks = chunk_text(text, chunk_chars=chunk_chars, overlap_chars=overlap, single_chunk_below=single_below)

    if not text.strip():
        assert chunks == []
        return
    _assert_exact_slices(text, chunks)
    # Every character is covered: the first chunk starts at 0, the last ends at the end, and
    # each chunk starts no later than the previous one ends.
    assert chunks[0].start == 0
    assert chunks[-1].end == len(text)
    for prev, nxt in itertools.pairwise(chunks):
        assert prev.start < nxt.start  # order preserved, always progressing
        assert nxt.start <= prev.end  # no gap
        assert prev.end - nxt.start <= overlap  # overlap bounded
        assert prev.end <= nxt.end
    # Chunks respect the limit, except a text short enough to be kept whole.
    if len(chunks) > 1:
        assert all(0 < len(c.text) <= chunk_chars for c in chunks)
    else:
        assert len(text) < single_below or len(text) <= chunk_chars

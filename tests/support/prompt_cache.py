"""The providers' prompt caches, as the fake servers model them, for the usage they report.

Each fake counts tokens its own way (words, mostly); these caches count in the same units, so a
fake's cached tokens are always a part of the prompt tokens it reports. The rules are the ones
each provider documents (tests/fixtures/SOURCES.md, "Prompt caching"):

- OpenAI caches automatically: a request whose prompt (tools, then messages) opens with a prefix
  it has seen reads that prefix from the cache, once the prefix is at least 1,024 tokens, in
  steps of 128 (`usage.prompt_tokens_details.cached_tokens`). Nothing is billed as a write.
- Anthropic and Bedrock cache up to explicit breakpoints (a block's `cache_control`, a Converse
  `cachePoint` block): the prompt up to the furthest breakpoint whose prefix is cached is read
  (`cache_read_input_tokens`, `cacheReadInputTokens`), the rest up to the last breakpoint is
  written (`cache_creation_input_tokens`, `cacheWriteInputTokens`), and a prefix shorter than the
  model's minimum (1,024 tokens for most Claude models) is not cached at all.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any

# OpenAI's documented thresholds (platform.openai.com/docs/guides/prompt-caching).
OPENAI_MIN_TOKENS = 1024
OPENAI_INCREMENT = 128
# Anthropic's minimum cacheable prompt for most models (docs.claude.com, prompt caching).
ANTHROPIC_MIN_TOKENS = 1024


@dataclass(frozen=True)
class Unit:
    """One piece of a prompt in the provider's cache order: its canonical text, its tokens, and
    whether a breakpoint follows it."""

    text: str
    tokens: int
    breakpoint: bool = False


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass
class BreakpointCache:
    """Anthropic's and Bedrock's cache: prefixes that end at a breakpoint, by digest."""

    min_tokens: int = ANTHROPIC_MIN_TOKENS
    _prefixes: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def use(self, units: list[Unit]) -> tuple[int, int]:
        """(tokens read from the cache, tokens written to it) for a request of `units`."""
        digest, tokens = hashlib.sha256(), 0
        breakpoints: list[tuple[str, int]] = []  # (prefix digest, prefix tokens)
        for unit in units:
            digest.update(unit.text.encode() + b"\x00")
            tokens += unit.tokens
            if unit.breakpoint and tokens >= self.min_tokens:
                breakpoints.append((digest.copy().hexdigest(), tokens))
        if not breakpoints:
            return 0, 0
        with self._lock:
            read = max((n for key, n in breakpoints if key in self._prefixes), default=0)
            self._prefixes.update(key for key, _ in breakpoints)
        return read, breakpoints[-1][1] - read


@dataclass
class AutomaticCache:
    """OpenAI's cache: the longest prefix, in tokens, shared with a prompt seen before."""

    min_tokens: int = OPENAI_MIN_TOKENS
    increment: int = OPENAI_INCREMENT
    _seen: list[list[str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def use(self, tokens: list[str]) -> int:
        """The cached tokens of a prompt given as its tokens in order (tools' digest first)."""
        with self._lock:
            shared = max((_common(tokens, seen) for seen in self._seen), default=0)
            self._seen.append(tokens)
            del self._seen[:-64]  # recent prompts only, as a real cache evicts
        if shared < self.min_tokens:
            return 0
        return self.min_tokens + (shared - self.min_tokens) // self.increment * self.increment


def _common(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n

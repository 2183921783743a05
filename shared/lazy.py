"""What is made the first time it is needed, not when its module is imported or its owner built.

`once(make)`: `make()` called by the first caller, its result kept for every caller after,
whatever threads ask at the same moment; a failure is not kept, the next call makes it again (the
batch's turn dependencies, the platforms' HTTP client, consolidation's model).

`LazyPattern`: a regular expression compiled the first time it is used.

The safety scan and the redactor hold about a hundred patterns, each behind literals one of which
the text must contain before the pattern runs (shared.safety): most messages never run most of
them. Compiled at import they were 17 ms of the agent's cold import, every cold start; lazily,
only what a text needs is compiled, once per process.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")


def once(make: Callable[[], T]) -> Callable[[], T]:
    """`make`, called at most once successfully, however many threads ask at the same moment."""
    lock = threading.Lock()
    made: list[T] = []

    def get() -> T:
        with lock:
            if not made:
                made.append(make())
            return made[0]

    return get


class LazyPattern:
    """`re.compile(pattern, flags)`, the first time a method needs it. `pattern` and `flags` read
    as a compiled pattern's do, without compiling. Two threads may both compile it the first time:
    the same pattern either way."""

    __slots__ = ("_compiled", "flags", "pattern")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags
        self._compiled: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self.pattern, self.flags)
        return self._compiled

    def search(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self.compiled.search(string, pos, endpos)

    def fullmatch(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self.compiled.fullmatch(string, pos, endpos)

    def finditer(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> Iterator[re.Match[str]]:
        return self.compiled.finditer(string, pos, endpos)

    def sub(self, repl: str | Callable[[re.Match[str]], str], string: str, count: int = 0) -> str:
        return self.compiled.sub(repl, string, count)

    def __repr__(self) -> str:
        return f"LazyPattern({self.pattern!r}, {self.flags!r})"

"""The lookup key of a triple's subject or object (spec 003's memory-key normalisation).

Domain rule shared by every MemoryStore adapter, so "Code_Style" finds "code style" in SQLite and
in DynamoDB alike.
"""

from __future__ import annotations

import re

_SEPARATORS = re.compile(r"[\s_\-]+")
_SLASHES = re.compile(r"\s*/+\s*")


def normalize_key(value: str) -> str:
    """Case-folded; runs of spaces, underscores and hyphens become one hyphen, repeated slashes one
    slash, and leading or trailing separators go.
    """
    key = _SLASHES.sub("/", value.casefold())
    key = _SEPARATORS.sub("-", key)
    return key.strip("-/")

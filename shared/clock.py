"""Time in one place, so tests can pin it and every timestamp is timezone-aware UTC."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)


def epoch_seconds() -> float:
    return time.time()


def new_id(prefix: str = "") -> str:
    """Time-ordered unique ids (uuid7-like: ms timestamp then randomness) sort in creation order."""
    ms = int(time.time() * 1000)
    rand = uuid.uuid4().hex[:16]
    return f"{prefix}{ms:013x}{rand}"

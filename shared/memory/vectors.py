"""Vector helpers shared by every index adapter, so they agree on what can be searched."""

from __future__ import annotations

import math
from collections.abc import Sequence


def usable_vector(vector: Sequence[float] | None) -> bool:
    """True for a non-empty, finite, non-zero vector.

    Cosine distance to a zero vector is undefined (sqlite-vec returns NULL, which would sort first;
    OpenSearch rejects it), so such documents are indexed for text search only.
    """
    if not vector:
        return False
    norm = 0.0
    for x in vector:
        if not math.isfinite(x):
            return False
        norm += x * x
    return norm > 0.0

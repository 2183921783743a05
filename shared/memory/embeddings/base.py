"""What every remote embedder does to a response before handing vectors back."""

from __future__ import annotations

import math
from collections.abc import Sequence

from shared.errors import EmbeddingError

# OpenAI and Titan both refuse an empty input; a single space embeds as "nothing" and keeps the
# one-vector-per-text contract for callers that pass a blank chunk.
BLANK_STAND_IN = " "


def api_input(text: str) -> str:
    if not isinstance(text, str):
        raise EmbeddingError(f"can only embed str, got {type(text).__name__}")
    return text if text.strip() else BLANK_STAND_IN


def unit(vector: Sequence[float], dimensions: int, model_id: str) -> list[float]:
    """The vector as floats, checked for width and scaled to unit length.

    OpenAI and Titan (normalize=true) already answer with unit vectors; OpenAI-compatible servers
    may not, and the index's cosine scores assume it. A zero vector is left as it is: the index
    adapters refuse it for k-NN (shared.memory.vectors.usable_vector).
    """
    if len(vector) != dimensions:
        raise EmbeddingError(f"{model_id} returned a {len(vector)}-dimensional vector, expected {dimensions}")
    values = [float(x) for x in vector]
    norm = math.hypot(*values)
    if not math.isfinite(norm):
        raise EmbeddingError(f"{model_id} returned a vector with non-finite values")
    if norm > 0.0 and abs(norm - 1.0) > 1e-6:
        values = [x / norm for x in values]
    return values

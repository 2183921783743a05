"""A deterministic offline embedder for tests and benchmarks: hashed character trigrams and words.

Not a language model: texts that share most of their characters get vectors with a high cosine
(one word changed in a sentence of ten is about 0.9; case and punctuation are ignored) and
unrelated texts a low one. That is what dedup, backfill and search need to be exercised for real
without a model download; the MiniLM tests cover actual meaning.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np


class HashingEmbedder:
    def __init__(self, dimensions: int = 384, *, model_id: str = "test/hashing-trigram-v1") -> None:
        self.dimensions = dimensions
        self.model_id = model_id
        self.calls: list[int] = []  # the batch size of every embed call

    def _features(self, text: str) -> list[str]:
        # Case and punctuation barely move a sentence embedding; here they do not at all.
        folded = " ".join(re.sub(r"[\W_]+", " ", text.casefold()).split())
        padded = f"  {folded}  "
        grams = [padded[i : i + 3] for i in range(len(padded) - 2)]
        return grams + [f"w:{w}" for w in folded.split()]

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(len(texts))
        out = []
        for text in texts:
            v = np.zeros(self.dimensions)
            for feature in self._features(text):
                digest = hashlib.blake2b(f"{self.model_id}|{feature}".encode(), digest_size=8).digest()
                h = int.from_bytes(digest, "little")
                v[h % self.dimensions] += 1.0 if (h >> 32) & 1 else -1.0
            norm = float(np.linalg.norm(v)) or 1.0
            out.append((v / norm).tolist())
        return out

"""A workspace's triples in memory, as the finish phase (dedup, cap, purge) needs them whole."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from shared.models import Triple


@dataclass
class Scope:
    """A workspace's triples in memory, with each vector as one numpy row instead of a list of
    Python floats (a twelfth of the memory); `full` puts it back for a write."""

    triples: dict[str, Triple] = field(default_factory=dict)
    vectors: dict[str, npt.NDArray[np.float64]] = field(default_factory=dict)
    _dirty: set[str] = field(default_factory=set)

    def add(self, t: Triple) -> None:
        if t.status != "active" or t.embedding is None:
            # Merged and pruned triples are only read (for the purge): kept as they are.
            self.triples[t.id] = t.model_copy()
            return
        self.vectors[t.id] = np.asarray(t.embedding, dtype=np.float64)
        self.triples[t.id] = t.model_copy(update={"embedding": None})

    def update(self, t: Triple) -> None:
        """A changed triple (the vector, if any, stays in `vectors`), written by the finish step."""
        self.triples[t.id] = t if t.embedding is None else t.model_copy(update={"embedding": None})
        self._dirty.add(t.id)

    def active(self) -> list[Triple]:
        return [t for t in self.triples.values() if t.status == "active"]

    def dirty(self) -> list[Triple]:
        return [self.triples[i] for i in sorted(self._dirty)]

    def full(self, t: Triple) -> Triple:
        vector = self.vectors.get(t.id)
        return t if vector is None else t.model_copy(update={"embedding": vector.tolist()})

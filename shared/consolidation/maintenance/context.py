"""What the phases of one maintenance run share: the backend, the run's clock and deadline, and
whether the embedder still answers."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from shared.consolidation.deadline import Deadline
from shared.consolidation.maintenance.checkpoint import Checkpoint, save_checkpoint
from shared.consolidation.maintenance.policy import MaintenancePolicy
from shared.consolidation.maintenance.report import PhaseResult, Stage
from shared.models import Triple

if TYPE_CHECKING:
    from shared.backend import Backend
    from shared.consolidation.maintenance.scope import Scope
    from shared.ports import Embedder

log = logging.getLogger("sigil.consolidation.maintenance")


@dataclass
class Run:
    backend: Backend
    workspace_id: str
    run_id: str
    deadline: Deadline
    now: datetime
    policy: MaintenancePolicy
    embedding_ok: bool = True
    # The whole scope as a score phase that started at the first page saw it, so the finish
    # phase reuses it instead of reading everything again; None after a resume.
    scope: Scope | None = None

    @property
    def embedder(self) -> Embedder | None:
        return self.backend.embedder if self.embedding_ok else None

    def out_of_time(self) -> bool:
        return self.deadline.expired(self.policy.unit_reserve_s)

    def checkpoint(self, phase: Stage | None, after: str | None = None) -> None:
        """Save where the next run resumes; None: the last phase is done."""
        value = Checkpoint(phase=phase or "done", after=after, run_id=self.run_id, at=self.now)
        save_checkpoint(self.backend, self.workspace_id, value)

    def write(self, result: PhaseResult, triples: Sequence[Triple]) -> None:
        if triples:
            self.backend.memory.put_triples(self.workspace_id, triples)
            result.written += len(triples)

    def unindex(self, result: PhaseResult, ids: Sequence[str]) -> None:
        if ids:
            self.backend.index.delete(self.workspace_id, list(ids))
            result.index_deleted += len(ids)

    def embed_or_give_up(
        self, result: PhaseResult, embedder: Embedder, texts: list[str], what: str
    ) -> list[list[float]] | None:
        """The vectors of `texts`, or None when the embedder failed: counted and logged, and the
        rest of this run goes without embeddings (an outage must not stop maintenance; the next
        run tries again)."""
        try:
            return embedder.embed(texts)
        except Exception as exc:  # noqa: BLE001
            log.warning(
                f"{what} failed; the rest of this run goes without it",
                extra={"workspace_id": self.workspace_id, "error_type": type(exc).__name__},
            )
            self.give_up_embedding(result, len(texts))
            return None

    def give_up_embedding(self, result: PhaseResult, failed: int) -> None:
        result.embed_failures += failed
        self.embedding_ok = False

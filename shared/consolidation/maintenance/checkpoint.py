"""The run's checkpoint (ConsolidationState, name "maintenance"): the phase to resume in and,
for the score phase, the id of the last page done."""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import TYPE_CHECKING, Final, Literal

from pydantic import BaseModel, Field, ValidationError

from shared.clock import utcnow
from shared.consolidation.maintenance.report import Stage

if TYPE_CHECKING:
    from shared.backend import Backend

log = logging.getLogger("sigil.consolidation.maintenance")

CHECKPOINT: Final = "maintenance"


class Checkpoint(BaseModel):
    phase: Stage | Literal["done"]
    after: str | None = None
    run_id: str
    at: datetime = Field(default_factory=utcnow)


def load_checkpoint(backend: Backend, workspace_id: str) -> Checkpoint | None:
    raw = backend.consolidation.get_checkpoint(workspace_id, CHECKPOINT)
    if not raw:
        return None
    try:
        return Checkpoint.model_validate(json.loads(raw))
    except (ValueError, ValidationError):
        log.warning("maintenance checkpoint unreadable; starting over", extra={"workspace_id": workspace_id})
        return None


def save_checkpoint(backend: Backend, workspace_id: str, checkpoint: Checkpoint) -> None:
    backend.consolidation.put_checkpoint(workspace_id, CHECKPOINT, checkpoint.model_dump_json())

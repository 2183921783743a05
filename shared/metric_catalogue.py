"""Every CloudWatch metric the functions emit: name, unit, dimensions, who emits it and what it counts.

The one list the code and the stack read. Each `add_metric` call names a constant from here, the
consolidation reports' metric dictionaries are keyed by these names, the dashboard
(infra/constructs/dashboard.py) draws each of them and the alarms read only these; the tests hold
all three sides to the list (tests/unit/test_metric_catalogue.py, tests/infra/test_observability.py).

Free of powertools on purpose: the CLI and the local gateway import the modules that count retries
and search fallbacks, and must not pay for (or be reconfigured by) powertools' logger and tracer.
Those modules call `record`, which adds to powertools' metrics only in a process that loaded
shared.observability (the Lambda handlers do), and does nothing anywhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal

NAMESPACE: Final = "Sigil"
SERVICE: Final = "sigil"
# powertools' Metrics puts its service on every metric as this dimension.
SERVICE_DIMENSION: Final = "service"
WORKSPACE_DIMENSION: Final = "workspace_id"

# powertools' MetricUnit values (its enum is not imported here, see above); "None" is NoUnit.
Unit = Literal["Count", "Milliseconds", "None"]
Function = Literal["webhook", "agent", "consolidate"]


@dataclass(frozen=True)
class Metric:
    name: str
    unit: Unit
    emitted_by: tuple[Function, ...]
    meaning: str
    # Every metric carries the service; the per-workspace ones carry the workspace too, one metric
    # per workspace (bounded: workspaces are configured, never created by a sender).
    dimensions: tuple[str, ...] = (SERVICE_DIMENSION,)


def _count(name: str, by: Function, meaning: str) -> Metric:
    return Metric(name, "Count", (by,), meaning)


def _ms(name: str, by: Function, meaning: str) -> Metric:
    return Metric(name, "Milliseconds", (by,), meaning)


# ---------------------------------------------------------------- webhook (shared.ingress.metered)

MESSAGES_QUEUED = _count("MessagesQueued", "webhook", "messages put on a lane")
MESSAGES_DUPLICATE = _count("MessagesDuplicate", "webhook", "web messages already queued (a client retry)")
HANDSHAKES = _count("Handshakes", "webhook", "platform handshakes answered (URL checks, pings)")
EVENTS_IGNORED = _count("EventsIgnored", "webhook", "platform events that carry no message for us")
REQUESTS_REFUSED = _count("RequestsRefused", "webhook", "requests answered with an error status")

# ---------------------------------------------------------------- agent (shared.agent.batch)

TURN_DURATION = _ms("TurnDuration", "agent", "one turn, from its start to its commit")
TOKENS_IN = _count("TokensIn", "agent", "model input tokens per turn")
TOKENS_OUT = _count("TokensOut", "agent", "model output tokens per turn")
TOOL_CALLS = _count("ToolCalls", "agent", "tool calls per turn")
COST_USD = Metric("CostUSD", "None", ("agent",), "model cost per turn in US dollars (price table)")
WORKSPACE_TOKENS_IN = Metric(
    "WorkspaceTokensIn",
    "Count",
    ("agent",),
    "model input tokens per turn, per workspace",
    (SERVICE_DIMENSION, WORKSPACE_DIMENSION),
)
WORKSPACE_TOKENS_OUT = Metric(
    "WorkspaceTokensOut",
    "Count",
    ("agent",),
    "model output tokens per turn, per workspace",
    (SERVICE_DIMENSION, WORKSPACE_DIMENSION),
)
WORKSPACE_COST_USD = Metric(
    "WorkspaceCostUSD",
    "None",
    ("agent",),
    "model cost per turn in US dollars, per workspace",
    (SERVICE_DIMENSION, WORKSPACE_DIMENSION),
)
TURNS_NOT_STARTED = _count("TurnsNotStarted", "agent", "turns left to the next delivery: no time left")
TURNS_COALESCED = _count("TurnsCoalesced", "agent", "turns that carried a burst of messages")
TURNS_COMPLETED = _count("TurnsCompleted", "agent", "lane records done per batch")
TURNS_FAILED = _count("TurnsFailed", "agent", "lane records returned to the lane per batch")
TURNS_GIVEN_UP = _count("TurnsGivenUp", "agent", "records on their last delivery: apologised for")
APOLOGIES_UNDELIVERED = _count("ApologiesUndelivered", "agent", "apologies the platform refused")
PROVIDER_ERRORS = _count("ProviderErrors", "agent", "turns failed by the model provider, retries spent")

# The AuditRecord outcomes (shared.models.AuditRecord.outcome), one count each as Outcome_<outcome>.
OUTCOME_NAMES: Final = (
    "ok",
    "error",
    "skipped_duplicate",
    "model_not_configured",
    "budget_denied",
    "limited",
    "pairing_required",
    "sender_refused",
    "refused",
    "given_up",
    "command",  # a chat command (/status, /new, /model, /skills), answered without the model
    "scheduled",  # a fired reminder, sent without the model (shared.schedules)
)
OUTCOMES: Final[Mapping[str, Metric]] = MappingProxyType(
    {o: _count(f"Outcome_{o}", "agent", f"turns whose outcome was {o}") for o in OUTCOME_NAMES}
)
BUDGET_DENIED = OUTCOMES["budget_denied"]

# ---------------------------------------------------------------- model calls and memory search
# Counted in whichever function makes the call (shared.providers.resilient, shared.memory.search).

_BOTH: Final[tuple[Function, ...]] = ("agent", "consolidate")
PROVIDER_RETRIES = Metric(
    "ProviderRetries", "Count", _BOTH, "model calls made again after a retryable failure (fallback set)"
)
PROVIDER_FALLBACKS = Metric("ProviderFallbacks", "Count", _BOTH, "model calls handed to SIGIL_FALLBACK_MODEL")
SEARCH_FALLBACK_BM25 = Metric(
    "SearchFallbackBm25", "Count", ("agent",), "searches answered by BM25 alone: no query embedding"
)
SEARCH_FALLBACK_RECENT = Metric(
    "SearchFallbackRecent", "Count", ("agent",), "searches answered by recent messages: index failed"
)

# ---------------------------------------------------------------- consolidate (shared.consolidation)

SCHEDULE_TICKS = _count("ScheduleTicks", "consolidate", "hourly runs started")
COMPACTION_REQUESTS = _count("CompactionRequests", "consolidate", "CompactionDue events received")
MAINTENANCE_REQUESTS = _count("MaintenanceRequests", "consolidate", "MaintenanceDue events received")
SUMMARIES_WRITTEN = _count("SummariesWritten", "consolidate", "summaries written")
FACTS_EXTRACTED = _count("FactsExtracted", "consolidate", "facts extracted from summaries")
FACTS_MERGED = _count("FactsMerged", "consolidate", "extracted facts merged into known ones")
FACTS_DROPPED = _count("FactsDropped", "consolidate", "extracted facts dropped")
COMPACTION_BUSY = _count("CompactionBusy", "consolidate", "compactions skipped: another run held the lease")
COMPACTION_OVER_BUDGET = _count("CompactionOverBudget", "consolidate", "compactions stopped by a budget")
CONSOLIDATION_ERRORS = _count("ConsolidationErrors", "consolidate", "sessions or workspaces that failed")
CONSOLIDATION_TOKENS_IN = _count("ConsolidationTokensIn", "consolidate", "model input tokens")
CONSOLIDATION_TOKENS_OUT = _count("ConsolidationTokensOut", "consolidate", "model output tokens")
COMPACTION_DURATION = _ms("CompactionDurationMs", "consolidate", "one CompactionDue's compaction")
CONSOLIDATION_RUN_DURATION = _ms("ConsolidationRunMs", "consolidate", "one hourly run")
CONSOLIDATION_PARTIAL = _count("ConsolidationPartial", "consolidate", "hourly runs that ran out of time")
TURN_EXTRACTION_REQUESTS = _count("TurnExtractionRequests", "consolidate", "TurnCommitted events received")
TURN_EXTRACTIONS = _count("TurnExtractions", "consolidate", "per-turn extractions that ran")
TURN_EXTRACTION_FACTS = _count("TurnExtractionFacts", "consolidate", "new facts from per-turn extraction")
TURN_EXTRACTION_SUPERSEDED = _count(
    "TurnExtractionSuperseded", "consolidate", "TurnCommitted skipped: a later turn's will extract"
)
TURN_EXTRACTION_BUSY = _count("TurnExtractionBusy", "consolidate", "per-turn extractions skipped: lease held")
TURN_EXTRACTION_OVER_BUDGET = _count(
    "TurnExtractionOverBudget", "consolidate", "per-turn extractions skipped by a used-up budget"
)
MAINTENANCE_SCORED = _count("MaintenanceScored", "consolidate", "facts scored")
MAINTENANCE_PROMOTED = _count("MaintenancePromoted", "consolidate", "facts promoted")
MAINTENANCE_PRUNED = _count("MaintenancePruned", "consolidate", "facts pruned or capped")
MAINTENANCE_MERGED = _count("MaintenanceMerged", "consolidate", "facts merged (exact and near)")
MAINTENANCE_BACKFILLED = _count("MaintenanceBackfilled", "consolidate", "facts given their vector")
MAINTENANCE_PURGED = _count("MaintenancePurged", "consolidate", "records purged past retention")
MAINTENANCE_MESSAGES_BACKFILLED = _count(
    "MaintenanceMessagesBackfilled", "consolidate", "message documents given their vector"
)
MAINTENANCE_SUMMARIES_BACKFILLED = _count(
    "MaintenanceSummariesBackfilled", "consolidate", "summary documents given their vector"
)
MAINTENANCE_SCOPES_BACKFILLED = _count(
    "MaintenanceScopesBackfilled", "consolidate", "records given their legacy scope"
)
MAINTENANCE_DURATION = _ms("MaintenanceDurationMs", "consolidate", "maintenance runs' time")
MAINTENANCE_COMPLETE = _count("MaintenanceComplete", "consolidate", "maintenance runs that finished")


def _catalogue() -> dict[str, Metric]:
    found = [v for v in globals().values() if isinstance(v, Metric)] + list(OUTCOMES.values())
    return {m.name: m for m in sorted(found, key=lambda m: m.name)}


CATALOGUE: Final[Mapping[str, Metric]] = MappingProxyType(_catalogue())

# ---------------------------------------------------------------- counting from the lower layers

Sink = Callable[[Metric, float], None]
_sink: list[Sink] = []


def set_sink(sink: Sink) -> None:
    """Where `record` adds its counts (shared.observability sets powertools' metrics)."""
    _sink[:] = [sink]


def record(metric: Metric, value: float = 1.0) -> None:
    """Add `value` to `metric` in a process that publishes metrics; nothing in one that does not."""
    for sink in _sink:
        sink(metric, value)

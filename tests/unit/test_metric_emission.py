"""The counts added at their source for the dashboard: tokens and cost per workspace, turns failed by
the model provider, provider retries and fallbacks, memory search fallbacks.

Read from powertools' own metric set (what the handler's `log_metrics` flushes) and from the EMF
line printed for the per-workspace ones; the turns run on the embedded backend with the sample SQS
records (events/), the provider is the function-backed one, the search the real embedded index.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.adapters.embedded import Database, SqliteMemoryIndex, SqliteMemoryStore, build_embedded_backend
from shared.agent.batch import Plan, TurnRecord, run_record
from shared.agent.turn import TurnDeps
from shared.backend import Backend
from shared.channels.out import build_senders
from shared.config import Settings
from shared.errors import ProviderError
from shared.memory.embeddings.minilm import LocalMiniLM
from shared.memory.search import MemorySearch
from shared.models import WORKSPACE_WIDE
from shared.observability import metrics
from shared.providers.base import ChatRequest
from shared.providers.function import FunctionProvider
from shared.providers.resilient import ResilientProvider
from tests.support.fake_platforms import DictSecrets
from tests.support.hashing_embedder import HashingEmbedder

EVENTS = Path(__file__).resolve().parents[2] / "events"
DOWN = ProviderError("the model provider failed (InternalServerError, HTTP 500)", retryable=True)


@pytest.fixture(autouse=True)
def clean_metrics() -> Iterator[None]:
    # The process's powertools metrics are shared: start empty, and leave nothing for the next test.
    metrics.clear_metrics()
    yield
    metrics.clear_metrics()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SIGIL_MODEL", "SIGIL_FALLBACK_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[Backend]:
    b = build_embedded_backend(Settings(data_dir=tmp_path))
    yield b
    b.close()


def counted() -> dict[str, float]:
    """Metric name -> sum of what was added since the last clear."""
    blob = metrics.serialize_metric_set() if metrics.metric_set else {}
    names = [m["Name"] for d in blob.get("_aws", {}).get("CloudWatchMetrics", []) for m in d["Metrics"]]
    return {n: sum(blob[n]) if isinstance(blob[n], list) else blob[n] for n in names}


def sample_record() -> TurnRecord:
    raw: dict[str, Any] = json.loads((EVENTS / "agent_sqs_fifo_batch.json").read_text())["Records"][0]
    return TurnRecord.model_validate(raw)


def deps_with(
    backend: Backend, settings: Settings, http: httpx.Client, provider: FunctionProvider
) -> TurnDeps:
    senders = build_senders(DictSecrets({}), outbox=backend.outbox, http=http)
    return TurnDeps(
        backend=backend, settings=settings, senders=senders, provider_factory=lambda ref: (provider, "m")
    )


def test_a_turn_publishes_its_tokens_and_cost_per_workspace(
    backend: Backend, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = sample_record()
    with httpx.Client(timeout=5) as http:
        deps = deps_with(backend, Settings(data_dir=tmp_path), http, FunctionProvider(lambda r: "noted"))
        # When one lane record runs as a turn
        run_record(Plan(), lambda: deps, record)

    # Then its workspace's tokens and cost went out on a line of their own, under its workspace
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    (line,) = lines
    (directive,) = line["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "Sigil"
    assert sorted(directive["Dimensions"][0]) == ["service", "workspace_id"]
    assert (line["workspace_id"], line["service"]) == (record.body.inbound.workspace_id, "sigil")
    assert {m["Name"] for m in directive["Metrics"]} == {
        "WorkspaceTokensIn",
        "WorkspaceTokensOut",
        "WorkspaceCostUSD",
    }
    assert line["WorkspaceTokensIn"] == [counted()["TokensIn"]] and counted()["TokensIn"] > 0
    assert counted()["Outcome_ok"] == 1


def test_a_turn_failed_by_the_provider_counts_provider_errors(backend: Backend, tmp_path: Path) -> None:
    def down(request: ChatRequest) -> str:
        raise DOWN

    with httpx.Client(timeout=5) as http:
        deps = deps_with(backend, Settings(data_dir=tmp_path), http, FunctionProvider(down))
        with pytest.raises(ProviderError):
            run_record(Plan(), lambda: deps, sample_record())

    assert (counted()["ProviderErrors"], counted()["Outcome_error"]) == (1, 1)


def test_a_turn_failed_otherwise_is_no_provider_error(backend: Backend, tmp_path: Path) -> None:
    def broken(request: ChatRequest) -> str:
        raise RuntimeError("a bug of ours")

    with httpx.Client(timeout=5) as http:
        deps = deps_with(backend, Settings(data_dir=tmp_path), http, FunctionProvider(broken))
        with pytest.raises(RuntimeError):
            run_record(Plan(), lambda: deps, sample_record())

    assert "ProviderErrors" not in counted()
    assert counted()["Outcome_error"] == 1


def scripted(*outcomes: ProviderError | str) -> FunctionProvider:
    queue = list(outcomes)

    def answer(request: ChatRequest) -> str:
        outcome = queue.pop(0)
        if isinstance(outcome, ProviderError):
            raise outcome
        return outcome

    return FunctionProvider(answer)


def test_each_retry_and_each_hand_over_to_the_fallback_is_counted() -> None:
    request = ChatRequest(model="primary", system="", messages=[])
    waits: list[float] = []
    provider = ResilientProvider(
        scripted(DOWN, DOWN), scripted(DOWN, "from the fallback"), max_attempts=2, sleep=waits.append
    )

    text = "".join(getattr(e, "text", "") for e in provider.stream(request))

    assert text == "from the fallback"
    # One retry on the primary, one hand-over, one retry on the fallback
    assert (counted()["ProviderRetries"], counted()["ProviderFallbacks"]) == (2, 1)
    assert len(waits) == 2


def test_a_call_that_needs_neither_counts_nothing() -> None:
    provider = ResilientProvider(scripted("fine"), scripted("unused"))

    list(provider.stream(ChatRequest(model="primary", system="", messages=[])))

    assert counted() == {}


def test_search_fallbacks_are_counted_step_by_step(
    dbs: tuple[Database, Database],
    index: SqliteMemoryIndex,
    memory: SqliteMemoryStore,
    embedder: HashingEmbedder,
    tmp_path: Path,
) -> None:
    broken = LocalMiniLM(tmp_path / "no-model-here")  # no weights: embed raises
    # A hybrid search without its embedding: BM25
    MemorySearch(index, memory, broken).search("ws", "pesto", scope=WORKSPACE_WIDE)
    # A BM25 search asked for as such is no fallback
    MemorySearch(index, memory, embedder).search("ws", "pesto", scope=WORKSPACE_WIDE, mode="bm25")
    assert counted() == {"SearchFallbackBm25": 1}

    dbs[0].close()  # the index's database is gone: recent messages stand in
    MemorySearch(index, memory, embedder).search("ws", "pesto", scope=WORKSPACE_WIDE, session_id="s1")
    assert counted() == {"SearchFallbackBm25": 1, "SearchFallbackRecent": 1}

"""The consolidate Lambda handler doing the work, on moto: EventBridge-shaped events (a
CompactionDue published on the bus and delivered by a rule, the hourly schedule's event), the
real openai SDK against the local OpenAI stand-in answering as the consolidation model, and
osmem-server as OpenSearch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws
from osmem_server import OsmemServer

from functions.consolidate import handler as consolidate
from shared import cloud
from shared.adapters.aws import clients
from shared.adapters.aws.events import EventBridgeBus
from shared.backend import Backend
from shared.budgets import bucket_key
from shared.config import Settings
from shared.consolidation.compaction import batch_summary_id
from shared.consolidation.runner import CATCHUP_CHECKPOINT, GLOBAL_SCOPE
from shared.errors import ProviderError
from shared.models import WORKSPACE_WIDE, BudgetLimits, DomainEvent, IndexQuery, ScopeLimits, WorkspaceConfig
from shared.models.tasks import Task
from tests.contract.builders import task
from tests.support.consolidation import SID, WINDOW, FakeConsolidator, seed
from tests.support.consolidator_reach import SESSIONS_TABLE_REACH, recorded
from tests.support.fake_openai import FakeOpenAI
from tests.support.moto_aws import REGION, AwsResources, drain_fifo, provision

EVENTS = Path(__file__).resolve().parents[2] / "events"
WS = "ws-handler"


@dataclass
class Context:
    """A Lambda context with the time left, which the handler turns into its deadline."""

    remaining_ms: int = 15 * 60 * 1000
    function_name: str = "sigil-consolidate"
    memory_limit_in_mb: int = 1024
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:sigil-consolidate"
    aws_request_id: str = "00000000-0000-0000-0000-000000000001"

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def schedule_event() -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / "consolidate_schedule.json").read_text())
    return event


@pytest.fixture
def osmem() -> Iterator[OsmemServer]:
    # One server per test: the index name is fixed (shared.adapters.aws.opensearch), and tests
    # must not see each other's documents.
    server = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
    yield server
    server.close()


@pytest.fixture
def consolidator() -> FakeConsolidator:
    return FakeConsolidator()


@pytest.fixture
def fake(consolidator: FakeConsolidator) -> Iterator[FakeOpenAI]:
    with FakeOpenAI(consolidator.openai) as server:
        yield server


@pytest.fixture
def aws(osmem: OsmemServer, fake: FakeOpenAI) -> Iterator[AwsResources]:
    with mock_aws():
        clients.reset()
        resources = provision("consolidate")
        cloud.reset(config=settings(resources, osmem, fake))
        yield resources
        cloud.reset()


def settings(resources: AwsResources, osmem: OsmemServer, fake: FakeOpenAI | None, **extra: Any) -> Settings:
    model: dict[str, Any] = (
        {"model": "openai/fake-model", "OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-test"}
        if fake is not None
        else {}
    )
    return resources.settings(
        opensearch_endpoint=osmem.url,
        provider_max_retries=0,
        **model,
        **extra,
    )


def backend() -> Backend:
    """The backend the handler works on (built once per container, as in Lambda)."""
    return cloud.consolidator()[0]


def bus_event(aws: AwsResources, event: DomainEvent) -> dict[str, Any]:
    """`event` published on Sigil's bus by the agent's adapter and delivered by a rule, as the
    consolidate function receives it (moto's SQS target stands in for the Lambda target)."""
    sqs, events = clients.sqs(REGION), clients.events(REGION)
    inbox = sqs.create_queue(QueueName="consolidate-inbox")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=inbox, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(
        Name="compaction", EventBusName=aws.event_bus_name, EventPattern=json.dumps({"source": ["sigil"]})
    )
    events.put_targets(
        Rule="compaction", EventBusName=aws.event_bus_name, Targets=[{"Id": "inbox", "Arn": arn}]
    )
    EventBridgeBus(aws.event_bus_name, region=REGION).publish(event)
    [message] = sqs.receive_message(QueueUrl=inbox)["Messages"]
    sqs.delete_message(QueueUrl=inbox, ReceiptHandle=message["ReceiptHandle"])
    # moto's target leaves out the envelope's `account`, which AWS always sends.
    delivered: dict[str, Any] = schedule_event() | json.loads(message["Body"])
    return delivered


def compaction_due(session_id: str = SID) -> DomainEvent:
    return DomainEvent(
        type="CompactionDue", workspace_id=WS, session_id=session_id, detail={"first_seq": 50, "last_seq": 99}
    )


def emitted_metrics(stdout: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for line in stdout.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            blob = json.loads(line)
            for directive in blob["_aws"]["CloudWatchMetrics"]:
                for metric in directive["Metrics"]:
                    value = blob[metric["Name"]]
                    found[metric["Name"]] = sum(value) if isinstance(value, list) else value
    return found


# ---------------------------------------------------------------- CompactionDue


def test_compaction_due_summarises_the_session_and_a_redelivery_changes_nothing(
    aws: AwsResources, fake: FakeOpenAI, consolidator: FakeConsolidator, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a session whose 60 turns rolled 100 messages into Tier 1 (two complete batches)
    seed(backend(), workspace_id=WS)
    event = bus_event(aws, compaction_due())
    # When the consolidate function gets the CompactionDue
    result = consolidate.lambda_handler(event, Context())
    # Then both batches are summarised, facts extracted, and the run says so in its metrics
    outcome = result["outcome"]
    assert (result["trigger"], outcome["status"], outcome["summaries"], outcome["checkpoint"]) == (
        "CompactionDue",
        "done",
        2,
        99,
    )
    assert outcome["run_id"] == f"run-{event['id']}"
    assert (outcome["facts_extracted"], outcome["facts_merged"], outcome["facts_dropped"]) == (4, 2, 1)
    metrics = emitted_metrics(capsys.readouterr().out)
    assert (metrics["CompactionRequests"], metrics["SummariesWritten"], metrics["FactsExtracted"]) == (
        1,
        2,
        4,
    )
    assert metrics["CompactionDurationMs"] > 0
    # Through the real SDK: two summaries, two extractions, one fold of the rolling summary
    assert consolidator.calls == {"summary": 2, "rolling": 1, "extract": 2}
    assert {body["model"] for body in fake.requests} == {"fake-model"}
    summaries = backend().memory.list_summaries(WS, scope=WORKSPACE_WIDE, session_id=SID)
    assert [(s.kind, s.id) for s in summaries if s.kind == "batch"] == [
        ("batch", batch_summary_id(SID, 0)),
        ("batch", batch_summary_id(SID, 50)),
    ]
    session = backend().sessions.get(WS, SID)
    assert session is not None and session.summary.startswith("Messages 0-49")
    # And the summaries are in OpenSearch, found by their words
    found = backend().index.search(
        WS, IndexQuery(scope=WORKSPACE_WIDE, text="PostgreSQL Sarah", tiers=["summary"])
    )
    assert {hit.doc.id for hit in found.text_hits} == {batch_summary_id(SID, 0)}

    # When EventBridge delivers the same event again
    again = consolidate.lambda_handler(event, Context())
    # Then nothing is left to do: no model call, no write
    assert (again["outcome"]["status"], again["outcome"]["summaries"]) == ("done", 0)
    assert len(fake.requests) == 5


def test_a_model_failure_is_raised_for_a_retry_that_finishes_the_work(
    aws: AwsResources, fake: FakeOpenAI, consolidator: FakeConsolidator
) -> None:
    seed(backend(), workspace_id=WS)
    event = bus_event(aws, compaction_due())
    # The third model call (batch 2's summary) fails with HTTP 500, after no SDK retry
    fake.respond(consolidator.openai).respond(consolidator.openai).fail(500)
    with pytest.raises(ProviderError):
        consolidate.lambda_handler(event, Context())
    assert backend().consolidation.get_checkpoint(WS, f"compact:{SID}") == "49"
    # EventBridge retries the event (same id): the run continues at batch 2
    retried = consolidate.lambda_handler(event, Context())
    assert (
        retried["outcome"]["status"],
        retried["outcome"]["summaries"],
        retried["outcome"]["checkpoint"],
    ) == (
        "done",
        1,
        99,
    )
    summaries = backend().memory.list_summaries(WS, scope=WORKSPACE_WIDE, session_id=SID)
    assert sorted((s.kind, s.first_seq) for s in summaries) == [("batch", 0), ("batch", 50), ("rolling", 0)]
    assert {s.run_id for s in summaries} == {f"run-{event['id']}"}


def test_without_a_model_a_compaction_due_is_skipped_not_retried(
    aws: AwsResources, osmem: OsmemServer
) -> None:
    cloud.reset(config=settings(aws, osmem, None))
    seed(backend(), workspace_id=WS)
    result = consolidate.lambda_handler(bus_event(aws, compaction_due()), Context())
    # Nothing raised (a retry cannot help), nothing written: the hourly run catches up later
    assert result["outcome"] is None
    assert backend().memory.list_summaries(WS, scope=WORKSPACE_WIDE) == []
    assert backend().consolidation.get_checkpoint(WS, f"compact:{SID}") is None


def overdue_task() -> Task:
    """A task of WS, long past its deadline, still "running" (its step item was lost)."""
    tasks = backend().tasks
    assert tasks is not None
    return tasks.create(task(WS, "web.s1", status="running"), max_per_session=3, max_per_workspace=20)


def budgeted_session(aws: AwsResources, osmem: OsmemServer, fake: FakeOpenAI, *, tokens_per_day: int) -> None:
    """The model priced (SIGIL_MODEL_PRICES), WS allowed `tokens_per_day`, and its session seeded."""
    prices = {"openai/fake-model": {"input_per_mtok": 2, "output_per_mtok": 10}}
    cloud.reset(config=settings(aws, osmem, fake, model_prices=prices))
    budget = BudgetLimits(workspace=ScopeLimits(tokens_per_day=tokens_per_day))
    backend().workspaces.put(WorkspaceConfig(id=WS, active_window=WINDOW, budget=budget))
    seed(backend(), workspace_id=WS)


def test_a_compaction_due_is_charged_to_the_workspace_budget_and_stops_when_it_is_used_up(
    aws: AwsResources,
    osmem: OsmemServer,
    fake: FakeOpenAI,
    consolidator: FakeConsolidator,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given the consolidation model's price in SIGIL_MODEL_PRICES, and a workspace allowed one
    # token a day: the check before the first call passes (nothing spent yet), batch 1's charge
    # uses the day up
    budgeted_session(aws, osmem, fake, tokens_per_day=1)
    # When the consolidate function gets the CompactionDue
    result = consolidate.lambda_handler(bus_event(aws, compaction_due()), Context())
    # Then batch 1 is summarised and batch 2 waits in Tier 1 for the budget to reset
    outcome = result["outcome"]
    assert (outcome["status"], outcome["summaries"], outcome["checkpoint"]) == ("over_budget", 1, 49)
    assert outcome["budget_exhausted"].startswith("workspace/day/tokens ")
    assert consolidator.calls == {"summary": 1, "rolling": 0, "extract": 1}
    assert backend().memory.count_messages(WS, SID) == 100
    # And the DynamoDB counters hold the reported tokens, priced by the settings' table
    tokens_in, tokens_out = outcome["tokens_in"], outcome["tokens_out"]
    assert tokens_in > 0 and tokens_out > 0
    key = bucket_key("workspace", None, "month", datetime.now(UTC))
    [month] = backend().budgets.totals(WS, [key]).values()
    assert (month.tokens, month.usd_nanos) == (
        tokens_in + tokens_out,
        (2 * tokens_in + 10 * tokens_out) * 1000,
    )
    metrics = emitted_metrics(capsys.readouterr().out)
    assert (metrics["SummariesWritten"], metrics["CompactionOverBudget"]) == (1, 1)


def test_the_consolidator_asks_the_sessions_table_only_what_the_stack_grants(
    aws: AwsResources, osmem: OsmemServer, fake: FakeOpenAI, consolidator: FakeConsolidator
) -> None:
    # Given a budgeted workspace with a session to compact, and another whose CompactionDue
    # never arrived (the hourly run's catch-up)
    budgeted_session(aws, osmem, fake, tokens_per_day=10_000_000)
    seed(backend(), workspace_id="ws-b")
    # And a delegated task of WS past its deadline, whose step item was lost (the task sweep)
    overdue = overdue_task()
    event = bus_event(aws, compaction_due())
    # When the consolidate function compacts on the event, then runs its hourly schedule (every
    # adapter sends through the one cached client of the region)
    with recorded(clients.dynamodb(REGION), aws.sessions_table) as reach:
        assert consolidate.lambda_handler(event, Context())["outcome"]["status"] == "done"
        hourly = consolidate.lambda_handler(schedule_event(), Context())
        assert hourly["outcome"]["status"] == "done"
    # And the schedule's sweep timed the task out and put its outcome on the parent's lane
    assert hourly["tasks_swept"]["timed_out"] == 1
    tasks = backend().tasks
    assert tasks is not None and (ended := tasks.get(WS, overdue.id)) is not None
    assert ended.status == "timed_out"
    [outcome] = drain_fifo(aws.queue_url, 10)
    assert outcome.task is not None and outcome.inbound.event_id == f"task.{overdue.id}.outcome"
    # Then every request to the sessions table is one the stack's grant allows (no Scan, no
    # BatchWriteItem, deletes of leases only, updates of budget counters only), and the run did
    # reach each kind: a lease released, a budget charged, sessions listed
    assert reach <= SESSIONS_TABLE_REACH, reach - SESSIONS_TABLE_REACH
    assert {
        ("dynamodb:DeleteItem", "consolidation"),
        ("dynamodb:UpdateItem", "budget"),
        ("dynamodb:Query", "session"),
        ("dynamodb:PutItem", "session"),
        ("dynamodb:UpdateItem", "tasks"),
    } <= reach


# ---------------------------------------------------------------- the hourly schedule


def test_the_hourly_run_catches_up_every_workspace_and_maintains_it(
    aws: AwsResources, consolidator: FakeConsolidator, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given two workspaces: one with a session whose CompactionDue never arrived, one whose
    # session has no complete batch yet (30 turns: 40 messages in Tier 1)
    seed(backend(), workspace_id="ws-a")
    seed(backend(), workspace_id="ws-b", turns=30)
    # When the hourly schedule fires
    result = consolidate.lambda_handler(schedule_event(), Context())
    outcome = result["outcome"]
    # Then every workspace was visited, in order, and the missed batches summarised
    assert (outcome["status"], [w["workspace_id"] for w in outcome["workspaces"]]) == (
        "done",
        ["ws-a", "ws-b"],
    )
    ws_a, ws_b = outcome["workspaces"]
    assert [(c["session_id"], c["summaries"]) for c in ws_a["compactions"]] == [(SID, 2)]
    assert ws_b["compactions"] == []
    assert consolidator.calls["summary"] == 2
    # And each workspace's facts were maintained after its catch-up (the facts just extracted)
    assert ws_a["maintenance"] is not None and ws_a["maintenance"]["scored"] >= 4
    assert ws_b["maintenance"] is not None and ws_b["maintenance"]["scored"] == 0
    metrics = emitted_metrics(capsys.readouterr().out)
    assert (metrics["ScheduleTicks"], metrics["SummariesWritten"], metrics["ConsolidationPartial"]) == (
        1,
        2,
        0,
    )
    assert metrics["MaintenanceScored"] >= 4
    # A full pass leaves no resume point
    assert backend().consolidation.get_checkpoint(GLOBAL_SCOPE, CATCHUP_CHECKPOINT) == ""


def test_an_hourly_run_out_of_time_leaves_a_checkpoint_and_the_next_resumes_there(
    aws: AwsResources, consolidator: FakeConsolidator
) -> None:
    for ws in ("ws-a", "ws-b", "ws-c"):
        backend().workspaces.put(WorkspaceConfig(id=ws))
    seed(backend(), workspace_id="ws-a")
    # Lambda gives this invocation less time than one workspace needs: it stops before starting
    short = Context(remaining_ms=int((consolidate.MARGIN_S + 10) * 1000))
    first = consolidate.lambda_handler(schedule_event(), short)["outcome"]
    assert (first["status"], first["workspaces"]) == ("partial", [])
    assert backend().consolidation.get_checkpoint(GLOBAL_SCOPE, CATCHUP_CHECKPOINT) == "ws-a"
    # A run that stopped in ws-b resumes in ws-b, leaving ws-a for the next pass
    backend().consolidation.put_checkpoint(GLOBAL_SCOPE, CATCHUP_CHECKPOINT, "ws-b")
    second = consolidate.lambda_handler(schedule_event(), Context())["outcome"]
    assert (second["status"], second["resumed_at"]) == ("done", "ws-b")
    assert [w["workspace_id"] for w in second["workspaces"]] == ["ws-b", "ws-c"]
    assert consolidator.calls["summary"] == 0
    # The pass after it starts from the beginning again and catches ws-a up
    third = consolidate.lambda_handler(schedule_event(), Context())["outcome"]
    assert [w["workspace_id"] for w in third["workspaces"]] == ["ws-a", "ws-b", "ws-c"]
    assert third["workspaces"][0]["compactions"][0]["summaries"] == 2


def test_two_hourly_runs_never_overlap(aws: AwsResources) -> None:
    # Another invocation holds the hourly lease (a slow run, or EventBridge's retry of it)
    assert backend().consolidation.acquire_lease(GLOBAL_SCOPE, "hourly", "someone-else", 600)
    result = consolidate.lambda_handler(schedule_event(), Context())
    assert result["outcome"]["status"] == "busy"

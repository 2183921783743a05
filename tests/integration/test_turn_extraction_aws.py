"""Per-turn extraction in the cloud, through the real handlers on moto: the agent function commits
turns and sends each TurnCommitted to the extraction queue with the workspace's debounce as its
DelaySeconds; the queue holds them (nobody waits) and the consolidate function, given the batch
as its SQS event source would, extracts once. The models are the real openai SDK against the
local OpenAI stand-in (the turn's echo, and tests.support.consolidation.FakeConsolidator as the
consolidation model); OpenSearch is osmem-server.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws
from osmem_server import OsmemServer

from functions.agent import handler as agent
from functions.consolidate import handler as consolidate
from shared import cloud
from shared.adapters.aws import clients
from shared.adapters.aws.events import EventBridgeBus
from shared.agent.turn import recall_scope_for
from shared.consolidation.extraction_keys import Pending, pending_keys
from shared.consolidation.watermark import extracted_range
from shared.errors import SigilError
from shared.local.aws_mode.event_source import sqs_event
from shared.memory.search import FACTS_KEY, MemorySearch
from shared.models import (
    WORKSPACE_WIDE,
    BudgetLimits,
    DomainEvent,
    InboundMessage,
    ScopeLimits,
    Sender,
    ToolCall,
    WorkspaceConfig,
)
from shared.models.budgets import BudgetUsage
from shared.ports import ReadsDocs
from shared.tools import ToolContext
from shared.tools.builtin import agent_registry
from tests.support.consolidation import FakeConsolidator
from tests.support.fake_openai import FakeOpenAI
from tests.support.lambda_context import context_for
from tests.support.moto_aws import REGION, AwsResources, provision

EVENTS = Path(__file__).resolve().parents[2] / "events"
WS, SID, USER = "default", "web.demo", "alice"
DEBOUNCE_S = 5.0


@pytest.fixture
def consolidator() -> FakeConsolidator:
    return FakeConsolidator()


@pytest.fixture
def osmem() -> Iterator[OsmemServer]:
    server = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
    yield server
    server.close()


@pytest.fixture
def fake(consolidator: FakeConsolidator) -> Iterator[FakeOpenAI]:
    def respond(body: dict[str, Any]) -> str:
        # The consolidation model's prompts to the FakeConsolidator (it knows them by their system
        # prompt), the turn's to a plain answer.
        try:
            return consolidator.openai(body)
        except KeyError:
            return "noted"

    with FakeOpenAI(respond) as server:
        yield server


@pytest.fixture
def aws(osmem: OsmemServer, fake: FakeOpenAI) -> Iterator[AwsResources]:
    with mock_aws():
        clients.reset()
        resources = provision("turnx")
        cloud.reset(
            config=resources.settings(
                secrets_prefix="sigil/",
                opensearch_endpoint=osmem.url,
                model="openai/fake-model",
                OPENAI_BASE_URL=fake.base_url,
                OPENAI_API_KEY="sk-test",
                provider_max_retries=0,
            )
        )
        cloud.turn_deps().backend.workspaces.put(WorkspaceConfig(id=WS, extraction_debounce_s=DEBOUNCE_S))
        yield resources
        cloud.reset()


def turns(*texts: str, first: int = 0) -> dict[str, Any]:
    """An SQS FIFO batch of the session's turns, as the agent receives it (the sample's first
    record); their event ids count from `first`."""
    sample = json.loads((EVENTS / "agent_sqs_fifo_batch.json").read_text())
    records = []
    for i, text in enumerate(texts, start=first):
        record = copy.deepcopy(sample["Records"][0])
        body = json.loads(record["body"])
        body["inbound"] |= {"event_id": f"evt-x{i}", "text": text}
        record |= {"body": json.dumps(body), "messageId": f"m-{i}"}
        record["attributes"]["MessageDeduplicationId"] = f"default.web.evt-x{i}"
        records.append(record)
    return {"Records": records}


def delayed(aws: AwsResources, count: int) -> list[dict[str, Any]]:
    """Receive `count` messages of the extraction queue, waiting (long polls) until SQS releases them."""
    sqs = clients.sqs(REGION)
    got: list[dict[str, Any]] = []
    for _ in range(10):
        if len(got) >= count:
            break
        got += sqs.receive_message(
            QueueUrl=aws.extraction_queue_url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=20,
            AttributeNames=["All"],
        ).get("Messages", [])
    return got


def queue_arn(aws: AwsResources) -> str:
    attrs = clients.sqs(REGION).get_queue_attributes(
        QueueUrl=aws.extraction_queue_url, AttributeNames=["QueueArn"]
    )
    return str(attrs["Attributes"]["QueueArn"])


def recall(topic: str) -> str:
    backend = cloud.turn_deps().backend
    inbound = InboundMessage(
        event_id="recall",
        text=topic,
        channel="web",
        workspace_id=WS,
        session_id=SID,
        sender=Sender(id=USER),
        chat_id="demo",
    )
    workspace = backend.workspaces.get(WS)
    assert workspace is not None
    ctx = ToolContext(
        workspace_id=WS,
        session_id=SID,
        user_id=USER,
        turn_id="t-recall",
        backend=backend,
        scope=recall_scope_for(backend, workspace, inbound, USER),
        owner=None,
        now=lambda: datetime.now(UTC),
    )
    result = agent_registry().execute(
        ToolCall(id="c1", name="memory_recall", arguments=json.dumps({"topic": topic})), ctx, workspace
    )
    assert not result.is_error, result.content
    return result.content


def test_a_burst_of_turns_is_extracted_once_after_the_delay_and_recallable(
    aws: AwsResources, consolidator: FakeConsolidator
) -> None:
    # Given two turns of one session, run by the agent function
    event = turns("I prefer dark mode in every editor.", "I prefer green tea in the morning.")
    assert agent.lambda_handler(event, context_for("sigil-agent")) == {"batchItemFailures": []}
    # Then each sent a TurnCommitted that SQS holds for the debounce: none can be received yet
    sqs = clients.sqs(REGION)
    assert sqs.receive_message(QueueUrl=aws.extraction_queue_url, WaitTimeSeconds=0).get("Messages", []) == []
    attrs = sqs.get_queue_attributes(
        QueueUrl=aws.extraction_queue_url, AttributeNames=["ApproximateNumberOfMessagesDelayed"]
    )["Attributes"]
    assert attrs["ApproximateNumberOfMessagesDelayed"] == "2"
    # When the delay has passed and the consolidate function gets the batch
    messages = delayed(aws, 2)
    assert len(messages) == 2
    batch = sqs_event(messages, queue_arn=queue_arn(aws), region=REGION)
    result = consolidate.lambda_handler(batch, context_for("sigil-consolidate"))
    # Then nothing failed, the first turn's event was superseded and one extraction ran, on a
    # four-message session (compaction would wait for 50 rolled out)
    assert result["batchItemFailures"] == []
    assert sorted(r["status"] for r in result["extractions"]) == ["done", "superseded"]
    assert consolidator.calls == {"summary": 0, "rolling": 0, "extract": 1}
    backend = cloud.consolidator()[0]
    session = backend.sessions.get(WS, SID)
    assert session is not None and session.message_count == 4
    facts = backend.memory.triples_by_subject(WS, USER, scope=WORKSPACE_WIDE)
    assert sorted((t.predicate, t.object) for t in facts) == [
        ("editor-theme", "dark mode"),
        ("morning-drink", "green tea"),
    ]
    assert extracted_range(backend, WS, SID) == (0, 3)
    # And the agent's memory_recall finds them
    assert "green tea" in recall("what do I drink in the morning")
    assert "dark mode" in recall("editor theme")


def test_an_over_budget_workspace_extracts_nothing_in_the_cloud_and_says_so(
    aws: AwsResources, consolidator: FakeConsolidator
) -> None:
    # Given a turn, after which the workspace's budget for the day is used up
    assert agent.lambda_handler(turns("I prefer green tea in the morning."), context_for("sigil-agent")) == {
        "batchItemFailures": []
    }
    backend = cloud.turn_deps().backend
    limits = BudgetLimits(workspace=ScopeLimits(tokens_per_day=100))
    backend.workspaces.put(WorkspaceConfig(id=WS, budget=limits, extraction_debounce_s=DEBOUNCE_S))
    backend.budgets.charge(WS, None, BudgetUsage(tokens_in=500), limits, datetime.now(UTC))
    # When its TurnCommitted arrives
    messages = delayed(aws, 1)
    result = consolidate.lambda_handler(
        sqs_event(messages, queue_arn=queue_arn(aws), region=REGION), context_for("sigil-consolidate")
    )
    # Then no model call was made, no fact written, and the result says why
    (run,) = result["extractions"]
    assert run["status"] == "over_budget" and "workspace/day/tokens" in run["budget_exhausted"]
    assert result["batchItemFailures"] == []
    assert consolidator.calls["extract"] == 0
    assert cloud.consolidator()[0].memory.triples_by_subject(WS, USER, scope=WORKSPACE_WIDE) == []


def test_a_failed_model_call_fails_only_its_record_for_sqs_to_deliver_again(
    aws: AwsResources, consolidator: FakeConsolidator, fake: FakeOpenAI
) -> None:
    # Given a turn's TurnCommitted released by the queue, and a model whose next call fails
    assert agent.lambda_handler(turns("I prefer green tea in the morning."), context_for("sigil-agent")) == {
        "batchItemFailures": []
    }
    messages = delayed(aws, 1)
    fake.fail(500)
    # When the consolidate function gets it
    result = consolidate.lambda_handler(
        sqs_event(messages, queue_arn=queue_arn(aws), region=REGION), context_for("sigil-consolidate")
    )
    # Then its record is reported failed (SQS delivers it again, then dead-letters it), and
    # nothing is marked extracted, so the retry, or compaction, still extracts it
    assert result["batchItemFailures"] == [{"itemIdentifier": messages[0]["MessageId"]}]
    assert extracted_range(cloud.consolidator()[0], WS, SID) is None
    # And the retry, with the model back, extracts it
    again = consolidate.lambda_handler(
        sqs_event(messages, queue_arn=queue_arn(aws), region=REGION), context_for("sigil-consolidate")
    )
    assert again["batchItemFailures"] == [] and [r["status"] for r in again["extractions"]] == ["done"]
    assert consolidator.calls["extract"] == 1


def test_a_delayed_publish_without_a_queue_is_a_clear_error(aws: AwsResources) -> None:
    bus = EventBridgeBus(aws.event_bus_name, region=REGION)
    event = DomainEvent(type="TurnCommitted", workspace_id=WS, session_id=SID, detail={"seq": 1})
    with pytest.raises(SigilError) as raised:
        bus.publish_after(event, 5.0)
    assert raised.value.code == "misconfigured" and "SIGIL_EXTRACTION_QUEUE_URL" in raised.value.message


def extract_delayed(aws: AwsResources, count: int) -> list[str]:
    """The consolidate function run on the next `count` TurnCommitted the queue releases: their statuses."""
    messages = delayed(aws, count)
    assert len(messages) == count
    result = consolidate.lambda_handler(
        sqs_event(messages, queue_arn=queue_arn(aws), region=REGION), context_for("sigil-consolidate")
    )
    assert result["batchItemFailures"] == []
    return sorted(r["status"] for r in result["extractions"])


def test_a_fact_extracted_per_turn_keys_its_message_in_opensearch_once_it_rolls_out(
    aws: AwsResources, consolidator: FakeConsolidator
) -> None:
    backend = cloud.turn_deps().backend
    backend.workspaces.put(
        WorkspaceConfig(id=WS, active_window=4, summary_batch=2, extraction_debounce_s=DEBOUNCE_S)
    )
    # Given a turn whose fact is extracted a debounce later, while its message is in the window
    assert agent.lambda_handler(turns("I prefer green tea in the morning."), context_for("sigil-agent")) == {
        "batchItemFailures": []
    }
    assert extract_delayed(aws, 1) == ["done"]
    session = backend.sessions.get(WS, SID)
    assert session is not None and session.rolled_out_count == 0
    said = session.active_messages[0].id
    (fact,) = backend.memory.triples_by_subject(WS, USER, scope=WORKSPACE_WIDE)
    assert fact.message_ids == [said]
    assert pending_keys(backend, WS, SID) == [Pending(0, said, fact.id)]
    assert isinstance(backend.index, ReadsDocs) and backend.index.get_docs(WS, [said]) == []
    # When two more turns roll it out (into DynamoDB's Tier 1 and OpenSearch) and their
    # extraction runs
    assert agent.lambda_handler(
        turns("small talk", "more small talk", first=1), context_for("sigil-agent")
    ) == {"batchItemFailures": []}
    assert extract_delayed(aws, 2) == ["done", "superseded"]
    # Then the message's OpenSearch document carries the fact, found by a word only the fact has
    (doc,) = [d for d in backend.index.get_docs(WS, [said]) if d.id == said]
    assert doc.metadata[FACTS_KEY] == f"{USER} morning-drink: green tea"
    assert found("drink") == [said]
    assert pending_keys(backend, WS, SID) == []
    # When the CompactionDue of seqs 0-1 reaches the consolidate function
    sample = json.loads((EVENTS / "consolidate_compaction_due.json").read_text())
    sample["detail"]["detail"] = {"first_seq": 0, "last_seq": 1}
    done = consolidate.lambda_handler(sample, context_for("sigil-consolidate"))
    assert (done["outcome"]["status"], done["outcome"]["summaries"]) == ("done", 1)
    # Then the batch was summarised without extracting again (the flush guard), and the key stayed
    assert consolidator.calls["summary"] == 1 and consolidator.calls["extract"] == 2
    assert found("drink") == [said]
    assert sorted(
        (t.predicate, t.object) for t in backend.memory.triples_by_subject(WS, USER, scope=WORKSPACE_WIDE)
    ) == [("morning-drink", "green tea")]


def found(query: str) -> list[str]:
    backend = cloud.turn_deps().backend
    search = MemorySearch(backend.index, backend.memory, backend.embedder)
    outcome = search.search(WS, query, scope=WORKSPACE_WIDE, tiers=["message"], mode="bm25")
    return [h.id for h in outcome.hits]


def test_an_extraction_the_queue_dropped_is_done_by_the_next_compaction(
    aws: AwsResources, consolidator: FakeConsolidator
) -> None:
    backend = cloud.turn_deps().backend
    backend.workspaces.put(
        WorkspaceConfig(id=WS, active_window=4, summary_batch=2, extraction_debounce_s=DEBOUNCE_S)
    )
    # Given a turn with a fact in it, and two more that roll its message out of the window
    assert agent.lambda_handler(turns("I prefer green tea in the morning."), context_for("sigil-agent")) == {
        "batchItemFailures": []
    }
    assert agent.lambda_handler(
        turns("small talk", "more small talk", first=1), context_for("sigil-agent")
    ) == {"batchItemFailures": []}
    # And their TurnCommitted events dropped before anyone consumed them (as the queue's 1-hour
    # retention drops an extraction that waited behind a backlog)
    sqs = clients.sqs(REGION)
    sqs.purge_queue(QueueUrl=aws.extraction_queue_url)
    attrs = sqs.get_queue_attributes(
        QueueUrl=aws.extraction_queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"],
    )["Attributes"]
    assert (attrs["ApproximateNumberOfMessages"], attrs["ApproximateNumberOfMessagesDelayed"]) == ("0", "0")
    assert consolidator.calls["extract"] == 0
    assert extracted_range(backend, WS, SID) is None
    assert backend.memory.triples_by_subject(WS, USER, scope=WORKSPACE_WIDE) == []
    # When the session's next compaction (the CompactionDue of the rolled-out seqs 0-1) runs
    sample = json.loads((EVENTS / "consolidate_compaction_due.json").read_text())
    sample["detail"]["detail"] = {"first_seq": 0, "last_seq": 1}
    done = consolidate.lambda_handler(sample, context_for("sigil-consolidate"))
    assert (done["outcome"]["status"], done["outcome"]["summaries"]) == ("done", 1)
    # Then it extracted the messages no turn had (they were past the watermark), and the fact is
    # in memory, found by the agent's memory_recall
    assert consolidator.calls["extract"] == 1
    facts = backend.memory.triples_by_subject(WS, USER, scope=WORKSPACE_WIDE)
    assert [(t.predicate, t.object) for t in facts] == [("morning-drink", "green tea")]
    assert "green tea" in recall("what do I drink in the morning")

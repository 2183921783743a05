"""The agent function's batch within the invocation's remaining time (issue 14, finding 1).

A slow model call used to hold the batch until Lambda killed the function: every record came
back, the finished ones too, and those on their last delivery were dead-lettered with no apology.
Now the batch's turns run within the remaining time (less SIGIL_TURN_RESERVE_S): a hung call is
cut at that deadline, a turn that cannot start is left to SQS as its record's failure alone, and
the turns that ran are reported done.

The agent handler runs on in-process moto with the real openai SDK against the local fake server;
the Lambda context is the test stand-in with the remaining time each test gives it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from moto import mock_aws

from functions.agent import handler as agent
from shared import cloud
from shared.adapters.aws import clients
from shared.agent.turn import APOLOGY
from shared.models import LaneItem
from shared.observability import metrics
from tests.support.fake_openai import FakeOpenAI
from tests.support.lambda_context import LambdaContext
from tests.support.moto_aws import AwsResources, provision

EVENTS = Path(__file__).resolve().parents[2] / "events"
WS = "default"
WAIT_S = 30  # the longest a test waits for the server to notice a hang-up (a bound, never a sleep)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def aws(fake: FakeOpenAI, request: pytest.FixtureRequest) -> Iterator[AwsResources]:
    request.addfinalizer(metrics.clear_metrics)
    with mock_aws():
        clients.reset()
        resources = provision("deadline")
        # A read timeout longer than any test's remaining time: only the deadline can end a hang.
        cloud.reset(
            config=resources.settings(
                model="openai/fake-model",
                OPENAI_BASE_URL=fake.base_url,
                OPENAI_API_KEY="sk-test",
                provider_max_retries=0,
                provider_timeout_s=60,
                turn_reserve_s=1,
                turn_min_s=1,
            )
        )
        yield resources
        cloud.reset()


def sample() -> list[dict[str, Any]]:
    """The sample batch's records: web.demo's two turns, then web.kitchen's one."""
    records: list[dict[str, Any]] = json.loads((EVENTS / "agent_sqs_fifo_batch.json").read_text())["Records"]
    return records


def variant(
    record: dict[str, Any], *, index: int, session: str | None = None, text: str | None = None
) -> dict[str, Any]:
    """A copy of a sample record with its own message id, and maybe another session or text."""
    out = copy.deepcopy(record)
    item = LaneItem.model_validate_json(out["body"])
    inbound = item.inbound
    if session is not None:
        inbound = inbound.model_copy(
            update={
                "session_id": session,
                "chat_id": session.removeprefix("web."),
                "event_id": f"evt-x{index}",
            }
        )
        out["attributes"]["MessageGroupId"] = f"{WS}.{session}"
    if text is not None:
        inbound = inbound.model_copy(update={"text": text})
    out["body"] = item.model_copy(update={"inbound": inbound}).model_dump_json()
    out["messageId"] = f"00000000-0000-0000-0000-{index:012d}"
    return out


def ids(records: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [{"itemIdentifier": r["messageId"]} for r in records]


def texts(session: str) -> list[str]:
    return [e.message.text for e in cloud.turn_deps().backend.outbox.read(WS, session)]


def test_a_hung_model_call_is_cut_and_only_its_sessions_turns_go_back(
    aws: AwsResources, fake: FakeOpenAI
) -> None:
    # Given a batch: web.kitchen's turn, then web.demo's two (its first asks the model server, by
    # the fake's marker, to hang after the stream's first event), then web.garden's
    demo_first, demo_second, kitchen = sample()
    hung = variant(demo_first, index=1, text="[fake:hang] What's on my calendar tomorrow?")
    garden = variant(kitchen, index=2, session="web.garden", text="Water the tomatoes")
    records = [kitchen, hung, demo_second, garden]
    # And 15 s left in the invocation, 1 s of it kept back for the replies and commits
    context = LambdaContext(remaining_ms=15_000)
    # When the agent handles the batch
    response = agent.lambda_handler({"Records": records}, context)
    # Then the hung call was cut by the batch's deadline: the server saw the client hang up
    assert fake.streams[0].done.wait(WAIT_S) and fake.streams[0].client_closed
    # And web.demo's records (the cut turn and the one behind it) come back as failures; the other
    # sessions' turns, which ran beside the hung one rather than behind it, are done
    assert response == {"batchItemFailures": ids([hung, demo_second])}
    assert texts("web.kitchen") == ["Remind me to buy milk"]
    assert texts("web.garden") == ["Water the tomatoes"]
    # And web.demo's second turn never reached the model, and nobody got an apology on a first
    # delivery
    assert sorted(r["messages"][-1]["content"] for r in fake.requests) == [
        "Remind me to buy milk",
        "Water the tomatoes",
        "[fake:hang] What's on my calendar tomorrow?",
    ]
    assert texts("web.demo") == []
    # And the cut turn is audited as a provider error that names the deadline
    audit = cloud.turn_deps().backend.audit.list_records(WS)
    errors = [r for r in audit if r.outcome == "error"]
    assert [r.event_id for r in errors] == ["evt-0001"]
    assert errors[0].error is not None and "deadline" in errors[0].error


def test_a_turn_with_no_time_left_to_start_is_apologised_for_on_its_last_delivery(
    aws: AwsResources, fake: FakeOpenAI
) -> None:
    # Given the sample batch on its last delivery (the queue's maxReceiveCount), and an invocation
    # with too little time left to start any turn
    records = sample()
    for record in records:
        record["attributes"]["ApproximateReceiveCount"] = "5"
    context = LambdaContext(remaining_ms=1_500)
    # When the agent handles it, every record fails (so the processor raises, the batch returning)
    with pytest.raises(BatchProcessingError):
        agent.lambda_handler({"Records": records}, context)
    # Then no turn reached the model, and each user was told rather than dead-lettered in silence
    assert fake.requests == []
    assert texts("web.demo") == [APOLOGY, APOLOGY]
    assert texts("web.kitchen") == [APOLOGY]

"""Burst coalescing and per-turn metrics in the agent handler, on moto with the fake OpenAI server."""

from __future__ import annotations

import pytest

from functions.agent import handler as agent
from shared import cloud
from tests.integration.test_handlers import (
    CONTEXT,
    SAMPLE_TEXT,
    WS,
    aws,  # noqa: F401 -- fixture
    emitted_metrics,
    fake,  # noqa: F401 -- fixture
    lane_records,
    load,
    settings_for,
    texts,
    web_demo,
)
from tests.support.fake_openai import FakeOpenAI
from tests.support.moto_aws import AwsResources


@pytest.fixture
def coalescing(aws: AwsResources, fake: FakeOpenAI) -> AwsResources:  # noqa: F811
    cloud.reset(
        config=settings_for(
            aws,
            model="openai/fake-model",
            OPENAI_BASE_URL=fake.base_url,
            OPENAI_API_KEY="sk-test",
            provider_max_retries=0,
            coalesce_burst=True,
            # Behind a local URL the fake model is free unless priced: priced, so the cost metric
            # has something to show.
            model_prices={"openai/fake-model": {"input_per_mtok": "1", "output_per_mtok": "4"}},
        )
    )
    return aws


def test_a_sessions_burst_is_one_turn_and_its_metrics_are_emitted(
    coalescing: AwsResources,
    fake: FakeOpenAI,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given the sample batch: two records of web.demo, one of web.kitchen
    event = load("agent_sqs_fifo_batch.json")
    # When the agent handles it with coalescing on
    assert agent.lambda_handler(event, CONTEXT) == {"batchItemFailures": []}
    # Then two turns ran, and the model saw web.demo's two messages as one
    assert sorted(r["messages"][-1]["content"] for r in fake.requests) == [
        "Remind me to buy milk",
        f"{SAMPLE_TEXT}\n\nAnd the day after?",
    ]
    assert texts("web.demo") == [f"{SAMPLE_TEXT}\n\nAnd the day after?"]
    demo = cloud.turn_deps().backend.sessions.get(WS, "web.demo")
    assert demo is not None
    assert demo.message_count == 2
    # The session remembers the burst's merged id and each original id (a late retry of either
    # is then skipped as handled)
    assert demo.recent_event_ids[:2] == ["evt-0001", "evt-0002"]
    assert demo.recent_event_ids[2].startswith("evt-0001+")
    # And each turn's audit record became metrics
    emitted = emitted_metrics(capsys.readouterr().out)
    assert emitted["Outcome_ok"] == 2
    assert emitted["TurnsCoalesced"] == 1
    assert emitted["TurnsCompleted"] == 3
    assert emitted["TokensIn"] > 0
    assert emitted["TokensOut"] > 0
    assert emitted["TurnDuration"] > 0
    assert emitted["ToolCalls"] == 0
    assert emitted["CostUSD"] > 0


def test_a_failed_burst_fails_all_its_records_and_not_the_other_session(
    coalescing: AwsResources,
    fake: FakeOpenAI,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a model whose call for web.demo's merged turn fails
    fake.fail(500, when=web_demo)
    event = load("agent_sqs_fifo_batch.json")
    # When the agent handles the batch
    response = agent.lambda_handler(event, CONTEXT)
    # Then both web.demo records are failures and web.kitchen's turn ran
    assert response == {
        "batchItemFailures": [{"itemIdentifier": i} for i in lane_records(event)["default.web.demo"]]
    }
    assert len(fake.requests) == 2
    assert texts("web.demo") == []
    assert texts("web.kitchen") == ["Remind me to buy milk"]
    emitted = emitted_metrics(capsys.readouterr().out)
    assert (emitted["Outcome_error"], emitted["Outcome_ok"], emitted["TurnsFailed"]) == (1, 1, 2)

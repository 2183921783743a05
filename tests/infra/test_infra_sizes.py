"""Issue 30: `-c size=50|500|10000` sizes the caps for that many active people, each cap still
changed by its own context value; `-c lanes=N` shards the lanes over N FIFO queues, each with its
event source; `-c lanes_paused_from=n` keeps the queues a reshard added paused (docs/scale.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App

from infra.config import SIZES, Caps, read_caps
from tests.infra.helpers import Synth, logical_id, synthesize

pytestmark = pytest.mark.slow


def _caps(**context: Any) -> Caps:
    return read_caps(App(context=context).node)


@pytest.mark.parametrize("name", ["50", "500", "10000"])
def test_each_size_is_a_preset_of_every_cap(name: str) -> None:
    caps = _caps(size=name)

    assert caps == SIZES[name]
    # Reserved is what every lane's event source may run at once, no less (a throttled delivery
    # counts towards maxReceiveCount).
    assert caps.agent_reserved == caps.agent_total == caps.agent_concurrency * caps.lanes
    # One event source runs at most 1,000 batches.
    assert 2 <= caps.agent_concurrency <= 1000


def test_sizes_grow_with_the_people_they_serve() -> None:
    small, medium, large = (SIZES[n] for n in ("50", "500", "10000"))
    for field in ("agent_total", "webhook_reserved", "consolidate_reserved"):
        assert getattr(Caps(), field) < getattr(small, field) < getattr(medium, field) < getattr(large, field)
    assert Caps().turn_routes.rate < small.turn_routes.rate < medium.turn_routes.rate < large.turn_routes.rate
    # 10,000 people need more batches at once than one event source runs: the lanes are sharded.
    assert large.agent_total > 1000 and large.lanes > 1


def test_a_cap_given_on_its_own_changes_the_sizes_value() -> None:
    caps = _caps(size="500", agent_concurrency="300", webhook_concurrency="none", lanes="2")

    assert (caps.agent_concurrency, caps.agent_reserved, caps.lanes) == (300, 600, 2)
    assert caps.webhook_reserved is None
    assert caps.consolidate_reserved == SIZES["500"].consolidate_reserved
    assert _caps(size="10,000") == _caps(size="10_000") == SIZES["10000"]


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"size": "big"}, "size must be one of default, 50, 500, 10000"),
        ({"lanes": "0"}, "lanes must be between 1 and 16"),
        ({"lanes": "2", "lanes_paused_from": "2"}, "lanes_paused_from must name a lane queue below lanes=2"),
        ({"lanes_paused_from": "1"}, "lanes_paused_from must name a lane queue below lanes=1"),
        ({"memory_shards": "3", "memory_routing_partitions": "3"}, "must be below memory_shards"),
    ],
)
def test_a_bad_size_or_lane_count_is_refused_at_synth(context: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _caps(**context)


@pytest.fixture(scope="module")
def resharded(tmp_path_factory: pytest.TempPathFactory, stand_in_layer: Path) -> Iterator[Synth]:
    # The middle of a reshard from 2 lane queues to 3: the new queue's event source paused.
    yield synthesize(
        "dev",
        tmp_path_factory.mktemp("cdk-lanes"),
        stand_in_layer,
        size="500",
        lanes="3",
        lanes_paused_from="2",
        memory_shards="6",
        memory_routing_partitions="3",
    )


def _agent_sources(synth: Synth) -> list[dict[str, Any]]:
    agent = {"Ref": logical_id(synth.stack.agent.function)}
    return [
        r["Properties"]
        for r in synth.resources("AWS::Lambda::EventSourceMapping").values()
        if r["Properties"]["FunctionName"] == agent
    ]


def test_each_lane_queue_has_its_own_event_source_and_the_new_one_waits(resharded: Synth) -> None:
    queues = [logical_id(q) for q in resharded.stack.lanes.queues]
    sources = {s["EventSourceArn"]["Fn::GetAtt"][0]: s for s in _agent_sources(resharded)}

    assert sorted(sources) == sorted(queues)
    assert {s["ScalingConfig"]["MaximumConcurrency"] for s in sources.values()} == {200}
    assert [sources[q]["Enabled"] for q in queues] == [True, True, False]
    # The reservation covers every queue's event source.
    agent = resharded.raw["Resources"][logical_id(resharded.stack.agent.function)]["Properties"]
    assert agent["ReservedConcurrentExecutions"] == 600
    # Queue 0 keeps the single queue's name; every queue is FIFO, high-throughput, with the one DLQ.
    fifo = resharded.resources("AWS::SQS::Queue")
    names = [fifo[q]["Properties"]["QueueName"] for q in queues]
    assert names == ["sigil-dev-turns.fifo", "sigil-dev-turns-1.fifo", "sigil-dev-turns-2.fifo"]
    for q in queues:
        props = fifo[q]["Properties"]
        assert props["FifoThroughputLimit"] == "perMessageGroupId"
        assert props["RedrivePolicy"]["deadLetterTargetArn"] == {
            "Fn::GetAtt": [logical_id(resharded.stack.lanes.dead_letters), "Arn"]
        }


def test_the_webhook_learns_every_lane_queue_in_order_and_may_send_to_each(resharded: Synth) -> None:
    webhook = resharded.raw["Resources"][logical_id(resharded.stack.ingress.function)]["Properties"]
    variables = webhook["Environment"]["Variables"]
    queues = [{"Ref": logical_id(q)} for q in resharded.stack.lanes.queues]

    assert variables["SIGIL_LANE_QUEUE_URLS"] == {"Fn::Join": [",", queues]}
    assert variables["SIGIL_QUEUE_URL"] == queues[0]
    role = {"Ref": logical_id(resharded.stack.ingress.function.role)}  # type: ignore[arg-type]
    sent_to: set[str] = set()
    for policy in resharded.resources("AWS::IAM::Policy").values():
        if role not in policy["Properties"]["Roles"]:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if "sqs:SendMessage" in actions:
                resources = statement["Resource"]
                for target in resources if isinstance(resources, list) else [resources]:
                    sent_to.add(target["Fn::GetAtt"][0])
    assert {logical_id(q) for q in resharded.stack.lanes.queues} <= sent_to
    assert resharded.raw["Outputs"]["LaneQueueUrls"]["Value"] == {"Fn::Join": [",", queues]}


def test_sharded_lanes_synthesise_with_nothing_unacknowledged(resharded: Synth) -> None:
    report = resharded.validation_report()

    assert [v["ruleName"] for plugin in report["pluginReports"] for v in plugin["violations"]] == []


def test_one_lane_queue_by_default_sets_no_lane_list(each_stage: Synth) -> None:
    webhook = each_stage.raw["Resources"][logical_id(each_stage.stack.ingress.function)]["Properties"]

    assert "SIGIL_LANE_QUEUE_URLS" not in webhook["Environment"]["Variables"]
    assert len(_agent_sources(each_stage)) == 1
    assert "LaneQueueUrls" not in each_stage.raw["Outputs"]
    agent = each_stage.raw["Resources"][logical_id(each_stage.stack.agent.function)]["Properties"]
    assert "SIGIL_OPENSEARCH_SHARDS" not in agent["Environment"]["Variables"]


def test_the_memory_index_sizing_reaches_the_functions_that_create_it(resharded: Synth) -> None:
    for owner in (resharded.stack.agent, resharded.stack.consolidation):
        variables = resharded.raw["Resources"][logical_id(owner.function)]["Properties"]["Environment"][
            "Variables"
        ]
        assert (variables["SIGIL_OPENSEARCH_SHARDS"], variables["SIGIL_OPENSEARCH_ROUTING_PARTITIONS"]) == (
            "6",
            "3",
        )


def test_a_fired_schedule_may_reach_every_lane_queue_and_the_agent_knows_them_all(resharded: Synth) -> None:
    # A schedule targets its session's lane queue (shared.adapters.aws._lane_queue_arns)
    stack = resharded.stack
    role = {"Ref": logical_id(stack.schedules.role)}
    sent_to = {
        target["Fn::GetAtt"][0]
        for policy in resharded.resources("AWS::IAM::Policy").values()
        if role in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        for target in (
            statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        )
    }
    assert sent_to == {logical_id(q) for q in stack.lanes.queues}
    agent = resharded.raw["Resources"][logical_id(stack.agent.function)]["Properties"]
    queues = [{"Ref": logical_id(q)} for q in stack.lanes.queues]
    assert agent["Environment"]["Variables"]["SIGIL_LANE_QUEUE_URLS"] == {"Fn::Join": [",", queues]}

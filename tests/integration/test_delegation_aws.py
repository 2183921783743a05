"""Delegation on the cloud path, as `sigil dev --aws` runs it (issue 29): the real agent handler
(functions/agent) fed by the SQS FIFO event-source poller of shared.local.aws_mode over in-process
moto, with the function-backed model scripted as in tests/integration/test_delegation.py.

The user asks for research; the first reply arrives before the task has run at all; the
Researcher's five tool calls take two invocations (the deadline cuts a model call in the first);
the user's message sent meanwhile is answered first, and the result is told once, after it, in the
same conversation. A cancel stops a running task.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws

from functions.agent import handler as agent
from shared import cloud
from shared.adapters.aws import clients
from shared.agent.turn import TurnDeps
from shared.local.aws_mode.event_source import FifoPoller
from shared.models import LaneItem, RoleConfig, new_workspace
from shared.models.tasks import Task
from shared.observability import metrics
from shared.providers.function import FunctionProvider
from shared.tasks.items import step_item
from tests.integration.test_delegation import LOOKUPS, WS, Script, lookup, replies, say
from tests.support.lambda_context import LambdaContext
from tests.support.moto_aws import REGION, AwsResources, provision

EVENTS = Path(__file__).resolve().parents[2] / "events"


def sqs_record(item: LaneItem, receive_count: int) -> dict[str, Any]:
    """The sample lane record (events/agent_sqs_fifo_batch.json) carrying `item`, as its
    `receive_count`th delivery."""
    sample = json.loads((EVENTS / "agent_sqs_fifo_batch.json").read_text())["Records"][0]
    record: dict[str, Any] = copy.deepcopy(sample)
    record["body"] = item.model_dump_json()
    record["attributes"]["MessageGroupId"] = item.group_id
    record["attributes"]["ApproximateReceiveCount"] = str(receive_count)
    return record


@pytest.fixture
def script() -> Script:
    LOOKUPS.clear()
    made = Script()
    made.user_spoke.set()  # no thread waits here: the test orders the batches itself
    made.release.set()
    return made


@pytest.fixture
def aws(request: pytest.FixtureRequest, script: Script) -> Iterator[tuple[AwsResources, TurnDeps]]:
    request.addfinalizer(metrics.clear_metrics)
    with mock_aws():
        clients.reset()
        resources = provision("delegation")
        cloud.reset(config=resources.settings(model="function/scripted", turn_reserve_s=1, turn_min_s=0))
        deps = cloud.turn_deps()
        provider = FunctionProvider(script)
        deps.provider_factory = lambda ref: (provider, "scripted")
        deps.tools = deps.tools.extended(lookup)
        roles = {"researcher": RoleConfig(instructions="Research.", tools=["lookup"])}
        workspace = new_workspace(WS)
        deps.backend.workspaces.put(
            workspace.model_copy(
                update={"delegation": workspace.delegation.model_copy(update={"roles": roles})}
            )
        )
        yield resources, deps
        cloud.reset()


def poller(resources: AwsResources) -> FifoPoller:
    sqs = clients.sqs(REGION)
    arn = sqs.get_queue_attributes(QueueUrl=resources.queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    return FifoPoller(
        sqs,
        queue_url=resources.queue_url,
        queue_arn=arn,
        region=REGION,
        invoke=lambda event: agent.lambda_handler(event, LambdaContext(remaining_ms=60_000)),
    )


def only_task(deps: TurnDeps) -> Task:
    assert deps.backend.tasks is not None
    (task,) = deps.backend.tasks.list_tasks(WS)
    return task


def drain(poll: FifoPoller, until: Callable[[], bool], *, batches: int = 20) -> None:
    """Poll batch after batch (as the event-source mapping does) until `until` holds."""
    for _ in range(batches):
        if until():
            return
        poll.poll_once()
    assert until(), "the lane ran dry before the condition held"


def test_research_on_the_cloud_path_is_told_once_after_what_the_user_said_meanwhile(
    aws: tuple[AwsResources, TurnDeps], script: Script
) -> None:
    resources, deps = aws
    poll = poller(resources)
    # When the user asks for research, and the agent's first batch runs
    say(deps.backend, "e1", "Please research the tides")
    assert poll.poll_once() == 1
    # Then the first reply is out before the task has run a single step
    task = only_task(deps)
    assert replies(deps.backend) == [f"Started: {task.id}. I'll tell you when it reports."]
    assert task.status == "queued" and LOOKUPS == []
    # When the task's first invocation runs: three lookups, then the deadline cuts a model call
    assert poll.poll_once() == 1
    assert LOOKUPS == ["tides 1", "tides 2", "tides 3"] and script.cut
    assert only_task(deps).invocations == 1 and not only_task(deps).terminal
    # And the user says something else meanwhile
    say(deps.backend, "e2", "And what about the weather?")
    # Then the batches run to the task's end: its continuation beside the user's turn
    drain(poll, lambda: only_task(deps).outcome_delivered)
    said = replies(deps.backend)
    assert said[1] == "echo: And what about the weather?"
    assert len(said) == 3 and said[2].startswith(
        f"Update on your task: [Task {task.id} (researcher) finished:"
    )
    assert [f"tides {n}" for n in range(1, 6)] == LOOKUPS
    done = only_task(deps)
    assert done.status == "done" and done.invocations == 2
    # And nothing is left on the lanes: the outcome was told once
    assert poll.poll_once() == 0
    assert len(replies(deps.backend)) == 3
    # And each invocation has its own audit record, linked to the delegating turn
    records = [r for r in deps.backend.audit.list_records(WS) if r.task_id == task.id]
    assert len(records) == 2 and {r.parent_turn_id for r in records} == {task.parent_turn_id}
    assert {r.correlation_id for r in records} == {"req-e1"}


def test_a_cancel_stops_a_running_task_on_the_cloud_path(aws: tuple[AwsResources, TurnDeps]) -> None:
    resources, deps = aws
    poll = poller(resources)
    say(deps.backend, "e1", "Please research the tides")
    drain(poll, lambda: bool(LOOKUPS))  # the task's first invocation has run (and was cut)
    # When the user cancels it (what `/tasks cancel` stores) before its continuation runs
    assert deps.backend.tasks is not None
    task = only_task(deps)
    deps.backend.tasks.save(task.model_copy(update={"cancel_requested": True}))
    drain(poll, lambda: only_task(deps).outcome_delivered)
    # Then it stopped without another model call, and the user is told
    assert only_task(deps).status == "cancelled"
    assert LOOKUPS == ["tides 1", "tides 2", "tides 3"]
    assert replies(deps.backend)[-1].startswith(
        f"Update on your task: [Task {task.id} (researcher) was cancelled"
    )


def test_a_redelivered_step_hands_the_rest_of_its_task_to_a_fresh_step_item(
    aws: tuple[AwsResources, TurnDeps],
) -> None:
    resources, deps = aws
    poll = poller(resources)
    say(deps.backend, "e1", "Please research the tides")
    assert poll.poll_once() == 1
    task = only_task(deps)
    # When the task's step comes on its second delivery (its first died: a killed sandbox takes
    # its whole batch with it, bench/chaos.py --tasks), through the agent's handler
    record = sqs_record(step_item(task, 0), receive_count=2)
    answer = agent.lambda_handler({"Records": [record]}, LambdaContext(remaining_ms=60_000))
    # Then it made one step and handed the rest over: the invocation is counted, and the next
    # step item (its own deliveries from one) continues, rather than this one running on until
    # it is killed again and SQS's count of its deliveries reaches the dead-letter queue
    assert answer == {"batchItemFailures": []}
    assert LOOKUPS == ["tides 1"]
    assert only_task(deps).invocations == 1 and not only_task(deps).terminal
    # And the task runs to its end from there, each lookup made once, and is told once
    drain(poll, lambda: only_task(deps).outcome_delivered)
    assert [f"tides {n}" for n in range(1, 6)] == LOOKUPS
    assert only_task(deps).status == "done"
    assert replies(deps.backend)[-1].startswith(
        f"Update on your task: [Task {task.id} (researcher) finished:"
    )

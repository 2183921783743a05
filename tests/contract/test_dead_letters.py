"""DeadLetters contract: what a lane gave up on is listed with its reason, and a redrive puts a
session's items back on its lane in their original order, once, skipping what its requeue skips.

Each backend's dead letters are made the way its lane makes them: the embedded runner's handler
fails an item on its last attempt; on moto, the turns queue's redrive policy moves a record to the
FIFO dead-letter queue after its receives, and the reason is the turn's "error" audit record.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from moto import mock_aws

from shared.adapters.aws import build_aws_backend, clients
from shared.adapters.embedded import EmbeddedLaneRunner, SqliteLanes, build_embedded_backend
from shared.agent.preflight import turn_id_for
from shared.agent.redrive import redriven, requeue_policy
from shared.backend import Backend
from shared.config import Settings
from shared.models import AssistantMessage, AuditRecord, LaneItem, Session, UserMessage
from shared.ports import DeadLetters
from tests.support.moto_aws import REGION, drain_fifo, name_for, provision

from .builders import lane_item

REASON = "model unavailable: HTTP 500"


@dataclass
class DeadLetterSet:
    backend: Backend
    kill: Callable[[list[LaneItem]], None]  # submit the items and let the lane give up on them
    drain: Callable[[int], list[LaneItem]]  # what the lane holds now, in delivery order

    @property
    def dead(self) -> DeadLetters:
        assert self.backend.dead_letters is not None
        return self.backend.dead_letters


@contextlib.contextmanager
def embedded(data_dir: pathlib.Path) -> Iterator[DeadLetterSet]:
    backend = build_embedded_backend(Settings(data_dir=data_dir))
    lanes = backend.lanes
    assert isinstance(lanes, SqliteLanes)

    def fail(item: LaneItem) -> None:
        raise RuntimeError(REASON)

    def kill(items: list[LaneItem]) -> None:
        for item in items:
            lanes.submit(item)
        with EmbeddedLaneRunner(
            lanes, fail, workers=2, max_attempts=2, backoff_s=0, poll_interval_s=0.05
        ) as r:
            assert r.wait_idle(30)

    def drain(n: int) -> list[LaneItem]:
        taken: list[LaneItem] = []
        with EmbeddedLaneRunner(lanes, taken.append, workers=1, poll_interval_s=0.05) as runner:
            assert runner.wait_idle(30)
        return taken[:n]

    try:
        yield DeadLetterSet(backend, kill, drain)
    finally:
        backend.close()


@contextlib.contextmanager
def aws(data_dir: pathlib.Path) -> Iterator[DeadLetterSet]:
    with mock_aws():
        clients.reset()
        name = name_for(data_dir)
        resources = provision(name)
        sqs = clients.sqs(REGION)
        fifo = {"FifoQueue": "true", "ContentBasedDeduplication": "false"}
        dlq = sqs.create_queue(QueueName=f"{name}-turns-dlq.fifo", Attributes=fifo)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        # As infra/constructs/lanes.py, with two receives before the dead-letter queue.
        turns = sqs.create_queue(
            QueueName=f"{name}-lane.fifo",
            Attributes={
                **fifo,
                "DeduplicationScope": "messageGroup",
                "FifoThroughputLimit": "perMessageGroupId",
                "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 2}),
            },
        )["QueueUrl"]
        backend = build_aws_backend(resources.settings(queue_url=turns, dead_letter_queue_url=dlq))

        def kill(items: list[LaneItem]) -> None:
            for item in items:
                backend.lanes.submit(item)
                # What run_turn audits for each failed attempt of a provider error.
                backend.audit.append(
                    AuditRecord(
                        workspace_id=item.inbound.workspace_id,
                        session_id=item.inbound.session_id,
                        turn_id=turn_id_for(item),
                        event_id=item.inbound.event_id,
                        outcome="error",
                        error=REASON,
                    )
                )
            # Received and never deleted, as by a consumer whose every attempt fails, until SQS has
            # moved every record to the dead-letter queue.
            for _ in range(50):
                left = sqs.get_queue_attributes(
                    QueueUrl=turns,
                    AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
                )["Attributes"]
                if sum(int(v) for v in left.values()) == 0:
                    return
                sqs.receive_message(QueueUrl=turns, MaxNumberOfMessages=10, VisibilityTimeout=0)
            raise AssertionError("the records never reached the dead-letter queue")

        try:
            yield DeadLetterSet(backend, kill, lambda n: drain_fifo(turns, n))
        finally:
            backend.close()


FACTORIES = {"embedded": embedded, "aws": aws}


@pytest.fixture(params=sorted(FACTORIES))
def dl(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[DeadLetterSet]:
    with FACTORIES[request.param](tmp_path / "backend") as found:
        yield found


def texts(items: list[LaneItem]) -> list[str]:
    return [i.inbound.text for i in items]


def session_items(ws: str, session: str, n: int) -> list[LaneItem]:
    return [
        lane_item(ws, session, event_id=f"{session}-e{i}", text=f"{session} message {i}") for i in range(n)
    ]


# ---------------------------------------------------------------- listing


def test_a_dead_item_is_listed_with_its_session_event_preview_attempts_and_reason(
    dl: DeadLetterSet, ws_a: str
) -> None:
    long = lane_item(ws_a, "s1", event_id="evt-long", text="x" * 500)
    dl.kill([long])

    [entry] = dl.dead.list_entries()
    assert (entry.workspace_id, entry.session_id, entry.event_id, entry.channel) == (
        ws_a,
        "s1",
        "evt-long",
        "telegram",
    )
    assert entry.group_id == long.group_id
    # The start of the user's text only, and kept out of the entry's repr (what a log line shows).
    assert entry.preview == "x" * 60
    assert "xxxx" not in repr(entry)
    assert entry.attempts >= 2
    assert entry.reason is not None and REASON in entry.reason
    assert entry.item == long
    assert dl.dead.show(entry.id) == entry


def test_the_list_is_by_session_in_original_order_and_filters_by_workspace(
    dl: DeadLetterSet, ws_a: str, ws_b: str
) -> None:
    dl.kill([*session_items(ws_a, "s1", 3), *session_items(ws_b, "s2", 2)])

    assert [e.event_id for e in dl.dead.list_entries(ws_a)] == ["s1-e0", "s1-e1", "s1-e2"]
    assert [e.event_id for e in dl.dead.list_entries(ws_b)] == ["s2-e0", "s2-e1"]
    assert len(dl.dead.list_entries()) == 5
    # Listing takes nothing away.
    assert len(dl.dead.list_entries()) == 5


def test_show_of_an_unknown_id_is_none(dl: DeadLetterSet) -> None:
    assert dl.dead.show("12345") is None
    assert dl.dead.show("no-such-id") is None


# ---------------------------------------------------------------- redrive


def test_a_session_redrive_requeues_its_items_in_order_once(dl: DeadLetterSet, ws_a: str) -> None:
    items = session_items(ws_a, "s1", 4)
    other = session_items(ws_a, "s2", 1)
    dl.kill([*items, *other])

    report = dl.dead.redrive(redriven, session=(ws_a, "s1"))

    assert len(report.ids("redriven")) == 4
    back = dl.drain(10)
    assert texts(back) == texts(items)
    assert [i.redrive_of for i in back] == [i.inbound.event_id for i in items]
    assert [i.inbound.event_id for i in back] == [f"{i.inbound.event_id}.r1" for i in items]
    assert [o.detail for o in report.outcomes] == [i.inbound.event_id for i in back]
    # The other session's dead letter stays; this session's are gone, so a second redrive finds none.
    assert [e.session_id for e in dl.dead.list_entries()] == ["s2"]
    assert dl.dead.redrive(redriven, session=(ws_a, "s1")).outcomes == []
    assert dl.drain(10) == []


def test_a_redrive_by_id_takes_only_those_and_reports_unknown_ids(dl: DeadLetterSet, ws_a: str) -> None:
    dl.kill(session_items(ws_a, "s1", 3))
    entries = dl.dead.list_entries()

    report = dl.dead.redrive(redriven, ids=[entries[2].id, entries[0].id, "404"])

    # Still in the session's order, whatever order the ids came in.
    assert report.ids("redriven") == [entries[0].id, entries[2].id]
    assert report.ids("not_found") == ["404"]
    assert texts(dl.drain(10)) == ["s1 message 0", "s1 message 2"]
    assert [e.id for e in dl.dead.list_entries()] == [entries[1].id]


def test_what_the_requeue_skips_is_reported_and_removed_not_queued(dl: DeadLetterSet, ws_a: str) -> None:
    items = session_items(ws_a, "s1", 3)
    dl.kill(items)
    done = items[1].inbound.event_id

    report = dl.dead.redrive(
        lambda item: None if item.inbound.event_id == done else redriven(item), session=(ws_a, "s1")
    )

    assert [o.outcome for o in report.outcomes] == ["redriven", "skipped", "redriven"]
    assert texts(dl.drain(10)) == ["s1 message 0", "s1 message 2"]
    assert dl.dead.list_entries() == []


def test_the_redrive_policy_skips_a_committed_answer_and_requeues_a_given_up_message(
    dl: DeadLetterSet, ws_a: str
) -> None:
    answered, given_up, never_ran = session_items(ws_a, "s1", 3)
    dl.kill([answered, given_up, never_ran])
    # The session as the turns left it: the first answered (a late failure after its commit), the
    # second given up (its message kept, no reply), the third never committed.
    sessions = dl.backend.sessions
    t_answered, t_given_up = turn_id_for(answered), turn_id_for(given_up)
    session = Session(
        id="s1",
        workspace_id=ws_a,
        active_messages=[
            UserMessage(id=f"{t_answered}.u", content="s1 message 0", event_id=answered.inbound.event_id),
            AssistantMessage(id=f"{t_answered}.a", content="an answer"),
            UserMessage(id=f"{t_given_up}.u", content="s1 message 1", event_id=given_up.inbound.event_id),
        ],
        message_count=3,
        recent_event_ids=[answered.inbound.event_id, given_up.inbound.event_id],
        recent_event_times=[2_000_000_000, 2_000_000_000],
    )
    sessions.save(session, expected_version=0)

    report = dl.dead.redrive(requeue_policy(sessions), session=(ws_a, "s1"))

    assert [o.outcome for o in report.outcomes] == ["skipped", "redriven", "redriven"]
    back = dl.drain(10)
    assert texts(back) == ["s1 message 1", "s1 message 2"]
    assert dl.dead.list_entries() == []

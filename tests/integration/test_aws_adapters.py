"""The AWS adapters on in-process moto: what the contract suites cannot show.

The contract suites prove each port behaves like the embedded one. These tests look at the wire
and the tables: FIFO message attributes and deduplication, EventBridge entries as a rule delivers
them, Secrets Manager reads cached by powertools, DynamoDB conditions under racing writers, the
send ledger's items, round trips per call, TTL and the workspace prefix of every key.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError
from botocore.exceptions import ClientError
from moto import mock_aws

from shared import serde
from shared.adapters.aws import build_aws_backend, clients
from shared.adapters.aws.dead_letters import SqsDeadLetters
from shared.adapters.aws.dynamodb import (
    TABLE_SCHEMAS,
    TTL_ATTRIBUTE,
    DynamoAuditLog,
    DynamoMemoryStore,
    DynamoOutbox,
    DynamoSessionStore,
    DynamoWorkspaceStore,
)
from shared.adapters.aws.dynamodb.audit import AUDIT_SHARDS, audit_pk
from shared.adapters.aws.dynamodb.budgets import DynamoBudgetStore
from shared.adapters.aws.dynamodb.retry import RETRIES
from shared.adapters.aws.dynamodb.table import shard_of
from shared.adapters.aws.events import EventBridgeBus, EventPublishError
from shared.adapters.aws.opensearch import OpenSearchIndex
from shared.adapters.aws.secrets import SecretsManagerStore
from shared.adapters.aws.sqs import SqsLanes, fifo_id, lane_queue
from shared.budgets import BudgetCharge, Counters, buckets
from shared.errors import ConcurrencyConflict, SigilError
from shared.models import (
    WORKSPACE_WIDE,
    AuditRecord,
    BudgetLimits,
    DomainEvent,
    InboundMessage,
    LaneItem,
    MemoryRecord,
    MemoryScope,
    OutboundMessage,
    OutboxEntry,
    RecallScope,
    Sender,
    Session,
    Summary,
    ToolResultMessage,
    Triple,
    WorkspaceConfig,
)
from shared.ports import (
    AuditLog,
    EventBus,
    Lanes,
    MemoryIndex,
    MemoryStore,
    Outbox,
    SecretStore,
    SessionStore,
    WorkspaceStore,
)
from tests.support.moto_aws import REGION, AwsResources, drain_fifo, moto_like_aws, provision

NOW = datetime(2026, 1, 5, 9, 30, tzinfo=UTC)


@pytest.fixture
def aws() -> Iterator[AwsResources]:
    # A fresh moto state per test; cached clients carry over (see moto_aws.persistent_mock).
    with mock_aws(), moto_like_aws():
        yield provision("it")


def inbound(
    workspace: str = "ws1", session: str = "s1", event: str = "e1", text: str = "hi"
) -> InboundMessage:
    return InboundMessage(
        event_id=event,
        channel="telegram",
        workspace_id=workspace,
        session_id=session,
        sender=Sender(id="u1"),
        chat_id="c1",
        text=text,
    )


def reply(
    turn: str = "t1", part: int = 0, session: str = "s1", workspace: str = "ws1", seq: int | None = None
) -> OutboundMessage:
    return OutboundMessage(
        workspace_id=workspace,
        session_id=session,
        channel="web",
        chat_id="c1",
        turn_id=turn,
        part=part,
        seq=seq if seq is not None else part + 1,
        text="ok",
    )


def counting_client() -> tuple[Any, list[str]]:
    """A DynamoDB client of its own (not the cached one) that records every operation it sends."""
    client = boto3.client("dynamodb", region_name=REGION)
    calls: list[str] = []
    client.meta.events.register("before-call.dynamodb", lambda model, **_: calls.append(model.name))
    return client, calls


# ---------------------------------------------------------------- SQS FIFO lanes


def test_lane_message_carries_group_and_dedup_ids_and_the_item(aws: AwsResources) -> None:
    # Given a lane item for session s1 of ws1
    item = LaneItem(inbound=inbound(), enqueued_at=NOW)
    # When it is submitted
    result = SqsLanes(aws.queue_url, region=REGION).submit(item)
    # Then SQS holds one message grouped by session, deduplicated by event, whose body is the item
    assert result.status == "queued"
    messages = clients.sqs(REGION).receive_message(
        QueueUrl=aws.queue_url,
        MaxNumberOfMessages=10,
        MessageSystemAttributeNames=["MessageGroupId", "MessageDeduplicationId"],
    )["Messages"]
    assert len(messages) == 1
    attributes = messages[0]["Attributes"]
    assert attributes["MessageGroupId"] == "ws1.s1" == item.group_id
    assert attributes["MessageDeduplicationId"] == "ws1.telegram.e1" == item.dedup_id
    assert serde.loads(LaneItem, messages[0]["Body"]) == item


def test_same_dedup_id_within_five_minutes_is_queued_once(aws: AwsResources) -> None:
    lanes = SqsLanes(aws.queue_url, region=REGION)
    first = LaneItem(inbound=inbound(text="first"))
    # A platform redelivery: same event id, so the same dedup id, even with another body.
    again = LaneItem(inbound=inbound(text="redelivered"))
    assert lanes.submit(first).status == "queued"
    assert lanes.submit(again).status == "queued"  # SQS answers 200 and drops it
    drained = drain_fifo(aws.queue_url, 10)
    assert [i.inbound.text for i in drained] == ["first"]
    # After the first was consumed and deleted, a retry inside the interval is still dropped
    # (SQS behaviour; moto needs tests.support.moto_aws.sqs_dedup_survives_delete for it)
    assert lanes.submit(LaneItem(inbound=inbound(text="late retry"))).status == "queued"
    assert drain_fifo(aws.queue_url, 10) == []


def test_lanes_keep_order_within_a_session(aws: AwsResources) -> None:
    lanes = SqsLanes(aws.queue_url, region=REGION)
    for n in range(5):
        lanes.submit(LaneItem(inbound=inbound(session="s1", event=f"a{n}", text=f"a{n}")))
        lanes.submit(LaneItem(inbound=inbound(session="s2", event=f"b{n}", text=f"b{n}")))
    drained = drain_fifo(aws.queue_url, 100)
    assert [i.inbound.text for i in drained if i.inbound.session_id == "s1"] == [f"a{n}" for n in range(5)]
    assert [i.inbound.text for i in drained if i.inbound.session_id == "s2"] == [f"b{n}" for n in range(5)]


def test_ids_longer_than_sqs_allows_are_digested_and_stay_distinct(aws: AwsResources) -> None:
    # Workspace and session ids may each be 128 characters: their group id is 257.
    ws, s1, s2 = "w" * 128, "s" * 127 + "1", "s" * 127 + "2"
    lanes = SqsLanes(aws.queue_url, region=REGION)
    a = LaneItem(inbound=inbound(ws, s1, "e" * 127 + "1"))
    b = LaneItem(inbound=inbound(ws, s2, "e" * 127 + "2"))
    lanes.submit(a)
    lanes.submit(b)
    ids = [fifo_id(a.group_id), fifo_id(b.group_id), fifo_id(a.dedup_id), fifo_id(b.dedup_id)]
    assert all(len(i) <= 128 for i in ids)
    assert len(set(ids)) == 4
    received = clients.sqs(REGION).receive_message(
        QueueUrl=aws.queue_url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["MessageGroupId"]
    )["Messages"]
    assert sorted(m["Attributes"]["MessageGroupId"] for m in received) == sorted(ids[:2])
    # Short ids are sent as they are, so the console shows the session key.
    assert fifo_id("ws1.s1") == "ws1.s1"


# ---------------------------------------------------------------- EventBridge


def test_published_event_reaches_a_rule_target_as_sent(aws: AwsResources) -> None:
    # Given a rule on the bus that sends Sigil's CompactionDue events to an SQS queue
    sqs, events = clients.sqs(REGION), clients.events(REGION)
    target_url = sqs.create_queue(QueueName="compaction")["QueueUrl"]
    target_arn = sqs.get_queue_attributes(QueueUrl=target_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    events.put_rule(
        Name="compaction",
        EventBusName=aws.event_bus_name,
        EventPattern=json.dumps({"source": ["sigil"], "detail-type": ["CompactionDue"]}),
    )
    events.put_targets(
        Rule="compaction", EventBusName=aws.event_bus_name, Targets=[{"Id": "q", "Arn": target_arn}]
    )
    event = DomainEvent(
        type="CompactionDue", workspace_id="ws1", session_id="s1", detail={"tier1": 50}, at=NOW
    )
    bus = EventBridgeBus(aws.event_bus_name, region=REGION)
    # When one CompactionDue and one MaintenanceDue are published
    bus.publish(event)
    bus.publish(DomainEvent(type="MaintenanceDue", workspace_id="ws1"))
    # Then the queue receives only the matching one, with source, detail-type and detail intact
    messages = sqs.receive_message(QueueUrl=target_url, MaxNumberOfMessages=10)["Messages"]
    assert len(messages) == 1
    envelope = json.loads(messages[0]["Body"])
    assert envelope["source"] == "sigil"
    assert envelope["detail-type"] == "CompactionDue"
    assert serde.from_jsonable(DomainEvent, envelope["detail"]) == event


def test_an_entry_eventbridge_refuses_raises(aws: AwsResources) -> None:
    # PutEvents answers 200 and reports refusals per entry. An SDK hook blanks the entry's
    # DetailType on its way out, which EventBridge (and moto) refuses as InvalidArgument.
    client = boto3.client("events", region_name=REGION)

    def blank_detail_type(params: dict[str, Any], **_: Any) -> None:
        params["Entries"][0]["DetailType"] = ""

    client.meta.events.register("provide-client-params.events.PutEvents", blank_detail_type)
    bus = EventBridgeBus(aws.event_bus_name, client=client)
    with pytest.raises(EventPublishError, match="InvalidArgument"):
        bus.publish(DomainEvent(type="MaintenanceDue", workspace_id="ws1"))


# ---------------------------------------------------------------- Secrets Manager


def test_secrets_are_read_by_prefixed_name_and_cached(aws: AwsResources) -> None:
    sm = boto3.client("secretsmanager", region_name=REGION)
    reads: list[str] = []
    sm.meta.events.register("before-call.secrets-manager.GetSecretValue", lambda **_: reads.append("get"))
    sm.create_secret(Name=f"{aws.secrets_prefix}web/ws1", SecretString="s3cret")
    store = SecretsManagerStore(aws.secrets_prefix, client=sm, max_age_s=300)
    # Two reads inside max_age: one call to Secrets Manager
    assert store.get("web/ws1") == "s3cret"
    sm.put_secret_value(SecretId=f"{aws.secrets_prefix}web/ws1", SecretString="rotated")
    assert store.get("web/ws1") == "s3cret"
    assert reads == ["get"]
    # A store without caching sees the rotation at once
    assert SecretsManagerStore(aws.secrets_prefix, client=sm, max_age_s=0).get("web/ws1") == "rotated"


def test_binary_secret_is_returned_as_text(aws: AwsResources) -> None:
    clients.secretsmanager(REGION).create_secret(Name=f"{aws.secrets_prefix}bin", SecretBinary=b"raw-token")
    assert SecretsManagerStore(aws.secrets_prefix, region=REGION).get("bin") == "raw-token"


def test_missing_secret_is_none_and_other_failures_raise(aws: AwsResources) -> None:
    sm = clients.secretsmanager(REGION)
    store = SecretsManagerStore(aws.secrets_prefix, region=REGION)
    assert store.get("web/nobody") is None
    # A secret scheduled for deletion is an InvalidRequestException, not "not found": it must not
    # pass for a missing secret (a webhook would then run unsigned), so it raises.
    sm.create_secret(Name=f"{aws.secrets_prefix}gone", SecretString="x")
    sm.delete_secret(SecretId=f"{aws.secrets_prefix}gone")
    with pytest.raises(GetParameterError):
        store.get("gone")


# ---------------------------------------------------------------- sessions


def test_session_get_and_save_are_one_round_trip_each(aws: AwsResources) -> None:
    client, calls = counting_client()
    store = DynamoSessionStore(aws.sessions_table, client=client)
    saved = store.save(Session(id="s1", workspace_id="ws1"), expected_version=0)
    assert calls == ["PutItem"]
    calls.clear()
    loaded = store.get("ws1", "s1")
    assert calls == ["GetItem"]
    calls.clear()
    assert loaded is not None
    store.save(loaded, expected_version=saved.version)
    assert calls == ["PutItem"]


def test_two_writers_of_one_version_one_wins(aws: AwsResources) -> None:
    store = DynamoSessionStore(aws.sessions_table, region=REGION)
    store.save(Session(id="s1", workspace_id="ws1"), expected_version=0)
    # Both turns read version 1, then both write
    a, b = store.get("ws1", "s1"), store.get("ws1", "s1")
    assert a is not None and b is not None
    a.summary, b.summary = "from a", "from b"
    assert store.save(a, expected_version=1).version == 2
    with pytest.raises(ConcurrencyConflict):
        store.save(b, expected_version=1)
    stored = store.get("ws1", "s1")
    assert stored is not None and (stored.version, stored.summary) == (2, "from a")
    # Creating a session that exists is a conflict too (attribute_not_exists on version 0)
    with pytest.raises(ConcurrencyConflict):
        store.save(Session(id="s1", workspace_id="ws1"), expected_version=0)


def test_concurrent_writers_on_threads_exactly_one_wins(aws: AwsResources) -> None:
    store = DynamoSessionStore(aws.sessions_table, region=REGION)
    store.save(Session(id="s1", workspace_id="ws1"), expected_version=0)
    writers = 8
    barrier = threading.Barrier(writers)
    outcomes: list[str] = []
    lock = threading.Lock()

    def write(n: int) -> None:
        session = store.get("ws1", "s1")
        assert session is not None
        session.summary = f"writer {n}"
        barrier.wait()
        try:
            store.save(session, expected_version=1)
            outcome = "won"
        except ConcurrencyConflict:
            outcome = "conflict"
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["conflict"] * (writers - 1) + ["won"]
    stored = store.get("ws1", "s1")
    assert stored is not None and stored.version == 2


def test_a_session_over_400_kb_is_refused_clearly(aws: AwsResources) -> None:
    store = DynamoSessionStore(aws.sessions_table, region=REGION)
    huge = ToolResultMessage(tool_call_id="c", name="fetch", content="x" * 30_000)
    session = Session(id="s1", workspace_id="ws1", active_messages=[huge] * 14)
    with pytest.raises(SigilError) as raised:
        store.save(session, expected_version=0)
    assert raised.value.code == "item_too_large"
    # A full default window of ordinary messages is far below the limit
    ordinary = ToolResultMessage(tool_call_id="c", name="fetch", content="x" * 4_000)
    store.save(Session(id="s2", workspace_id="ws1", active_messages=[ordinary] * 20), expected_version=0)


# ---------------------------------------------------------------- outbox (send ledger)


def test_outbox_append_is_one_put_item_and_a_duplicate_is_one_too(aws: AwsResources) -> None:
    client, calls = counting_client()
    outbox = DynamoOutbox(aws.sessions_table, client=client)
    first = outbox.append(reply("t1", 0, seq=101))
    assert calls == ["PutItem"]
    assert first is not None and first.seq == 101
    calls.clear()
    # The retried turn: the failed condition hands back the stored item, which is this part
    assert outbox.append(reply("t1", 0, seq=101)) is None
    assert calls == ["PutItem"]
    second = outbox.append(reply("t1", 1, seq=102))
    assert second is not None and second.seq == 102
    assert [(e.seq, e.message.part) for e in outbox.read("ws1", "s1")] == [(101, 0), (102, 1)]
    # One item per part, at its seq: no counter, no ledger items
    items = clients.dynamodb(REGION).query(
        TableName=aws.sessions_table,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": "WS#ws1#OUTBOX#s1"}},
    )["Items"]
    assert sorted(i["sk"]["S"] for i in items) == ["SEQ#000000000101", "SEQ#000000000102"]


def test_outbox_part_at_another_turns_seq_looks_for_the_next_free_one(aws: AwsResources) -> None:
    client, calls = counting_client()
    outbox = DynamoOutbox(aws.sessions_table, client=client)
    # Given a turn that sent two parts and never committed
    outbox.append(reply("t1", 0, seq=501))
    outbox.append(reply("t1", 1, seq=502))
    calls.clear()
    # When the next turn asks for the same first seq: one failed PutItem, one Query, one PutItem
    entry = outbox.append(reply("t2", 0, seq=501))
    assert calls == ["PutItem", "Query", "PutItem"]
    assert entry is not None and (entry.seq, entry.message.seq) == (503, 503)
    calls.clear()
    # And its retry finds itself in the same two steps, storing nothing
    assert outbox.append(reply("t2", 0, seq=501)) is None
    assert calls == ["PutItem", "Query"]
    assert [e.message.turn_id for e in outbox.read("ws1", "s1")] == ["t1", "t1", "t2"]


def test_outbox_reads_entries_stored_before_messages_carried_a_seq(aws: AwsResources) -> None:
    # Given a partition as the counter design left it: COUNTER, SENT# and a SEQ# entry whose
    # message has no seq of its own
    ddb, pk = clients.dynamodb(REGION), {"S": "WS#ws1#OUTBOX#s1"}
    older = json.loads(serde.dumps(OutboxEntry(seq=1, message=reply("t0", 0, seq=1))))
    del older["message"]["seq"]
    for sk, extra in [
        ("COUNTER", {"n": {"N": "1"}}),
        ("SENT#V#t0#0", {"seq": {"N": "1"}}),
        ("SEQ#000000000001", {"doc": {"S": json.dumps(older)}}),
    ]:
        ddb.put_item(TableName=aws.sessions_table, Item={"pk": pk, "sk": {"S": sk}, **extra})
    outbox = DynamoOutbox(aws.sessions_table, region=REGION)
    # When the next turn (two messages committed) replies, then both read back, in order
    assert outbox.append(reply("t1", 0, seq=201)) is not None
    assert [(e.seq, e.message.seq, e.message.turn_id) for e in outbox.read("ws1", "s1")] == [
        (1, 1, "t0"),
        (201, 201, "t1"),
    ]


def test_outbox_concurrent_duplicates_store_one(aws: AwsResources) -> None:
    outbox = DynamoOutbox(aws.sessions_table, region=REGION)
    writers = 6
    barrier = threading.Barrier(writers)
    results: list[int | None] = []
    lock = threading.Lock()

    def append() -> None:
        barrier.wait()
        entry = outbox.append(reply("t1", 0))
        with lock:
            results.append(entry.seq if entry else None)

    threads = [threading.Thread(target=append) for _ in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results, key=lambda r: r or 0) == [None] * (writers - 1) + [1]
    assert len(outbox.read("ws1", "s1")) == 1


# ---------------------------------------------------------------- the atomic commit


def tier1(seq: int, text: str = "hi") -> MemoryRecord:
    return MemoryRecord(
        id=f"r{seq}", workspace_id="ws1", session_id="s1", role="user", text=text, seq=seq, created_at=NOW
    )


def test_a_save_with_archive_and_audit_is_one_transaction_across_both_tables(aws: AwsResources) -> None:
    client, calls = counting_client()
    store = DynamoSessionStore(aws.sessions_table, memory_table=aws.memory_table, client=client)
    actions: list[list[str]] = []
    client.meta.events.register(
        "before-parameter-build.dynamodb.TransactWriteItems",
        lambda params, **_: actions.append(
            [a["Put"]["TableName"] for a in params["TransactItems"]]  # one Put per item
        ),
    )
    audit = AuditRecord(workspace_id="ws1", session_id="s1", turn_id="t1", outcome="ok")
    store.save(
        Session(id="s1", workspace_id="ws1"), expected_version=0, archive=[tier1(0), tier1(1)], audit=audit
    )
    assert calls == ["TransactWriteItems"]
    assert actions == [[aws.sessions_table, aws.memory_table, aws.memory_table, aws.memory_table]]
    assert [r.id for r in DynamoMemoryStore(aws.memory_table, region=REGION).get_messages("ws1", "s1")] == [
        "r0",
        "r1",
    ]
    # The audit item is the one DynamoAuditLog writes: listed, with its TTL
    assert [r.id for r in DynamoAuditLog(aws.memory_table, region=REGION).list_records("ws1")] == [audit.id]


def test_a_save_whose_version_moved_is_a_conflict_and_writes_nothing(aws: AwsResources) -> None:
    store = DynamoSessionStore(aws.sessions_table, memory_table=aws.memory_table, region=REGION)
    store.save(Session(id="s1", workspace_id="ws1"), expected_version=0)
    audit = AuditRecord(workspace_id="ws1", session_id="s1", turn_id="t1", outcome="ok")
    with pytest.raises(ConcurrencyConflict):
        store.save(Session(id="s1", workspace_id="ws1"), expected_version=0, archive=[tier1(0)], audit=audit)
    assert DynamoMemoryStore(aws.memory_table, region=REGION).count_messages("ws1", "s1") == 0
    assert DynamoAuditLog(aws.memory_table, region=REGION).list_records("ws1") == []


def test_a_save_resends_without_the_records_already_stored(aws: AwsResources) -> None:
    client, calls = counting_client()
    store = DynamoSessionStore(aws.sessions_table, memory_table=aws.memory_table, client=client)
    DynamoMemoryStore(aws.memory_table, region=REGION).append_messages("ws1", [tier1(0, "first")])
    # r0's condition cancels the transaction; the session and r1 are sent again, without it
    store.save(
        Session(id="s1", workspace_id="ws1"), expected_version=0, archive=[tier1(0, "again"), tier1(1)]
    )
    assert calls == ["TransactWriteItems", "TransactWriteItems"]
    texts = [r.text for r in DynamoMemoryStore(aws.memory_table, region=REGION).get_messages("ws1", "s1")]
    assert texts == ["first", "hi"]


def test_an_archive_over_100_items_goes_first_then_the_session_and_audit(aws: AwsResources) -> None:
    client, _ = counting_client()
    store = DynamoSessionStore(aws.sessions_table, memory_table=aws.memory_table, client=client)
    sizes: list[int] = []
    client.meta.events.register(
        "before-parameter-build.dynamodb.TransactWriteItems",
        lambda params, **_: sizes.append(len(params["TransactItems"])),
    )
    audit = AuditRecord(workspace_id="ws1", session_id="s1", turn_id="t1", outcome="ok")
    store.save(
        Session(id="s1", workspace_id="ws1"),
        expected_version=0,
        archive=[tier1(seq) for seq in range(150)],
        audit=audit,
    )
    # The archive in transactions of at most 100, then the session with the audit record
    assert sizes == [100, 50, 2]
    assert DynamoMemoryStore(aws.memory_table, region=REGION).count_messages("ws1", "s1") == 150


def test_a_save_with_extras_needs_the_memory_table(aws: AwsResources) -> None:
    store = DynamoSessionStore(aws.sessions_table, region=REGION)
    with pytest.raises(SigilError) as raised:
        store.save(Session(id="s1", workspace_id="ws1"), expected_version=0, archive=[tier1(0)])
    assert raised.value.code == "misconfigured"
    assert store.get("ws1", "s1") is None


# ---------------------------------------------------------------- memory table


def test_audit_records_expire_after_400_days(aws: AwsResources) -> None:
    audit = DynamoAuditLog(aws.memory_table, region=REGION)
    record = AuditRecord(workspace_id="ws1", session_id="s1", turn_id="t1", outcome="ok")
    before = datetime.now(UTC)
    audit.append(record)
    audit.append(record)  # a retried turn: stored once
    item = clients.dynamodb(REGION).get_item(
        TableName=aws.memory_table,
        Key={
            "pk": {"S": audit_pk("ws1", shard_of("s1", AUDIT_SHARDS))},
            "sk": {"S": f"AUDIT#{record.created_at.strftime('%Y-%m-%dT%H:%M:%S.%fZ')}#{record.id}"},
        },
    )["Item"]
    expires = datetime.fromtimestamp(int(item[TTL_ATTRIBUTE]["N"]), UTC)
    assert timedelta(days=399) < expires - before < timedelta(days=401)
    ttl = clients.dynamodb(REGION).describe_time_to_live(TableName=aws.memory_table)["TimeToLiveDescription"]
    assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", TTL_ATTRIBUTE)
    assert [r.id for r in audit.list_records("ws1")] == [record.id]
    # A record past its TTL that the sweeper has not deleted yet is not listed
    expired = DynamoAuditLog(aws.memory_table, region=REGION, retention_days=-1)
    expired.append(AuditRecord(workspace_id="ws1", session_id="s1", turn_id="t2", outcome="ok"))
    assert [r.id for r in audit.list_records("ws1")] == [record.id]


def test_every_base_table_key_begins_with_its_workspace(aws: AwsResources) -> None:
    # Given one item of every kind written for workspace "ws1"
    ws = "ws1"
    sessions = DynamoSessionStore(aws.sessions_table, memory_table=aws.memory_table, region=REGION)
    memory = DynamoMemoryStore(aws.memory_table, region=REGION)
    # The session with a Tier-1 record and an audit record in its transaction
    sessions.save(
        Session(id="s1", workspace_id=ws),
        expected_version=0,
        archive=[
            MemoryRecord(
                id="r0", workspace_id=ws, session_id="s1", role="user", text="hi", seq=0, created_at=NOW
            )
        ],
        audit=AuditRecord(workspace_id=ws, session_id="s1", turn_id="t0", outcome="ok"),
    )
    DynamoOutbox(aws.sessions_table, region=REGION).append(reply(workspace=ws))
    memory.append_messages(
        ws,
        [
            MemoryRecord(
                id="r1", workspace_id=ws, session_id="s1", role="user", text="hi", seq=1, created_at=NOW
            )
        ],
    )
    memory.put_summary(
        Summary(
            id="u1",
            workspace_id=ws,
            session_id="s1",
            text="t",
            first_seq=0,
            last_seq=0,
            start_at=NOW,
            end_at=NOW,
        )
    )
    memory.put_triple(Triple(id="k1", workspace_id=ws, subject="Alice", predicate="likes", object="tea"))
    DynamoWorkspaceStore(aws.memory_table, region=REGION).put(WorkspaceConfig(id=ws))
    DynamoAuditLog(aws.memory_table, region=REGION).append(
        AuditRecord(workspace_id=ws, session_id="s1", turn_id="t1", outcome="ok")
    )
    # Then every partition key in both tables is under WS#ws1 (GSI keys are index-only)
    ddb = clients.dynamodb(REGION)
    pks = [
        i["pk"]["S"] for t in (aws.sessions_table, aws.memory_table) for i in ddb.scan(TableName=t)["Items"]
    ]
    assert len(pks) == 9  # session, outbox entry, 2 Tier-1, summary, triple, config, 2 audit
    assert all(pk == f"WS#{ws}" or pk.startswith(f"WS#{ws}#") for pk in pks), pks


def test_reappending_tier1_keeps_the_first_write_and_stores_the_new_ones(aws: AwsResources) -> None:
    client, calls = counting_client()
    memory = DynamoMemoryStore(aws.memory_table, client=client)

    def record(seq: int, text: str) -> MemoryRecord:
        return MemoryRecord(
            id=f"r{seq}", workspace_id="ws1", session_id="s1", role="user", text=text, seq=seq, created_at=NOW
        )

    memory.append_messages("ws1", [record(0, "first")])
    assert calls == ["TransactWriteItems"]
    calls.clear()
    # A redelivered roll-out (r0 again, rewritten) plus one new record
    memory.append_messages("ws1", [record(0, "rewritten"), record(1, "new")])
    # The transaction is cancelled on r0's condition; r1 alone is sent again
    assert calls == ["TransactWriteItems", "TransactWriteItems"]
    assert [(r.id, r.text) for r in memory.get_messages("ws1", "s1")] == [("r0", "first"), ("r1", "new")]


def test_triples_with_long_objects_use_a_digest_key(aws: AwsResources) -> None:
    memory = DynamoMemoryStore(aws.memory_table, region=REGION)
    long_object = "a fact " + "x" * 2000  # 2007 characters: too long for a key as it is
    memory.put_triple(
        Triple(id="k1", workspace_id="ws1", subject="alice", predicate="said", object=long_object)
    )
    assert [t.id for t in memory.triples_by_object("ws1", long_object, scope=WORKSPACE_WIDE)] == ["k1"]
    assert memory.triples_by_object("ws1", long_object[:-1], scope=WORKSPACE_WIDE) == []


def test_a_scoped_lookup_reads_on_past_pages_of_other_peoples_facts(aws: AwsResources) -> None:
    """DynamoDB applies a FilterExpression to each page (1 MB read) before returning it: a lookup
    whose visible facts lie behind more than a page of other people's reads on until it has them."""
    client, calls = counting_client()
    memory = DynamoMemoryStore(aws.memory_table, client=client)
    theirs = MemoryScope(conversation="telegram.dm-u2", users=("u2",))
    mine = MemoryScope(conversation="telegram.dm-u1", users=("u1",))
    # ~2.4 KB a fact: 600 of u2's are ~1.4 MB, more than one page, all newer than u1's two.
    facts = [
        Triple(
            id=f"t{i:03d}",
            workspace_id="ws1",
            subject="ada",
            predicate="said",
            object="ada " + "x" * 2000,
            scope=theirs,
            updated_at=NOW + timedelta(minutes=i),
        )
        for i in range(600)
    ]
    facts += [
        Triple(
            id=f"m{i}",
            workspace_id="ws1",
            subject="ada",
            predicate="likes",
            object="tea",
            scope=mine,
            updated_at=NOW,
        )
        for i in range(2)
    ]
    memory.put_triples("ws1", facts)
    calls.clear()
    u1 = RecallScope(session_id="telegram.dm-u1.new", users=("u1",))
    assert [t.id for t in memory.triples_by_subject("ws1", "ada", scope=u1, limit=1)] == ["m0"]
    assert calls.count("Query") >= 2, calls  # the first page held none of u1's
    assert {t.id for t in memory.triples_by_subject("ws1", "ada", scope=u1)} == {"m0", "m1"}
    assert len(memory.triples_by_subject("ws1", "ada", scope=WORKSPACE_WIDE, limit=700)) == 602


def test_tables_in_tests_are_built_from_the_adapters_schema(aws: AwsResources) -> None:
    ddb = clients.dynamodb(REGION)
    memory = ddb.describe_table(TableName=aws.memory_table)["Table"]
    assert memory["KeySchema"] == TABLE_SCHEMAS["memory"]["KeySchema"]
    assert sorted(g["IndexName"] for g in memory["GlobalSecondaryIndexes"]) == ["GSI1", "GSI2"]
    sessions = ddb.describe_table(TableName=aws.sessions_table)["Table"]
    assert sessions["KeySchema"] == TABLE_SCHEMAS["sessions"]["KeySchema"]
    assert sessions.get("GlobalSecondaryIndexes", []) == []


# ---------------------------------------------------------------- wiring


def test_build_aws_backend_wires_every_port(aws: AwsResources) -> None:
    backend = build_aws_backend(aws.settings())
    for port, protocol in [
        (backend.sessions, SessionStore),
        (backend.memory, MemoryStore),
        (backend.index, MemoryIndex),
        (backend.lanes, Lanes),
        (backend.outbox, Outbox),
        (backend.events, EventBus),
        (backend.workspaces, WorkspaceStore),
        (backend.audit, AuditLog),
        (backend.secrets, SecretStore),
    ]:
        assert isinstance(port, protocol), protocol.__name__
    assert isinstance(backend.index, OpenSearchIndex)
    # The ports work end to end on the stack's resources
    backend.workspaces.put(WorkspaceConfig(id="ws1"))
    assert [w.id for w in backend.workspaces.list_workspaces()] == ["ws1"]


def test_build_aws_backend_names_missing_settings(aws: AwsResources) -> None:
    with pytest.raises(SigilError, match="SIGIL_MEMORY_TABLE, SIGIL_QUEUE_URL") as raised:
        build_aws_backend(aws.settings(memory_table=None, queue_url=None))
    assert raised.value.code == "misconfigured"


def test_sharded_lanes_send_each_session_to_its_queue_in_order(aws: AwsResources) -> None:
    # Given the lanes sharded over three FIFO queues (the stack's `-c lanes=3`)
    sqs = clients.sqs(REGION)
    extra = [
        sqs.create_queue(
            QueueName=f"{aws.queue_url.rsplit('/', 1)[1].removesuffix('.fifo')}-{n}.fifo",
            Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "false"},
        )["QueueUrl"]
        for n in (1, 2)
    ]
    queues = [aws.queue_url, *extra]
    lanes = SqsLanes(queues, region=REGION)
    # When 30 sessions each queue three turns
    sessions = [f"s{n}" for n in range(30)]
    for turn in range(3):
        for s in sessions:
            lanes.submit(LaneItem(inbound=inbound(session=s, event=f"{s}-{turn}", text=f"{s}-{turn}")))
    # Then each session's turns are all in the queue its hash names, in order, and each queue has some
    drained = {url: drain_fifo(url, 200) for url in queues}
    for s in sessions:
        [home] = [url for url, items in drained.items() if any(i.inbound.session_id == s for i in items)]
        assert home == queues[lane_queue(fifo_id(f"ws1.{s}"), 3)] == lanes.queue_of(f"ws1.{s}")
        assert [i.inbound.text for i in drained[home] if i.inbound.session_id == s] == [
            f"{s}-{t}" for t in range(3)
        ]
    assert all(drained.values())


def test_a_redrive_sends_each_turn_back_to_its_sessions_lane_queue(aws: AwsResources) -> None:
    # Given sharded lanes (three queues) and turns of six sessions in their dead-letter queue
    sqs = clients.sqs(REGION)
    fifo = {"FifoQueue": "true", "ContentBasedDeduplication": "false"}
    stem = aws.queue_url.rsplit("/", 1)[1].removesuffix(".fifo")
    extra = [sqs.create_queue(QueueName=f"{stem}-{n}.fifo", Attributes=fifo)["QueueUrl"] for n in (1, 2)]
    queues = [aws.queue_url, *extra]
    dlq = sqs.create_queue(QueueName=f"{stem}-dlq.fifo", Attributes=fifo)["QueueUrl"]
    sessions = [f"s{n}" for n in range(6)]
    for s in sessions:
        item = LaneItem(inbound=inbound(session=s, event=f"{s}-dead", text=s))
        sqs.send_message(
            QueueUrl=dlq,
            MessageBody=serde.dumps(item),
            MessageGroupId=fifo_id(item.group_id),
            MessageDeduplicationId=fifo_id(item.dedup_id),
        )
    # When each session is redriven
    dead = SqsDeadLetters(dlq, aws.queue_url, lane_queue_urls=queues, region=REGION)
    for s in sessions:
        report = dead.redrive(lambda item: item, session=("ws1", s))
        assert [o.outcome for o in report.outcomes] == ["redriven"]
    # Then each turn is in the queue its session's hash names, as the webhook would have sent it
    drained = {url: [i.inbound.session_id for i in drain_fifo(url, 20)] for url in queues}
    for s in sessions:
        assert s in drained[SqsLanes(queues, region=REGION).queue_of(f"ws1.{s}")]
    assert sum(map(len, drained.values())) == len(sessions)


def test_a_charge_dynamodb_keeps_refusing_is_logged_and_the_commit_stands(
    aws: AwsResources, caplog: pytest.LogCaptureFixture
) -> None:
    # Given DynamoDB cancelling every charge transaction (a shard kept busy by other charges)
    store = DynamoSessionStore(aws.sessions_table, region=REGION)
    refused: list[int] = []

    def cancel_charges(params: dict[str, Any], **_: Any) -> None:
        actions = params["TransactItems"]
        if all("Update" in a for a in actions):
            refused.append(len(actions))
            raise ClientError(
                {
                    "Error": {"Code": "TransactionCanceledException", "Message": "conflict"},
                    "CancellationReasons": [{"Code": "TransactionConflict"}] * len(actions),
                },
                "TransactWriteItems",
            )

    hook = "provide-client-params.dynamodb.TransactWriteItems"
    store.client.meta.events.register(hook, cancel_charges)
    now = datetime(2026, 3, 17, 12, tzinfo=UTC)
    plan = tuple(buckets(None, BudgetLimits(), now))
    charge = BudgetCharge(workspace_id="ws1", buckets=plan, amounts=Counters(tokens=5), at=now)
    try:
        # When a turn commits with its charge
        with caplog.at_level(logging.WARNING, logger="sigil.budgets"):
            saved = store.save(Session(id="s1", workspace_id="ws1"), expected_version=0, charge=charge)
    finally:
        store.client.meta.events.unregister(hook, cancel_charges)
    # Then the commit stands, the charge was tried RETRIES times, and its loss is logged, not raised
    assert store.get("ws1", "s1") == saved
    assert len(refused) == RETRIES
    assert "budget charge not recorded after the commit" in caplog.text
    assert DynamoBudgetStore(aws.sessions_table, region=REGION).totals("ws1", [b.key for b in plan]) == {}

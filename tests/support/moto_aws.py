"""The AWS adapter set on in-process moto: resources named from the adapters' own schema.

Used by the contract suites' "aws" factory and by tests/integration/test_aws_adapters.py. Tables
are created from shared.adapters.aws.dynamodb.TABLE_SCHEMAS, the same definition the adapters
query, so the test tables cannot drift from the adapters' keys.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import pathlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

from moto import mock_aws
from moto.core.botocore_stubber import BotocoreStubber
from moto.sqs import models as sqs_models

from shared import serde
from shared.adapters.aws import build_aws_backend, clients
from shared.adapters.aws.dynamodb import create_tables
from shared.adapters.embedded import Database, SqliteMemoryIndex
from shared.backend import Backend
from shared.config import Settings
from shared.models import EVENT_SOURCE, LaneItem

REGION = "us-east-1"


@dataclass(frozen=True)
class AwsResources:
    """Names of one adapter set's resources, and Settings pointing at them."""

    sessions_table: str
    memory_table: str
    queue_url: str
    event_bus_name: str
    secrets_prefix: str
    skills_bucket: str = ""
    media_bucket: str = ""
    # The per-turn extraction's delay queue (infra/constructs/consolidation.py).
    extraction_queue_url: str = ""

    def settings(self, **overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "backend": "aws",
            "sessions_table": self.sessions_table,
            "memory_table": self.memory_table,
            "queue_url": self.queue_url,
            "event_bus_name": self.event_bus_name,
            # Never contacted in these tests: the contract set swaps in the embedded index.
            "opensearch_endpoint": "https://search.invalid",
            "secrets_prefix": self.secrets_prefix,
            "skills_bucket": self.skills_bucket or None,
            "media_bucket": self.media_bucket or None,
            "extraction_queue_url": self.extraction_queue_url or None,
            "AWS_REGION": REGION,
        }
        values.update(overrides)
        return Settings(**values)


@contextlib.contextmanager
def persistent_mock() -> Iterator[None]:
    """moto in-process, keeping its state when the block ends.

    moto wipes every backend when its outermost mock stops; the contract suites re-enter a
    factory to simulate a restart and must find their tables again, so this mock neither resets
    on start nor removes data on stop. Resources are named per test directory (see `provision`),
    so tests never see each other's data.
    """
    mock = mock_aws()
    mock.start(reset=False)
    # The cached clients are kept from one mock to the next (building them is most of a factory
    # entry's time): moto intercepts every botocore client's requests while any mock is active,
    # and a client built under a mock holds moto's fake credentials.
    try:
        yield
    finally:
        mock.stop(remove_data=False)


@contextlib.contextmanager
def moto_like_aws() -> Iterator[None]:
    """Close two gaps between in-process moto and AWS that Sigil's tests depend on, for the block.

    Both patches change the stand-in, never Sigil's code, and each cites what AWS does.
    """
    with atomic_requests(), sqs_dedup_survives_delete():
        yield


@contextlib.contextmanager
def atomic_requests() -> Iterator[None]:
    """Handle one moto request at a time, as the real services apply each request atomically.

    In-process moto runs a request on the caller's thread with no isolation: its DynamoDB
    TransactWriteItems snapshots the whole table and restores the snapshot when a condition fails
    (moto.dynamodb.models.DynamoDBBackend.transact_write_items), so one thread's failed transaction
    can undo another's committed one, and scans can hit "dictionary changed size during
    iteration". DynamoDB transactions are serializable. With one lock around moto's request
    handling, concurrent callers still interleave between requests (what the tests of racing
    writers are about) but never inside one.
    """
    lock = threading.RLock()
    original = BotocoreStubber.__call__

    def call(self: BotocoreStubber, event_name: str, request: Any, **kwargs: Any) -> Any:
        with lock:
            return original(self, event_name, request, **kwargs)

    with mock.patch.object(BotocoreStubber, "__call__", call):
        yield


@contextlib.contextmanager
def sqs_dedup_survives_delete() -> Iterator[None]:
    """Make moto remember a FIFO deduplication id after its message is deleted, as SQS does.

    SQS: "Amazon SQS continues tracking the deduplication ID even after the message has been
    received and deleted" (SQS Developer Guide, FIFO queue key terms), for the 5-minute interval.
    moto 5 compares a new message only with those still in the queue, so a platform retry that
    arrives after the first delivery was consumed would be delivered again on moto and not on AWS.
    This patch of the stand-in (not of Sigil's code) closes that gap for the block's duration.
    """
    original_add = sqs_models.Queue.add_message
    original_delete = sqs_models.Queue.delete_message

    def delete_message(queue: Any, receipt_handle: str) -> None:
        for message in queue._messages:
            if message.deduplication_id and message.had_receipt_handle(receipt_handle):
                queue.__dict__.setdefault("_deleted_dedup_ids", {})[message.deduplication_id] = (
                    message.sent_timestamp
                )
        original_delete(queue, receipt_handle)

    def add_message(queue: Any, message: Any) -> None:
        sent = queue.__dict__.get("_deleted_dedup_ids", {}).get(message.deduplication_id)
        window_ms = sqs_models.DEDUPLICATION_TIME_IN_SECONDS * 1000
        if queue.fifo_queue and sent is not None and message.sent_timestamp - sent < window_ms:
            return  # accepted and dropped, as SQS does with a duplicate
        original_add(queue, message)

    with (
        mock.patch.object(sqs_models.Queue, "add_message", add_message),
        mock.patch.object(sqs_models.Queue, "delete_message", delete_message),
    ):
        yield


def provision(name: str) -> AwsResources:
    """Create (or find again) the tables, FIFO queue and event bus for `name`."""
    res = AwsResources(
        sessions_table=f"{name}-sessions",
        memory_table=f"{name}-memory",
        queue_url="",
        event_bus_name=f"{name}-bus",
        secrets_prefix=f"{name}/",
    )
    ddb = clients.dynamodb(REGION)
    # Paginated: ListTables answers 100 names a page, and a test session makes hundreds.
    existing = {n for page in ddb.get_paginator("list_tables").paginate() for n in page["TableNames"]}
    if res.sessions_table not in existing:
        create_tables(ddb, sessions_table=res.sessions_table, memory_table=res.memory_table)
    # CreateQueue with the same attributes is idempotent and returns the existing queue's URL.
    queue_url = clients.sqs(REGION).create_queue(
        QueueName=f"{name}-turns.fifo",
        # Content-based dedup as infra/constructs/lanes.py (EventBridge Scheduler's messages).
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true", "VisibilityTimeout": "30"},
    )["QueueUrl"]
    extraction_queue_url = clients.sqs(REGION).create_queue(QueueName=f"{name}-extraction")["QueueUrl"]
    events = clients.events(REGION)
    # Asked by name: ListEventBuses pages its answer, and a test session makes hundreds of buses.
    if not events.list_event_buses(NamePrefix=res.event_bus_name)["EventBuses"]:
        events.create_event_bus(Name=res.event_bus_name)
    # CreateBucket of a bucket this account owns succeeds again in us-east-1.
    skills_bucket = f"{name.lower()}-skills"
    clients.s3(REGION).create_bucket(Bucket=skills_bucket)
    media_bucket = f"{name.lower()}-media"
    clients.s3(REGION).create_bucket(Bucket=media_bucket)
    return AwsResources(
        sessions_table=res.sessions_table,
        memory_table=res.memory_table,
        queue_url=queue_url,
        event_bus_name=res.event_bus_name,
        secrets_prefix=res.secrets_prefix,
        skills_bucket=skills_bucket,
        media_bucket=media_bucket,
        extraction_queue_url=extraction_queue_url,
    )


def name_for(directory: pathlib.Path) -> str:
    """A resource-name stem unique to a test directory (AWS names allow [A-Za-z0-9_.-])."""
    return "c" + hashlib.sha256(str(directory).encode()).hexdigest()[:16]


def drain_fifo(queue_url: str, max_items: int) -> list[LaneItem]:
    """Receive and delete up to `max_items` lane items in delivery order.

    A FIFO queue hands out a group's next message only after the previous ones are deleted, so
    each batch is deleted before the next receive. Messages received beyond `max_items` are made
    visible again, so they stay queued in their group's order.
    """
    sqs = clients.sqs(REGION)
    consumed: list[LaneItem] = []
    while len(consumed) < max_items:
        messages = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0, VisibilityTimeout=30
        ).get("Messages", [])
        if not messages:
            break
        for message in messages:
            if len(consumed) < max_items:
                consumed.append(serde.loads(LaneItem, message["Body"]))
                sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
            else:
                sqs.change_message_visibility(
                    QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
                )
    return consumed


def route_bus_to_queue(event_bus_name: str) -> str:
    """A rule on the bus matching every event Sigil publishes, targeting a standard queue of its
    own: what the bus delivers is then read back as a consumer sees it. Returns the queue's URL."""
    sqs, events = clients.sqs(REGION), clients.events(REGION)
    queue_url = sqs.create_queue(QueueName=f"{event_bus_name}-watch")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(
        Name="watch", EventBusName=event_bus_name, EventPattern=json.dumps({"source": [EVENT_SOURCE]})
    )
    events.put_targets(Rule="watch", EventBusName=event_bus_name, Targets=[{"Id": "watch", "Arn": arn}])
    return queue_url


def receive_all(queue_url: str) -> list[str]:
    """Receive and delete every message visible now in a standard queue; their bodies."""
    sqs = clients.sqs(REGION)
    bodies: list[str] = []
    while messages := sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get(
        "Messages", []
    ):
        for message in messages:
            bodies.append(message["Body"])
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
    return bodies


@contextlib.contextmanager
def contract_backend(data_dir: pathlib.Path) -> Iterator[tuple[Backend, Callable[[int], list[LaneItem]]]]:
    """The backend `build_aws_backend` wires, on moto, for the contract suites; and its lane drain.

    The index is the embedded one: moto has no OpenSearch, and osmem-server answers no k-NN
    query, which the suites that search with vectors need. The index's own contract runs the
    OpenSearch adapter on osmem-server itself (tests/contract/test_memory_index.py; docs/
    architecture.md, "Where each adapter is proven"). Entering twice with one directory finds the
    same tables, queue and index again (a restart).
    """
    with persistent_mock(), moto_like_aws():
        resources = provision(name_for(data_dir))
        backend = build_aws_backend(resources.settings())
        index_db = Database(data_dir / "index.db", load_vec=True)
        backend.index = SqliteMemoryIndex(index_db)
        backend.closers.append(index_db.close)
        try:
            yield backend, lambda max_items: drain_fifo(resources.queue_url, max_items)
        finally:
            backend.close()

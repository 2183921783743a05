"""The AWS adapter set on in-process moto: resources named from the adapters' own schema.

Used by the contract suites' "aws" factory and by tests/integration/test_aws_adapters.py. Tables
are created from shared.adapters.aws.dynamodb.TABLE_SCHEMAS, the same definition the adapters
query, so the test tables cannot drift from the adapters' keys.
"""

from __future__ import annotations

import contextlib
import hashlib
import pathlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from moto import mock_aws

from shared import serde
from shared.adapters.aws import clients
from shared.adapters.aws.dynamodb import create_tables
from shared.config import Settings
from shared.models import LaneItem

REGION = "us-east-1"


@dataclass(frozen=True)
class AwsResources:
    """Names of one adapter set's resources, and Settings pointing at them."""

    sessions_table: str
    memory_table: str
    queue_url: str
    event_bus_name: str
    secrets_prefix: str

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
    # Clients built before this mock (or under another test's credentials) are not reused.
    clients.reset()
    try:
        yield
    finally:
        mock.stop(remove_data=False)
        clients.reset()


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
    existing = ddb.list_tables()["TableNames"]
    if res.sessions_table not in existing:
        create_tables(ddb, sessions_table=res.sessions_table, memory_table=res.memory_table)
    # CreateQueue with the same attributes is idempotent and returns the existing queue's URL.
    queue_url = clients.sqs(REGION).create_queue(
        QueueName=f"{name}-turns.fifo",
        Attributes={"FifoQueue": "true", "VisibilityTimeout": "30"},
    )["QueueUrl"]
    events = clients.events(REGION)
    if not any(bus["Name"] == res.event_bus_name for bus in events.list_event_buses()["EventBuses"]):
        events.create_event_bus(Name=res.event_bus_name)
    return AwsResources(
        sessions_table=res.sessions_table,
        memory_table=res.memory_table,
        queue_url=queue_url,
        event_bus_name=res.event_bus_name,
        secrets_prefix=res.secrets_prefix,
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

"""The adapter sets the contract suites run against, one factory per set.

A factory takes a fresh directory and returns a context manager yielding a `ContractBackend`.
Two rules every factory keeps:

- Entering it twice with the same directory reaches the same durable state: that is how the
  suites simulate a restart (the embedded set reopens its SQLite files; a cloud set keys its
  tables and queue by the directory, so a second entry finds them again).
- Vectors in the suites have `CONTRACT_VECTOR_DIM` dimensions, for indexes whose mapping fixes one.

To add a set, add its factory to BACKEND_FACTORIES: every suite then runs against it unchanged.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, get_args

from shared import serde
from shared.adapters.aws import clients
from shared.adapters.aws.dynamodb.embedding_cache import DynamoEmbeddingCache
from shared.adapters.aws.dynamodb.memory import DynamoMemoryStore
from shared.adapters.aws.events import EventBridgeBus
from shared.adapters.embedded import Database, EmbeddedLaneRunner, SqliteLanes, build_embedded_backend
from shared.adapters.embedded.embedding_cache import SqliteEmbeddingCache
from shared.adapters.embedded.events import LocalScheduler, SqliteEventBus
from shared.backend import Backend
from shared.config import Settings
from shared.models import DomainEvent, LaneItem
from shared.ports import EmbeddingCache
from tests.support import moto_aws

CONTRACT_VECTOR_DIM = 8


class EventWatch(Protocol):
    """Reads back what the set's EventBus was given, where its consumers get it."""

    def due(self) -> list[DomainEvent]:
        """Take the published events a consumer can have now (each once; no order promised)."""
        ...

    def held(self) -> int:
        """How many published events are still held back (`publish_after` before its delay)."""
        ...


@dataclass
class ContractBackend:
    """The ports under test, plus the test-side consumer of the lanes.

    `drain_lane(max_items)` consumes pending lane items until the lanes are empty or `max_items`
    were taken, and returns every item it consumed, in delivery order (items of one group in
    their group's order; groups may interleave). `watch_events()`, called before publishing,
    returns the reader of what the event bus publishes from then on.
    """

    backend: Backend
    drain_lane: Callable[[int], list[LaneItem]]
    watch_events: Callable[[], EventWatch]
    # The set's embedding cache, built whether or not the backend has an embedder (an aws backend
    # on "auto" has none, but its cache adapter still needs its contract run).
    embedding_cache: EmbeddingCache | None = None


def _drain_embedded(lanes: SqliteLanes, max_items: int, *, timeout: float = 10.0) -> list[LaneItem]:
    consumed: list[LaneItem] = []
    lock = threading.Lock()
    enough = threading.Event()

    def record(item: LaneItem) -> None:
        with lock:
            consumed.append(item)
            if len(consumed) >= max_items:
                enough.set()

    runner = EmbeddedLaneRunner(lanes, record, workers=2, max_attempts=1, poll_interval_s=0.05)
    runner.start()
    try:
        deadline = time.monotonic() + timeout
        while not enough.is_set() and time.monotonic() < deadline:
            if runner.wait_idle(0.05):
                break
    finally:
        runner.stop()
    with lock:
        return list(consumed)


@dataclass
class _SchedulerWatch:
    """The local bus's consumer: the scheduler delivers due events to the handlers of each type."""

    bus: SqliteEventBus

    def due(self) -> list[DomainEvent]:
        delivered: list[DomainEvent] = []
        scheduler = LocalScheduler(self.bus)
        for event_type in get_args(DomainEvent.model_fields["type"].annotation):
            scheduler.on(event_type, delivered.append)
        scheduler.run_pending()
        return delivered

    def held(self) -> int:
        return self.bus.pending_count()


@dataclass
class _QueueWatch:
    """EventBridge's consumers: a rule's target queue (moto_aws.route_bus_to_queue) for a published
    event, the delay queue for a delayed one."""

    bus_queue_url: str
    delay_queue_url: str

    def due(self) -> list[DomainEvent]:
        envelopes = [json.loads(body) for body in moto_aws.receive_all(self.bus_queue_url)]
        return [serde.from_jsonable(DomainEvent, e["detail"]) for e in envelopes] + [
            serde.loads(DomainEvent, body) for body in moto_aws.receive_all(self.delay_queue_url)
        ]

    def held(self) -> int:
        attributes = clients.sqs(moto_aws.REGION).get_queue_attributes(
            QueueUrl=self.delay_queue_url, AttributeNames=["ApproximateNumberOfMessagesDelayed"]
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessagesDelayed"])


@contextlib.contextmanager
def embedded(data_dir: pathlib.Path) -> Iterator[ContractBackend]:
    backend = build_embedded_backend(Settings(data_dir=data_dir))
    lanes = backend.lanes
    assert isinstance(lanes, SqliteLanes)
    bus = backend.events
    assert isinstance(bus, SqliteEventBus)
    cache_db = Database(data_dir / "sigil.db")
    try:
        yield ContractBackend(
            backend=backend,
            drain_lane=lambda n: _drain_embedded(lanes, n),
            watch_events=lambda: _SchedulerWatch(bus),
            embedding_cache=SqliteEmbeddingCache(cache_db),
        )
    finally:
        cache_db.close()
        backend.close()


@contextlib.contextmanager
def aws(data_dir: pathlib.Path) -> Iterator[ContractBackend]:
    """The AWS adapters on in-process moto, index excepted (see moto_aws.contract_backend)."""
    with moto_aws.contract_backend(data_dir) as (backend, drain):
        memory = backend.memory
        assert isinstance(memory, DynamoMemoryStore)
        cache = DynamoEmbeddingCache(memory.table, client=memory.client)
        bus = backend.events
        assert isinstance(bus, EventBridgeBus) and bus.delay_queue_url

        def watch_events() -> EventWatch:
            assert bus.delay_queue_url
            return _QueueWatch(moto_aws.route_bus_to_queue(bus.event_bus_name), bus.delay_queue_url)

        yield ContractBackend(
            backend=backend, drain_lane=drain, watch_events=watch_events, embedding_cache=cache
        )


BACKEND_FACTORIES: dict[str, Callable[[pathlib.Path], contextlib.AbstractContextManager[ContractBackend]]] = {
    "embedded": embedded,
    "aws": aws,
}

"""The consolidate function's grant on the sessions table (CONSOLIDATOR_SESSIONS_ACCESS) against
the keys the DynamoDB adapters really build: it allows everything the consolidator does
(tests/support/consolidator_reach.py, recorded from a real run on moto by
tests/integration/test_consolidate_handler.py), and refuses the table's other items: no delete of
a session, an outbox entry or a ledger record, no update but of a budget counter or a task's
items (the task sweep), nothing at all
in the routes or the WebSocket connections. No synth: IAM's StringLike is matched here as IAM
matches it (tests/infra/helpers.string_like).

A limit of StringLike: `*` also matches "#", so `WS#*#CONSOLIDATION` would match a send-ledger key
whose turn id (the platform's free text) ends in "#CONSOLIDATION"; workspace and session ids hold
no "#" (shared.models.ID_PATTERN), so no session, outbox or listener key can."""

from __future__ import annotations

import pytest

from infra.constructs.memory import CONSOLIDATOR_SESSIONS_ACCESS
from shared.adapters.aws.dynamodb.budgets import COUNTER_SHARDS, counter_key
from shared.adapters.aws.dynamodb.connections import connection_pk, listeners_pk
from shared.adapters.aws.dynamodb.consolidation_state import _pk as consolidation_pk
from shared.adapters.aws.dynamodb.outbox import DynamoOutbox
from shared.adapters.aws.dynamodb.routes import ROUTES_PK
from shared.adapters.aws.dynamodb.send_ledger import DynamoSendLedger
from shared.adapters.aws.dynamodb.sessions import DynamoSessionStore
from shared.adapters.aws.dynamodb.tasks import DynamoTaskStore
from shared.consolidation.runner import GLOBAL_SCOPE
from tests.infra.helpers import string_like
from tests.support.consolidator_reach import SESSIONS_TABLE_REACH, partition_kind

WORKSPACE = "default"

# Keys of every kind of item in the sessions table, as the adapters build them.
KEYS = {
    "session": DynamoSessionStore._key(WORKSPACE, "telegram.42")["pk"]["S"],
    "consolidation": consolidation_pk(WORKSPACE)["S"],
    "hourly lease": consolidation_pk(GLOBAL_SCOPE)["S"],
    "budget": counter_key(WORKSPACE, "workspace#day#2026-01-01")["pk"]["S"],
    "budget shard": counter_key(WORKSPACE, "workspace#day#2026-01-01", COUNTER_SHARDS - 1)["pk"]["S"],
    "outbox": DynamoOutbox._pk(WORKSPACE, "web.s1"),
    "ledger": DynamoSendLedger._key(WORKSPACE, "t1", 0, 0)["pk"]["S"],
    "routes": ROUTES_PK,
    "connection": connection_pk("abc="),
    "listeners": listeners_pk(WORKSPACE, "web.s1"),
    "tasks": DynamoTaskStore._pk(WORKSPACE),
}


def allowed(action: str, key: str) -> bool:
    return any(
        action in actions and any(string_like(p, key) for p in partitions)
        for actions, partitions in CONSOLIDATOR_SESSIONS_ACCESS
    )


@pytest.mark.parametrize(("action", "kind"), sorted(SESSIONS_TABLE_REACH))
def test_the_grant_allows_what_the_consolidator_does(action: str, kind: str) -> None:
    keys = [k for k in KEYS.values() if partition_kind(k) == kind]
    assert keys, kind
    for key in keys:
        assert allowed(action, key), (action, key)


@pytest.mark.parametrize(
    "name",
    ["session", "outbox", "ledger", "budget", "budget shard", "routes", "connection", "listeners", "tasks"],
)
def test_only_a_lease_may_be_deleted(name: str) -> None:
    assert not allowed("dynamodb:DeleteItem", KEYS[name])


@pytest.mark.parametrize("name", [n for n in KEYS if n not in {"budget", "tasks"}])
def test_only_a_budget_counter_or_a_task_may_be_updated(name: str) -> None:
    assert not allowed("dynamodb:UpdateItem", KEYS[name])


@pytest.mark.parametrize("name", ["routes", "connection"])
def test_the_routes_and_the_connections_are_out_of_reach(name: str) -> None:
    actions = {a for actions, _ in CONSOLIDATOR_SESSIONS_ACCESS for a in actions}
    assert not any(allowed(a, KEYS[name]) for a in actions)


def test_no_request_without_a_partition_and_no_batch_write() -> None:
    actions = {a for actions, _ in CONSOLIDATOR_SESSIONS_ACCESS for a in actions}
    assert not actions & {"dynamodb:Scan", "dynamodb:BatchWriteItem", "dynamodb:ConditionCheckItem"}
    assert actions == {a for a, _ in SESSIONS_TABLE_REACH}

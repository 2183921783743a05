"""DynamoDB round trips per agent turn: the agent handler on in-process moto, the model the real
openai SDK against tests/support/fake_openai.py, every DynamoDB call counted by a botocore
`before-call.dynamodb` hook on the client the adapters use.

The goal ("Foundation II", "The agent turn"): at most 3 per warm turn without tools. The design
makes it exactly 3, the session's GetItem, the reply's PutItem and the commit's TransactWriteItems,
whether or not the commit rolls messages out of the window, and with a budget too: the session is
then read with the budget's counters in one BatchGetItem, and the turn's spending is added to them
in the commit's transaction (bench/aws_calls.py measures the same on moto in server mode).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws

from functions.agent import handler as agent
from shared import cloud, serde
from shared.adapters.aws import clients
from shared.adapters.aws.dynamodb import DynamoOutbox, DynamoSessionStore, DynamoWorkspaceStore
from shared.adapters.embedded import Database, SqliteMemoryIndex
from shared.budgets import BudgetUsage, Counters, buckets
from shared.models import BudgetLimits, InboundMessage, LaneItem, ScopeLimits, Sender, WorkspaceConfig
from tests.support.fake_openai import FakeOpenAI
from tests.support.lambda_context import context_for
from tests.support.moto_aws import REGION, AwsResources, provision

ROOT = Path(__file__).resolve().parents[2]
WS = "default"
SESSION = "web.rt"


@dataclass
class Call:
    operation: str
    tables: list[str] = field(default_factory=list)  # the table, or each action's in a transaction


CONTEXT: Any = context_for("sigil-test")


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def aws(fake: FakeOpenAI, tmp_path: Path) -> Iterator[AwsResources]:
    with mock_aws():
        clients.reset()
        resources = provision("rt")
        cloud.reset(
            config=resources.settings(
                model="openai/fake-model", OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="sk-test"
            )
        )
        # moto has no OpenSearch: the index is the embedded one, as in the contract suites. It is
        # not DynamoDB, so it changes nothing counted here.
        index_db = Database(tmp_path / "index.db", load_vec=True)
        cloud.turn_deps().backend.index = SqliteMemoryIndex(index_db)
        try:
            yield resources
        finally:
            cloud.reset()
            index_db.close()


def count_dynamodb() -> list[Call]:
    """Every DynamoDB call from now on, through the client every adapter of the agent shares."""
    client = clients.dynamodb(REGION)
    backend = cloud.turn_deps().backend
    assert isinstance(backend.sessions, DynamoSessionStore) and backend.sessions.client is client
    assert isinstance(backend.outbox, DynamoOutbox) and backend.outbox.client is client
    calls: list[Call] = []

    def before_call(model: Any, params: dict[str, Any], **_: Any) -> None:
        body = json.loads(params.get("body") or b"{}")
        tables = [body["TableName"]] if "TableName" in body else []
        tables += [action["TableName"] for item in body.get("TransactItems", []) for action in item.values()]
        tables += list(body.get("RequestItems", {}))
        calls.append(Call(model.name, tables))

    client.meta.events.register("before-call.dynamodb", before_call)
    return calls


def batch(n: int) -> dict[str, Any]:
    """The sample batch's first record, carrying turn `n` of SESSION."""
    event: dict[str, Any] = json.loads((ROOT / "events" / "agent_sqs_fifo_batch.json").read_text())
    record = copy.deepcopy(event["Records"][0])
    item = LaneItem(
        inbound=InboundMessage(
            event_id=f"evt-{n}",
            channel="web",
            workspace_id=WS,
            session_id=SESSION,
            sender=Sender(id="alice"),
            chat_id="rt",
            text=f"message {n}",
        )
    )
    record.update(messageId=f"m-{n}", body=serde.dumps(item))
    record["attributes"].update(MessageGroupId=item.group_id, MessageDeduplicationId=item.dedup_id)
    event["Records"] = [record]
    return event


def test_a_warm_turn_makes_three_dynamodb_round_trips(aws: AwsResources) -> None:
    # Given a workspace whose window holds 2 messages: every turn after the first rolls 2 out
    DynamoWorkspaceStore(aws.memory_table, region=REGION).put(WorkspaceConfig(id=WS, active_window=2))
    calls = count_dynamodb()

    turns: list[list[Call]] = []
    for n in range(1, 5):
        start = len(calls)
        assert agent.lambda_handler(batch(n), CONTEXT) == {"batchItemFailures": []}
        turns.append(calls[start:])

    # The cold turn reads the workspace config once, at the sender's first contact reads and
    # creates their identity, reads the workspace's identities for the sender's aliases (a direct
    # conversation under the personal memory policy), their tacit facts and their learned
    # personality; then the caches answer
    assert [c.operation for c in turns[0]] == [
        "GetItem",  # workspace config
        "GetItem",  # the sender's identity
        "PutItem",  # ... created at first contact (policy "allow")
        "GetItem",  # the session
        "Query",  # the workspace's identities: the sender's aliases, then cached for a minute
        "Query",  # the sender's tacit facts (Tier 3 by subject), then cached for a minute
        # The conversation's Orientation Document (the context pipeline's default, inject): the
        # sender's recent summaries and the workspace's open delegated tasks, once a conversation
        # (kept on the session after)
        "Query",
        "Query",
        "Query",  # the sender's learned personality directive, then cached for a minute
        "PutItem",  # the reply
        "TransactWriteItems",  # the commit
    ]
    assert turns[0][0].tables == [aws.memory_table]
    # Every warm turn: the session, the reply, and one transaction that commits the session with
    # the two messages rolled out to Tier 1 and the audit record
    for warm in turns[1:]:
        assert len(warm) == 3
        assert [(c.operation, c.tables) for c in warm] == [
            ("GetItem", [aws.sessions_table]),
            ("PutItem", [aws.sessions_table]),
            ("TransactWriteItems", [aws.sessions_table, *[aws.memory_table] * 3]),
        ]

    # And what the turns wrote is all there: replies in order, the window, Tier 1, the audit
    backend = cloud.turn_deps().backend
    entries = backend.outbox.read(WS, SESSION)
    assert [e.message.text for e in entries] == [f"message {n}" for n in range(1, 5)]
    assert [e.seq for e in entries] == [1, 201, 401, 601]
    session = backend.sessions.get(WS, SESSION)
    assert session is not None and (session.message_count, session.rolled_out_count) == (8, 6)
    assert [r.text for r in backend.memory.get_messages(WS, SESSION)] == [
        "message 1",
        "message 1",
        "message 2",
        "message 2",
        "message 3",
        "message 3",
    ]
    audited = backend.audit.list_records(WS)
    assert len(audited) == len({r.turn_id for r in audited}) == 4
    assert {r.outcome for r in audited} == {"ok"}


def test_a_warm_budgeted_turn_makes_four_dynamodb_round_trips(aws: AwsResources) -> None:
    # Given a workspace with limits for the workspace and for each user, and a window of 2
    limits = BudgetLimits(
        workspace=ScopeLimits(tokens_per_day=1_000_000, usd_per_month="5"),
        user=ScopeLimits(tool_calls_per_day=100, tokens_per_day=500_000),
    )
    DynamoWorkspaceStore(aws.memory_table, region=REGION).put(
        WorkspaceConfig(id=WS, active_window=2, budget=limits)
    )
    calls = count_dynamodb()

    turns: list[list[Call]] = []
    for n in range(1, 5):
        start = len(calls)
        assert agent.lambda_handler(batch(n), CONTEXT) == {"batchItemFailures": []}
        turns.append(calls[start:])

    # The cold turn as without a budget, but for the session's read, which reads the counters too
    assert [c.operation for c in turns[0]] == [
        "GetItem",  # workspace config
        "GetItem",  # the sender's identity
        "PutItem",  # ... created at first contact
        "BatchGetItem",  # the session and the budget's four limited counters
        "Query",  # the workspace's identities (the sender's aliases)
        "Query",  # the sender's tacit facts
        "Query",  # the sender's recent summaries, for the conversation's Orientation Document
        "Query",  # ... and the workspace's open delegated tasks, for the same
        "Query",  # the sender's learned personality directive
        "PutItem",  # the reply
        "TransactWriteItems",  # the commit
        "TransactWriteItems",  # the turn's spending, on its session's counter shard
    ]
    # Every warm turn: four. The check before the model call is made on the counters read with the
    # session; the commit holds only the session's own items (session, Tier 1, audit record), so
    # it never conflicts with another session's (issue 30), and the charge follows it: four ADDs
    # to the workspace's and the user's day and month counters of the session's shard
    for warm in turns[1:]:
        assert [(c.operation, c.tables) for c in warm] == [
            ("BatchGetItem", [aws.sessions_table]),
            ("PutItem", [aws.sessions_table]),
            ("TransactWriteItems", [aws.sessions_table, *[aws.memory_table] * 3]),
            ("TransactWriteItems", [aws.sessions_table] * 4),
        ]

    # And the counters hold exactly what the four turns spent, as their audit records say
    backend = cloud.turn_deps().backend
    audited = backend.audit.list_records(WS)
    assert len(audited) == 4 and {r.outcome for r in audited} == {"ok"}
    now = cloud.turn_deps().clock()
    workspace_keys = [b.key for b in buckets(None, limits, now)]
    spent = sum(r.tokens_in + r.tokens_out for r in audited)
    totals = backend.budgets.totals(WS, workspace_keys)
    assert spent > 0
    assert [t.tokens for t in totals.values()] == [spent, spent]
    assert {t.tool_calls for t in totals.values()} == {0}
    assert round(sum(r.cost_usd for r in audited), 9) == round(totals[workspace_keys[0]].usd_nanos / 1e9, 9)

    # When the workspace's daily tokens are used up elsewhere (another session's turns)
    backend.budgets.charge(WS, None, BudgetUsage(tokens_in=1_000_000), None, now)
    start = len(calls)
    assert agent.lambda_handler(batch(5), CONTEXT) == {"batchItemFailures": []}
    denied = calls[start:]
    # Then the next turn is denied on what it read with its session, before any model call, and
    # makes three round trips (nothing was spent, so there is no charge)
    assert [(c.operation, c.tables) for c in denied] == [
        ("BatchGetItem", [aws.sessions_table]),
        ("PutItem", [aws.sessions_table]),
        ("TransactWriteItems", [aws.sessions_table, *[aws.memory_table] * 3]),
    ]
    [last] = [r for r in backend.audit.list_records(WS) if r.event_id == "evt-5"]
    assert last.outcome == "budget_denied"
    assert backend.budgets.totals(WS, workspace_keys)[workspace_keys[0]] == Counters(
        tokens=spent + 1_000_000, usd_nanos=totals[workspace_keys[0]].usd_nanos
    )

"""Issue 30: 200 turns of one workspace commit at once, none cancelled by another, and the
budget is passed by no more than docs/budgets.md's bound; the audit records all listed.

Given 200 sessions of one workspace, each turn reads its session with the budget's counters, is
denied or spends c, and saves with its audit record and charge, all from 200 threads released
together. On both adapter sets every save lands, the counters hold exactly what the turns
charged, and the total stays under L + N * min(k * c, L - R + c) (k = 1 call a turn here).

What moto cannot show: it applies one request at a time (moto_aws.atomic_requests), so it never
cancels a transaction for a conflict as DynamoDB does. What the aws set proves instead is the
construction that makes a conflict impossible: DynamoDB cancels a transaction for a conflict only
when another one touches one of its items at the same moment, and every commit transaction
captured here touches items no other session's commit touches (the session, its Tier-1 records,
its audit record; the budget counters are charged after the commit, outside it).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.adapters.aws.dynamodb.budgets import COUNTER_SHARDS, counter_pk, counter_shard
from shared.adapters.aws.dynamodb.sessions import DynamoSessionStore
from shared.budgets import BudgetCharge, Counters, buckets
from shared.models import AuditRecord, BudgetLimits, ScopeLimits

from .builders import session
from .factories import ContractBackend

pytestmark = pytest.mark.slow

TURNS = 200
COST = 1_000  # tokens a turn spends: c, one call a turn (k = 1)
LIMIT = 50 * COST  # L: used up by a quarter of the turns
LIMITS = BudgetLimits(workspace=ScopeLimits(tokens_per_day=LIMIT))
NOON = datetime(2026, 3, 17, 12, tzinfo=UTC)


def _day_key() -> str:
    [key] = [b.key for b in buckets(None, LIMITS, NOON) if b.period == "day"]
    return key


def _turn(backend: Any, workspace_id: str, n: int, version: int) -> int:
    """One turn of session s{n}: read with the counters, check, save with the audit record and
    (when allowed) the charge; what it charged."""
    session_id = f"s{n}"
    found, totals = backend.sessions.get_with_budget(workspace_id, session_id, [_day_key()])
    current = found if found is not None else session(workspace_id, session_id)
    allowed = totals.get(_day_key(), Counters()).tokens < LIMIT
    spent = COST if allowed else 0
    charge = BudgetCharge(
        workspace_id=workspace_id,
        buckets=tuple(buckets(None, LIMITS, NOON)),
        amounts=Counters(tokens=spent),
        at=NOON,
    )
    audit = AuditRecord(
        workspace_id=workspace_id,
        session_id=session_id,
        turn_id=f"t{n}-{version}",
        outcome="ok" if allowed else "budget_denied",
        tokens_in=spent,
    )
    backend.sessions.save(current, expected_version=version, audit=audit, charge=charge)
    return spent


def _round(backend: Any, workspace_id: str, version: int) -> list[int]:
    """Every session's turn from its own thread, released together; each turn's charge."""
    spent: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(TURNS)

    def run(n: int) -> None:
        try:
            start.wait()
            amount = _turn(backend, workspace_id, n, version)
            with lock:
                spent.append(amount)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(n,)) for n in range(TURNS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == [], f"{len(errors)} commits failed, the first: {errors[:1]}"
    return spent


@pytest.fixture
def transactions(contract: ContractBackend) -> Iterator[list[list[dict[str, Any]]]]:
    """The TransactItems of every TransactWriteItems the session store sends (aws set only)."""
    sent: list[list[dict[str, Any]]] = []
    store = contract.backend.sessions
    if not isinstance(store, DynamoSessionStore):
        yield sent
        return

    def before_call(params: dict[str, Any], **_: Any) -> None:
        sent.append(json.loads(params["body"])["TransactItems"])

    store.client.meta.events.register("before-call.dynamodb.TransactWriteItems", before_call)
    try:
        yield sent
    finally:
        store.client.meta.events.unregister("before-call.dynamodb.TransactWriteItems", before_call)


def _keys(action: dict[str, Any]) -> tuple[str, str, str]:
    (kind, body), *_ = action.items()
    key = body["Item"] if kind == "Put" else body["Key"]
    return body["TableName"], key["pk"]["S"], key["sk"]["S"]


def test_200_concurrent_turns_of_one_workspace_all_commit_within_the_budget_bound(
    contract: ContractBackend, ws_a: str, transactions: list[list[dict[str, Any]]]
) -> None:
    backend = contract.backend

    # When 200 first turns run at once, then 200 second turns
    first = _round(backend, ws_a, version=0)
    total = backend.budgets.totals(ws_a, [_day_key()])[_day_key()].tokens
    second = _round(backend, ws_a, version=1)

    # Then every turn committed: each session is at its second version
    assert {backend.sessions.get(ws_a, f"s{n}").version for n in range(TURNS)} == {2}  # type: ignore[union-attr]
    # And the counter holds exactly what the turns charged
    assert total == sum(first)
    assert backend.budgets.totals(ws_a, [_day_key()])[_day_key()].tokens == sum(first) + sum(second)
    # And the first round passed L by no more than N * min(k * c, L - R + c), R = 0 (k = 1)
    assert total < LIMIT + TURNS * min(COST, LIMIT + COST)
    # And once the total was at L, every turn that read it was denied before spending
    assert total >= LIMIT and sum(second) == 0
    # And every turn's audit record is listed, from whichever partition holds it
    audited = backend.audit.list_records(ws_a, limit=3 * TURNS)
    assert len(audited) == 2 * TURNS
    assert [r.created_at for r in audited] == sorted((r.created_at for r in audited), reverse=True)
    assert sum(r.outcome == "budget_denied" for r in audited) == TURNS + sum(1 for s in first if s == 0)

    if not isinstance(backend.sessions, DynamoSessionStore):
        return
    # And (aws) no item is in two sessions' commit transactions: none can conflict with another
    commits = [t for t in transactions if any("Put" in a and "SESSION#" in _keys(a)[2] for a in t)]
    assert len(commits) == 2 * TURNS
    owners: dict[tuple[str, str, str], str] = {}
    for commit in commits:
        [session_sk] = [_keys(a)[2] for a in commit if "SESSION#" in _keys(a)[2]]
        for action in commit:
            assert owners.setdefault(_keys(action), session_sk) == session_sk, f"{_keys(action)} shared"
    # And the charges went to the sessions' own shards, spread over every shard
    charges = [t for t in transactions if t not in commits]
    assert len(charges) == sum(1 for s in first + second if s)
    shards = {_keys(a)[1] for t in charges for a in t}
    assert shards <= {counter_pk(ws_a, counter_shard(f"s{n}")) for n in range(TURNS)}
    assert len(shards) == COUNTER_SHARDS

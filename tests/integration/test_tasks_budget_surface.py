"""A task stopped by the user's budget, as the user and the operator see it (docs/delegation.md#costs):
the outcome message says the budget ran out, `/tasks show` and `sigil tasks show` give the task's
spend beside its parent turn's, and the spend adds up to what the user's budget was charged.

The runtime (shared.tasks.runner, shared.tasks.budget) stops the task before the model call that
would take the user's budget past its limit; test_delegation_crash shows that on the lanes. Here the
same scripted task runs through run_turn on both backends (embedded, DynamoDB/SQS on moto) with a
priced model, and what is shown is read back from the real command, CLI and outcome turn.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

from typer.testing import CliRunner

from shared.agent.turn import run_turn
from shared.backend import Backend
from shared.budgets import PriceTable
from shared.cli import app
from shared.models import BudgetLimits, ChatCommand, LaneItem, ScopeLimits
from shared.tasks.items import outcome_item
from tests.integration import test_delegation_crash as crash
from tests.integration.test_delegation_crash import backend  # noqa: F401 - the fixture: both backends

# $1 in and $2 out per 1M tokens: each model call of the script (400 in, 100 out) costs $0.0006.
PRICE = {"input_per_mtok": 1, "output_per_mtok": 2}
CALL_USD = Decimal("0.0006")
# The delegating turn makes two calls ($0.0012); the task's first two bring the user to $0.0024, and
# a third would make $0.0030: past the limit, so the task stops before it.
LIMIT = Decimal("0.0025")


def command(args: str, event_id: str) -> LaneItem:
    item = crash.user_item(event_id, f"/tasks {args}")
    item.inbound.command = ChatCommand(name="tasks", args=args)
    return item


def test_a_task_past_the_users_budget_stops_and_the_user_and_operator_see_why_and_what_it_cost(
    backend: Backend,  # noqa: F811
    tmp_path: Path,
) -> None:
    backend.workspaces.put(crash.workspace(BudgetLimits(user=ScopeLimits(usd_per_day=LIMIT))))
    deps = crash.deps_for(backend, tmp_path, crash.Script())
    deps.prices = PriceTable({"function/test-model": PRICE})
    # Given a delegated task that pays bills, one model call a bill
    crash.run_turn(deps, crash.user_item("e1", "Pay my three bills"))
    crash.deliver_until_done(deps, backend)
    task = crash.the_task(backend)
    # Then it stopped before the call that would pass the user's budget: two calls, two bills
    assert task.status == "budget_exhausted" and crash.Ledger.runs == ["p1", "p2"]
    assert task.usage.model_calls == 2 and task.usage.usd == 2 * CALL_USD
    assert task.error is not None

    # And the user is told so, in the conversation, by the outcome's turn
    told = run_turn(deps, outcome_item(task, pii=False))
    assert told.outcome == "ok"
    assert crash.replies(backend)[-1].startswith(f"Told: [Task {task.id} (payer) stopped: the budget ran out")

    # And /tasks shows it ended for the budget, with what it and its parent turn cost
    listed = run_turn(deps, command("", "c1"))
    assert listed.outcome == "command"
    assert f"- {task.id}  payer  budget_exhausted" in crash.replies(backend)[-1]
    assert "$0.0012" in crash.replies(backend)[-1]
    run_turn(deps, command(f"show {task.id}", "c2"))
    shown = crash.replies(backend)[-1]
    assert f"Task {task.id}: payer, budget_exhausted" in shown
    assert f"Error: {task.error}" in shown
    assert "Usage: 2 model calls, 2 tool calls, 800 tokens in, 200 out, est. $0.0012" in shown
    assert (
        f"Spend: task est. $0.0012, parent turn {task.parent_turn_id} est. $0.0012, together est. $0.0024"
        in shown
    )
    # which is what the user's budget was charged for the two (the outcome's turn came after)
    parent = [r for r in backend.audit.list_records(crash.WS) if r.turn_id == task.parent_turn_id]
    children = [r for r in backend.audit.list_records(crash.WS) if r.task_id == task.id]
    assert Decimal(str(sum(r.cost_usd for r in parent))) == 2 * CALL_USD
    assert Decimal(str(sum(r.cost_usd for r in children))).quantize(CALL_USD) == task.usage.usd


def test_sigil_tasks_show_gives_the_operator_the_same_spend(tmp_path: Path) -> None:
    """The embedded data dir, which `sigil tasks` opens (the stack's, on moto, in test_cli_tasks)."""
    from shared.adapters.embedded import build_embedded_backend
    from shared.config import Settings

    data_dir = tmp_path / "state"
    embedded = build_embedded_backend(Settings(data_dir=data_dir))
    try:
        crash.Ledger.runs, crash.Ledger.effects, crash.Ledger.kill_in_tool = [], {}, set()
        embedded.workspaces.put(crash.workspace(BudgetLimits(user=ScopeLimits(usd_per_day=LIMIT))))
        deps = crash.deps_for(embedded, data_dir, crash.Script())
        deps.prices = PriceTable({"function/test-model": PRICE})
        crash.run_turn(deps, crash.user_item("e1", "Pay my three bills"))
        crash.deliver_until_done(deps, embedded)
        task = crash.the_task(embedded)
    finally:
        embedded.close()
    assert task.status == "budget_exhausted"
    shown = CliRunner().invoke(app, ["tasks", "show", task.id, "-w", crash.WS, "--data-dir", str(data_dir)])
    assert shown.exit_code == 0, shown.output
    assert "payer, budget_exhausted" in shown.output
    assert f"parent turn {task.parent_turn_id} est. $0.0012, together est. $0.0024" in shown.output
    as_json = CliRunner().invoke(
        app, ["tasks", "show", task.id, "-w", crash.WS, "--data-dir", str(data_dir), "--json"]
    )
    spend = json.loads(as_json.output)["spend"]
    assert Decimal(spend["task_usd"]) == Decimal(spend["parent_usd"]) == 2 * CALL_USD

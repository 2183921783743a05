"""A task's budget (docs/delegation.md, docs/budgets.md): the parent user's and workspace's.

A turn checks its budget against what was spent so far; a task runs for longer, unattended, so it
checks against what its next model call is expected to spend as well: the tokens and cost of its
calls so far, on average. So it stops before the call that would take the budget to its limit,
rather than after it, and the user is told (the task ends "budget_exhausted").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.budgets import TurnBudget, evaluate
from shared.models.budgets import BudgetDecision, BudgetUsage
from shared.models.tasks import TaskUsage

NANOS = 1_000_000_000


def expected_call(usage: TaskUsage) -> BudgetUsage:
    """What one more model call of a task is expected to spend: its calls' mean so far."""
    calls = usage.model_calls
    if not calls:
        return BudgetUsage()
    return BudgetUsage(
        tokens_in=usage.tokens_in // calls,
        tokens_out=usage.tokens_out // calls,
        usd_nanos=int(usage.usd * NANOS) // calls,
    )


@dataclass
class TaskBudget(TurnBudget):
    """A TurnBudget whose check before a model call counts that call's expected spending as spent."""

    expected: BudgetUsage = field(default_factory=BudgetUsage)
    model_calls: int = 0  # charged by this invocation

    def check_model_call(self) -> BudgetDecision:
        ahead = self.expected.counters
        return evaluate(self.clock(), [(b, c + ahead) for b, c in self.readings()])

    def charge_model_call(
        self, model_ref: str, *, tokens_in: int, tokens_out: int, cache_read: int = 0, cache_write: int = 0
    ) -> BudgetDecision:
        usage = self.prices.usage(
            model_ref,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            cache_read=cache_read,
            cache_write=cache_write,
        )
        self.model_calls += 1
        # The next call is expected to cost at least what the last one did (its context only grows).
        self.expected = BudgetUsage(
            tokens_in=max(usage.tokens_in, self.expected.tokens_in),
            tokens_out=max(usage.tokens_out, self.expected.tokens_out),
            usd_nanos=max(usage.usd_nanos, self.expected.usd_nanos),
        )
        return super().charge_model_call(
            model_ref,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            cache_read=cache_read,
            cache_write=cache_write,
        )

"""The console's tasks pages in headless Chromium (Debian's, through Playwright's executable path),
on both backends (test_console's `console` fixture: the embedded data dir, and moto's DynamoDB with
osmem-server): a workspace's delegated tasks with status, role and spend, one task's detail with
its spend beside its parent turn's and the link to that turn, and a cancel after confirmation.

The tasks are stored through the backend's real TaskStore, as the delegate tool stores them, with
a real turn of the seeded conversation as their parent (its audit record, its correlation id).
"""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from playwright.sync_api import BrowserContext, expect

from shared.models.tasks import TaskResult, TaskUsage
from tests.browser.test_console import Console, console  # noqa: F401 - the fixture
from tests.integration.test_cli_tasks import a_task
from tests.support.console_seed import ALICE_SESSION, WS


def seed(console: Console) -> str:  # noqa: F811
    """A running and a finished task of Alice's session, delegated by her first model turn; that
    turn's id."""
    store = console.backend.tasks
    if store is None:
        pytest.fail(f"the {console.kind} backend has no TaskStore")
    turns = [r for r in console.backend.audit.list_records(WS, limit=1000) if r.session_id == ALICE_SESSION]
    parent = min((r for r in turns if r.outcome == "ok"), key=lambda r: r.created_at)
    usage = TaskUsage(model_calls=5, tool_calls=8, tokens_in=20_000, tokens_out=1_500, usd=Decimal("0.0210"))
    for task in (
        a_task(
            "tsk-research", ALICE_SESSION, turn=parent.turn_id, workspace=WS, status="running", usage=usage
        ),
        a_task(
            "tsk-finished",
            ALICE_SESSION,
            turn=parent.turn_id,
            workspace=WS,
            status="done",
            result=TaskResult(summary="Alice asked for the solarized theme.", confidence=0.9),
        ),
    ):
        store.create(
            task.model_copy(update={"correlation_id": parent.correlation_id}),
            max_per_session=3,
            max_per_workspace=20,
        )
    return parent.turn_id


def test_the_tasks_page_lists_them_and_a_task_shows_its_spend_and_parent_turn_and_cancels(
    context: BrowserContext,
    console: Console,  # noqa: F811
) -> None:
    parent_turn = seed(console)
    page = console.open(context, f"/workspaces/{WS}")
    page.locator("nav.tabs").get_by_role("link", name="Tasks").click()
    rows = page.locator("table.tasks tbody tr")
    expect(rows).to_have_count(2)
    running = rows.filter(has_text="tsk-research")
    for shown in ("researcher", "running", ALICE_SESSION, "$0.0210"):
        expect(running).to_contain_text(shown)
    expect(rows.filter(has_text="tsk-finished")).to_contain_text("done")

    # the detail: the task's spend beside its parent turn's, and the link to that turn
    running.get_by_role("link", name="tsk-research").click()
    facts = page.locator("dl")
    expect(facts).to_contain_text("5 model calls, 8 tool calls, 20,000 tokens in, 1,500 out")
    expect(facts).to_contain_text("$0.0210")
    parent_cost = facts.locator("dt:has-text('parent turn est. cost') + dd")
    expect(parent_cost).to_have_text(re.compile(r"^\$\d+\.\d{4}$"))
    page.get_by_role("link", name=parent_turn).click()
    expect(page).to_have_url(
        re.compile(f"/sessions/{re.escape(ALICE_SESSION)}#turn-{re.escape(parent_turn)}$")
    )
    expect(page.locator(f"article#turn-{parent_turn}")).to_be_visible()

    # cancel, through its confirmation page
    page.go_back()
    page.get_by_role("link", name="Cancel this task…").click()
    expect(page.get_by_role("heading", name="Cancel tsk-research?")).to_be_visible()
    page.get_by_role("button", name="Cancel the task").click()
    expect(page.locator("p.done")).to_have_text(
        "Cancel requested for tsk-research: it stops before its next step."
    )
    assert console.backend.tasks is not None
    stored = console.backend.tasks.get(WS, "tsk-research")
    assert stored is not None and stored.cancel_requested
    page.get_by_role("link", name="Back to the task").click()
    expect(page.locator("dl")).to_contain_text("running (cancel requested)")
    expect(page.get_by_role("link", name="Cancel this task…")).to_have_count(0)

    # a finished task shows its result, and offers no cancel
    finished = console.open(context, f"/workspaces/{WS}/tasks/tsk-finished")
    expect(finished.locator("blockquote.summary")).to_have_text("Alice asked for the solarized theme.")
    expect(finished.get_by_role("link", name="Cancel this task…")).to_have_count(0)
    missing = console.open(context, f"/workspaces/{WS}/tasks/tsk-nope")
    expect(missing.locator(".error")).to_have_text(f"no task 'tsk-nope' in workspace '{WS}'")


def test_a_cancel_without_the_csrf_token_changes_nothing(
    context: BrowserContext,
    console: Console,  # noqa: F811
) -> None:
    seed(console)
    page = console.open(context, f"/workspaces/{WS}/tasks/tsk-research/cancel")
    page.locator("input[name=csrf]").evaluate("el => el.value = 'forged'")
    page.get_by_role("button", name="Cancel the task").click()
    expect(page.locator("body")).to_contain_text("refused")
    assert console.backend.tasks is not None
    stored = console.backend.tasks.get(WS, "tsk-research")
    assert stored is not None and not stored.cancel_requested

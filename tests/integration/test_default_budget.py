"""Cost capped by default (issue 14, finding 7): a workspace nobody configured has a daily budget
per user and per workspace, and a turn past it is refused; `budget: null` still turns budgets off.

On the embedded backend with no workspace config stored, which is how every workspace starts in
the cloud (the stack stores none); the local gateway stores new_workspace's config on first start.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shared import serde
from shared.adapters.embedded import build_embedded_backend
from shared.agent.preflight import resolve
from shared.agent.turn import TurnDeps, run_turn
from shared.backend import Backend
from shared.budgets import PriceTable
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.models import DEFAULT_BUDGET, LaneItem, WorkspaceConfig, new_workspace
from shared.providers.base import ChatRequest, Done, ProviderEvent, TextDelta, Usage
from shared.providers.function import FunctionProvider
from shared.tools import default_registry
from tests.integration.test_turn_budget import SESSION, WS, Clock, item

# gpt-4.1-mini's list price for every model: a 1M-token call costs $0.40, under every USD cap.
CHEAP = PriceTable({"*": {"input_per_mtok": 0.4, "output_per_mtok": 1.6}}, defaults={})


def spends(tokens: int) -> FunctionProvider:
    def answer(request: ChatRequest) -> list[ProviderEvent]:
        return [TextDelta(text="fine"), Usage(input_tokens=tokens, output_tokens=0), Done()]

    return FunctionProvider(answer)


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[Backend]:
    b = build_embedded_backend(Settings(data_dir=tmp_path))
    yield b
    b.close()


def deps_for(backend: Backend, tmp_path: Path, provider: FunctionProvider) -> TurnDeps:
    return TurnDeps(
        backend=backend,
        settings=Settings(data_dir=tmp_path),
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=lambda ref: (provider, "test-model"),
        clock=Clock(),
        tools=default_registry(),
        prices=CHEAP,
    )


def from_sender(event_id: str, sender: str) -> LaneItem:
    lane_item = item(event_id)
    inbound = lane_item.inbound.model_copy(
        update={"sender": lane_item.inbound.sender.model_copy(update={"id": sender})}
    )
    return lane_item.model_copy(update={"inbound": inbound})


def last_reply(backend: Backend) -> str:
    return backend.outbox.read(WS, SESSION)[-1].message.text


def test_a_workspace_nobody_configured_has_a_daily_cap_per_user_and_per_workspace(backend: Backend) -> None:
    budget = new_workspace(WS).budget

    assert budget == DEFAULT_BUDGET
    for scope in (budget.workspace, budget.user):
        assert scope.tokens_per_day and scope.usd_per_day
    # The workspace together may spend more than one user
    assert budget.workspace.tokens_per_day > budget.user.tokens_per_day
    # And a turn in a workspace with no stored config (every workspace, in the cloud) gets it
    workspace, _ = resolve(backend, item("e0").inbound, Clock()())
    assert workspace.budget == DEFAULT_BUDGET


def test_a_turn_past_the_default_workspace_budget_is_refused(backend: Backend, tmp_path: Path) -> None:
    # Given no config stored, and a model call that spends the whole workspace's daily tokens
    limit = DEFAULT_BUDGET.workspace.tokens_per_day
    assert limit is not None
    provider = spends(limit)
    deps = deps_for(backend, tmp_path, provider)
    assert run_turn(deps, item("e1")).outcome == "ok"

    # When the next message comes
    denied = run_turn(deps, item("e2", "one more?"))

    # Then it is refused before any model call, and the user is told why
    assert denied.outcome == "budget_denied"
    assert len(provider.requests) == 1
    assert last_reply(backend).startswith(
        f"The daily token budget for this workspace is used up ({limit:,} of {limit:,})."
    )


def test_one_user_past_the_default_user_budget_leaves_the_others_served(
    backend: Backend, tmp_path: Path
) -> None:
    # Given a user whose one call spends a user's daily tokens (a fifth of the workspace's)
    limit = DEFAULT_BUDGET.user.tokens_per_day
    assert limit is not None
    provider = spends(limit)
    deps = deps_for(backend, tmp_path, provider)
    assert run_turn(deps, from_sender("e1", "u1")).outcome == "ok"

    # Then that user's next turn is refused, and another user's runs
    assert run_turn(deps, from_sender("e2", "u1")).outcome == "budget_denied"
    assert last_reply(backend).startswith(f"Your daily token budget is used up ({limit:,} of {limit:,}).")
    assert run_turn(deps, from_sender("e3", "u2")).outcome == "ok"
    assert len(provider.requests) == 2


def test_an_explicit_null_budget_turns_budgets_off(backend: Backend, tmp_path: Path) -> None:
    # Given a stored config saying `"budget": null`
    backend.workspaces.put(serde.loads(WorkspaceConfig, f'{{"id": "{WS}", "budget": null}}'))
    stored = backend.workspaces.get(WS)
    assert stored is not None and stored.budget is None
    # When a model call spends more than the default workspace budget, twice
    limit = DEFAULT_BUDGET.workspace.tokens_per_day
    assert limit is not None
    provider = spends(2 * limit)
    deps = deps_for(backend, tmp_path, provider)

    # Then nothing is refused
    assert [run_turn(deps, item(f"e{n}")).outcome for n in range(3)] == ["ok", "ok", "ok"]
    assert len(provider.requests) == 3

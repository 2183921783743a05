"""`sigil replay --compare-context` (shared.replay.context_modes, docs/replay.md): a recorded
conversation (tests/fixtures/replay/context_conversation.json, recorded here with the scripted
model) replayed under off, pointers and inject, each turn's prompt part and tokens side by side:
inject shows the memory's text, pointers its id, off neither."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from shared.adapters.embedded import build_embedded_backend
from shared.agent.pipeline import MEMORY_HEADING, POINTERS_HEADING
from shared.agent.turn import TurnDeps, run_turn
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.models import InboundMessage, LaneItem, Sender, WorkspaceConfig
from shared.providers.base import Provider
from shared.providers.function import FunctionProvider
from shared.replay.context_modes import compare_context_modes, render_context_html, render_context_text
from tests.support.fake_openai import FakeOpenAI

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "replay" / "context_conversation.json"
CONVERSATION: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
WS = CONVERSATION["workspace"]
SESSION = f"{CONVERSATION['channel']}.{CONVERSATION['chat_id']}"
CABIN = CONVERSATION["turns"][0]["text"]


def record(data_dir: Path, model: str = "function/scripted") -> None:
    """The fixture's conversation, recorded as the gateway records one (the pipeline off), in a
    two-message window so that the earlier messages are in memory by the questions."""
    backend = build_embedded_backend(Settings(data_dir=data_dir, embedding_model="none"))
    provider = FunctionProvider(lambda request: "Noted.")
    clock = {"at": datetime.fromisoformat(CONVERSATION["turns"][0]["at"])}
    try:
        backend.workspaces.put(WorkspaceConfig(id=WS, active_window=2, model=model))
        deps = TurnDeps(
            backend=backend,
            settings=Settings(data_dir=data_dir, embedding_model="none"),
            senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
            provider_factory=lambda ref: (provider, "scripted"),
            clock=lambda: clock["at"],
        )
        for i, turn in enumerate(CONVERSATION["turns"]):
            clock["at"] = datetime.fromisoformat(turn["at"])
            inbound = InboundMessage(
                event_id=f"rec-{i}",
                channel=CONVERSATION["channel"],
                workspace_id=WS,
                session_id=SESSION,
                sender=Sender(**CONVERSATION["sender"]),
                chat_id=CONVERSATION["chat_id"],
                text=turn["text"],
                received_at=clock["at"],
            )
            run_turn(deps, LaneItem(inbound=inbound, enqueued_at=clock["at"]))
    finally:
        backend.close()


def test_each_turns_prompt_under_off_pointers_and_inject_side_by_side(tmp_path: Path) -> None:
    # Given the recorded conversation
    settings = Settings(data_dir=tmp_path, embedding_model="none")
    record(tmp_path)
    source = build_embedded_backend(settings)
    provider = FunctionProvider(lambda request: "Noted.")

    def factory(ref: str | None) -> tuple[Provider, str]:
        return provider, "scripted"

    # When it is replayed under the three modes with the scripted model
    try:
        cabin_id = next(r.id for r in source.memory.get_messages(WS, SESSION) if r.text == CABIN)
        compared = compare_context_modes(source, settings, WS, budget_tokens=1000, provider_factory=factory)
    finally:
        source.close()
    # Then every turn has a column per mode, and the cabin question's columns differ as the modes do
    assert compared.modes == ["off", "pointers", "inject"] and len(compared.rows) == len(
        CONVERSATION["turns"]
    )
    question = next(r for r in compared.rows if "Which week" in r.user_text)
    off, pointers, inject = (question.modes[m] for m in compared.modes)
    assert off.pipeline == "" and off.orientation == "" and off.pipeline_tokens == 0
    assert pointers.pipeline.startswith(POINTERS_HEADING) and cabin_id in pointers.pipeline
    assert CABIN not in pointers.pipeline  # twelve words of it, not the whole
    assert inject.pipeline.startswith(MEMORY_HEADING) and CABIN in inject.pipeline
    assert cabin_id not in inject.pipeline
    # And the tokens: what each mode adds, and what the model was sent (the scripted model counts
    # a token a word)
    assert pointers.pipeline_tokens > 0 and inject.pipeline_tokens > 0
    assert off.tokens_in < min(pointers.tokens_in, inject.tokens_in)
    assert off.system_tokens < min(pointers.system_tokens, inject.system_tokens)
    # Off, no Orientation Document either (this workspace knows nothing to orient with: no facts,
    # summaries or skills, so the pipeline's modes write none too)
    assert all(r.modes[m].orientation == "" for r in compared.rows for m in compared.modes)
    assert compared.tokens_in["off"] < min(compared.tokens_in["pointers"], compared.tokens_in["inject"])
    # And the renderings put the three columns side by side
    text = render_context_text(compared)
    header = next(line for line in text.splitlines() if line.startswith("| off"))
    assert header.split("|")[1:4] == [f" {m:<44} " for m in ("off", "pointers", "inject")]
    assert "(nothing added)" in text and cabin_id in text
    page = render_context_html(compared)
    assert page.count("<th>inject</th>") == 1 and "Lake Bled" in page
    print("\n" + text)


def test_sigil_replay_compare_context_through_a_real_provider(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shared.cli import app

    # Given the conversation recorded with an OpenAI model, replayed through the openai SDK
    # against the fake
    monkeypatch.setenv("SIGIL_EMBEDDING_MODEL", "none")
    record(tmp_path, model="openai/gpt-4.1-mini")
    with FakeOpenAI(lambda body: "fake says hi") as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        result = CliRunner().invoke(
            app,
            ["replay", "-w", WS, "--compare-context", "--context-budget", "500", "--data-dir", str(tmp_path)],
        )
        sent = len(fake.requests)
    assert result.exit_code == 0, result.stderr
    assert "(inject within 500 tokens)" in result.stdout and "| off " in result.stdout
    assert CABIN.split()[0] in result.stdout and sent == 3 * len(CONVERSATION["turns"])
    bad = CliRunner().invoke(
        app, ["replay", "-w", WS, "--compare-context", "--context-budget", "50", "--data-dir", str(tmp_path)]
    )
    assert bad.exit_code == 2 and "budget_tokens" in bad.stderr

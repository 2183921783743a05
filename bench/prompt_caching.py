"""The input-token cost of a 20-turn conversation with and without prompt caching, per provider.

Each provider's real SDK (openai, anthropic, boto3) talks to its local fake (tests/support), which
keeps a prompt cache by the provider's documented rules and reports its usage fields
(tests/support/prompt_cache.py). A 20-turn conversation runs through the real turn
(shared.agent.turn.run_turn, embedded backend) with a realistic static prefix: a 600-word persona,
a catalogue of 30 skills and the built-in tools; the time changes on every turn. The audit records
give each turn's prompt tokens and the part the provider read from or wrote to its cache; the
prompt is priced at the model's list price (shared.budgets.PriceTable, genai-prices' rates):
"without" prices every prompt token at the input rate, "with" prices the cache reads and writes
at their own rates, as the budgets and the console do. The fakes count a token a word, so the
figures are in words: about 0.75 of a real tokenizer's count for English.

    .venv/bin/python bench/prompt_caching.py            # also printed at the end of bench/cost.py
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/ is not in the installed package

from shared.adapters.embedded import build_embedded_backend  # noqa: E402
from shared.agent.turn import TurnDeps, run_turn  # noqa: E402
from shared.budgets import PriceTable  # noqa: E402
from shared.channels.senders import OutboxSender, SenderRegistry  # noqa: E402
from shared.config import Settings  # noqa: E402
from shared.models import AuditRecord, InboundMessage, LaneItem, Sender, WorkspaceConfig  # noqa: E402
from shared.providers import build_provider  # noqa: E402
from shared.providers.bedrock import bedrock_client  # noqa: E402
from shared.skills import Skill  # noqa: E402
from tests.support.fake_anthropic import FakeAnthropic  # noqa: E402
from tests.support.fake_bedrock import FakeBedrock  # noqa: E402
from tests.support.fake_openai import FakeOpenAI  # noqa: E402

TURNS = 20
WS = "bench"
MODELS = ("openai/gpt-4.1-mini", "anthropic/claude-sonnet-4-6", "bedrock/anthropic.claude-sonnet-4-6-v1:0")
PERSONA = "You are Sigil, the assistant of a small design studio. " + " ".join(
    f"Guideline {i}: keep answers short, say what you are unsure of, and name the source you used."
    for i in range(36)
)
SKILLS = [
    Skill(
        name=f"skill-{i:02d}",
        description=f"How the studio handles task family {i}: the steps, the checks and who signs off.",
        body="Steps.",
    )
    for i in range(30)
]
REPLY = " ".join(["Here is what I found and what I would do next."] * 4)


@dataclass(frozen=True)
class Row:
    model: str
    prompt: int  # prompt tokens over the conversation
    read: int  # of which read from the cache
    written: int  # of which written to it
    without_usd: float
    with_usd: float


@contextlib.contextmanager
def _served(model: str) -> Iterator[dict[str, str]]:
    """The fake for `model`'s provider, and the environment its SDK needs to reach it."""
    if model.startswith("openai/"):
        with FakeOpenAI(lambda body: REPLY) as openai_fake:
            yield {"OPENAI_BASE_URL": openai_fake.base_url}
    elif model.startswith("anthropic/"):
        with FakeAnthropic(lambda body: REPLY) as anthropic_fake:
            yield {"ANTHROPIC_BASE_URL": anthropic_fake.base_url, "ANTHROPIC_API_KEY": "sk-ant-bench"}
    else:
        with FakeBedrock() as bedrock_fake:
            bedrock_client.cache_clear()
            yield {
                "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": bedrock_fake.base_url,
                "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
                "AWS_SECRET_ACCESS_KEY": "not-a-secret",
                "SIGIL_BEDROCK_REGION": "us-east-1",
            }
            bedrock_client.cache_clear()


def conversation(model: str, turns: int = TURNS) -> list[AuditRecord]:
    """The audit records of a `turns`-turn conversation with `model`, through its fake."""
    start = datetime(2026, 3, 4, 9, 0, tzinfo=UTC)
    with tempfile.TemporaryDirectory() as tmp, _served(model) as env, mock.patch.dict(os.environ, env):
        settings = Settings(data_dir=Path(tmp))
        backend = build_embedded_backend(settings)
        try:
            backend.workspaces.put(WorkspaceConfig(id=WS, system_prompt=PERSONA, model=model))
            now = {"at": start}
            deps = TurnDeps(
                backend=backend,
                settings=settings,
                senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
                provider_factory=lambda ref: build_provider(settings, ref),
                clock=lambda: now["at"],
                skills=lambda ws: SKILLS,
            )
            records = []
            for i in range(turns):
                now["at"] = start + timedelta(minutes=3 * i)  # within the providers' 5-minute cache life
                inbound = InboundMessage(
                    event_id=f"e{i}",
                    channel="web",
                    workspace_id=WS,
                    session_id="web.s1",
                    sender=Sender(id="u1", name="Ada"),
                    chat_id="s1",
                    text=f"Question {i}: what should we do about the brief for client {i}?",
                )
                records.append(run_turn(deps, LaneItem(inbound=inbound)))
            return records
        finally:
            backend.close()


def measure(models: tuple[str, ...] = MODELS, turns: int = TURNS) -> list[Row]:
    prices, rows = PriceTable(), []
    for model in models:
        records = conversation(model, turns)
        # The input side only: the output costs the same with caching or without.
        without = sum(prices.cost_nanos(model, r.tokens_in, 0) for r in records)
        with_cache = sum(
            prices.cost_nanos(
                model, r.tokens_in, 0, cache_read=r.tokens_cached, cache_write=r.tokens_cache_write
            )
            for r in records
        )
        rows.append(
            Row(
                model,
                sum(r.tokens_in for r in records),
                sum(r.tokens_cached for r in records),
                sum(r.tokens_cache_write for r in records),
                without / 1e9,
                with_cache / 1e9,
            )
        )
    return rows


def render(rows: list[Row], turns: int = TURNS) -> str:
    header = (
        f"Prompt caching: the input-token cost of one {turns}-turn conversation (bench/prompt_caching.py)\n"
        "(tokens as the fakes count them, a word each; priced at genai-prices' list rates)\n"
    )
    cols = ("model", "prompt tokens", "cache read", "cache write", "without caching", "with caching", "saved")
    lines = [
        (
            r.model,
            f"{r.prompt:,}",
            f"{r.read:,}",
            f"{r.written:,}",
            f"${r.without_usd:.4f}",
            f"${r.with_usd:.4f}",
            f"{(1 - r.with_usd / r.without_usd) * 100:.0f}%" if r.without_usd else "-",
        )
        for r in rows
    ]
    widths = [max(len(c), *(len(line[i]) for line in lines)) for i, c in enumerate(cols)]
    out = [" | ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))]
    out.append("-+-".join("-" * w for w in widths))
    out += [" | ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)) for line in lines]
    return header + "\n".join(out)


def main() -> None:
    print(render(measure()))


if __name__ == "__main__":
    main()

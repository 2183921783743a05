"""What the Refinement Gate (shared.agent.gate, docs/context.md) adds to 1,000 turns: one call to
the workspace's cheap model per turn whose pipeline selected something, when the gate is on.

The gate's request is built by the gate itself (shared.agent.gate.gate_prompt) over a selection
of the pipeline's full size: ContextConfig.max_items memories (10) of a chat message's length
(40 words each, about what a LoCoMo turn or a short chat message holds) and the three skills the
catalogue match keeps at most, for a 20-word message. Its tokens are the characters / 4 the
budget charges them at (no tokenizer on the turn path). The answer is the JSON that keeps every
id (the longest a valid answer gets); the budget charges each call its bound before it is made
(the prompt in, GATE_MAX_TOKENS out), shown apart. Priced at each cheap model's list price
(shared.budgets.PriceTable: genai-prices' rates). Printed by bench/cost.py (`--gate-only` for it
alone); no model is called.

    .venv/bin/python bench/gate_cost.py
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the bench runs from a plain clone

from shared.agent.gate import GATE_MAX_TOKENS, gate_prompt  # noqa: E402
from shared.agent.pipeline import Selection  # noqa: E402
from shared.budgets import PriceTable  # noqa: E402
from shared.memory.search import MemoryHit  # noqa: E402
from shared.models import ContextConfig  # noqa: E402
from shared.skills import Skill  # noqa: E402

CHEAP_MODELS = (
    "openai/gpt-4.1-nano",
    "anthropic/claude-haiku-4-5",
    "bedrock/amazon.nova-micro-v1:0",
)
MEMORY_WORDS = 40
MESSAGE_WORDS = 20
TURNS = 1000
WORDS = [
    "the",
    "cabin",
    "trip",
    "booked",
    "august",
    "marco",
    "boiler",
    "report",
    "helga",
    "sister",
    "violin",
    "porto",
    "lake",
    "week",
]


def _text(seed: int, words: int) -> str:
    return " ".join(WORDS[(seed * 7 + i) % len(WORDS)] for i in range(words))


@dataclass(frozen=True)
class GateCost:
    tokens_in: int  # one gate call's prompt
    tokens_out: int  # its longest valid answer
    charged_out: int  # what the budget charges before the call
    usd: dict[str, tuple[float, float]]  # model -> (USD per 1,000 turns, as charged)


def measure() -> GateCost:
    at = datetime(2026, 5, 1, tzinfo=UTC)
    items = ContextConfig().max_items
    hits = tuple(
        MemoryHit(
            id=f"t_{i:032x}.u",
            tier="message",
            text=_text(i, MEMORY_WORDS),
            score=1.0 - i / 20,
            session_id="web.s1",
            created_at=at,
            metadata={},
        )
        for i in range(items)
    )
    skills = tuple((Skill(name=f"skill-{i}", description=_text(i + 50, 20), body="b"), 0.5) for i in range(3))
    selection = Selection(mode="inject", hits=hits, skills=skills)
    request = gate_prompt(selection, _text(99, MESSAGE_WORDS))
    tokens_in = _estimate(request.system) + _estimate(str(request.messages[0].content))
    answer = json.dumps({"keep": [h.id for h in hits] + [s.name for s, _ in skills]})
    tokens_out = min(_estimate(answer), GATE_MAX_TOKENS)
    prices = PriceTable()
    usd = {}
    for model in CHEAP_MODELS:
        expected = prices.cost_nanos(model, tokens_in * TURNS, tokens_out * TURNS) / 1e9
        charged = prices.cost_nanos(model, tokens_in * TURNS, GATE_MAX_TOKENS * TURNS) / 1e9
        usd[model] = (expected, charged)
    return GateCost(tokens_in, tokens_out, GATE_MAX_TOKENS, usd)


def render(cost: GateCost) -> str:
    out = [
        "### The Refinement Gate, when on: one cheap-model call per turn (docs/context.md)",
        "",
        f"A full selection (10 memories of {MEMORY_WORDS} words, 3 skills): {cost.tokens_in} tokens in, "
        f"{cost.tokens_out} out (the budget charges {cost.charged_out} out before the call).",
        "",
        "| cheap model | USD per 1,000 turns | as the budget charges it |",
        "|---|---|---|",
    ]
    out += [f"| {m} | ${e:.4f} | ${c:.4f} |" for m, (e, c) in cost.usd.items()]
    out.append("\nThe gate off (the default): no call, $0. A turn whose pipeline selected nothing: no call.")
    return "\n".join(out)


def _estimate(text: str) -> int:
    return math.ceil(len(text) / 4)


if __name__ == "__main__":
    print(render(measure()))

"""Prompt size with 50 skills installed in a workspace (docs/skills.md). Run by `make bench`.

Fifty agentskills.io skills (descriptions of 90-200 characters, bodies of 2-4 KB) are installed
in a workspace of the embedded backend; one real turn runs with a function-backed model that
loads one of them with the `skill` tool and then answers. Printed, in tokens:

- the catalogue part of the system prompt (name + description of each skill),
- every body injected at once (what listing bodies instead of names would cost),
- the system prompt of the turn, and its first request (system + user message),
- the second request of the turn: the same plus the tool call and the quoted skill body.

Tokens are the repo's own estimate (shared.agent.context.estimate: characters / 4, rounded up),
the one the prompt's budgets use; no tokenizer is installed (tiktoken is not a dependency).
Tool JSON schemas go to the provider separately and are counted apart.
A benchmark, not a test: it prints a table.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shared.adapters.embedded import build_embedded_backend  # noqa: E402
from shared.agent.context import BUDGETS, estimate  # noqa: E402
from shared.agent.turn import TurnDeps, run_turn  # noqa: E402
from shared.channels.senders import OutboxSender, SenderRegistry  # noqa: E402
from shared.config import Settings  # noqa: E402
from shared.models import (  # noqa: E402
    AssistantMessage,
    InboundMessage,
    LaneItem,
    Sender,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from shared.providers.base import ChatRequest, ProviderEvent, ToolCallEvent  # noqa: E402
from shared.providers.function import FunctionProvider  # noqa: E402

SKILLS = 50
WS = "bench"
TOPICS = [
    "kubernetes", "terraform", "postgres", "release-notes", "incident-review", "pdf-forms", "invoices",
    "travel-plans", "recipes", "garden", "tax-returns", "code-review", "python-packaging", "docker",
    "ansible", "grafana", "budgeting", "meeting-notes", "job-interviews", "git-history",
]  # fmt: skip
TEXT = (
    "check the current state first then change one thing at a time and write down what you did "
    "so that the next person can follow the steps and undo them when something goes wrong"
)
WORDS = TEXT.split()


def skill_files(i: int, rng: random.Random) -> tuple[str, bytes]:
    name = f"{TOPICS[i % len(TOPICS)]}-{i:02d}"
    description = " ".join(rng.choice(WORDS) for _ in range(rng.randint(16, 36)))[:200].capitalize() + "."
    paragraphs = [" ".join(rng.choice(WORDS) for _ in range(60)) + "." for _ in range(rng.randint(6, 12))]
    body = f"# {name}\n\n" + "\n\n".join(paragraphs)
    return name, f"---\nname: {name}\ndescription: {description}\n---\n{body}\n".encode()


def request_tokens(request: ChatRequest) -> int:
    total = estimate(request.system)
    for m in request.messages:
        if isinstance(m, UserMessage | ToolResultMessage):
            total += estimate(m.content)
        elif isinstance(m, AssistantMessage):
            total += estimate(m.content) + sum(estimate(c.name + c.arguments) for c in m.tool_calls)
    return total


def main() -> None:
    rng = random.Random(15)  # noqa: S311 -- reproducible filler text, not a secret
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), model="function/zero", embedding_model="none")
        backend = build_embedded_backend(settings)
        try:
            bodies = []
            for i in range(SKILLS):
                name, data = skill_files(i, rng)
                backend.skills.put_skill(WS, name, {"SKILL.md": data})
                bodies.append(data.decode())
            target = "kubernetes-00"

            def model(request: ChatRequest) -> str | list[ProviderEvent]:
                if not any(isinstance(m, ToolResultMessage) for m in request.messages):
                    call = ToolCall(id="c1", name="skill", arguments=json.dumps({"name": target}))
                    return [ToolCallEvent(call=call)]
                return "Done."

            provider = FunctionProvider(model)
            deps = TurnDeps(
                backend=backend,
                settings=settings,
                senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
                provider_factory=lambda ref: (provider, "zero"),
            )
            inbound = InboundMessage(
                event_id="e1",
                channel="web",
                workspace_id=WS,
                session_id="web.s1",
                sender=Sender(id="u1", name="Ada"),
                chat_id="s1",
                text="my pods keep restarting, what should I check?",
            )
            run_turn(deps, LaneItem(inbound=inbound))
        finally:
            backend.close()
    first, second = provider.requests
    system = first.system
    start = system.index("## Skills you can load")
    end = system.find("\n\n## ", start + 1)
    catalogue = system[start : end if end > 0 else None]
    listed = catalogue.count("\n- ")
    result = next(m for m in second.messages if isinstance(m, ToolResultMessage))
    schemas = sum(estimate(json.dumps(t.parameters) + t.name + t.description) for t in first.tools)
    rows = [
        ("skills installed", f"{SKILLS}"),
        ("skills listed in the catalogue", f"{listed - (1 if '… and' in catalogue else 0)}"),
        ("catalogue part of the system prompt", f"{estimate(catalogue)} (budget {BUDGETS['catalogue']})"),
        ("every body injected instead (untrimmed)", f"{sum(estimate(b) for b in bodies)}"),
        ("system prompt of the turn", f"{estimate(system)}"),
        ("first request (system + message)", f"{request_tokens(first)}"),
        ("the loaded skill (tool result, quoted)", f"{estimate(result.content)}"),
        ("second request, one skill loaded", f"{request_tokens(second)}"),
        ("tool schemas, sent apart (every request)", f"{schemas}"),
    ]
    print(f"\nPrompt size with {SKILLS} skills installed (tokens: chars / 4, shared.agent.context.estimate)")
    width = max(len(r[0]) for r in rows)
    print(f"{'':{width}}  tokens")
    for label, value in rows:
        print(f"{label:{width}}  {value}")


if __name__ == "__main__":
    main()

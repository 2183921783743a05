"""The Refinement Gate (specs 001/002, issue 31): one call to the workspace's cheap model that
keeps or trims the context pipeline's selection before the turn's model sees it.

The gate is optional (ContextConfig.gate) and can only take away: it is shown the message and the
selection's items with their ids, and answers with the ids to keep, `{"keep": ["id", ...]}`. The
deterministic selection stands whenever the gate cannot be trusted to have judged it:

- `budget`: the turn's budget is spent (checked before the call, as for every model call);
- `timeout`: no whole answer within ContextConfig.gate_timeout_s (or the turn's deadline);
- `error`: no model configured for it, or the provider failed;
- `invalid`: an answer that is not that JSON object, or names an id that was not offered.

The call is charged to the turn's budget before it is made, at its bound (the prompt's estimated
tokens in, GATE_MAX_TOKENS out), so that a gate that hangs or fails has paid for its attempt
like any model call; the provider's own count is charged on top where it says more. Every
outcome is in the turn's audit record (AuditRecord.context_gate): kept, trimmed (with the ids
dropped) or fell back (with why), the model, the time and the tokens.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from typing import Final

from shared.agent.pipeline import Selection, narrowed
from shared.budgets import TurnBudget
from shared.deadline import bounded, within
from shared.errors import DeadlineExceeded, SigilError
from shared.models import ContextConfig, ContextGate, UserMessage, WorkspaceConfig
from shared.providers.base import ChatRequest, Provider, TextDelta, Usage

log = logging.getLogger("sigil.context")

GATE_MAX_TOKENS: Final = 200
# Each memory as the gate sees it: enough of its text to judge, not the whole of a long one.
GATE_ITEM_CHARS: Final = 300
GATE_SYSTEM: Final = (
    "You check what an assistant is about to be shown before it answers a user's message. You get "
    "the message and candidate items (memories and skills), each with its id. Keep the items that "
    "could help answer this message; drop the ones that are clearly unrelated. When unsure, keep. "
    'Answer with JSON only, no prose: {"keep": ["<id>", ...]}'
)


@dataclass(frozen=True)
class Gated:
    selection: Selection
    audit: ContextGate


def cheap_model_ref(workspace: WorkspaceConfig) -> str | None:
    """The model the gate calls: the workspace's "cheap" class (DelegationConfig.models), else its
    own model (None: the gateway's default)."""
    return workspace.delegation.models.get("cheap") or workspace.model


def gate_prompt(selection: Selection, message: str) -> ChatRequest:
    """The gate's request, without its model (the caller's provider names it)."""
    lines = [f"Message: {message[:2000]}", "", "Items:"]
    for h in selection.hits:
        text = " ".join(h.text.split())
        lines.append(f"- id={h.id} ({h.tier}): {text[:GATE_ITEM_CHARS]}")
    for s, _ in selection.skills:
        lines.append(f"- id={s.name} (skill): {' '.join(s.description.split())[:GATE_ITEM_CHARS]}")
    return ChatRequest(
        model="",
        system=GATE_SYSTEM,
        messages=[UserMessage(id="gate", content="\n".join(lines))],
        max_tokens=GATE_MAX_TOKENS,
        temperature=0.0,
    )


def refine(
    selection: Selection,
    message: str,
    *,
    config: ContextConfig,
    provider: Provider | None,
    model: str,
    budget: TurnBudget | None,
) -> Gated:
    """The gate's judgement of `selection` for `message`, or the selection unchanged with the
    reason it stands. `provider` None: no model could be had for the gate (an error)."""
    started = time.perf_counter()
    offered = [h.id for h in selection.hits] + [s.name for s, _ in selection.skills]
    model_ref = f"{provider.name}/{model}" if provider is not None else None

    def fell_back(reason: str, usage: Usage | None = None) -> Gated:
        log.info("context gate fell back", extra={"reason": reason.split(":", maxsplit=1)[0]})
        return Gated(selection, _audit("fell_back", started, model_ref, usage, reason=reason))

    if not offered:
        return Gated(selection, ContextGate(verdict="skipped", reason="nothing selected"))
    if provider is None:
        return fell_back("error: no model for the gate")
    if budget is not None:
        decision = budget.check()
        if decision.exhausted is not None:
            return fell_back(f"budget: {decision.exhausted.summary}")
    request = gate_prompt(selection, message).model_copy(update={"model": model})
    bound_in = _estimate(request.system) + _estimate(request.messages[0].content)
    if budget is not None:
        assert model_ref is not None
        budget.charge_model_call(model_ref, tokens_in=bound_in, tokens_out=GATE_MAX_TOKENS)
    parts: list[str] = []
    usage = Usage()
    try:
        for event in bounded(within(config.gate_timeout_s), iter(provider.stream(request))):
            if isinstance(event, TextDelta):
                parts.append(event.text)
            elif isinstance(event, Usage):
                usage = usage + event
    except DeadlineExceeded:
        return fell_back(f"timeout: no answer within {config.gate_timeout_s:g} s")
    except SigilError as exc:
        return fell_back(f"error: {type(exc).__name__}: {exc.message[:200]}")
    finally:
        if budget is not None and model_ref is not None:
            over_in = max(0, usage.input_tokens - bound_in)
            over_out = max(0, usage.output_tokens - GATE_MAX_TOKENS)
            if over_in or over_out:
                budget.charge_model_call(model_ref, tokens_in=over_in, tokens_out=over_out)
    keep = _kept_ids("".join(parts), set(offered))
    if isinstance(keep, str):
        return fell_back(f"invalid: {keep}", usage)
    dropped = [i for i in offered if i not in keep]
    if not dropped:
        return Gated(selection, _audit("kept", started, model_ref, usage))
    return Gated(narrowed(selection, keep), _audit("trimmed", started, model_ref, usage, dropped=dropped))


def _kept_ids(answer: str, offered: set[str]) -> set[str] | str:
    """The ids the answer keeps, or what is wrong with it. A model may wrap the JSON in a code
    fence: the outermost braces are read, nothing else of the prose."""
    start, end = answer.find("{"), answer.rfind("}")
    if start < 0 or end < start:
        return "no JSON object"
    try:
        data = json.loads(answer[start : end + 1])
    except ValueError:
        return "not JSON"
    keep = data.get("keep") if isinstance(data, dict) else None
    if not isinstance(keep, list) or not all(isinstance(i, str) for i in keep):
        return 'no "keep" list of ids'
    unknown = sorted(set(keep) - offered)
    if unknown:
        return f"ids not offered: {', '.join(unknown[:5])[:200]}"
    return set(keep)


def _audit(
    verdict: str,
    started: float,
    model_ref: str | None,
    usage: Usage | None,
    *,
    reason: str | None = None,
    dropped: list[str] | None = None,
) -> ContextGate:
    usage = usage or Usage()
    return ContextGate.model_validate(
        {
            "verdict": verdict,
            "reason": reason,
            "model": model_ref,
            "dropped": dropped or [],
            "ms": round((time.perf_counter() - started) * 1000, 3),
            "tokens_in": usage.input_tokens,
            "tokens_out": usage.output_tokens,
        }
    )


def _estimate(text: str) -> int:
    return math.ceil(len(text) / 4)

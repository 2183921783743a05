"""The `sigil` host module's host side: what a sandboxed script may ask of Sigil (docs/sandbox.md).

Read-only memory under the calling turn's RecallScope, and the session scratchpad (a seam: the
delegation work that adds a scratchpad has not landed, so it answers None). The scope, the
workspace and the session come from the ToolContext the call was built with; a request naming
any of them, or an argument the op does not take, is refused. Every call is counted against the
run's max_host_calls and max_host_rows and recorded in the run's audit (SandboxRun.host_calls).
"""

from __future__ import annotations

from typing import Any

from shared.errors import SandboxError
from shared.memory.search import MemorySearch
from shared.models import SandboxConfig
from shared.tools.core import ToolContext

_ARGS = {"facts": {"after", "limit"}, "search": {"query", "k"}, "scratchpad": {"key"}}


class HostModule:
    """Answers one run's `sigil` calls for one turn. Built per call; holds no state between runs."""

    def __init__(self, ctx: ToolContext, limits: SandboxConfig, searcher: MemorySearch) -> None:
        self._ctx, self._limits, self._searcher = ctx, limits, searcher

    def __call__(self, op: str, args: dict[str, Any]) -> Any:
        allowed = _ARGS.get(op)
        if allowed is None:
            raise SandboxError(f"sigil has no call {op!r}; it has {sorted(_ARGS)}", limit="host")
        extra = set(args) - allowed
        if extra:
            raise SandboxError(f"sigil.{op} takes no {sorted(extra)}", limit="host")
        if op == "facts":
            return self._facts(args.get("after"), args.get("limit"))
        if op == "search":
            return self._search(args.get("query"), args.get("k"))
        return None  # scratchpad: the seam for delegation's session scratchpad

    def _rows(self, value: object, default: int) -> int:
        n = default if value is None else value
        if not isinstance(n, int) or n < 1:
            raise SandboxError("limit and k must be positive integers", limit="host")
        return min(n, self._limits.max_host_rows)

    def _facts(self, after: object, limit: object) -> list[dict[str, Any]]:
        if after is not None and not isinstance(after, str):
            raise SandboxError("after must be a fact id (a string)", limit="host")
        ctx = self._ctx
        triples = ctx.backend.memory.list_triples(
            ctx.workspace_id, scope=ctx.scope, after=after, limit=self._rows(limit, 500)
        )
        return [
            {
                "id": t.id,
                "subject": t.subject,
                "predicate": t.predicate,
                "object": t.object,
                "category": t.category,
                "status": t.status,
                "created_at": t.created_at.isoformat(),
            }
            for t in triples
        ]

    def _search(self, query: object, k: object) -> list[dict[str, Any]]:
        if not isinstance(query, str) or not query.strip():
            raise SandboxError("query must be a non-empty string", limit="host")
        ctx = self._ctx
        outcome = self._searcher.search(
            ctx.workspace_id, query[:400], scope=ctx.scope, k=self._rows(k, 10), now=ctx.now()
        )
        return [
            {"id": h.id, "tier": h.tier, "text": h.text, "created_at": h.created_at.isoformat()}
            for h in outcome.hits
        ]

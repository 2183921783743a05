"""The `sigil` host module's host side: what a sandboxed script may ask of Sigil (docs/sandbox.md).

Read-only memory under the calling turn's RecallScope, and the turn's own session's scratchpad
(delegated tasks' full output, read-only: an entry's text, or its keys). The scope, the
workspace and the session come from the ToolContext the call was built with; a request naming
any of them, or an argument the op does not take, is refused. Every call is counted against the
run's max_host_calls and max_host_rows and recorded in the run's audit (SandboxRun.host_calls).
"""

from __future__ import annotations

import re
from typing import Any

from shared.errors import SandboxError
from shared.memory.search import MemorySearch
from shared.models import SandboxConfig
from shared.models.tasks import SCRATCHPAD_KEY_PATTERN
from shared.ports import Scratchpad
from shared.tools.core import ToolContext

_ARGS = {
    "facts": {"after", "limit"},
    "search": {"query", "k"},
    "scratchpad": {"key"},
    "scratchpad_keys": {"prefix"},
}


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
        if op == "scratchpad":
            return self._scratchpad(args.get("key"))
        return self._scratchpad_keys(args.get("prefix"))

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

    def _pad(self) -> Scratchpad:
        pad = self._ctx.backend.scratchpad
        if pad is None:
            raise SandboxError(
                "this gateway has no scratchpad (delegation is not available here)", limit="host"
            )
        return pad

    def _scratchpad(self, key: object) -> str | None:
        """The entry's text (None: no such entry in the turn's session)."""
        if not isinstance(key, str) or not re.match(SCRATCHPAD_KEY_PATTERN, key):
            raise SandboxError(
                "key must be a scratchpad key (a string, as scratchpad_keys lists)", limit="host"
            )
        ctx = self._ctx
        return self._pad().get(ctx.workspace_id, ctx.session_id, key)

    def _scratchpad_keys(self, prefix: object) -> list[str]:
        if prefix is not None and not isinstance(prefix, str):
            raise SandboxError("prefix must be a string", limit="host")
        ctx = self._ctx
        keys = self._pad().list_keys(ctx.workspace_id, ctx.session_id, prefix=prefix or "")
        return keys[: self._limits.max_host_rows]

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

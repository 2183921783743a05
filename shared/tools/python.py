"""`run_python`: the agent runs a short Python script in the WebAssembly sandbox (docs/sandbox.md).

Off unless the workspace's config turns it on (`sandbox.enabled`), and subject to tools_allow /
tools_deny like every tool. The script, its inputs, its output and what it used come back in the
result, which the turn records in the audit like any tool result; the output is untrusted (it may
repeat memory text that a person wrote), so the turn passes it to the model fenced.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shared.deadline import check, current, cut
from shared.errors import Forbidden, SandboxError
from shared.models import SandboxConfig, SandboxRun, SandboxUsage, WorkspaceConfig, new_workspace
from shared.ports import CodeExecutor
from shared.tools.core import Tool, ToolContext, tool

MAX_SCRIPT_CHARS = 20_000
MAX_INPUTS_CHARS = 200_000


class RunPythonArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    script: str = Field(
        min_length=1,
        max_length=MAX_SCRIPT_CHARS,
        description="Python 3.12 source. print() what you want back. `import sigil` reads memory: "
        "sigil.facts(after=None, limit=500) pages through the facts you may recall (dicts with id, "
        "subject, predicate, object, category, created_at); sigil.search(query, k=10) finds messages "
        "and facts. Only pure-computation modules import (json, math, statistics, collections, "
        "itertools, datetime, re, ...); there is no file system, network or environment.",
    )
    inputs: dict[str, str] = Field(
        default_factory=dict, description="Named texts the script reads as the read-only mapping `inputs`."
    )


def sandbox_config(ctx: ToolContext) -> SandboxConfig:
    workspace = ctx.backend.workspaces.get(ctx.workspace_id) or new_workspace(ctx.workspace_id)
    return workspace.sandbox


@cache
def default_executor() -> CodeExecutor:
    """One executor per process; the Wasmtime adapter is imported only when a workspace uses it."""
    from shared.sandbox.wasm import WasmExecutor

    return WasmExecutor()


def python_tools(executor: CodeExecutor | None = None) -> tuple[Tool[Any], ...]:
    @tool(name="run_python", untrusted_output=True)
    def run_python(args: RunPythonArgs, ctx: ToolContext) -> str:
        """Run a short Python script in a sandbox and get what it prints: for counting, grouping
        and computing over many memories at once (sigil.facts, sigil.search) or over given texts.
        Limited in instructions, memory, time and output; no files, network or environment."""
        limits = sandbox_config(ctx)
        if not limits.enabled:
            raise Forbidden(
                "run_python is not enabled in this workspace (its config's sandbox.enabled). "
                "Answer without it, or tell the user it is off here.",
                code="permission_denied",
            )
        if sum(len(k) + len(v) for k, v in args.inputs.items()) > MAX_INPUTS_CHARS:
            raise SandboxError(f"the inputs exceed {MAX_INPUTS_CHARS:,} characters", limit="inputs")
        from shared.memory.people import people_of

        # Inside the turn's deadline, like every outbound call: the script's wall time is cut to it.
        at = current()
        check(at)
        wall = cut(limits.wall_s, at)
        if wall is not None and wall < limits.wall_s:
            limits = limits.model_copy(update={"wall_s": wall})
        from shared.memory.search import MemorySearch
        from shared.sandbox.host import HostModule

        backend = ctx.backend
        host = HostModule(
            ctx,
            limits,
            MemorySearch(
                backend.index, backend.memory, backend.embedder, people=people_of(backend.identities)
            ),
        )
        try:
            run = (executor or default_executor()).run(
                args.script, inputs=args.inputs, limits=limits, host=host
            )
        except SandboxError as exc:
            # What it used goes to the model and the audit with the reason it was stopped.
            ctx.sandbox_usage.append(_usage(exc.used, stopped=exc.limit))
            raise SandboxError(
                f"{exc.message} (used: {json.dumps(exc.used)})", limit=exc.limit, used=exc.used
            ) from None
        ctx.sandbox_usage.append(
            SandboxUsage(
                fuel=run.fuel_used,
                memory_bytes=run.memory_bytes,
                wall_s=run.wall_s,
                output_bytes=len(run.stdout.encode()) + len(run.stderr.encode()),
                host_calls=len(run.host_calls),
                prewarmed=run.prewarmed,
            )
        )
        return render_run(run)

    def warm(ctx: ToolContext, workspace: WorkspaceConfig) -> None:
        # Before each model call of a turn in a workspace that enables the sandbox: an instance
        # starts CPython on its own thread (~0.6 s) while the model thinks, so a call costs ~1 ms.
        if workspace.sandbox.enabled:
            (executor or default_executor()).prewarm()

    return (replace(run_python, warm=warm),)


def _usage(used: dict[str, int | float], *, stopped: str) -> SandboxUsage:
    return SandboxUsage(
        fuel=int(used.get("fuel", 0)),
        memory_bytes=int(used.get("memory_bytes", 0)),
        wall_s=float(used.get("wall_s", 0.0)),
        output_bytes=int(used.get("output_bytes", 0)),
        host_calls=int(used.get("host_calls", 0)),
        stopped=stopped,
    )


def render_run(run: SandboxRun) -> str:
    usage = {
        "fuel": run.fuel_used,
        "memory_bytes": run.memory_bytes,
        "wall_s": run.wall_s,
        "prewarmed": run.prewarmed,
        "host_calls": run.host_calls,
    }
    lines = [f"run_python: {json.dumps(usage, default=str)}", "", "stdout:", run.stdout.rstrip()]
    if run.stderr.strip():
        lines += ["", "stderr:", run.stderr.rstrip()]
    return "\n".join(lines)


PYTHON_TOOLS = python_tools()

"""`run_python`: the agent runs a short Python script in the WebAssembly sandbox (docs/sandbox.md);
`run_skill_script`: one of a skill's Python scripts, in the same sandbox (docs/skills.md).

Both are off unless the workspace's config turns the sandbox on (`sandbox.enabled`), and subject
to tools_allow / tools_deny like every tool; a skill's script also needs the skill to be one the
workspace has and allows (WorkspaceConfig.skills), and to be Python: nothing runs a skill's other
scripts, and nothing runs any skill file on the host. The script, its inputs, its output and
what it used come back in the result, which the turn records in the audit like any tool result;
the output is untrusted (it may repeat memory text that a person wrote), so the turn passes it to
the model fenced.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import cache
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from shared.deadline import check, current, cut
from shared.errors import BadRequest, Forbidden, NotFound, SandboxError
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


class RunSkillScriptArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=64, description="The skill's name, as your list of skills gives it.")
    script: str = Field(
        max_length=200, description="The script's path in the skill, one level into scripts/: 'scripts/x.py'."
    )
    args: list[Annotated[str, Field(max_length=1000)]] = Field(
        default_factory=list, max_length=50, description="Its command-line arguments (sys.argv[1:])."
    )
    stdin: str = Field(
        default="", max_length=MAX_INPUTS_CHARS, description="Text the script reads from standard input."
    )


def sandbox_config(ctx: ToolContext) -> SandboxConfig:
    workspace = ctx.backend.workspaces.get(ctx.workspace_id) or new_workspace(ctx.workspace_id)
    return workspace.sandbox


@cache
def default_executor() -> CodeExecutor:
    """One executor per process; the Wasmtime adapter is imported only when a workspace uses it."""
    from shared.sandbox.wasm import WasmExecutor

    return WasmExecutor()


def _run_sandboxed(
    ctx: ToolContext,
    executor: CodeExecutor | None,
    tool_name: str,
    script: str,
    inputs: Mapping[str, str],
    *,
    argv: Sequence[str] = (),
    stdin: str = "",
) -> SandboxRun:
    """One sandbox run for a tool: refused unless the workspace enables the sandbox, inside the
    turn's deadline, with the `sigil` host module, what it used recorded for the audit
    (ctx.sandbox_usage) whether it ends or is stopped."""
    limits = sandbox_config(ctx)
    if not limits.enabled:
        raise Forbidden(
            f"{tool_name} is not enabled in this workspace (its config's sandbox.enabled). "
            "Answer without it, or tell the user it is off here.",
            code="permission_denied",
        )
    if sum(len(k) + len(v) for k, v in inputs.items()) + len(stdin) > MAX_INPUTS_CHARS:
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
        MemorySearch(backend.index, backend.memory, backend.embedder, people=people_of(backend.identities)),
    )
    try:
        run = (executor or default_executor()).run(
            script, inputs=inputs, limits=limits, host=host, argv=argv, stdin=stdin
        )
    except SandboxError as exc:
        # What it used goes to the model and the audit with the reason it was stopped.
        ctx.sandbox_usage.append(_usage(exc.used, stopped=exc.limit, tool=tool_name))
        raise SandboxError(
            f"{exc.message} (used: {json.dumps(exc.used)})", limit=exc.limit, used=exc.used
        ) from None
    ctx.sandbox_usage.append(
        SandboxUsage(
            tool=tool_name,
            fuel=run.fuel_used,
            memory_bytes=run.memory_bytes,
            wall_s=run.wall_s,
            output_bytes=len(run.stdout.encode()) + len(run.stderr.encode()),
            host_calls=len(run.host_calls),
            prewarmed=run.prewarmed,
        )
    )
    return run


def python_tools(executor: CodeExecutor | None = None) -> tuple[Tool[Any], ...]:
    @tool(name="run_python", untrusted_output=True)
    def run_python(args: RunPythonArgs, ctx: ToolContext) -> str:
        """Run a short Python script in a sandbox and get what it prints: for counting, grouping
        and computing over many memories at once (sigil.facts, sigil.search) or over given texts.
        Limited in instructions, memory, time and output; no files, network or environment."""
        run = _run_sandboxed(ctx, executor, "run_python", args.script, args.inputs)
        return render_run(run)

    @tool(name="run_skill_script", untrusted_output=True)
    def run_skill_script(args: RunSkillScriptArgs, ctx: ToolContext) -> str:
        """Run one of a skill's Python scripts (scripts/x.py) in the sandbox, with arguments and
        optional stdin text, and get what it prints. The skill's text files are its read-only
        `inputs` (by path); there are no files, network or environment. Only Python runs."""
        script, inputs, digest = skill_script(ctx, args.name, args.script)
        argv = [args.script, *args.args]
        run = _run_sandboxed(ctx, executor, "run_skill_script", script, inputs, argv=argv, stdin=args.stdin)
        origin = {"skill": args.name, "script": args.script, "sha256": digest, "args": args.args}
        return f"run_skill_script: {json.dumps(origin)}\n" + render_run(run)

    def warm(ctx: ToolContext, workspace: WorkspaceConfig) -> None:
        # Before each model call of a turn in a workspace that enables the sandbox: an instance
        # starts CPython on its own thread (~0.6 s) while the model thinks, so a call costs ~1 ms.
        # Either tool's hook warms the one instance the executor keeps.
        if workspace.sandbox.enabled:
            (executor or default_executor()).prewarm()

    return (replace(run_python, warm=warm), replace(run_skill_script, warm=warm))


def skill_script(ctx: ToolContext, name: str, path: str) -> tuple[str, dict[str, str], str]:
    """A skill's Python script, the skill's text files as the run's inputs (by path), and the
    script's SHA-256 (the audit says which version ran). Refused: a skill the workspace does not
    have or allow, a path outside scripts/, anything but a Python script, a binary file."""
    from shared.skills import LINK_FILE, SkillError, read_skill
    from shared.tools.skill import checked_path

    workspace = ctx.backend.workspaces.get(ctx.workspace_id) or new_workspace(ctx.workspace_id)
    if workspace.skills is not None and name not in workspace.skills:
        raise NotFound(f"no skill named {name!r} here; call skill() for the list")
    store = ctx.backend.skills
    try:
        read_skill(store, ctx.workspace_id, name)
    except SkillError:
        raise NotFound(f"no usable skill named {name!r} here; call skill() for the list") from None
    path = checked_path(path)
    if not path.startswith("scripts/"):
        raise BadRequest(f"{path!r}: only a skill's scripts/ run; load other files with skill(name, path)")
    if not path.endswith(".py"):
        raise BadRequest(
            f"{path!r} is not a Python script: only Python scripts run, and only inside the "
            "sandbox; Sigil never runs a skill's shell or other scripts. Read it with skill(name, path)."
        )
    data = store.read_file(ctx.workspace_id, name, path)
    if data is None:
        raise NotFound(f"skill {name!r} has no file {path!r}")
    script = _text(data)
    if script is None:
        raise BadRequest(f"{path!r} is not UTF-8 text")
    inputs: dict[str, str] = {}
    room = MAX_INPUTS_CHARS - len(script)
    for file in sorted(store.list_files(ctx.workspace_id, name)):
        text = None if file == LINK_FILE else _text(store.read_file(ctx.workspace_id, name, file) or b"")
        if text is None or len(file) + len(text) > room:
            continue  # binaries, and what would overflow the inputs, are left out of the mount
        inputs[file] = text
        room -= len(file) + len(text)
    return script, inputs, hashlib.sha256(data).hexdigest()


def _text(data: bytes) -> str | None:
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _usage(used: dict[str, int | float], *, stopped: str, tool: str) -> SandboxUsage:
    return SandboxUsage(
        tool=tool,
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

"""The tools a turn offers, and the one place a tool call is executed (spec 000, spec 002).

Every registered tool is offered to the model; what a workspace may run is checked here, when
the call arrives (spec 002: "all tools visible, enforcement at execution"). Whatever happens to
a call, the model gets a ToolResultMessage back and the turn goes on: an unknown tool, a denied
one, arguments that don't validate and a tool that raises all become error results whose content
is a small JSON object the model can read and act on:

    {"error": "permission_denied", "tool": "shell", "message": "..."}

This is the tool-result boundary of the error hierarchy: a SigilError raised by a tool passes
its code and message on (they are written to be shown); any other exception passes only its type.
The one exception that passes through is DeadlineExceeded: the turn's deadline ends the turn.
"""

from __future__ import annotations

import fnmatch
import logging
import time
import traceback
from collections.abc import Iterable, Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from shared.errors import DeadlineExceeded, SigilError
from shared.models import ToolCall, ToolResultMessage, WorkspaceConfig
from shared.providers.base import ToolSpec
from shared.tools.core import A, Tool, ToolContext

log = logging.getLogger("sigil.tools")

# What one result may add to the context and to the session item. The window (20 messages by
# default) lives in one DynamoDB item of at most 400 KB: twenty results at this bound take 160 KB.
# Bytes rather than characters because that limit is in bytes.
MAX_RESULT_BYTES = 8 * 1024
MAX_ERROR_DETAILS = 10  # validation messages passed back; the first few are enough to fix a call


class ToolError(BaseModel):
    """The content of an error result, as the model reads it."""

    model_config = ConfigDict(defer_build=True)  # built when first used, not at import

    error: str  # a stable code: unknown_tool, permission_denied, invalid_arguments, tool_failed, ...
    tool: str
    message: str
    details: list[str] | None = None


def tool_error(
    call: ToolCall, code: str, message: str, details: list[str] | None = None
) -> ToolResultMessage:
    """An error result in the one shape the model sees for every failure."""
    body = ToolError(error=code, tool=call.name, message=message, details=details)
    return ToolResultMessage(
        tool_call_id=call.id, name=call.name, content=body.model_dump_json(exclude_none=True), is_error=True
    )


def permitted(workspace: WorkspaceConfig, name: str) -> bool:
    """tools_deny wins over tools_allow; tools_allow None admits every tool. Entries are exact
    names or shell-style patterns ("memory_*")."""
    if any(fnmatch.fnmatchcase(name, p) for p in workspace.tools_deny):
        return False
    return workspace.tools_allow is None or any(fnmatch.fnmatchcase(name, p) for p in workspace.tools_allow)


def truncate(text: str, limit: int) -> str:
    """`text` if it fits in `limit` UTF-8 bytes, else its head and a note saying how much was cut."""
    data = text.encode()
    if len(data) <= limit:
        return text
    longest_note = f"\n[truncated: showing {len(data)} of {len(data)} bytes]"
    # Decoding with errors="ignore" drops a character cut in half at the end.
    head = data[: limit - len(longest_note.encode())].decode(errors="ignore")
    return f"{head}\n[truncated: showing {len(head.encode())} of {len(data)} bytes]"


class ToolRegistry:
    """Tools by name. Memory tools and skills add theirs with `register` or `extended`."""

    def __init__(self, tools: Iterable[Tool[Any]] = (), *, max_result_bytes: int = MAX_RESULT_BYTES) -> None:
        if max_result_bytes < 256:
            raise ValueError("max_result_bytes below 256 leaves no room for an error result")
        self.max_result_bytes = max_result_bytes
        self._tools: dict[str, Tool[Any]] = {}
        for t in tools:
            self.register(t)

    def register(self, t: Tool[A]) -> Tool[A]:
        """Add a tool (returned, so this works as a decorator over `@tool`). Names are unique."""
        if t.name in self._tools:
            raise ValueError(f"a tool named {t.name!r} is already registered")
        self._tools[t.name] = t
        return t

    def extended(self, *tools: Tool[Any]) -> ToolRegistry:
        """A new registry with these tools added; this one is left as it is."""
        return ToolRegistry([*self._tools.values(), *tools], max_result_bytes=self.max_result_bytes)

    def get(self, name: str) -> Tool[Any] | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool[Any]]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def specs(self) -> list[ToolSpec]:
        """Every tool, whatever the workspace allows: the model sees them all (spec 002)."""
        return [t.spec for t in self._tools.values()]

    def untrusted_output(self, name: str) -> bool:
        """Whether `name`'s results carry third-party text (Tool.untrusted_output), to be quoted
        as untrusted data always. An unknown tool's result is the registry's own error."""
        t = self._tools.get(name)
        return t is not None and t.untrusted_output

    def warm(self, ctx: ToolContext, workspace: WorkspaceConfig) -> None:
        """Let each permitted tool with a `warm` hook prepare, before a model call (docs/sandbox.md)."""
        for t in self._tools.values():
            if t.warm is not None and permitted(workspace, t.name):
                t.warm(ctx, workspace)

    def permits(self, name: str, workspace: WorkspaceConfig) -> bool:
        """Whether a call to `name` would run in `workspace`: the tool exists and is permitted."""
        return name in self._tools and permitted(workspace, name)

    def execute(self, call: ToolCall, ctx: ToolContext, workspace: WorkspaceConfig) -> ToolResultMessage:
        """Run one call; always a result, never an exception from the tool."""
        if ctx.workspace_id != workspace.id:
            # A wiring bug, not a model error: permissions would be checked for another workspace.
            raise ValueError(f"tool context for {ctx.workspace_id!r} with the config of {workspace.id!r}")
        started = time.monotonic()
        result = self._run(call, ctx, workspace)
        result = result.model_copy(update={"content": truncate(result.content, self.max_result_bytes)})
        # Never the arguments or the result: they carry the conversation, and logs outlive it.
        log.info(
            "tool call",
            extra={
                "tool": call.name,
                "turn_id": ctx.turn_id,
                "workspace_id": ctx.workspace_id,
                "is_error": result.is_error,
                "duration_ms": round((time.monotonic() - started) * 1000, 3),
            },
        )
        return result

    def _run(self, call: ToolCall, ctx: ToolContext, workspace: WorkspaceConfig) -> ToolResultMessage:
        t = self._tools.get(call.name)
        if t is None:
            names = ", ".join(sorted(self._tools)) or "none"
            return tool_error(call, "unknown_tool", f"There is no tool named {call.name!r}. Tools: {names}.")
        if not permitted(workspace, call.name):
            return tool_error(
                call,
                "permission_denied",
                f"This workspace does not allow the tool {call.name!r}. "
                "Answer without it, or tell the user it is not enabled here.",
            )
        try:
            args = t.args.model_validate_json(call.arguments or "{}")
        except ValidationError as exc:
            details = [
                f"{'.'.join(str(part) for part in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors(include_url=False, include_input=False)[:MAX_ERROR_DETAILS]
            ]
            message = "The arguments do not match the tool's schema; correct them and call again."
            return tool_error(call, "invalid_arguments", message, details)
        try:
            output = t.fn(args, ctx)
            content = output if isinstance(output, str) else output.model_dump_json()
        except DeadlineExceeded:
            # The turn's time is up (shared.deadline): the next model call could not
            # start either, so the turn ends here, its attempt failed and audited.
            raise
        except SigilError as exc:
            # Raised on purpose (BadRequest, NotFound, Forbidden, ...): the message is meant to be read.
            return tool_error(call, exc.code, exc.message)
        except Exception as exc:  # noqa: BLE001 -- the tool boundary: a broken tool must not end the turn
            # The exception's text may quote the arguments, so the log gets its type and where it
            # was raised, and the model gets its type.
            where = traceback.extract_tb(exc.__traceback__)[-1]
            log.warning(
                "tool failed",
                extra={
                    "tool": call.name,
                    "turn_id": ctx.turn_id,
                    "error_type": type(exc).__name__,
                    "at": f"{where.filename}:{where.lineno} in {where.name}",
                },
            )
            message = f"The tool failed with {type(exc).__name__}. Try other arguments or answer without it."
            return tool_error(call, "tool_failed", message)
        return ToolResultMessage(tool_call_id=call.id, name=call.name, content=content)

"""The `scratchpad_read` tool: a delegated task's full output, read a page at a time.

A task's result gives the conversation a bounded summary and leaves its full output in the
session's scratchpad (shared.models.tasks.TaskResult.scratchpad_keys); the agent reads it here
when it needs more than the summary, rather than having it pasted into its context. The session
is the turn's (ToolContext), never the model's: a turn reads only its own session's scratchpad.
Without a key the tool lists the entries' keys; with one it returns up to `limit` characters from
`offset`, and says where the next page starts. The text was written by a task agent from memory
and web pages, so the result is untrusted.
"""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from shared.errors import BadRequest, NotFound
from shared.models.tasks import SCRATCHPAD_KEY_PATTERN
from shared.tools.core import Tool, ToolContext, tool
from shared.tools.registry import MAX_RESULT_BYTES

# A page's text and its header stay under the registry's cut, so a page is never truncated there.
_PAGE_BYTES: Final = MAX_RESULT_BYTES - 512
MAX_PAGE_CHARS: Final = 6000
MAX_KEYS_LISTED: Final = 200


class ScratchpadReadArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str | None = Field(
        default=None,
        max_length=200,
        pattern=SCRATCHPAD_KEY_PATTERN,
        description="The entry to read (a task's result names its keys); omitted: list the keys.",
    )
    offset: int = Field(default=0, ge=0, description="The character to start at (for the next page).")
    limit: int = Field(
        default=MAX_PAGE_CHARS, ge=1, le=MAX_PAGE_CHARS, description="How many characters to return."
    )


@tool(untrusted_output=True)
def scratchpad_read(args: ScratchpadReadArgs, ctx: ToolContext) -> str:
    """Read this conversation's scratchpad, where delegated tasks leave their full output (their
    result's summary names the keys). Without a key: the keys. With a key: a page of the entry,
    and the offset of the next page when there is more."""
    pad = ctx.backend.scratchpad
    if pad is None:
        raise BadRequest("this gateway has no scratchpad (delegation is not available here)")
    if args.key is None:
        keys = pad.list_keys(ctx.workspace_id, ctx.session_id)
        if not keys:
            return "scratchpad: no entries in this conversation"
        shown = keys[:MAX_KEYS_LISTED]
        more = f"\n[{len(keys) - len(shown)} more keys not shown]" if len(keys) > len(shown) else ""
        return f"scratchpad: {len(keys)} entries\n" + "\n".join(f"- {k}" for k in shown) + more
    text = pad.get(ctx.workspace_id, ctx.session_id, args.key)
    if text is None:
        raise NotFound(
            f"there is no scratchpad entry {args.key!r} in this conversation; call scratchpad_read "
            "without a key to list them"
        )
    return _page(args.key, text, args.offset, args.limit)


def _page(key: str, text: str, offset: int, limit: int) -> str:
    total = len(text)
    if offset >= total and total:
        raise BadRequest(f"offset {offset} is past the end of {key!r} ({total} characters)")
    page = text[offset : offset + limit]
    # Characters are what the model pages by; bytes are what the registry cuts at.
    while len(page.encode()) > _PAGE_BYTES:
        page = page[: max(1, len(page) * _PAGE_BYTES // len(page.encode()) - 1)]
    end = offset + len(page)
    head = f"scratchpad {key}: characters {offset}-{end} of {total}"
    tail = f"\n[more: call again with offset={end}]" if end < total else "\n[end of entry]"
    return f"{head}\n{page}{tail}"


SCRATCHPAD_TOOLS: tuple[Tool[ScratchpadReadArgs], ...] = (scratchpad_read,)

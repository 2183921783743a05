"""The `skill` tool: progressive disclosure of a workspace's skills (docs/skills.md).

The system prompt lists each available skill by name and description (shared.agent.context's
catalogue). When a task matches one, the model calls

    skill(name)                      the skill's instructions (the SKILL.md body)
    skill(name, "references/x.md")   one file the instructions refer to
    skill()                          the whole list, if the prompt's was cut to its budget

A file is read one level into the format's folders (`references/`, `assets/`, `scripts/`), as
UTF-8 text; anything else is refused: `..`, absolute paths, deeper paths, binary files. A script
is shown as text (the model may quote it to the user) and never executed by this tool: nothing in
Sigil runs skill code on the host, and a skill's Python script runs only inside the WebAssembly
sandbox, through run_skill_script (shared.tools.python). The workspace comes from the ToolContext,
never from the model, and only the skills the workspace's config allows (WorkspaceConfig.skills)
are reachable. Skill text is written by whoever published the skill, so results are quoted as
untrusted data (Tool.untrusted_output).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shared.errors import BadRequest, NotFound
from shared.models import new_workspace
from shared.skills import FOLDERS, SKILL_FILE, SkillError, available_skills, catalogue, read_skill
from shared.tools.core import Tool, ToolContext, tool


class SkillArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(
        default=None,
        max_length=64,
        description="The skill's name, as your list of skills gives it; omitted: the full list.",
    )
    path: str | None = Field(
        default=None,
        max_length=200,
        description="A file the skill's instructions refer to, one level into references/, assets/ "
        "or scripts/ (e.g. 'references/api.md'); omitted: the skill's instructions.",
    )


@tool(untrusted_output=True)
def skill(args: SkillArgs, ctx: ToolContext) -> str:
    """Load a skill from your list of skills: its instructions, or one file they refer to. Call it
    when the task matches a skill's description, before answering. Scripts are shown, not run here
    (run_skill_script runs a Python one in the sandbox)."""
    workspace = ctx.backend.workspaces.get(ctx.workspace_id) or new_workspace(ctx.workspace_id)
    if args.name is None:
        listed = catalogue(available_skills(ctx.backend, workspace))
        lines = [f"- {s.name}: {s.description}" for s in listed]
        return "Skills:\n" + "\n".join(lines) if lines else "This workspace has no skills."
    if workspace.skills is not None and args.name not in workspace.skills:
        raise NotFound(f"no skill named {args.name!r} here; call skill() for the list")
    store = ctx.backend.skills
    if args.path is None or args.path == SKILL_FILE:
        try:
            found = read_skill(store, ctx.workspace_id, args.name)
        except SkillError:
            raise NotFound(f"no usable skill named {args.name!r} here; call skill() for the list") from None
        files = [p for p in store.list_files(ctx.workspace_id, args.name) if _readable_path(p)]
        more = f"\n\n(Files you can load with skill(name, path): {', '.join(files)})" if files else ""
        return f"# Skill: {found.name}\n\n{found.body}{more}"
    path = checked_path(args.path)
    data = store.read_file(ctx.workspace_id, args.name, path)
    if data is None:
        raise NotFound(f"skill {args.name!r} has no file {path!r}")
    if b"\x00" in data:
        raise BadRequest(f"{path!r} is a binary file; only text files can be loaded")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(f"{path!r} is a binary file; only text files can be loaded") from None
    return f"# {args.name}/{path}\n\n{text}"


def _readable_path(path: str) -> bool:
    parts = path.split("/")
    return len(parts) == 2 and parts[0] in FOLDERS


def checked_path(path: str) -> str:
    """`path` when it names a file one level into the format's folders, else BadRequest."""
    if path.startswith("/") or "\\" in path or ".." in path.split("/") or path.startswith("~"):
        raise BadRequest(f"{path!r}: give a path inside the skill, such as 'references/x.md'")
    if not _readable_path(path) or path.split("/")[1] in ("", "."):
        raise BadRequest(
            f"{path!r}: only files one level into {', '.join(f + '/' for f in FOLDERS)} can be loaded"
        )
    return path


SKILL_TOOLS: tuple[Tool[Any], ...] = (skill,)

"""The `skill_draft` tool of the Skill Composer role (docs/delegation.md#the-skill-composer).

The composer writes a skill with the user (agentskills.io: a SKILL.md with its front matter, and
files under references/, scripts/, assets/) and calls `skill_draft` with it. The skill is
checked exactly as `sigil skill validate` checks a folder (shared.skills.drafts.validate); a
broken one is an error result naming every rule it breaks, file and line, for the composer to
fix. A valid one is saved as a draft in the session's scratchpad for an operator to install
(`sigil skill install-draft NAME --session SID`), or installed at once when the workspace's
config says so (delegation.skill_composer_installs), never over an installed skill of the same
name (that one is saved as a draft, for an operator to decide).

Only a role that lists it among its tools is offered it (the built-in skill_composer does); the
ordinary turn's registry does not hold it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.errors import BadRequest
from shared.models import new_workspace
from shared.skills import SKILL_FILE, drafts
from shared.tools.core import Tool, ToolContext, tool


class SkillDraftArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    skill_md: str = Field(
        min_length=1,
        max_length=100_000,
        description="The whole SKILL.md: '---' front matter (name, description, optional metadata) '---', "
        "then the instructions in Markdown.",
    )
    files: dict[str, str] = Field(
        default_factory=dict,
        max_length=50,
        description="Other files of the skill as text, by relative path "
        "(e.g. 'references/checklist.md', 'scripts/convert.py').",
    )


class SkillDrafted(BaseModel):
    name: str
    status: Literal["draft", "installed"]
    files: list[str]
    note: str


@tool
def skill_draft(args: SkillDraftArgs, ctx: ToolContext) -> SkillDrafted:
    """Check a skill you wrote with the user against the agentskills.io rules and save it: as a
    draft an operator installs, or installed when this workspace allows it. An error lists every
    rule it breaks (file and line): fix them and call again."""
    if SKILL_FILE in args.files:
        raise BadRequest(f"give the {SKILL_FILE} as skill_md, not among files")
    files = {SKILL_FILE: args.skill_md, **args.files}
    skill = drafts.validate(files)
    workspace = ctx.backend.workspaces.get(ctx.workspace_id) or new_workspace(ctx.workspace_id)
    installed = skill.name in ctx.backend.skills.list_skills(ctx.workspace_id)
    if workspace.delegation.skill_composer_installs and not installed:
        ctx.backend.skills.put_skill(ctx.workspace_id, skill.name, {p: t.encode() for p, t in files.items()})
        return SkillDrafted(
            name=skill.name,
            status="installed",
            files=sorted(files),
            note=f"Installed {skill.name}: the workspace's turns can use it now.",
        )
    if ctx.backend.scratchpad is None:
        raise BadRequest("this gateway has no scratchpad to keep a skill draft in")
    drafts.save(ctx.backend.scratchpad, ctx.workspace_id, ctx.session_id, files, turn_id=ctx.turn_id)
    why = (
        f"a skill named {skill.name} is installed already, so this version is a draft"
        if installed
        else "this workspace's operator installs skills"
    )
    return SkillDrafted(
        name=skill.name,
        status="draft",
        files=sorted(files),
        note=(
            f"Saved {skill.name} as a draft ({why}): tell the user an operator installs it with "
            f"`sigil skill install-draft {skill.name} --session {ctx.session_id} -w {ctx.workspace_id}`."
        ),
    )


SKILL_DRAFT_TOOLS: tuple[Tool[SkillDraftArgs],] = (skill_draft,)

"""Task agents' roles: the three built-in ones of spec 001 and a workspace's own (sigil.yaml
`delegation.roles`), and the model each runs on.

Spec 001's process model gives each role a model class (frontier, fast, cheap), a tool filter
and a spawn permission; here:

- researcher: read-only investigation (memory and web reads, skills, the scratchpad), reporting
  structured findings; frontier ("analysis quality drives research value");
- worker: task execution with scoped writes (memory_store, run_python, schedules), fire and forget
  or interactive; fast ("throughput over polish");
- skill_composer: writes a skill with the user, interactively; frontier ("creative skill authoring
  requires top-tier reasoning").

None may delegate (depth 1: only the agent the user talks to spawns). A workspace's role of the
same name is merged over the built-in one field by field (what it sets wins, the rest is the
built-in's; in `limits`, limit by limit), and a new name adds a role. A model class resolves
through `delegation.models`, else the workspace's model, else the gateway's default.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

from shared.errors import BadRequest, ModelNotConfigured
from shared.models import DelegationConfig, ModelClass, RoleConfig, RoleLimits, WorkspaceConfig

ROLE_NAME_PATTERN: Final = r"^[a-z][a-z0-9_]{0,31}$"
# The tool that spawns a task: a task's own tools never include it (depth 1).
DELEGATE_TOOL: Final = "delegate"

_READ_TOOLS: Final = (
    "current_time",
    "session_info",
    "memory_search",
    "memory_summary",
    "memory_recall",
    "memory_semantic",
    "web_search",
    "web_fetch",
    "skill",
    "scratchpad_read",
)

BUILTIN_ROLES: Final[Mapping[str, RoleConfig]] = {
    "researcher": RoleConfig(
        description="Read-only investigation: searches memory and the web, reports structured findings.",
        instructions=(
            "You are a researcher working for the assistant, not talking to the user. Investigate the "
            "brief with your read-only tools, and report findings, each with the ids of the memories, "
            "messages or pages it rests on, and how confident you are. Put long material in your "
            "result's full output, not in the summary."
        ),
        model_class="frontier",
        tools=list(_READ_TOOLS),
        interactive=False,
    ),
    "worker": RoleConfig(
        description="Carries out a task with scoped writes: memory, run_python, schedules.",
        instructions=(
            "You are a worker carrying out a task for the assistant. Do what the brief asks with your "
            "tools, no more; when something is ambiguous and you may ask, ask one clear question. "
            "Report what you did and what changed."
        ),
        model_class="fast",
        tools=[*_READ_TOOLS, "memory_store", "run_python", "schedule", "schedules", "schedule_cancel"],
        interactive=True,
    ),
    "skill_composer": RoleConfig(
        description="Writes a skill (agentskills.io format) with the user, saved as a draft.",
        instructions=(
            "You compose a skill with the user, in the agentskills.io format: a SKILL.md with its "
            "name, description and instructions, and any scripts or references it needs. Ask the "
            "user what the skill must do, draft it, refine it with their answers, and save the draft "
            "with skill_draft, which checks it as `sigil skill validate` does: fix what it reports."
        ),
        model_class="frontier",
        # skill_draft (shared.tools.skill_draft): saves the draft, or installs it where allowed.
        tools=[
            "current_time",
            "skill",
            "memory_search",
            "web_fetch",
            "run_python",
            "scratchpad_read",
            "skill_draft",
        ],
        interactive=True,
    ),
}


def merge_role(base: RoleConfig, over: RoleConfig) -> RoleConfig:
    """`over` on `base`: the fields `over` sets (and, in its limits, the limits it sets)."""
    update: dict[str, object] = {name: getattr(over, name) for name in over.model_fields_set}
    if "limits" in over.model_fields_set:
        limits: RoleLimits = over.limits
        update["limits"] = base.limits.model_copy(
            update={name: getattr(limits, name) for name in limits.model_fields_set}
        )
    return base.model_copy(update=update, deep=True)


def check_delegation(delegation: DelegationConfig) -> None:
    """Refuse a delegation section no task could run under: BadRequest, naming the role and why."""
    for name, role in delegation.roles.items():
        if not re.match(ROLE_NAME_PATTERN, name):
            raise BadRequest(
                f"delegation.roles: {name!r} is not a role name (lowercase letters, digits and _, "
                "starting with a letter, at most 32)"
            )
        if DELEGATE_TOOL in role.tools:
            raise BadRequest(
                f"delegation.roles.{name}.tools: a task cannot delegate (only the agent the user talks "
                f"to can); remove {DELEGATE_TOOL!r}"
            )
    for model_class, ref in delegation.models.items():
        if not re.match(r"^[a-z0-9-]+/\S+$", ref):
            raise BadRequest(
                f"delegation.models.{model_class}: {ref!r} is not provider/model (e.g. openai/gpt-4.1-mini)"
            )


def expand_roles(delegation: DelegationConfig) -> DelegationConfig:
    """The section with each of its roles spelled out whole (one named like a built-in merged over
    it): what is stored, so a role reads back the same whatever of it the file set. The built-in
    roles it does not name are left out, so they stay the code's own as it improves."""
    check_delegation(delegation)
    roles = {
        name: merge_role(BUILTIN_ROLES[name], role) if name in BUILTIN_ROLES else role
        for name, role in delegation.roles.items()
    }
    return delegation.model_copy(update={"roles": roles}, deep=True)


def _merged(roles: Mapping[str, RoleConfig]) -> dict[str, RoleConfig]:
    merged = {name: role.model_copy(deep=True) for name, role in BUILTIN_ROLES.items()}
    for name, role in roles.items():
        merged[name] = merge_role(merged[name], role) if name in merged else role.model_copy(deep=True)
    return merged


def roles_for(workspace: WorkspaceConfig) -> dict[str, RoleConfig]:
    """The workspace's roles by name: the built-in ones with its own merged over them."""
    check_delegation(workspace.delegation)
    return _merged(workspace.delegation.roles)


def role_for(workspace: WorkspaceConfig, role: str) -> RoleConfig:
    roles = roles_for(workspace)
    found = roles.get(role)
    if found is None:
        raise BadRequest(
            f"there is no role {role!r} in this workspace; the roles are: {', '.join(sorted(roles))}"
        )
    return found


def model_for_class(
    workspace: WorkspaceConfig, model_class: ModelClass, default_model: str | None = None
) -> str:
    model = workspace.delegation.models.get(model_class) or workspace.model or default_model
    if model is None:
        raise ModelNotConfigured(
            f"no model for the {model_class} class: set delegation.models.{model_class}, the workspace's "
            "model or the gateway's SIGIL_MODEL"
        )
    return model


def model_for(workspace: WorkspaceConfig, role: str, default_model: str | None = None) -> str:
    """The model a task of `role` runs on: its class through delegation.models, else the
    workspace's model, else `default_model` (the gateway's, Settings.resolved_model())."""
    return model_for_class(workspace, role_for(workspace, role).model_class, default_model)


def role_warnings(workspace: WorkspaceConfig, known_tools: Iterable[str]) -> list[str]:
    """What is allowed but likely a mistake: a role's tool no registry offers. Not an error: a
    tool may come with a later version or a skill; an MCP server's tools (`mcp__<server>__<tool>`,
    known once it connects) and patterns are not checked."""
    known = set(known_tools)
    warnings: list[str] = []
    for name, role in sorted(workspace.delegation.roles.items()):
        unknown = [
            t
            for t in role.tools
            if t not in known and not t.startswith("mcp__") and not any(c in t for c in "*?[")
        ]
        if unknown:
            warnings.append(
                f"workspace {workspace.id}: delegation.roles.{name}.tools names no known tool: "
                f"{', '.join(unknown)} (MCP tools are named mcp__<server>__<tool>)"
            )
    return warnings

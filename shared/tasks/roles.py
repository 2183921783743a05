"""Provisional stand-in for h-taskstore's shared/tasks/roles.py (replaced by theirs at merge):
the built-in roles and the model a role's class maps to."""

from __future__ import annotations

from shared.models import RoleConfig, WorkspaceConfig

BUILTIN_ROLES: dict[str, RoleConfig] = {
    "researcher": RoleConfig(
        description="Read-only investigation with structured findings.",
        instructions="You are a Researcher: investigate with your read-only tools and report findings.",
        model_class="frontier",
        tools=["memory_search", "web_search", "fetch_page", "current_time", "scratchpad_read"],
    ),
    "worker": RoleConfig(
        description="Task execution with scoped writes.",
        instructions="You are a Worker: carry out the task with your tools.",
        model_class="fast",
        tools=["memory_search", "memory_store", "current_time"],
        interactive=True,
    ),
}


def roles_for(workspace: WorkspaceConfig) -> dict[str, RoleConfig]:
    return {**BUILTIN_ROLES, **workspace.delegation.roles}


def model_for(workspace: WorkspaceConfig, role: RoleConfig) -> str | None:
    return workspace.delegation.models.get(role.model_class) or workspace.model

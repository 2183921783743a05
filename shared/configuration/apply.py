"""The file's effective configuration, and how it differs from (`plan`) and is written to
(`apply`) a backend's WorkspaceStore and RouteStore.

`apply` writes every workspace of the file and the file's whole route set: a route the store has
and the file has not is deleted (routes are the deployment's, all of them in the file), while a
workspace the file does not name is left alone (it may hold conversations; the file need not
list every workspace Sigil ever created). Writing what is already stored changes nothing, so
`apply` is idempotent and `plan` after it is empty.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from shared.budgets import describe_limits
from shared.configuration.model import Defaults, SigilFile, _WorkspaceSpecBase
from shared.models import DEFAULT_BUDGET, ChannelRoute, WorkspaceConfig
from shared.ports import RouteStore, SkillStore, WorkspaceStore
from shared.tasks.roles import expand_roles


def effective(workspace_id: str, spec: _WorkspaceSpecBase, defaults: Defaults) -> WorkspaceConfig:
    """The WorkspaceConfig a workspace section stands for: what it sets, its defaults for the rest.

    The model: its own, else `defaults.model` (else None: the gateway's SIGIL_MODEL at turn time).
    The budget: DEFAULT_BUDGET, as for a workspace Sigil creates itself (shared.models.new_workspace),
    with each limit the section gives in its place (`BudgetLimits.over`: a limit given as null is
    off); `budget: null` turns budgets off. Delegation roles: the built-in ones with the section's
    merged over them by name, field by field (shared.tasks.roles.expand_roles).
    """
    values: dict[str, Any] = {name: getattr(spec, name) for name in spec.model_fields_set}
    personality = values.pop("personality", None)
    if personality is not None:
        values["system_prompt"] = personality
    if values.get("model") is None:
        values["model"] = defaults.model
    if "budget" not in values:
        values["budget"] = DEFAULT_BUDGET.model_copy(deep=True)
    elif values["budget"] is not None:
        values["budget"] = values["budget"].over(DEFAULT_BUDGET)
    if "delegation" in values:
        # Each role whole, the built-in ones with what the file sets merged over them: stored that
        # way, a role reads back the same wherever it is read (shared.tasks.roles).
        values["delegation"] = expand_roles(values["delegation"])
    return WorkspaceConfig.model_validate({"id": workspace_id, **{k: _plain(v) for k, v in values.items()}})


def _plain(value: Any) -> Any:
    # Nested models of the spec are WorkspaceConfig's own types; a dump keeps validation simple.
    if hasattr(value, "model_dump"):
        return value.model_dump()
    return value


def effective_configs(file: SigilFile) -> dict[str, WorkspaceConfig]:
    return {ws: effective(ws, spec, file.defaults) for ws, spec in sorted(file.workspaces.items())}


Action = Literal["create", "update", "delete", "left alone"]


@dataclass(frozen=True)
class Change:
    kind: Literal["workspace", "route"]
    key: str
    action: Action
    # For an update: each changed field with its stored and its new value (JSON text; the
    # budget in words, its effective limits: describe_limits).
    fields: tuple[tuple[str, str, str], ...] = ()
    # For a created workspace: what it gets that the file may not spell out (its budget).
    notes: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        sign = {"create": "+", "update": "~", "delete": "-", "left alone": "="}[self.action]
        if self.action == "left alone":
            return [f"{sign} {self.kind} {self.key}: not in the file, left alone"]
        head = f"{sign} {self.kind} {self.key}" + (f" ({self.action})" if self.action != "update" else "")
        changed = [f"    {name}: {old} -> {new}" for name, old, new in self.fields]
        return [head] + changed + [f"    {note}" for note in self.notes]


@dataclass
class Plan:
    changes: list[Change] = field(default_factory=list)

    @property
    def writes(self) -> list[Change]:
        return [c for c in self.changes if c.action != "left alone"]

    @property
    def empty(self) -> bool:
        return not self.writes

    def lines(self) -> list[str]:
        out = [line for change in self.changes for line in change.lines()]
        if self.empty:
            out.append("no changes")
        return out


def plan(file: SigilFile, workspaces: WorkspaceStore, routes: RouteStore) -> Plan:
    """What `apply` would write: workspaces created or updated, routes created, updated or
    deleted, and the stored workspaces the file leaves alone."""
    changes: list[Change] = []
    wanted = effective_configs(file)
    for ws, config in wanted.items():
        stored = workspaces.get(ws)
        if stored is None:
            # The effective budget, defaults merged in: the file may give part of it, or none.
            budget = f"budget: {describe_limits(config.budget)}"
            changes.append(Change("workspace", ws, "create", notes=(budget,)))
        elif stored != config:
            changes.append(Change("workspace", ws, "update", _changed(stored, config)))
    for stored in workspaces.list_workspaces():
        if stored.id not in wanted:
            changes.append(Change("workspace", stored.id, "left alone"))
    stored_routes = {r.key: r for r in routes.list_routes()}
    wanted_routes = {r.key: r for r in file.channels}
    for key, route in sorted(wanted_routes.items()):
        old = stored_routes.get(key)
        if old is None:
            changes.append(Change("route", key, "create"))
        elif old != route:
            changes.append(Change("route", key, "update", _changed(old, route)))
    for key in sorted(stored_routes.keys() - wanted_routes.keys()):
        changes.append(Change("route", key, "delete"))
    return Plan(changes)


def apply(
    file: SigilFile,
    workspaces: WorkspaceStore,
    routes: RouteStore,
    *,
    on_change: Callable[[Change], None] | None = None,
) -> Plan:
    """Write the file to the stores; the plan it carried out (empty when nothing differed).
    `on_change` hears of each change once it is written (the CLI's progress)."""
    todo = plan(file, workspaces, routes)
    wanted = effective_configs(file)
    by_key = {r.key: r for r in file.channels}
    for change in todo.writes:
        if change.kind == "workspace":
            workspaces.put(wanted[change.key])
        elif change.action == "delete":
            platform, _, name = change.key.partition("/")
            routes.delete(platform, name)
        else:
            routes.put(by_key[change.key])
        if on_change is not None:
            on_change(change)
    return todo


def _changed(
    old: WorkspaceConfig | ChannelRoute, new: WorkspaceConfig | ChannelRoute
) -> tuple[tuple[str, str, str], ...]:
    before, after = old.model_dump(mode="json"), new.model_dump(mode="json")
    found = []
    for name in after:
        if before.get(name) == after.get(name):
            continue
        if isinstance(old, WorkspaceConfig) and isinstance(new, WorkspaceConfig) and name == "budget":
            # In words and whole: its JSON, every limit and its nulls, is cut at 100 characters.
            found.append((name, describe_limits(old.budget), describe_limits(new.budget)))
        else:
            found.append((name, _short(before.get(name)), _short(after.get(name))))
    return tuple(found)


def _short(value: Any, limit: int = 100) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def skills_not_installed(file: SigilFile, skills: SkillStore) -> list[str]:
    """One line per skill a workspace of the file names in `skills:` that the target does not
    hold. Not an error (it may be installed after the apply), but until it is the workspace's
    turns get no such skill, and a misspelt name would otherwise go unnoticed."""
    lines = []
    for ws, config in effective_configs(file).items():
        if not config.skills:
            continue
        installed = skills.list_skills(ws)
        for name in config.skills:
            if name not in installed:
                lines.append(
                    f"! workspace {ws}: skill {name!r} is not installed there "
                    f"(installed: {', '.join(installed) or 'none'}; `sigil skill install ... -w {ws}`)"
                )
    return lines


def stdio_servers(file: SigilFile) -> list[str]:
    """One line per MCP server of the file that is a local program (stdio): `sigil dev` runs
    those, a deployed stack cannot (docs/mcp.md), so applying them there is refused."""
    return [
        f"workspace {ws}: MCP server {server.name!r} is a local program (command); only `sigil dev` "
        "runs those: give it a `url` to use it in the cloud"
        for ws, config in effective_configs(file).items()
        for server in config.mcp.servers
        if server.command is not None
    ]

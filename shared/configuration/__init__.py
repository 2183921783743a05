"""Workspaces, channel routes and gateway defaults as code: one `sigil.yaml` (docs/configuration.md).

`load_file` reads and validates it (errors name the file, line and field); `effective` gives a
workspace's WorkspaceConfig with the defaults filled in; `plan` and `apply` compare it with, and
write it to, a backend's WorkspaceStore and RouteStore; `file_settings` fills the Settings the
environment leaves unset from its `defaults`.
"""

from shared.configuration.apply import (
    Change,
    Plan,
    apply,
    effective,
    effective_configs,
    plan,
    skills_not_installed,
)
from shared.configuration.loader import ConfigFileError, Problem, load_file, load_text
from shared.configuration.model import DEFAULT_WORKSPACE, Defaults, SigilFile, WorkspaceSpec, problems
from shared.configuration.settings import file_settings, json_schema

__all__ = [
    "DEFAULT_WORKSPACE",
    "Change",
    "ConfigFileError",
    "Defaults",
    "Plan",
    "Problem",
    "SigilFile",
    "WorkspaceSpec",
    "apply",
    "effective",
    "effective_configs",
    "file_settings",
    "json_schema",
    "load_file",
    "load_text",
    "plan",
    "problems",
    "skills_not_installed",
]

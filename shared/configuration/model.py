"""The model of `sigil.yaml`: gateway defaults, workspaces and channel routes (docs/configuration.md).

A workspace's section takes the fields of `WorkspaceConfig` but its id (the map's key), derived
from that model so the two cannot drift apart; `personality` is another name for
`system_prompt`. Cross-field rules (every route's and chat override's workspace exists, a route's
(platform, name) and a platform's account appear once) are `problems()`: located, so the loader
can name the line of each, and run by the model's own validator too.
"""

from __future__ import annotations

import copy
import re
from typing import Annotated, Any, Final

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from shared.budgets import ModelPrice
from shared.errors import BadRequest
from shared.models import ChannelRoute, DelegationConfig, WorkspaceConfig, WorkspaceId
from shared.tasks.roles import check_delegation

# The workspace a file need not declare: Settings.default_workspace when the loader is not told.
DEFAULT_WORKSPACE: Final = "default"
# "provider/model": openai/gpt-4.1-mini, anthropic/claude-sonnet-4-5, bedrock/amazon.nova-lite-v1:0.
MODEL_REF_PATTERN: Final = r"^[a-z0-9-]+/\S+$"
ModelRef = Annotated[str, Field(pattern=MODEL_REF_PATTERN)]
EMBEDDING_PATTERN: Final = r"^(auto|none|local|[a-z0-9-]+/\S+)$"
# A key of defaults.model_prices: a model ref, or "*" (every model nobody priced).
PRICE_KEY_PATTERN: Final = r"^(\*|[a-z0-9-]+/\S+)$"

Loc = tuple[str | int, ...]


def _not_a_ref(ref: str) -> str:
    return f"{ref!r} is not provider/model (e.g. openai/gpt-4.1-mini)"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Defaults(_Strict):
    """The gateway's defaults: what a workspace with no `model` of its own uses, and the models of
    the work no workspace owns. The environment's SIGIL_* variables win over these."""

    model: ModelRef | None = Field(default=None, description="default model of every workspace (SIGIL_MODEL)")
    fallback_model: ModelRef | None = Field(
        default=None, description="tried when the model's provider keeps failing (SIGIL_FALLBACK_MODEL)"
    )
    consolidation_model: ModelRef | None = Field(
        default=None, description="summaries and fact extraction (SIGIL_CONSOLIDATION_MODEL)"
    )
    embedding_model: Annotated[str, Field(pattern=EMBEDDING_PATTERN)] | None = Field(
        default=None,
        description="auto, none, local, openai/<model> or bedrock/<model> (SIGIL_EMBEDDING_MODEL)",
    )
    model_prices: dict[Annotated[str, Field(pattern=PRICE_KEY_PATTERN)], ModelPrice] | None = Field(
        default=None,
        description="USD per 1M tokens by model ref, {input_per_mtok, output_per_mtok}, over the list "
        'prices; "*": every model nobody priced (SIGIL_MODEL_PRICES). docs/budgets.md#prices',
    )

    @field_validator("model", "fallback_model", "consolidation_model", mode="before")
    @classmethod
    def _model_ref(cls, value: object) -> object:
        # Before the pattern (kept for the schema's editors): the message a workspace's model gets.
        if isinstance(value, str) and not re.match(MODEL_REF_PATTERN, value):
            raise ValueError(_not_a_ref(value))
        return value


# What a field left out of a workspace's section means, where it is not WorkspaceConfig's default.
_FILE_NOTES: Final = {
    "model": "provider/model; left out: defaults.model (else the gateway's SIGIL_MODEL)",
    "budget": "per-day and per-month limits; left out: DEFAULT_BUDGET (docs/budgets.md); null: budgets off",
}


def _workspace_spec_fields() -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name, info in WorkspaceConfig.model_fields.items():
        if name == "id":
            continue
        # Every field optional in the file: what it leaves out is filled in by `effective()`,
        # which tells "not set" (model_fields_set) from an explicit null (budget: null = off).
        spec = copy.copy(info)
        if name in _FILE_NOTES:
            spec.description = _FILE_NOTES[name]
        fields[name] = (info.annotation, spec)
    fields["personality"] = (
        str | None,
        Field(default=None, description="another name for system_prompt (set one of the two)"),
    )
    return fields


class _WorkspaceSpecBase(_Strict):
    @field_validator("model", "model_choices", check_fields=False)
    @classmethod
    def _model_refs(cls, value: str | list[str] | None) -> str | list[str] | None:
        # "gpt-4.1" alone names no provider: said here, at its line, not at the first turn.
        for ref in [value] if isinstance(value, str) else value or []:
            if not re.match(MODEL_REF_PATTERN, ref):
                raise ValueError(_not_a_ref(ref))
        return value

    @field_validator("delegation", check_fields=False)
    @classmethod
    def _delegation(cls, value: DelegationConfig) -> DelegationConfig:
        # Said at the section's line: a role name no task can carry, a role that could delegate.
        try:
            check_delegation(value)
        except BadRequest as exc:
            raise ValueError(exc.message) from None
        return value

    @model_validator(mode="after")
    def _one_prompt(self) -> _WorkspaceSpecBase:
        if "personality" in self.model_fields_set and "system_prompt" in self.model_fields_set:
            raise ValueError("set system_prompt or personality, not both (they are the same field)")
        return self


# One workspace's section: WorkspaceConfig's fields (id aside) plus `personality`.
WorkspaceSpec: type[_WorkspaceSpecBase] = create_model(
    "WorkspaceSpec",
    __base__=_WorkspaceSpecBase,
    __doc__="One workspace: WorkspaceConfig's fields; a field left out takes its default "
    "(the model: defaults.model; the budget: DEFAULT_BUDGET).",
    **_workspace_spec_fields(),
)


class SigilFile(_Strict):
    """One `sigil.yaml`."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"$comment": "generated by `sigil config schema`; docs/configuration.md"},
    )

    defaults: Defaults = Field(default_factory=Defaults)
    workspaces: dict[WorkspaceId, WorkspaceSpec] = Field(default_factory=dict, description="by workspace id")
    channels: list[ChannelRoute] = Field(
        default_factory=list, description="which platform account (bot) feeds which workspace"
    )

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> SigilFile:
        context = info.context if isinstance(info.context, dict) else {}
        if context.get("cross_field") is False:
            return self
        found = problems(self, default_workspace=context.get("default_workspace", DEFAULT_WORKSPACE))
        if found:
            raise ValueError("; ".join(f"{dotted(loc)}: {message}" for loc, message in found))
        return self

    def workspace_ids(self) -> list[str]:
        return sorted(self.workspaces)


def problems(file: SigilFile, *, default_workspace: str = DEFAULT_WORKSPACE) -> list[tuple[Loc, str]]:
    """What is wrong across fields, each with the path of the value at fault."""
    return route_problems(set(file.workspaces), list(enumerate(file.channels)), default_workspace)


def route_problems(
    workspaces: set[str], routes: list[tuple[int, ChannelRoute]], default_workspace: str = DEFAULT_WORKSPACE
) -> list[tuple[Loc, str]]:
    """The cross-field rules over the file's workspace ids and its routes (each with its index
    in `channels`): also run on the valid part of a file with errors, so its routes' rules are
    reported with its other errors (loader.load_text)."""
    found: list[tuple[Loc, str]] = []
    known = workspaces | {default_workspace}

    def unknown(workspace: str) -> str:
        return f"unknown workspace {workspace!r}; the known ones are: {', '.join(sorted(known))}"

    seen_names: dict[tuple[str, str], int] = {}
    seen_accounts: dict[tuple[str, str], int] = {}
    for i, route in routes:
        if route.workspace not in known:
            found.append((("channels", i, "workspace"), unknown(route.workspace)))
        for chat, override in route.chats.items():
            if override.workspace is not None and override.workspace not in known:
                found.append((("channels", i, "chats", chat, "workspace"), unknown(override.workspace)))
        key = (route.platform, route.name)
        if key in seen_names:
            found.append(
                (
                    ("channels", i, "name"),
                    f"route {route.key} is already defined at channels[{seen_names[key]}]",
                )
            )
        else:
            seen_names[key] = i
        if route.account is not None:
            account = (route.platform, route.account)
            if account in seen_accounts:
                found.append(
                    (
                        ("channels", i, "account"),
                        f"{route.platform} account {route.account!r} is already routed by "
                        f"channels[{seen_accounts[account]}]",
                    )
                )
            else:
                seen_accounts[account] = i
    return found


def dotted(loc: Loc) -> str:
    """("channels", 2, "workspace") -> "channels[2].workspace"."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out

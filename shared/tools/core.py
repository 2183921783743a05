"""A tool: a typed function the model may call, and the context it runs in.

A tool takes one pydantic model of arguments, validated from the JSON the model wrote, and a
ToolContext that says whose turn it is. The model never names the workspace, the session, the
user or the reach of a memory read: the context does (its RecallScope is the turn's, built from
the workspace's memory policy), and an arguments model may not even declare those fields, so no
tool can be talked into reading another workspace's data or another person's memory.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar, overload

from pydantic import BaseModel

from shared.backend import Backend
from shared.clock import utcnow
from shared.models import InboundMessage, MemoryScope, RecallScope, SandboxUsage, WorkspaceConfig
from shared.providers.base import ToolSpec

A = TypeVar("A", bound=BaseModel)
ToolOutput = str | BaseModel

# OpenAI's rule for function names, the strictest of the providers'.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# Arguments the model must never supply: these come from the turn (ToolContext).
RESERVED_ARGUMENTS = frozenset({"workspace_id", "session_id", "user_id", "recall_scope"})


@dataclass(frozen=True, kw_only=True)  # by name only: a swapped id here would cross workspaces
class ToolContext:
    """Who and where a tool call runs for, taken from the turn, never from the model."""

    workspace_id: str
    session_id: str
    user_id: str
    turn_id: str
    backend: Backend
    # What the turn's memory reads may reach (shared.memory.scope.recall_scope under the
    # workspace's policy), and the scope its memory writes carry (a stored fact's owner).
    scope: RecallScope
    owner: MemoryScope
    now: Callable[[], datetime] = utcnow
    # Changes to the session a tool asks for (e.g. the active-task pin). A tool must not save the
    # session itself (the turn commits it, under optimistic concurrency): the turn applies these
    # in its commit.
    session_updates: dict[str, Any] = field(default_factory=dict)
    # The message the turn answers (its channel, conversation and sender): what a schedule made
    # in the turn fires as (shared.schedules). None outside a turn (a replay's sandbox, tests).
    inbound: InboundMessage | None = None
    # What a tool asks the turn's audit record to carry (run_python's resource use): the loop
    # hands it to the record (LoopResult.sandbox).
    sandbox_usage: list[SandboxUsage] = field(default_factory=list)
    # The call being run (the model's id for it, the same on every delivery of a turn or a task's
    # step: shared.agent.steps): with turn_id, the key of a tool's side effects.
    call_id: str | None = None


ToolFunction = Callable[[A, ToolContext], ToolOutput]


@dataclass(frozen=True)
class Tool(Generic[A]):
    """A tool as registered: its schema is derived from `args` once, when it is defined."""

    name: str
    description: str
    args: type[A]
    fn: ToolFunction[A]
    # Whether the result carries text a person or a web page wrote (memory, a fetched page, a
    # search): the turn then always passes it to the model quoted as untrusted data, not only
    # when the injection scan flags it (docs/safety.md). False: the gateway wrote all of it.
    untrusted_output: bool = False
    # Work worth starting while the model call is in flight, in case the model calls this tool
    # (run_python starts a sandbox instance); it must return at once. ToolRegistry.warm calls it.
    warm: Callable[[ToolContext, WorkspaceConfig], None] | None = field(default=None, compare=False)
    parameters: dict[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not NAME_PATTERN.match(self.name):
            raise ValueError(f"tool name {self.name!r} must match {NAME_PATTERN.pattern}")
        if not self.description.strip():
            raise ValueError(f"tool {self.name!r} needs a description: the model chooses tools by it")
        reserved = RESERVED_ARGUMENTS & self.args.model_fields.keys()
        if reserved:
            raise ValueError(
                f"tool {self.name!r} declares {sorted(reserved)} as arguments; "
                "read them from the ToolContext, never from the model"
            )
        object.__setattr__(self, "parameters", json_schema(self.args))

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)


@overload
def tool(fn: ToolFunction[A], /) -> Tool[A]: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None, untrusted_output: bool = False
) -> Callable[[ToolFunction[A]], Tool[A]]: ...


def tool(
    fn: ToolFunction[A] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    untrusted_output: bool = False,
) -> Tool[A] | Callable[[ToolFunction[A]], Tool[A]]:
    """Build a Tool from `def name(args: SomeModel, ctx: ToolContext) -> str | BaseModel`.

    The function's name is the tool's name and its docstring the description; the annotation of
    its first parameter is the arguments model. `@tool(name=..., description=...)` overrides them;
    `@tool(untrusted_output=True)` declares that its results carry third-party text.
    """

    def build(f: ToolFunction[A]) -> Tool[A]:
        # Docstring lines are wrapped for the source, not for the model: each paragraph becomes one line.
        doc = "\n\n".join(" ".join(p.split()) for p in (inspect.getdoc(f) or "").split("\n\n"))
        return Tool(
            name=name or f.__name__,
            description=description or doc,
            args=_args_model(f),
            fn=f,
            untrusted_output=untrusted_output,
        )

    return build if fn is None else build(fn)


def _args_model(fn: Callable[..., Any]) -> Any:
    params = list(inspect.signature(fn).parameters)
    if len(params) != 2:
        raise TypeError(f"tool function {fn.__name__} must take (args, ctx), not {params}")
    try:
        hints = typing.get_type_hints(fn)
    except NameError as exc:
        raise TypeError(f"tool function {fn.__name__}: annotations must resolve at runtime ({exc})") from None
    model = hints.get(params[0])
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(f"tool function {fn.__name__}: its first parameter must be a pydantic model")
    return model


# ---------------------------------------------------------------- JSON schema for providers

# Where a JSON schema holds one subschema, a list of them, or a name → subschema map. Everything
# else (enum, const, default, examples) is data and is copied as it is: a default may well be an
# object with a "title" key.
_ONE = ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else")
_MANY = ("anyOf", "allOf", "oneOf", "prefixItems")
_NAMED = ("properties", "patternProperties", "dependentSchemas")


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema as every provider accepts it: `$ref`s inlined (Gemini and some
    OpenAI-compatible servers reject them), pydantic's generated titles dropped (noise in every
    request's tokens; the description carries the meaning), and always an object with properties.
    """
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})
    cleaned = _clean(schema, defs, ())
    cleaned["type"] = "object"
    cleaned.setdefault("properties", {})
    return cleaned


def _clean(schema: dict[str, Any], defs: dict[str, Any], seen: tuple[str, ...]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str):
        name = ref.removeprefix("#/$defs/")
        if name in seen:
            # Inlining a recursive model never ends; a tool's arguments have no need for one.
            raise ValueError(f"tool arguments may not be recursive ({' -> '.join((*seen, name))})")
        siblings = {k: v for k, v in schema.items() if k != "$ref"}
        return {**_clean(defs[name], defs, (*seen, name)), **_clean(siblings, defs, seen)}
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key in _ONE and isinstance(value, dict):
            out[key] = _clean(value, defs, seen)
        elif key in _MANY and isinstance(value, list):
            out[key] = [_clean(v, defs, seen) for v in value]
        elif key in _NAMED and isinstance(value, dict):
            out[key] = {k: _clean(v, defs, seen) for k, v in value.items()}
        else:
            out[key] = value
    return out

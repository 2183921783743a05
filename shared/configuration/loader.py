"""Reading `sigil.yaml`: YAML to SigilFile, with every error naming the file, the line and the field.

PyYAML's composer keeps each node's position; pydantic's errors carry the path (loc) of the
value at fault. Following the loc through the node tree gives the line: of the value when it is
there, of its mapping when it is missing. Duplicate keys, which YAML loaders silently resolve to
the last one, are errors here: a repeated workspace would otherwise replace the first unseen.
"""

from __future__ import annotations

import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from shared.configuration.model import (
    DEFAULT_WORKSPACE,
    EMBEDDING_PATTERN,
    MODEL_REF_PATTERN,
    PRICE_KEY_PATTERN,
    TRANSCRIPTION_PATTERN,
    Loc,
    SigilFile,
    dotted,
    problems,
    route_problems,
)
from shared.errors import SigilError
from shared.models import HTTP_URL_PATTERN, ID_PATTERN, ROUTE_NAME_PATTERN, ChannelRoute
from shared.models.mcp import MCP_SECRET_NAME_PATTERN, MCP_SERVER_NAME_PATTERN


@dataclass(frozen=True)
class Problem:
    line: int | None
    path: str
    message: str

    def render(self, source: str) -> str:
        where = f"{source}:{self.line}" if self.line is not None else source
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class ConfigFileError(SigilError):
    """The configuration file cannot be used; `problems` says where and why, one line each."""

    code = "bad_configuration"
    http_status = 400

    def __init__(self, source: str, found: list[Problem]) -> None:
        self.source = source
        self.problems = found
        super().__init__("\n".join(p.render(source) for p in found))


def load_file(path: Path, *, default_workspace: str = DEFAULT_WORKSPACE) -> SigilFile:
    """The file at `path`, validated; ConfigFileError when it is missing, unreadable or wrong."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigFileError(source, [Problem(None, "", "no such file")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigFileError(source, [Problem(None, "", f"cannot be read: {exc}")]) from None
    return load_text(text, source=source, default_workspace=default_workspace)


def load_text(
    text: str, *, source: str = "sigil.yaml", default_workspace: str = DEFAULT_WORKSPACE
) -> SigilFile:
    root, data = _parse(text, source)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigFileError(
            source, [Problem(_line(root), "", "the file must be a mapping (defaults, workspaces, channels)")]
        )
    _normalise(data)
    try:
        # Structure first; the cross-field rules next, located, rather than as one model error.
        file = SigilFile.model_validate(data, context={"cross_field": False})
    except ValidationError as exc:
        # With the cross-field rules of the part that is valid: one run shows every error.
        found = [_from_pydantic(root, e) for e in exc.errors()]
        cross = _valid_part_problems(data, default_workspace)
        raise ConfigFileError(source, _by_line(found + _located(root, cross))) from None
    cross = problems(file, default_workspace=default_workspace)
    if cross:
        raise ConfigFileError(source, _by_line(_located(root, cross)))
    return file


def _located(root: yaml.Node | None, found: list[tuple[Loc, str]]) -> list[Problem]:
    return [Problem(_line_at(root, loc), dotted(loc), msg) for loc, msg in found]


def _by_line(found: list[Problem]) -> list[Problem]:
    # In file order; errors of one line keep the order they were found in (sorted is stable).
    return sorted(found, key=lambda p: p.line if p.line is not None else 0)


def _valid_part_problems(data: dict[str, Any], default_workspace: str) -> list[tuple[Loc, str]]:
    """The cross-field rules over a file that has field errors: its valid workspace ids and the
    routes that are valid on their own. A route with errors of its own is left to those; with
    `workspaces` not a mapping nothing can be said of the routes' workspaces."""
    workspaces = data.get("workspaces") or {}
    channels = data.get("channels") or []
    if not isinstance(workspaces, dict) or not isinstance(channels, list):
        return []
    ids = {k for k in workspaces if isinstance(k, str) and re.match(ID_PATTERN, k)}
    routes: list[tuple[int, ChannelRoute]] = []
    for i, raw in enumerate(channels):
        try:
            routes.append((i, ChannelRoute.model_validate(raw)))
        except ValidationError:
            continue
    return route_problems(ids, routes, default_workspace)


# ---------------------------------------------------------------- YAML


def _parse(text: str, source: str) -> tuple[yaml.Node | None, Any]:
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None, None
        duplicate = _first_duplicate(root, ())
        if duplicate is not None:
            loc, node = duplicate
            raise ConfigFileError(
                source, [Problem(node.start_mark.line + 1, dotted(loc), "duplicate key (it is set twice)")]
            )
        return root, loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        message = " ".join(str(part) for part in (exc.context, exc.problem) if part)
        raise ConfigFileError(source, [Problem(line, "", f"not valid YAML: {message}")]) from None
    except yaml.YAMLError as exc:
        raise ConfigFileError(source, [Problem(None, "", f"not valid YAML: {exc}")]) from None
    finally:
        loader.dispose()


def _first_duplicate(node: yaml.Node, loc: Loc) -> tuple[Loc, yaml.Node] | None:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            name = str(key.value)
            if name in seen:
                return (*loc, name), key
            seen.add(name)
            found = _first_duplicate(value, (*loc, name))
            if found is not None:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found = _first_duplicate(item, (*loc, i))
            if found is not None:
                return found
    return None


def _normalise(data: dict[str, Any]) -> None:
    """Platform ids written as YAML numbers (a Telegram bot or chat id) read as the strings they are."""
    channels = data.get("channels")
    if not isinstance(channels, list):
        return
    for route in channels:
        if not isinstance(route, dict):
            continue
        if isinstance(route.get("account"), int) and not isinstance(route.get("account"), bool):
            route["account"] = str(route["account"])
        chats = route.get("chats")
        if isinstance(chats, dict):
            route["chats"] = {
                str(k) if isinstance(k, int) and not isinstance(k, bool) else k: v for k, v in chats.items()
            }


def _line(node: yaml.Node | None) -> int | None:
    return None if node is None else node.start_mark.line + 1


def _line_at(root: yaml.Node | None, loc: Loc) -> int | None:
    """The line of the value at `loc`, or of the deepest node on the way to it that exists (the
    mapping a missing field belongs in); for pydantic's "[key]" marker, the line of the key."""
    if loc[-1:] == ("[key]",):
        parent = _node_at(root, loc[:-2])
        if isinstance(parent, yaml.MappingNode):
            for key, _ in parent.value:
                if str(key.value) == str(loc[-2]):
                    return _line(key)
        return _line(parent)
    return _line(_node_at(root, loc))


def _node_at(root: yaml.Node | None, loc: Loc) -> yaml.Node | None:
    node = root
    for part in loc:
        nxt: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode):
            nxt = next((value for key, value in node.value if str(key.value) == str(part)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            nxt = node.value[part]
        if nxt is None:
            break
        node = nxt
    return node


# ---------------------------------------------------------------- pydantic errors


def _from_pydantic(root: yaml.Node | None, error: Any) -> Problem:
    loc: Loc = tuple(error["loc"])
    message = str(error["msg"])
    if error["type"] == "extra_forbidden":
        known = _known_fields(loc[:-1])
        if known:
            message = f"unknown field {loc[-1]!r}; the known ones are: {', '.join(known)}"
    if message.startswith("Value error, "):
        message = message.removeprefix("Value error, ")
    if error["type"] == "string_pattern_mismatch":
        message = (
            _pattern_message(loc, error["input"], str(error.get("ctx", {}).get("pattern", ""))) or message
        )
    shown = loc[:-1] if loc[-1:] == ("[key]",) else loc
    path = dotted(shown) + (" (the key)" if shown != loc else "")
    return Problem(_line_at(root, loc), path, message)


# What each pattern of the file's model allows, in words: "String should match pattern '^...$'"
# tells a user nothing they can act on. A test checks every pattern of the schema is here.
PATTERN_RULES: dict[str, tuple[str, str]] = {
    ID_PATTERN: (
        "a workspace id",
        "1-128 characters of letters, digits and . _ @ + = -, starting with a letter or digit",
    ),
    ROUTE_NAME_PATTERN: (
        "a route name",
        "1-32 characters of a-z, 0-9 and -, starting and ending with a letter or digit "
        "(it is the last segment of the webhook path /webhooks/PLATFORM/NAME)",
    ),
    MODEL_REF_PATTERN: ("a model", "provider/model, e.g. openai/gpt-4.1-mini"),
    HTTP_URL_PATTERN: (
        "a URL",
        "http:// or https:// and the rest, e.g. https://mcp.example.com/mcp or http://searxng.internal:8080/search",
    ),
    TRANSCRIPTION_PATTERN: (
        "a transcription model",
        "auto, none, or openai/<model> (an OpenAI-compatible /audio/transcriptions), e.g. openai/whisper-1",
    ),
    EMBEDDING_PATTERN: (
        "an embedding model",
        "auto, none, local, or provider/model, e.g. openai/text-embedding-3-small",
    ),
    PRICE_KEY_PATTERN: (
        "a priced model",
        'provider/model, e.g. openai/llama3.1:8b, or "*" (every other model)',
    ),
    MCP_SERVER_NAME_PATTERN: (
        "an MCP server name",
        "1-24 characters of a-z, 0-9 and -, starting with a letter or digit (no _: it is part of "
        "every tool name, mcp__SERVER__TOOL)",
    ),
    MCP_SECRET_NAME_PATTERN: (
        "a secret name",
        "1-64 characters of letters, digits and . _ -, starting with a letter or digit; the "
        "secret is the workspace's own, stored as mcp/WORKSPACE/NAME",
    ),
}


def _pattern_message(loc: Loc, value: object, pattern: str) -> str | None:
    rule = PATTERN_RULES.get(pattern)
    if rule is None:
        return None
    noun, allowed = rule
    if pattern == ID_PATTERN and "workspace" not in loc and loc[:1] != ("workspaces",):
        noun = "an id"  # the pattern of every id: only workspaces use it in the file today
    return f"{value!r} is not {noun}: {noun} is {allowed}"


def _known_fields(loc: Loc) -> list[str]:
    """The fields of the model at `loc` in a SigilFile, for "unknown field" messages."""
    current: Any = SigilFile
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return []
            current = field.annotation
            continue
        origin = typing.get_origin(current)
        args = typing.get_args(current)
        if origin is list and isinstance(part, int):
            current = args[0]
        elif origin is dict and isinstance(part, str):
            current = args[1]
        else:
            return []
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return sorted(current.model_fields)
    return []


def _unwrap(tp: Any) -> Any:
    """X | None -> X; Annotated[X, ...] -> X."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp
            tp = args[0]
        else:
            return tp

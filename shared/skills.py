"""Workspace skills (spec 000, "Skills"): SKILL.md files in the agentskills.io format.

A SKILL.md opens with YAML front matter between two `---` lines, then the markdown body that is
injected into the system prompt:

    ---
    name: infra-ops
    description: Infrastructure operations expertise...
    license: MIT
    allowed-tools: Bash(kubectl:*) Bash(terraform:*)
    metadata:
      author: sean
      version: "1.0"
      gateway:trigger: keyword       # auto | manual | keyword
      gateway:keywords: server deploy kubernetes terraform
      gateway:workspace: homelab
    ---
    You are an infrastructure operations expert...

The front matter the format uses is flat `key: value` lines plus one nested `metadata:` map, so
it is read by the small parser below rather than a YAML library (PyYAML is not a runtime
dependency of the gateway). Anything beyond that subset (lists, other nested maps, multi-line
values) is an error naming the file and line, never a silent misreading.

Trigger modes: `auto` is always injected; `keyword` when one of `gateway:keywords` appears in the
user's message as a whole word (case-insensitive); `manual` only when the message says
"use skill: <name>". A skill without `gateway:trigger` is `auto` (a plain agentskills.io skill
works as is).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Trigger = Literal["auto", "manual", "keyword"]
TRIGGERS: tuple[Trigger, ...] = ("auto", "manual", "keyword")
SKILL_FILE = "SKILL.md"
# agentskills.io: lowercase letters, digits and hyphens, at most 64 characters.
NAME_PATTERN = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$")
_KEY = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9_:.-]*):(?:\s+(.*))?$")
_USE_SKILL = re.compile(r"\buse skill:\s*([a-z0-9][a-z0-9-]*)", re.IGNORECASE)

log = logging.getLogger("sigil.skills")


class SkillError(ValueError):
    """A SKILL.md that can't be read; the message names the file."""


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    trigger: Trigger = "auto"
    keywords: tuple[str, ...] = ()
    body: str = ""
    license: str | None = None
    compatibility: str | None = None
    allowed_tools: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)


def parse_skill(text: str, source: str = SKILL_FILE) -> Skill:
    """One SKILL.md's text; `source` names it in errors."""
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        raise SkillError(f"{source}: a SKILL.md starts with a '---' line opening its front matter")
    try:
        end = next(i for i, line in enumerate(lines[1:], start=1) if line.strip() == "---")
    except StopIteration:
        raise SkillError(f"{source}: the front matter has no closing '---' line") from None
    top, metadata = _front_matter(lines[1:end], source)
    name, description = top.pop("name", ""), top.pop("description", "")
    if not NAME_PATTERN.match(name):
        raise SkillError(f"{source}: name {name!r} is not lowercase letters, digits and hyphens (1-64)")
    if not description:
        raise SkillError(f"{source}: description is required")
    trigger = metadata.get("gateway:trigger", "auto")
    if trigger not in TRIGGERS:
        raise SkillError(f"{source}: gateway:trigger {trigger!r} is not one of {', '.join(TRIGGERS)}")
    keywords = tuple(k.lower() for k in re.split(r"[\s,]+", metadata.get("gateway:keywords", "")) if k)
    if trigger == "keyword" and not keywords:
        raise SkillError(f"{source}: gateway:trigger keyword needs gateway:keywords")
    return Skill(
        name=name,
        description=description,
        trigger=trigger,
        keywords=keywords,
        body="\n".join(lines[end + 1 :]).strip(),
        license=top.get("license"),
        compatibility=top.get("compatibility"),
        allowed_tools=top.get("allowed-tools"),
        metadata=metadata,
    )


def load_skill(path: Path) -> Skill:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SkillError(f"{path}: can't be read ({exc})") from exc
    return parse_skill(text, str(path))


def load_skills(directory: Path, *, strict: bool = True) -> list[Skill]:
    """Every <directory>/<name>/SKILL.md, by name; none if the directory doesn't exist. A skill
    whose `name` differs from its folder is an error (agentskills.io requires them equal).

    With `strict=False` (the running gateway), a broken skill is logged and left out instead:
    one bad file must not fail every turn of its workspace.
    """
    if not directory.is_dir():
        return []
    skills = []
    for path in sorted(directory.glob(f"*/{SKILL_FILE}")):
        try:
            skill = load_skill(path)
            if skill.name != path.parent.name:
                raise SkillError(f"{path}: name {skill.name!r} differs from its folder {path.parent.name!r}")
        except SkillError as exc:
            if strict:
                raise
            log.error("skill left out", extra={"path": str(path), "reason": str(exc)})
            continue
        skills.append(skill)
    return skills


def select_skills(skills: Iterable[Skill], user_text: str) -> list[Skill]:
    """The skills to inject for this message, in the order given."""
    asked = {m.lower() for m in _USE_SKILL.findall(user_text)}
    return [s for s in skills if _selected(s, user_text, asked)]


def _selected(skill: Skill, text: str, asked: set[str]) -> bool:
    if skill.trigger == "auto":
        return True
    if skill.trigger == "manual":
        return skill.name in asked
    return any(re.search(rf"(?<!\w){re.escape(k)}(?!\w)", text, re.IGNORECASE) for k in skill.keywords)


def _front_matter(lines: list[str], source: str) -> tuple[dict[str, str], dict[str, str]]:
    top: dict[str, str] = {}
    metadata: dict[str, str] = {}
    in_metadata = False
    for number, raw in enumerate(lines, start=2):
        line = _strip_comment(raw).rstrip()
        if not line.strip():
            continue
        nested = line[0] in " \t"
        if nested and not in_metadata:
            raise SkillError(f"{source}:{number}: only 'metadata' may hold nested keys")
        match = _KEY.match(line.strip())
        if match is None:
            raise SkillError(f"{source}:{number}: expected 'key: value', got {line.strip()!r}")
        key, value = match.group(1), _scalar(match.group(2) or "", source, number)
        target = metadata if nested else top
        if key in target:
            raise SkillError(f"{source}:{number}: {key!r} appears twice")
        if not nested:
            in_metadata = key == "metadata"
            if in_metadata:
                if value:
                    raise SkillError(f"{source}:{number}: metadata is a map of nested 'key: value' lines")
                continue
        target[key] = value
    return top, metadata


def _strip_comment(line: str) -> str:
    """Drop a ` # comment` outside quotes (YAML needs the space before '#')."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


def _scalar(value: str, source: str, number: int) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    if value and value[0] in "[{|>&*!\"'":
        raise SkillError(f"{source}:{number}: only plain or quoted one-line values are supported")
    return value


def local_skills(data_dir: Path) -> Callable[[str], list[Skill]]:
    """The embedded runtime's skills: <data_dir>/workspaces/<workspace>/skills/<name>/SKILL.md,
    read on every turn (a few small files), so an edit applies to the next message."""
    return lambda workspace_id: load_skills(data_dir / "workspaces" / workspace_id / "skills", strict=False)

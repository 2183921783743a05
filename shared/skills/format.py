"""SKILL.md: the agentskills.io format (https://agentskills.io/specification) and our triggers.

A SKILL.md opens with YAML front matter between two `---` lines, then the markdown body:

    ---
    name: infra-ops
    description: Infrastructure operations expertise...
    license: MIT
    compatibility: Requires kubectl, terraform CLI
    allowed-tools: Bash(kubectl:*) Bash(terraform:*)
    metadata:
      author: sean
      version: "1.0"
      gateway:trigger: keyword       # auto | manual | keyword
      gateway:keywords: server deploy kubernetes terraform
    ---
    You are an infrastructure operations expert...

The specification's rules, checked here: `name` 1-64 characters of [a-z0-9-], no leading,
trailing or doubled hyphen, equal to the skill's folder name; `description` 1-1024 characters;
`compatibility` at most 500; `metadata` a map of strings; no other top-level field. Our
extensions live in `metadata` (spec 000), so any agentskills.io skill works here and ours work
elsewhere.

The front matter the format uses is `key: value` lines plus one nested `metadata:` map, so it is
read by the small parser below rather than a YAML library (PyYAML is not a runtime dependency of
the gateway). Values are read as YAML reads them: plain or quoted, a plain value going on over
deeper-indented lines, and `|` / `>` block scalars (with `-` / `+` and an indentation digit), the
way many published skills write a long description. Anything beyond that subset (lists, flow or
other nested maps, anchors, tags) is an error naming the file and line, never a silent misreading.

Trigger modes: `auto` is listed in the prompt's catalogue and loaded by the model with the
`skill` tool when it needs it; `keyword` is loaded into the prompt when one of `gateway:keywords`
appears in the user's message as a whole word (case-insensitive); `manual` only when the message
says "use skill: <name>" (and is left out of the catalogue), which loads any skill by name. A
skill without `gateway:trigger` is `auto` (a plain agentskills.io skill works as is).
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
# agentskills.io: lowercase letters, digits and single hyphens, at most 64 characters, neither
# starting nor ending with a hyphen.
NAME_PATTERN = re.compile(r"^(?!.*--)[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$")
MAX_DESCRIPTION = 1024
MAX_COMPATIBILITY = 500
FIELDS = frozenset({"name", "description", "license", "compatibility", "metadata", "allowed-tools"})
_KEY = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9_:.-]*):(?:\s+(.*))?$")
_USE_SKILL = re.compile(r"\buse skill:\s*([a-z0-9][a-z0-9-]*)", re.IGNORECASE)

log = logging.getLogger("sigil.skills")


class SkillError(ValueError):
    """A SKILL.md (or a skill's folder) that breaks the format; the message names the file and,
    where there is one, the line."""


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


def name_problem(name: str) -> str | None:
    """Why `name` is not a valid skill name, or None."""
    if not 1 <= len(name) <= 64:
        return f"name {name!r} must be 1-64 characters"
    if not NAME_PATTERN.match(name):
        return (
            f"name {name!r} is not lowercase letters, digits and hyphens (1-64), "
            "without a leading, trailing or doubled hyphen"
        )
    return None


def parse_skill(text: str, source: str = SKILL_FILE, *, folder: str | None = None) -> Skill:
    """One SKILL.md's text; `source` names it in errors; `folder`, when given, must equal the name."""
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        raise SkillError(f"{source}:1: a SKILL.md starts with a '---' line opening its front matter")
    try:
        end = next(i for i, line in enumerate(lines[1:], start=1) if line.strip() == "---")
    except StopIteration:
        raise SkillError(f"{source}: the front matter has no closing '---' line") from None
    # Every rule the fields break, each at its line, so one `sigil skill validate` shows them all:
    # a value the reader can't take is one of them, not the end of the reading.
    found: list[tuple[int, str]] = []
    top, metadata, at, unread = _front_matter(lines[1:end], source, found)
    for key in sorted((set(top) | unread) - FIELDS):
        found.append(
            (
                at[key],
                f"{key!r} is not a SKILL.md field ({', '.join(sorted(FIELDS))}); put extensions in metadata",
            )
        )
    # A folded (`>`) description ends in a line break, as YAML reads it: not part of the text.
    name, description = top.pop("name", ""), top.pop("description", "").strip()
    problem = None if "name" in unread else name_problem(name)
    if problem:
        found.append((at.get("name", 2), problem))
    elif folder is not None and name != folder:
        found.append((at["name"], f"name {name!r} differs from its folder {folder!r}"))
    if "description" in unread:
        pass
    elif not description:
        found.append((at.get("description", 2), "description is required"))
    elif len(description) > MAX_DESCRIPTION:
        found.append(
            (at["description"], f"description is {len(description)} characters (at most {MAX_DESCRIPTION})")
        )
    compatibility = top.get("compatibility")
    if compatibility is not None and not 1 <= len(compatibility) <= MAX_COMPATIBILITY:
        found.append((at["compatibility"], f"compatibility must be 1-{MAX_COMPATIBILITY} characters"))
    trigger = metadata.get("gateway:trigger", "auto")
    keywords = tuple(k.lower() for k in re.split(r"[\s,]+", metadata.get("gateway:keywords", "")) if k)
    if trigger not in TRIGGERS:
        found.append(
            (at["gateway:trigger"], f"gateway:trigger {trigger!r} is not one of {', '.join(TRIGGERS)}")
        )
    elif trigger == "keyword" and not keywords:
        found.append((at["gateway:trigger"], "gateway:trigger keyword needs gateway:keywords"))
    # (A bad trigger is among `found`; named again so the type checker knows `trigger` is a Trigger.)
    if found or trigger not in TRIGGERS:
        raise SkillError(
            "\n".join(f"{source}:{line}: {text}" for line, text in sorted(found, key=lambda f: f[0]))
        )
    return Skill(
        name=name,
        description=description,
        trigger=trigger,
        keywords=keywords,
        body="\n".join(lines[end + 1 :]).strip(),
        license=top.get("license"),
        compatibility=compatibility,
        allowed_tools=top.get("allowed-tools"),
        metadata=metadata,
    )


def load_skill(path: Path) -> Skill:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SkillError(f"{path}: can't be read ({exc})") from exc
    return parse_skill(text, str(path), folder=path.parent.name)


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
        except SkillError as exc:
            if strict:
                raise
            log.error("skill left out", extra={"path": str(path), "reason": str(exc)})
            continue
        skills.append(skill)
    return skills


def select_skills(skills: Iterable[Skill], user_text: str) -> list[Skill]:
    """The skills whose body this message loads into the prompt, in the order given: any one it
    asks for by name ("use skill: NAME", the only way to a `manual` one), and `keyword` ones whose
    keyword it has. The rest are in the catalogue (`catalogue`) for the `skill` tool."""
    asked = {m.lower() for m in _USE_SKILL.findall(user_text)}
    return [s for s in skills if _selected(s, user_text, asked)]


def catalogue(skills: Iterable[Skill]) -> list[Skill]:
    """The skills the prompt lists by name and description: every one but the `manual` ones."""
    return [s for s in skills if s.trigger != "manual"]


def _selected(skill: Skill, text: str, asked: set[str]) -> bool:
    # Asked for by name, any skill is loaded: the user knows what they want.
    if skill.name in asked:
        return True
    if skill.trigger != "keyword":
        return False
    return any(re.search(rf"(?<!\w){re.escape(k)}(?!\w)", text, re.IGNORECASE) for k in skill.keywords)


def _front_matter(
    lines: list[str], source: str, found: list[tuple[int, str]]
) -> tuple[dict[str, str], dict[str, str], dict[str, int], set[str]]:
    """(top-level fields, metadata, the line of each key, the top-level fields whose value could
    not be read) of the lines between the `---`s. A value outside the subset read here is added
    to `found` and reading goes on, so it is reported once, at its line, not also as missing."""
    unread: set[str] = set()
    top: dict[str, str] = {}
    metadata: dict[str, str] = {}
    at: dict[str, int] = {}
    in_metadata = False
    i = 0
    while i < len(lines):
        number, line = i + 2, _strip_comment(lines[i]).rstrip()
        i += 1
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" \t"))
        nested = indent > 0
        if nested and not in_metadata:
            raise SkillError(f"{source}:{number}: only 'metadata' may hold nested keys")
        match = _KEY.match(line.strip())
        if match is None:
            raise SkillError(f"{source}:{number}: expected 'key: value', got {line.strip()!r}")
        key, text = match.group(1), (match.group(2) or "").strip()
        target = metadata if nested else top
        if key in target or (not nested and key == "metadata" and key in at):
            raise SkillError(f"{source}:{number}: {key!r} appears twice")
        at.setdefault(key, number)
        if not nested:
            in_metadata = key == "metadata"
            if in_metadata:
                if text:
                    raise SkillError(f"{source}:{number}: metadata is a map of nested 'key: value' lines")
                continue
        block = _BLOCK.match(text)
        if block is not None:
            value, i = _block_scalar(lines, i, indent, block, source=source, number=number)
        else:
            problem = _scalar_problem(text)
            if problem is not None:
                found.append((number, f"{key!r}: {problem}"))
                if not nested:
                    unread.add(key)
                while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > indent):
                    i += 1  # the rest of the value, unread: its lines are not keys
                continue
            value = _scalar(text)
            value, i = _continued(lines, i, indent, value, quoted=text[:1] in ("'", '"'), source=source)
        target[key] = value
    return top, metadata, at, unread


# A block scalar's header: `|` (literal) or `>` (folded), then an optional indentation digit
# and chomping indicator (`-` strip, `+` keep) in either order. Descriptions are often written so.
_BLOCK = re.compile(r"^([|>])(?:([1-9])([-+])?|([-+])([1-9])?)?$")


def _block_scalar(
    lines: list[str], start: int, parent: int, header: re.Match[str], *, source: str, number: int
) -> tuple[str, int]:
    """The value of a `|` or `>` block scalar whose key (at `parent` indentation) is on the line
    before `lines[start]`, as YAML reads it; and the index of the line after it. Its lines are
    the following ones indented deeper than the key (blank lines within count); comments there
    are text, as in YAML."""
    style = header.group(1)
    digit = header.group(2) or header.group(5)
    chomp = header.group(3) or header.group(4) or ""
    end = start
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > parent):
        end += 1
    raw = [line.rstrip() for line in lines[start:end]]
    if digit:
        width = parent + int(digit)
    else:
        width = next((_indent(line) for line in raw if line.strip()), parent + 1)
    content: list[str] = []
    for offset, line in enumerate(raw):
        if not line.strip():
            content.append("")
        elif _indent(line) < width:
            raise SkillError(
                f"{source}:{number + 1 + offset}: this line of the block is indented less than its first"
            )
        else:
            content.append(line[width:])
    while content and not content[-1]:
        content.pop()
    trailing = len(raw) - len(content) if raw else 0
    text = "\n".join(content) if style == "|" else _fold(content)
    if not text or chomp == "-":
        return text, end
    return text + "\n" + ("\n" * trailing if chomp == "+" else ""), end


def _fold(content: list[str]) -> str:
    """YAML's folding: a line break between two lines of text is a space; each blank line a
    line break; lines indented deeper than the block keep theirs."""
    out: list[str] = []
    previous: str | None = None
    blank = 0
    for line in content:
        if not line:
            blank += 1
            continue
        if previous is None:
            out.append("\n" * blank)
        else:
            deeper = previous[:1] in " \t" or line[:1] in " \t"
            out.append("\n" * (blank + deeper) if blank or deeper else " ")
        out.append(line)
        previous, blank = line, 0
    return "".join(out)


def _continued(
    lines: list[str], start: int, parent: int, value: str, *, quoted: bool, source: str
) -> tuple[str, int]:
    """A plain value that goes on over the following lines indented deeper than its key (YAML's
    multi-line plain scalar: each line break a space, each blank line a line break); and the
    index of the line after its last. A quoted value stays on its line."""
    parts = [value] if value else []
    blank, i, end = 0, start, start
    while i < len(lines):
        line = _strip_comment(lines[i]).rstrip()
        if not line.strip():
            blank, i = blank + 1, i + 1
            continue
        if _indent(line) <= parent:
            break
        if quoted or _KEY.match(line.strip()):
            # A deeper `key: value` under a field, or text under a quoted value, is not YAML we read.
            what = "a quoted value must fit on its line" if quoted else "only 'metadata' may hold nested keys"
            raise SkillError(f"{source}:{i + 2}: {what}")
        if parts:
            parts.append("\n" * blank if blank else " ")
        parts.append(line.strip())
        blank, i = 0, i + 1
        end = i
    return "".join(parts), end


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


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


def _scalar(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


# What a value may not start with here, and what to say about it.
_UNSUPPORTED = {
    "[": "a list ([...]) is not a SKILL.md value: write it as text, e.g. a, b",
    "{": "a map ({...}) is not a SKILL.md value: only 'metadata' holds keys, one per line",
    "&": "YAML anchors (&) are not supported",
    "*": "YAML aliases (*) are not supported",
    "!": "YAML tags (!) are not supported",
    "|": "a block scalar's header is | or > with an optional digit and - or +",
    ">": "a block scalar's header is | or > with an optional digit and - or +",
}


def _scalar_problem(text: str) -> str | None:
    """Why `text` (one line's value) is outside what this reader takes, or None."""
    value = text.strip()
    if not value:
        return None
    quoted = len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'"
    if value[0] in "\"'" and not quoted:
        return "a quoted value must be closed on its line"
    return None if quoted else _UNSUPPORTED.get(value[0])


def local_skills(data_dir: Path) -> Callable[[str], list[Skill]]:
    """<data_dir>/workspaces/<workspace>/skills/<name>/SKILL.md read straight from the folder,
    every turn; links are not followed (the embedded SkillStore follows them)."""
    return lambda workspace_id: load_skills(data_dir / "workspaces" / workspace_id / "skills", strict=False)

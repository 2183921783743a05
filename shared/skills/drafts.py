"""Skill drafts (docs/delegation.md#the-skill-composer): a skill the Skill Composer wrote with the
user, validated exactly as `sigil skill validate` validates a folder (install.validate_files),
and kept in the session's scratchpad until an operator installs it (`sigil skill install-draft`),
unless the workspace lets the composer install it itself (delegation.skill_composer_installs).

The scratchpad and not the SkillStore: a draft belongs to the conversation that made it (a
session's scratchpad is erased with the session), is never offered to a turn as a skill, and
needs no new store on either backend. One draft per skill name per session; a new version of it
replaces the old. The record is JSON: the skill's files as UTF-8 text by relative path.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Final

from pydantic import Field, ValidationError

from shared.clock import utcnow
from shared.errors import BadRequest, NotFound
from shared.models import Model
from shared.ports import Scratchpad, SkillStore
from shared.skills.format import SKILL_FILE, Skill, SkillError, parse_skill
from shared.skills.install import InstallError, validate_files

PREFIX: Final = "skill-draft/"


class SkillDraft(Model):
    name: str
    description: str = ""
    files: dict[str, str] = Field(default_factory=dict)  # relative path -> UTF-8 text
    created_at: datetime = Field(default_factory=utcnow)
    turn_id: str | None = None  # the turn (a task's step) that drafted it
    # Set once an operator installed it: the scratchpad has no delete of one key, so the record
    # stays, marked, and is no longer listed (a new draft of the name replaces it).
    installed_at: datetime | None = None

    def as_bytes(self) -> dict[str, bytes]:
        return {path: text.encode("utf-8") for path, text in self.files.items()}


def key_of(name: str) -> str:
    return PREFIX + name


def validate(files: dict[str, str]) -> Skill:
    """The skill `files` make, checked as `sigil skill validate` checks a folder named after the
    skill; BadRequest naming every rule broken (file and line) otherwise."""
    if SKILL_FILE not in files:
        raise BadRequest(f"a skill needs a {SKILL_FILE} at its root")
    try:
        # The folder is the name the SKILL.md declares: a draft has no folder of its own.
        declared = parse_skill(files[SKILL_FILE], f"draft/{SKILL_FILE}").name
        return validate_files({p: t.encode("utf-8") for p, t in files.items()}, declared, f"draft {declared}")
    except SkillError as exc:
        raise BadRequest(str(exc)) from None
    except InstallError as exc:
        raise BadRequest(exc.message) from None


def save(
    pad: Scratchpad, workspace_id: str, session_id: str, files: dict[str, str], *, turn_id: str | None = None
) -> SkillDraft:
    """Validate and keep the draft in the session's scratchpad (replacing one of the same name)."""
    skill = validate(files)
    draft = SkillDraft(name=skill.name, description=skill.description, files=files, turn_id=turn_id)
    pad.put(workspace_id, session_id, key_of(skill.name), draft.model_dump_json())
    return draft


def load(pad: Scratchpad, workspace_id: str, session_id: str, name: str) -> SkillDraft:
    text = pad.get(workspace_id, session_id, key_of(name))
    if text is None:
        raise NotFound(f"no skill draft {name!r} in session {session_id}")
    try:
        return SkillDraft.model_validate(json.loads(text))
    except (ValueError, ValidationError):
        raise BadRequest(
            f"the scratchpad entry {key_of(name)} of session {session_id} is not a skill draft"
        ) from None


def names(pad: Scratchpad, workspace_id: str, session_id: str) -> list[str]:
    """The session's drafts not installed yet."""
    found = [k[len(PREFIX) :] for k in pad.list_keys(workspace_id, session_id, prefix=PREFIX)]
    return [n for n in found if load(pad, workspace_id, session_id, n).installed_at is None]


def mark_installed(pad: Scratchpad, workspace_id: str, session_id: str, draft: SkillDraft) -> None:
    done = draft.model_copy(update={"installed_at": utcnow()})
    pad.put(workspace_id, session_id, key_of(draft.name), done.model_dump_json())


def install(store: SkillStore, workspace_id: str, draft: SkillDraft, *, force: bool = False) -> Skill:
    """Install the draft, validated again (it may have been stored by an older version); a skill
    of the same name is replaced only with `force`."""
    skill = validate(draft.files)
    if skill.name in store.list_skills(workspace_id) and not force:
        raise BadRequest(f"{workspace_id} already has a skill named {skill.name!r}")
    store.put_skill(workspace_id, skill.name, draft.as_bytes())
    return skill

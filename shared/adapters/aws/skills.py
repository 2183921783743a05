"""SkillStore on the stack's skills bucket: `skills/<ws>/<name>/<path>` (docs/skills.md).

A link is one object, `skills/<ws>/<name>/.sigil-link.json`, naming the source (workspace,
name); reads follow it. A read asks for the file's own key first and looks for a link record
only when that is missing, so reading an installed skill costs one GetObject (a linked one
three). The bucket is versioned: a replaced or removed skill can be recovered from its versions.

Writes come from an operator's command (`sigil skill`), one at a time: a put writes every new
file, SKILL.md last (so the body never names a file not yet there), then deletes the files the
new version no longer has. The agent reads through shared.skills.CachedSkills.
"""

from __future__ import annotations

from collections.abc import Mapping

from shared.adapters.aws.s3 import S3Bucket
from shared.errors import ConcurrencyConflict, NotFound, SigilError
from shared.ports import SkillLink
from shared.skills import LINK_FILE, SKILL_FILE, check_name, check_path, check_workspace
from shared.skills.store import link_record, parse_link, refuse_if_linked

PREFIX = "skills/"


class S3SkillStore(S3Bucket):
    def _prefix(self, workspace_id: str, name: str | None = None) -> str:
        base = f"{PREFIX}{check_workspace(workspace_id)}/"
        return base if name is None else f"{base}{check_name(name)}/"

    def list_skills(self, workspace_id: str) -> list[str]:
        prefix = self._prefix(workspace_id)
        names: set[str] = set()
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix, Delimiter="/"
        )
        for page in pages:
            names.update(p["Prefix"][len(prefix) :].rstrip("/") for p in page.get("CommonPrefixes", []))
        return sorted(names)

    def link_of(self, workspace_id: str, name: str) -> SkillLink | None:
        record = self._get(self._prefix(workspace_id, name) + LINK_FILE)
        return parse_link(record) if record is not None else None

    def list_files(self, workspace_id: str, name: str) -> list[str]:
        link = self.link_of(workspace_id, name)
        prefix = self._prefix(link.workspace_id, link.name) if link else self._prefix(workspace_id, name)
        return sorted(k[len(prefix) :] for k in self._keys(prefix) if k[len(prefix) :] != LINK_FILE)

    def read_file(self, workspace_id: str, name: str, path: str) -> bytes | None:
        found = self._get(self._prefix(workspace_id, name) + check_path(path))
        if found is not None:
            return found
        link = self.link_of(workspace_id, name)
        return self._get(self._prefix(link.workspace_id, link.name) + path) if link else None

    def put_skill(self, workspace_id: str, name: str, files: Mapping[str, bytes]) -> None:
        paths = {check_path(p): data for p, data in files.items()}
        link = self.link_of(workspace_id, name)
        if link is not None:
            raise ConcurrencyConflict(
                f"{workspace_id}/{name} is a link to {link.workspace_id}/{link.name}: "
                "edit it there, or remove the link first"
            )
        prefix = self._prefix(workspace_id, name)
        old = set(self._keys(prefix))
        for path in sorted(paths, key=lambda p: p == SKILL_FILE):
            self.client.put_object(Bucket=self.bucket, Key=prefix + path, Body=paths[path])
        self._delete(sorted(old - {prefix + p for p in paths}))

    def link_skill(self, workspace_id: str, name: str, source: SkillLink) -> None:
        root = self.link_of(source.workspace_id, source.name) or source
        if self._get(self._prefix(root.workspace_id, root.name) + SKILL_FILE) is None:
            raise NotFound(f"no skill {source.name!r} in workspace {source.workspace_id!r}")
        if (root.workspace_id, root.name) == (workspace_id, name):
            raise ConcurrencyConflict(f"{workspace_id}/{name} can't link to itself")
        prefix = self._prefix(workspace_id, name)
        if next(self._keys(prefix), None) is not None:
            raise ConcurrencyConflict(f"{workspace_id} already has a skill named {name!r}; remove it first")
        self.client.put_object(Bucket=self.bucket, Key=prefix + LINK_FILE, Body=link_record(root))

    def links_to(self, workspace_id: str, name: str) -> list[SkillLink]:
        target = SkillLink(workspace_id=check_workspace(workspace_id), name=check_name(name))
        found = []
        # Every link record of the bucket: an operator's command, not a turn, asks this.
        for key in self._keys(PREFIX):
            if not key.endswith("/" + LINK_FILE):
                continue
            record = self._get(key)
            if record is not None and parse_link(record) == target:
                _, ws, linked, _ = key.split("/", 3)
                found.append(SkillLink(workspace_id=ws, name=linked))
        return sorted(found, key=lambda link: (link.workspace_id, link.name))

    def remove_skill(self, workspace_id: str, name: str) -> bool:
        prefix = self._prefix(workspace_id, name)
        keys = list(self._keys(prefix))
        if not keys:
            return False
        if prefix + LINK_FILE not in keys:
            refuse_if_linked(self.links_to(workspace_id, name), workspace_id, name)
        self._delete(keys)
        return True

    def _delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1,000 keys
            batch = [{"Key": k} for k in keys[start : start + 1000]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})


class NoSkillsBucket:
    """The store of a deployment without SIGIL_SKILLS_BUCKET: no skills; a write says what is missing."""

    def list_skills(self, workspace_id: str) -> list[str]:
        return []

    def list_files(self, workspace_id: str, name: str) -> list[str]:
        return []

    def read_file(self, workspace_id: str, name: str, path: str) -> bytes | None:
        return None

    def link_of(self, workspace_id: str, name: str) -> SkillLink | None:
        return None

    def links_to(self, workspace_id: str, name: str) -> list[SkillLink]:
        return []

    def put_skill(self, workspace_id: str, name: str, files: Mapping[str, bytes]) -> None:
        raise _unconfigured()

    def link_skill(self, workspace_id: str, name: str, source: SkillLink) -> None:
        raise _unconfigured()

    def remove_skill(self, workspace_id: str, name: str) -> bool:
        return False


def _unconfigured() -> SigilError:
    return SigilError(
        "skills need SIGIL_SKILLS_BUCKET (the stack's SkillsBucket output)", code="misconfigured"
    )

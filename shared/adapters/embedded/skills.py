"""SkillStore on the data directory: <data_dir>/workspaces/<ws>/skills/<name>/<path>.

The layout the local gateway has always read, so skills placed there by hand keep working. A
link is a folder holding only `.sigil-link.json` ({"workspace_id", "name"} of the source); reads
follow it. A skill is replaced by writing the new files into a sibling temporary folder and
renaming it over the old one, so a turn never reads half of an install.
"""

from __future__ import annotations

import shutil
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path

from shared.adapters.embedded.owner_only import open_data_dir
from shared.errors import ConcurrencyConflict, NotFound
from shared.ports import SkillLink
from shared.skills import LINK_FILE, check_name, check_path, check_workspace
from shared.skills.store import link_record, parse_link, refuse_if_linked


class FileSkillStore:
    def __init__(self, data_dir: Path) -> None:
        self.root = Path(data_dir) / "workspaces"
        # Link checks and their writes are one step within this process (the CLI and the gateway
        # are separate processes, but only the CLI writes).
        self._lock = threading.Lock()

    def _dir(self, workspace_id: str, name: str | None = None) -> Path:
        base = self.root / check_workspace(workspace_id) / "skills"
        return base if name is None else base / check_name(name)

    def list_skills(self, workspace_id: str) -> list[str]:
        base = self._dir(workspace_id)
        if not base.is_dir():
            return []
        return sorted(
            p.name
            for p in base.iterdir()
            if p.is_dir()
            and not p.name.startswith(".")
            and ((p / "SKILL.md").is_file() or (p / LINK_FILE).is_file())
        )

    def link_of(self, workspace_id: str, name: str) -> SkillLink | None:
        record = self._dir(workspace_id, name) / LINK_FILE
        return parse_link(record.read_bytes()) if record.is_file() else None

    def _resolved(self, workspace_id: str, name: str) -> Path:
        link = self.link_of(workspace_id, name)
        return self._dir(link.workspace_id, link.name) if link else self._dir(workspace_id, name)

    def list_files(self, workspace_id: str, name: str) -> list[str]:
        folder = self._resolved(workspace_id, name)
        if not folder.is_dir():
            return []
        return sorted(
            p.relative_to(folder).as_posix()
            for p in folder.rglob("*")
            if p.is_file() and not p.is_symlink() and p.name != LINK_FILE
        )

    def read_file(self, workspace_id: str, name: str, path: str) -> bytes | None:
        target = self._resolved(workspace_id, name) / check_path(path)
        # A symlink placed by hand could point anywhere on the machine: never followed.
        if target.is_symlink() or not target.is_file():
            return None
        return target.read_bytes()

    def put_skill(self, workspace_id: str, name: str, files: Mapping[str, bytes]) -> None:
        paths = {check_path(p): data for p, data in files.items()}
        folder = self._dir(workspace_id, name)
        with self._lock:
            link = self.link_of(workspace_id, name)
            if link is not None:
                raise ConcurrencyConflict(
                    f"{workspace_id}/{name} is a link to {link.workspace_id}/{link.name}: "
                    "edit it there, or remove the link first"
                )
            self._write(folder, paths)

    def link_skill(self, workspace_id: str, name: str, source: SkillLink) -> None:
        with self._lock:
            root = self.link_of(source.workspace_id, source.name) or source
            if not (self._dir(root.workspace_id, root.name) / "SKILL.md").is_file():
                raise NotFound(f"no skill {source.name!r} in workspace {source.workspace_id!r}")
            if (root.workspace_id, root.name) == (workspace_id, name):
                raise ConcurrencyConflict(f"{workspace_id}/{name} can't link to itself")
            folder = self._dir(workspace_id, name)
            if folder.exists():
                raise ConcurrencyConflict(
                    f"{workspace_id} already has a skill named {name!r}; remove it first"
                )
            self._write(folder, {LINK_FILE: link_record(root)})

    def links_to(self, workspace_id: str, name: str) -> list[SkillLink]:
        target = SkillLink(workspace_id=check_workspace(workspace_id), name=check_name(name))
        found = []
        for record in sorted(self.root.glob(f"*/skills/*/{LINK_FILE}")):
            if parse_link(record.read_bytes()) == target:
                found.append(SkillLink(workspace_id=record.parents[2].name, name=record.parent.name))
        return found

    def remove_skill(self, workspace_id: str, name: str) -> bool:
        folder = self._dir(workspace_id, name)
        with self._lock:
            if not folder.is_dir():
                return False
            if not (folder / LINK_FILE).is_file():
                refuse_if_linked(self.links_to(workspace_id, name), workspace_id, name)
            shutil.rmtree(folder)
            return True

    def _write(self, folder: Path, files: Mapping[str, bytes]) -> None:
        # `sigil skill install` may be the first thing to touch the data dir: owner-only, as always.
        open_data_dir(self.root.parent)
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = folder.parent / f".staging-{folder.name}-{uuid.uuid4().hex[:8]}"
        try:
            for path, data in files.items():
                target = staging / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            old = None
            if folder.exists():
                old = folder.parent / f".old-{folder.name}-{uuid.uuid4().hex[:8]}"
                folder.rename(old)
            staging.rename(folder)
            if old is not None:
                shutil.rmtree(old)
        finally:
            if staging.exists():
                shutil.rmtree(staging)

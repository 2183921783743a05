"""Skills as the turn and the tools read them: through a SkillStore (shared.ports), cached.

`available_skills(store, workspace)` is the one answer to "which skills may this turn use": the
installed ones (links followed), narrowed by `WorkspaceConfig.skills` when it names some, each
parsed; a broken one is logged and left out (one bad file must not fail every turn).

`CachedSkills` keeps what a store answered for `ttl_s` seconds (60), per process: a warm agent
turn makes no S3 call. An edit made elsewhere (the CLI, another container) applies here within
the TTL; a write through the cache applies in this process at once.

Paths inside a skill are relative POSIX paths without `.`/`..` parts; adapters check them with
`check_path` before touching storage, so no name or path can leave the workspace's folder.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Final

from cachetools import TTLCache

from shared.backend import Backend
from shared.errors import BadRequest, ConcurrencyConflict
from shared.models import ID_PATTERN, WorkspaceConfig
from shared.ports import SkillLink, SkillStore
from shared.skills.format import SKILL_FILE, Skill, SkillError, name_problem, parse_skill

log = logging.getLogger("sigil.skills")

SKILL_TTL_S: Final = 60.0
MAX_ENTRIES: Final = 4096
# The link record a linking workspace stores in place of a copy; never a skill's own file.
LINK_FILE: Final = ".sigil-link.json"
# The folders the agentskills.io format names; the `skill` tool reads one level into them.
FOLDERS: Final = ("scripts", "references", "assets")
MAX_PATH_CHARS: Final = 512
_WORKSPACE = re.compile(ID_PATTERN)


def check_workspace(workspace_id: str) -> str:
    if not _WORKSPACE.match(workspace_id):
        raise BadRequest(f"workspace id {workspace_id!r} is not valid")
    return workspace_id


def check_name(name: str) -> str:
    problem = name_problem(name)
    if problem:
        raise BadRequest(problem)
    return name


def check_path(path: str) -> str:
    """`path` if it is a relative POSIX path inside a skill's folder, else BadRequest."""
    parts = path.split("/")
    if (
        not path
        or len(path) > MAX_PATH_CHARS
        or path.startswith("/")
        or "\\" in path
        or "\x00" in path
        or any(p in ("", ".", "..") for p in parts)
        or re.match(r"^[A-Za-z]:", path)
    ):
        raise BadRequest(f"{path!r} is not a relative path inside the skill's folder")
    if path == LINK_FILE:
        raise BadRequest(f"{LINK_FILE} is reserved for links")
    return path


def link_record(source: SkillLink) -> bytes:
    return json.dumps({"workspace_id": source.workspace_id, "name": source.name}).encode()


def parse_link(data: bytes) -> SkillLink:
    raw: Any = json.loads(data)
    return SkillLink(
        workspace_id=check_workspace(str(raw["workspace_id"])), name=check_name(str(raw["name"]))
    )


def available_skills(backend_or_store: Backend | SkillStore, workspace: WorkspaceConfig | str) -> list[Skill]:
    """The skills a turn of `workspace` may use, by name: installed (links followed), in
    `workspace.skills` when that names some, parsed. Broken ones are logged and left out."""
    store = backend_or_store.skills if isinstance(backend_or_store, Backend) else backend_or_store
    workspace_id = workspace if isinstance(workspace, str) else workspace.id
    allowed = None if isinstance(workspace, str) else workspace.skills
    skills = []
    for name in store.list_skills(workspace_id):
        if allowed is not None and name not in allowed:
            continue
        try:
            skills.append(read_skill(store, workspace_id, name))
        except SkillError as exc:
            log.error(
                "skill left out", extra={"workspace_id": workspace_id, "skill": name, "reason": str(exc)}
            )
    return skills


def read_skill(store: SkillStore, workspace_id: str, name: str) -> Skill:
    """One installed skill, parsed; SkillError when it is missing or broken."""
    source = f"{workspace_id}/{name}/{SKILL_FILE}"
    data = store.read_file(workspace_id, name, SKILL_FILE)
    if data is None:
        raise SkillError(f"{source}: not found")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SkillError(f"{source}: not UTF-8 text ({exc.reason})") from None
    return parse_skill(text, source, folder=name)


class CachedSkills:
    """A SkillStore whose reads are answered from memory for `ttl_s` seconds (see the docstring)."""

    def __init__(
        self,
        store: SkillStore,
        *,
        ttl_s: float = SKILL_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        self.store = store
        self._cache: TTLCache[tuple[str, ...], Any] = TTLCache(max_entries, ttl_s, timer=clock)
        # The local gateway's lane workers share one instance.
        self._lock = threading.Lock()

    def _cached(self, key: tuple[str, ...], read: Callable[[], Any]) -> Any:
        try:
            with self._lock:
                return self._cache[key]
        except KeyError:
            pass
        # Read outside the lock: two threads missing at once both read, which is harmless.
        found = read()
        with self._lock:
            self._cache[key] = found
        return found

    def _forget(self) -> None:
        # Writes are rare (an operator's command) and a link touches two workspaces' answers.
        with self._lock:
            self._cache.clear()

    def list_skills(self, workspace_id: str) -> list[str]:
        return list(self._cached(("list", workspace_id), lambda: self.store.list_skills(workspace_id)))

    def list_files(self, workspace_id: str, name: str) -> list[str]:
        return list(
            self._cached(("files", workspace_id, name), lambda: self.store.list_files(workspace_id, name))
        )

    def read_file(self, workspace_id: str, name: str, path: str) -> bytes | None:
        found: bytes | None = self._cached(
            ("read", workspace_id, name, path), lambda: self.store.read_file(workspace_id, name, path)
        )
        return found

    def link_of(self, workspace_id: str, name: str) -> SkillLink | None:
        found: SkillLink | None = self._cached(
            ("link", workspace_id, name), lambda: self.store.link_of(workspace_id, name)
        )
        return found

    def links_to(self, workspace_id: str, name: str) -> list[SkillLink]:
        return self.store.links_to(workspace_id, name)

    def put_skill(self, workspace_id: str, name: str, files: Mapping[str, bytes]) -> None:
        try:
            self.store.put_skill(workspace_id, name, files)
        finally:
            self._forget()

    def link_skill(self, workspace_id: str, name: str, source: SkillLink) -> None:
        try:
            self.store.link_skill(workspace_id, name, source)
        finally:
            self._forget()

    def remove_skill(self, workspace_id: str, name: str) -> bool:
        try:
            return self.store.remove_skill(workspace_id, name)
        finally:
            self._forget()


def with_skill_cache(backend: Backend, *, ttl_s: float = SKILL_TTL_S) -> Backend:
    """The same backend, its skill store behind a CachedSkills."""
    if isinstance(backend.skills, CachedSkills):
        return backend
    return replace(backend, skills=CachedSkills(backend.skills, ttl_s=ttl_s))


def refuse_if_linked(links: list[SkillLink], workspace_id: str, name: str) -> None:
    """A stored copy other workspaces link to is not removed from under them: ConcurrencyConflict
    naming each link, removed first."""
    if links:
        names = ", ".join(f"{link.workspace_id}/{link.name}" for link in links)
        raise ConcurrencyConflict(f"{workspace_id}/{name} is linked from {names}: remove those links first")

"""Installing skills: from a folder, a SKILL.md's URL, an archive, or a well-known index.

The index is the agent-skills discovery document, schema 0.2.0, served at
`https://host/.well-known/agent-skills/index.json`:

    {"$schema": "...", "skills": [{"name": "pdf", "type": "skill-md" | "archive",
      "description": "...", "url": "pdf/SKILL.md", "digest": "sha256:<hex>"}]}

URLs are relative to the index. Every artifact fetched through an index is checked against its
digest before anything is stored, and its SKILL.md's name must be the entry's name. An archive
(.tar.gz or .zip) holds one skill, at its root or in one top folder named like the skill; an
entry that would land outside that folder (`..`, an absolute path, a link, a device) refuses the
whole archive. Whatever the source, the files are checked as agentskills.io says (shared.skills
.format) and stored together (SkillStore.put_skill); nothing is run. Limits keep a hostile
source from filling the store: MAX_FILES files, MAX_SKILL_BYTES in all, MAX_DOWNLOAD_BYTES a fetch.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import re
import tarfile
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.errors import BadRequest, SigilError
from shared.skills.format import SKILL_FILE, Skill, SkillError, parse_skill
from shared.skills.store import check_path

MAX_FILES = 500
MAX_SKILL_BYTES = 8 * 1024 * 1024
MAX_DOWNLOAD_BYTES = 16 * 1024 * 1024
FETCH_TIMEOUT_S = 30.0
INDEX_PATH = "/.well-known/agent-skills/index.json"
_DIGEST = re.compile(r"^sha256:([0-9a-f]{64})$")


class InstallError(SigilError):
    """A source that can't be installed; the message says which and why."""

    code = "install_refused"
    http_status = 400


class IndexEntry(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    type: Literal["skill-md", "archive"]
    description: str = ""
    url: str
    digest: str = Field(pattern=_DIGEST.pattern)


class SkillIndex(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    schema_: str | None = Field(default=None, alias="$schema")
    skills: list[IndexEntry]


def validate_files(files: Mapping[str, bytes], folder: str, source: str) -> Skill:
    """The skill these files make, if they follow the format (errors name `source`'s files)."""
    if len(files) > MAX_FILES:
        raise InstallError(f"{source}: {len(files)} files (at most {MAX_FILES})")
    total = sum(len(data) for data in files.values())
    if total > MAX_SKILL_BYTES:
        raise InstallError(f"{source}: {total} bytes (at most {MAX_SKILL_BYTES})")
    for path in files:
        try:
            check_path(path)
        except BadRequest as exc:
            raise InstallError(f"{source}: {exc.message}") from None
    if SKILL_FILE not in files:
        raise InstallError(f"{source}: no {SKILL_FILE} at the skill's root")
    try:
        text = files[SKILL_FILE].decode("utf-8")
    except UnicodeDecodeError:
        raise InstallError(f"{source}/{SKILL_FILE}: not UTF-8 text") from None
    return parse_skill(text, f"{source}/{SKILL_FILE}", folder=folder)


def read_folder(folder: Path) -> dict[str, bytes]:
    """A skill folder's files by relative path. Dot-files (.git, .DS_Store) are left out; a
    symbolic link is refused: it could point anywhere on this machine."""
    if not (folder / SKILL_FILE).is_file():
        raise InstallError(f"{folder}: no {SKILL_FILE} in this folder")
    files: dict[str, bytes] = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if any(part.startswith(".") for part in relative.parts):
            continue
        if path.is_symlink():
            raise InstallError(f"{path}: a symbolic link; copy the file it points to instead")
        if path.is_file():
            files[relative.as_posix()] = path.read_bytes()
        if len(files) > MAX_FILES:
            raise InstallError(f"{folder}: more than {MAX_FILES} files")
    return files


def fetch(url: str, *, max_bytes: int = MAX_DOWNLOAD_BYTES) -> bytes:
    """GET `url` (http or https only), at most `max_bytes`."""
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme not in ("http", "https"):
        raise InstallError(f"{url}: only http and https URLs can be fetched")
    # The scheme is checked just above: no file: or custom schemes reach urllib.
    request = urllib.request.Request(url, headers={"User-Agent": "sigil-skill-install"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT_S) as response:  # noqa: S310
            data: bytes = response.read(max_bytes + 1)
    except OSError as exc:
        raise InstallError(f"{url}: can't be fetched ({exc})") from None
    if len(data) > max_bytes:
        raise InstallError(f"{url}: larger than {max_bytes} bytes")
    return data


def check_digest(data: bytes, digest: str, what: str) -> None:
    match = _DIGEST.match(digest)
    if match is None:
        raise InstallError(f"{what}: digest {digest!r} is not 'sha256:<64 hex digits>'")
    actual = hashlib.sha256(data).hexdigest()
    if not hmac.compare_digest(actual, match.group(1)):
        raise InstallError(
            f"{what}: sha256 is {actual}, the index says {match.group(1)}; nothing was installed"
        )


def unpack(data: bytes, source: str) -> tuple[str | None, dict[str, bytes]]:
    """(the archive's top folder, if it has one, and the skill's files relative to it)."""
    entries = _zip_entries(data, source) if data[:2] == b"PK" else _tar_entries(data, source)
    if SKILL_FILE in entries:
        return None, entries
    tops = {path.split("/", 1)[0] for path in entries}
    if len(tops) != 1 or not all("/" in path for path in entries):
        raise InstallError(f"{source}: no {SKILL_FILE} at the root or in one top folder")
    top = tops.pop()
    return top, {path.split("/", 1)[1]: body for path, body in entries.items()}


def _entry_path(name: str, source: str) -> str:
    path = PurePosixPath(name)
    if name.startswith(("/", "\\")) or "\\" in name or ".." in path.parts or re.match(r"^[A-Za-z]:", name):
        raise InstallError(f"{source}: entry {name!r} escapes the skill's folder; nothing was installed")
    return "/".join(p for p in path.parts if p != ".")


def _add(entries: dict[str, bytes], path: str, body: bytes, source: str) -> None:
    if path in entries:
        raise InstallError(f"{source}: {path!r} appears twice")
    entries[path] = body
    if len(entries) > MAX_FILES or sum(len(b) for b in entries.values()) > MAX_SKILL_BYTES:
        raise InstallError(f"{source}: more than {MAX_FILES} files or {MAX_SKILL_BYTES} bytes")


def _tar_entries(data: bytes, source: str) -> dict[str, bytes]:
    entries: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
            for member in archive.getmembers():
                path = _entry_path(member.name, source)
                if member.isdir():
                    continue
                if not member.isfile():
                    # Symlinks, hard links, devices, FIFOs: none is a skill's file.
                    raise InstallError(
                        f"{source}: entry {member.name!r} is a link or special file; nothing was installed"
                    )
                if any(part.startswith(".") for part in path.split("/")):
                    continue
                extracted = archive.extractfile(member)
                body = extracted.read() if extracted else b""
                _add(entries, path, body, source)
    except tarfile.TarError as exc:
        raise InstallError(f"{source}: not a .tar.gz or .zip archive ({exc})") from None
    return entries


def _zip_entries(data: bytes, source: str) -> dict[str, bytes]:
    entries: dict[str, bytes] = {}
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                path = _entry_path(info.filename, source)
                if info.is_dir():
                    continue
                # A symbolic link in a zip is a file whose Unix mode says S_IFLNK.
                if (info.external_attr >> 16) & 0o170000 == 0o120000:
                    raise InstallError(f"{source}: entry {info.filename!r} is a link; nothing was installed")
                if any(part.startswith(".") for part in path.split("/")):
                    continue
                if info.file_size > MAX_SKILL_BYTES:
                    raise InstallError(f"{source}: entry {info.filename!r} is too large")
                _add(entries, path, archive.read(info), source)
    except zipfile.BadZipFile as exc:
        raise InstallError(f"{source}: not a .tar.gz or .zip archive ({exc})") from None
    return entries


def from_archive(data: bytes, source: str, expected: str | None = None) -> tuple[Skill, dict[str, bytes]]:
    top, files = unpack(data, source)
    if SKILL_FILE not in files:
        raise InstallError(f"{source}: no {SKILL_FILE}")
    folder = top or expected or _declared_name(files[SKILL_FILE], source)
    skill = validate_files(files, folder, source)
    if expected is not None and skill.name != expected:
        raise InstallError(
            f"{source}: the skill is named {skill.name!r}, not {expected!r}; nothing was installed"
        )
    return skill, files


def from_skill_md(data: bytes, source: str, expected: str | None = None) -> tuple[Skill, dict[str, bytes]]:
    files = {SKILL_FILE: data}
    folder = expected or _declared_name(data, source)
    skill = validate_files(files, folder, source)
    return skill, files


def _declared_name(skill_md: bytes, source: str) -> str:
    """The name a SKILL.md declares (validated with the rest when the files are)."""
    try:
        return parse_skill(skill_md.decode("utf-8"), f"{source}/{SKILL_FILE}").name
    except UnicodeDecodeError:
        raise InstallError(f"{source}/{SKILL_FILE}: not UTF-8 text") from None


def index_url(url: str) -> str:
    """An index's URL: as given, or for a bare origin (https://host) its well-known index."""
    parts = urllib.parse.urlsplit(url)
    if parts.path in ("", "/") and not parts.query:
        return urllib.parse.urlunsplit((parts.scheme, parts.netloc, INDEX_PATH, "", ""))
    return url


def load_index(url: str) -> SkillIndex:
    data = fetch(url)
    try:
        return SkillIndex.model_validate_json(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InstallError(f"{url}: not an agent-skills index ({where}: {first['msg']})") from None


def from_index_entry(index_url: str, entry: IndexEntry) -> tuple[Skill, dict[str, bytes]]:
    """Fetch, verify (digest, then name) and check one index entry's skill; nothing stored."""
    url = urllib.parse.urljoin(index_url, entry.url)
    data = fetch(url)
    check_digest(data, entry.digest, url)
    if entry.type == "archive":
        return from_archive(data, url, expected=entry.name)
    skill, files = from_skill_md(data, url, expected=entry.name)
    return skill, files


def search(index: SkillIndex, query: str) -> list[IndexEntry]:
    """Entries whose name or description holds every word of `query` (case-insensitive)."""
    words = query.lower().split()
    return [e for e in index.skills if all(w in f"{e.name} {e.description}".lower() for w in words)]


def source_kind(
    source: str,
) -> Literal["folder", "archive-file", "skill-md-file", "index", "archive", "skill-md"]:
    """What `sigil skill install SOURCE` was given."""
    if "://" not in source:
        path = Path(source).expanduser()
        if path.is_dir():
            return "folder"
        if path.is_file():
            return "skill-md-file" if path.name == SKILL_FILE else "archive-file"
        raise InstallError(f"{source}: no such folder or file")
    url_path = urllib.parse.urlsplit(source).path
    if url_path.endswith("/index.json") or url_path in ("", "/"):
        return "index"
    if url_path.endswith((".tar.gz", ".tgz", ".zip")):
        return "archive"
    if url_path.endswith(SKILL_FILE):
        return "skill-md"
    raise InstallError(
        f"{source}: give a SKILL.md's URL, an archive's (.tar.gz, .zip) or an index's "
        f"(https://host{INDEX_PATH}, or just https://host)"
    )


__all__ = [
    "INDEX_PATH",
    "IndexEntry",
    "InstallError",
    "SkillError",
    "SkillIndex",
    "check_digest",
    "fetch",
    "from_archive",
    "from_index_entry",
    "from_skill_md",
    "index_url",
    "load_index",
    "read_folder",
    "search",
    "source_kind",
    "unpack",
    "validate_files",
]

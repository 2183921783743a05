"""Installing skills: from a folder, a SKILL.md's URL, an archive, or a well-known index.

The index is the agent-skills discovery document, schema 0.2.0, served at
`https://host/.well-known/agent-skills/index.json`:

    {"$schema": "...", "skills": [{"name": "pdf", "type": "skill-md" | "archive",
      "description": "...", "url": "pdf/SKILL.md", "digest": "sha256:<hex>"}]}

URLs are relative to the index. Every artifact fetched through an index is checked against its
digest before anything is stored, and its SKILL.md's name must be the entry's name; a SKILL.md
or archive fetched by its own URL is checked against the sha256 the operator gives (`--sha256`),
or installed unchecked only when they say so (`--no-digest`). Only https is fetched (a redirect
included) unless the operator accepts plain http (`--allow-http`): over http anyone on the path
can change an index and the digests it lists. An archive (.tar.gz or .zip) holds one skill, at
its root or in one top folder named like the skill; an entry that would land outside that folder
(`..`, an absolute path, a link, a device) refuses the whole archive. Whatever the source, the
files are checked as agentskills.io says (shared.skills.format) and stored together
(SkillStore.put_skill); nothing is run.

Limits keep a hostile source from filling the store or the memory of the machine installing it:
MAX_DOWNLOAD_BYTES a fetch or a local file, MAX_FILES files and MAX_SKILL_BYTES in all per
skill. An archive is unpacked as a stream and never trusted about sizes: at most MAX_ENTRIES
members and MAX_UNPACKED_BYTES of uncompressed stream (headers and skipped dot-files included),
each member's declared size checked against what is left of MAX_SKILL_BYTES before a byte of it
is read, and read with that bound, so a member that holds more than it declares is cut and
refused. The digest is no help against a bomb: it comes from the same index as the archive.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import hmac
import io
import lzma
import re
import tarfile
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Mapping
from http.client import HTTPMessage
from pathlib import Path, PurePosixPath
from typing import IO, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.errors import BadRequest, SigilError
from shared.skills.format import SKILL_FILE, Skill, SkillError, parse_skill
from shared.skills.store import check_path

MAX_FILES = 500
MAX_SKILL_BYTES = 8 * 1024 * 1024
MAX_DOWNLOAD_BYTES = 16 * 1024 * 1024
# An archive's members (folders and skipped dot-files count) and its uncompressed stream.
MAX_ENTRIES = 2 * MAX_FILES
MAX_UNPACKED_BYTES = 2 * MAX_SKILL_BYTES
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
    total = 0
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if any(part.startswith(".") for part in relative.parts):
            continue
        if path.is_symlink():
            raise InstallError(f"{path}: a symbolic link; copy the file it points to instead")
        if path.is_file():
            # Sized before it is read: a skill folder is not the place for a disk image.
            total += path.stat().st_size
            if total > MAX_SKILL_BYTES:
                raise InstallError(f"{folder}: more than {MAX_SKILL_BYTES} bytes")
            files[relative.as_posix()] = path.read_bytes()
        if len(files) > MAX_FILES:
            raise InstallError(f"{folder}: more than {MAX_FILES} files")
    return files


def read_file(path: Path, *, max_bytes: int = MAX_DOWNLOAD_BYTES) -> bytes:
    """A local SKILL.md or archive, refused (unread) past `max_bytes`, as a fetch would be."""
    try:
        with path.open("rb") as file:
            data = file.read(max_bytes + 1)
    except OSError as exc:
        raise InstallError(f"{path}: can't be read ({exc.strerror})") from None
    if len(data) > max_bytes:
        raise InstallError(f"{path}: larger than {max_bytes} bytes")
    return data


def _check_scheme(url: str, *, allow_http: bool) -> None:
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme == "http" and not allow_http:
        raise InstallError(
            f"{url}: plain http, which anyone on the way can read or change (digests included); "
            "use https, or pass --allow-http to accept it"
        )
    if scheme not in ("http", "https"):
        raise InstallError(f"{url}: only https (or, with --allow-http, http) URLs can be fetched")


class _SchemeCheckedRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to a URL `fetch` would have accepted in the first place: urllib's
    own handler would follow https to http, or to ftp."""

    def __init__(self, *, allow_http: bool) -> None:
        self.allow_http = allow_http

    # urllib calls it with these six positionally: the override cannot take keywords.
    def redirect_request(  # noqa: PLR0917
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        _check_scheme(newurl, allow_http=self.allow_http)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def fetch(url: str, *, allow_http: bool = False, max_bytes: int = MAX_DOWNLOAD_BYTES) -> bytes:
    """GET `url` (https; http with `allow_http`), at most `max_bytes`."""
    _check_scheme(url, allow_http=allow_http)
    opener = urllib.request.build_opener(_SchemeCheckedRedirects(allow_http=allow_http))
    # The scheme is checked just above (and on every redirect): no file: or custom schemes.
    request = urllib.request.Request(url, headers={"User-Agent": "sigil-skill-install"})  # noqa: S310
    try:
        with opener.open(request, timeout=FETCH_TIMEOUT_S) as response:
            data: bytes = response.read(max_bytes + 1)
    except OSError as exc:
        raise InstallError(f"{url}: can't be fetched ({exc})") from None
    if len(data) > max_bytes:
        raise InstallError(f"{url}: larger than {max_bytes} bytes")
    return data


def check_digest(data: bytes, digest: str, what: str, *, given_by: str = "the index") -> None:
    match = _DIGEST.match(digest)
    if match is None:
        raise InstallError(f"{what}: digest {digest!r} is not 'sha256:<64 hex digits>'")
    actual = hashlib.sha256(data).hexdigest()
    if not hmac.compare_digest(actual, match.group(1)):
        raise InstallError(
            f"{what}: sha256 is {actual}, {given_by} says {match.group(1)}; nothing was installed"
        )


def operator_digest(sha256: str) -> str:
    """`--sha256`'s value as a digest: 64 hex digits, with or without `sha256:` (any case)."""
    value = sha256.strip().lower().removeprefix("sha256:")
    digest = f"sha256:{value}"
    if _DIGEST.match(digest) is None:
        raise InstallError(f"--sha256 {sha256!r}: give the file's sha256 as 64 hex digits")
    return digest


def from_url(
    url: str, *, sha256: str | None = None, no_digest: bool = False, allow_http: bool = False
) -> tuple[Skill, dict[str, bytes]]:
    """A SKILL.md or archive fetched by its own URL: no index vouches for it, so the operator
    gives its sha256 (checked before anything is unpacked) or says `no_digest` to take it as is."""
    kind = source_kind(url)
    if kind not in ("archive", "skill-md"):
        raise InstallError(f"{url}: not the URL of a SKILL.md or an archive")
    if sha256 is not None and no_digest:
        raise InstallError("give --sha256 or --no-digest, not both")
    if sha256 is None and not no_digest:
        raise InstallError(
            f"{url}: no index vouches for this file, so nothing would check what arrives; pass "
            "--sha256 <its sha256, as `sha256sum` prints it>, or --no-digest to install it unchecked"
        )
    digest = None if sha256 is None else operator_digest(sha256)
    data = fetch(url, allow_http=allow_http)
    if digest is not None:
        check_digest(data, digest, url, given_by="--sha256")
    if kind == "archive":
        return from_archive(data, url)
    return from_skill_md(data, url)


def from_file(path: Path, *, sha256: str | None = None) -> tuple[Skill, dict[str, bytes]]:
    """A local SKILL.md (its folder names it) or archive, checked against `sha256` when given."""
    data = read_file(path)
    if sha256 is not None:
        check_digest(data, operator_digest(sha256), str(path), given_by="--sha256")
    if path.name == SKILL_FILE:
        resolved = path.resolve()
        return from_skill_md(data, str(resolved), expected=resolved.parent.name)
    return from_archive(data, str(path))


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


class _Unpacked:
    """An archive's files as they are read, within the limits: MAX_ENTRIES members seen,
    MAX_FILES files and MAX_SKILL_BYTES kept. Sizes are reserved from what a member declares
    before it is read, and its body is read with that bound."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.files: dict[str, bytes] = {}
        self.reserved: set[str] = set()
        self.members = 0
        self.total = 0

    def seen(self) -> None:
        self.members += 1
        if self.members > MAX_ENTRIES:
            raise InstallError(f"{self.source}: more than {MAX_ENTRIES} entries; nothing was installed")

    def reserve(self, path: str, declared: int) -> None:
        if path in self.reserved:
            raise InstallError(f"{self.source}: {path!r} appears twice")
        if len(self.reserved) >= MAX_FILES:
            raise InstallError(f"{self.source}: more than {MAX_FILES} files; nothing was installed")
        if declared < 0 or declared > MAX_SKILL_BYTES - self.total:
            raise InstallError(
                f"{self.source}: entry {path!r} declares {declared} bytes, which would take the skill "
                f"past {MAX_SKILL_BYTES} bytes; nothing was installed"
            )
        self.reserved.add(path)
        self.total += declared

    def read(self, path: str, declared: int, body: IO[bytes]) -> None:
        """Store `path` from `body`, reading no more than one byte past what it declared."""
        data = body.read(declared + 1)
        if len(data) != declared:
            raise InstallError(
                f"{self.source}: entry {path!r} holds other than the {declared} bytes it declares; "
                "nothing was installed"
            )
        self.files[path] = data


class _Capped:
    """A stream read through, refused once more than `limit` bytes came out of it: the bound on
    decompressing that no header of the archive can talk past."""

    def __init__(self, inner: io.BufferedIOBase, limit: int, source: str) -> None:
        self.inner, self.limit, self.source = inner, limit, source
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        room = self.limit - self.count + 1
        data = self.inner.read(room if size < 0 else min(size, room))
        self.count += len(data)
        if self.count > self.limit:
            raise InstallError(
                f"{self.source}: unpacks to more than {self.limit} bytes (folders and dot-files "
                "included); nothing was installed"
            )
        return data

    # tarfile's stream mode only reads; the rest of its file protocol is never called.
    def write(self, data: bytes) -> int:
        raise io.UnsupportedOperation("read only")

    def tell(self) -> int:
        return self.count

    def seek(self, pos: int) -> int:
        raise io.UnsupportedOperation("a stream")

    def close(self) -> None:
        self.inner.close()


def _decompressed(data: bytes) -> io.BufferedIOBase:
    """The tar stream inside `data`, decompressed as it is read (gzip, bzip2, xz, or none)."""
    raw = io.BytesIO(data)
    if data[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw)
    if data[:3] == b"BZh":
        return bz2.BZ2File(raw)
    if data[:6] == b"\xfd7zXZ\x00":
        return lzma.LZMAFile(raw)
    return raw


def _tar_entries(data: bytes, source: str) -> dict[str, bytes]:
    unpacked = _Unpacked(source)
    stream = _Capped(_decompressed(data), MAX_UNPACKED_BYTES, source)
    try:
        # Stream mode ("r|"): one pass, nothing seeks back, and every byte comes through `stream`.
        with tarfile.open(fileobj=stream, mode="r|") as archive:
            for member in archive:
                unpacked.seen()
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
                unpacked.reserve(path, member.size)
                extracted = archive.extractfile(member)
                unpacked.read(path, member.size, extracted or io.BytesIO())
    except (tarfile.TarError, OSError, EOFError, lzma.LZMAError) as exc:
        raise InstallError(f"{source}: not a .tar.gz or .zip archive ({exc})") from None
    return unpacked.files


def _zip_entries(data: bytes, source: str) -> dict[str, bytes]:
    unpacked = _Unpacked(source)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
            if len(infos) > MAX_ENTRIES:
                raise InstallError(f"{source}: {len(infos)} entries (at most {MAX_ENTRIES})")
            # Every declared size is known from the central directory: all are reserved before the
            # first byte is inflated, so a bomb is refused without reading any of it.
            wanted: list[tuple[str, zipfile.ZipInfo]] = []
            for info in infos:
                path = _entry_path(info.filename, source)
                if info.is_dir():
                    continue
                # A symbolic link in a zip is a file whose Unix mode says S_IFLNK.
                if (info.external_attr >> 16) & 0o170000 == 0o120000:
                    raise InstallError(f"{source}: entry {info.filename!r} is a link; nothing was installed")
                if any(part.startswith(".") for part in path.split("/")):
                    continue
                unpacked.reserve(path, info.file_size)
                wanted.append((path, info))
            for path, info in wanted:
                with archive.open(info) as body:
                    unpacked.read(path, info.file_size, body)
    except (zipfile.BadZipFile, NotImplementedError, OSError, EOFError) as exc:
        raise InstallError(f"{source}: not a .tar.gz or .zip archive ({exc})") from None
    return unpacked.files


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


def load_index(url: str, *, allow_http: bool = False) -> SkillIndex:
    data = fetch(url, allow_http=allow_http)
    try:
        return SkillIndex.model_validate_json(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InstallError(f"{url}: not an agent-skills index ({where}: {first['msg']})") from None


def from_index_entry(
    index_url: str, entry: IndexEntry, *, allow_http: bool = False
) -> tuple[Skill, dict[str, bytes]]:
    """Fetch, verify (digest, then name) and check one index entry's skill; nothing stored."""
    url = urllib.parse.urljoin(index_url, entry.url)
    data = fetch(url, allow_http=allow_http)
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
    "from_file",
    "from_index_entry",
    "from_skill_md",
    "from_url",
    "index_url",
    "load_index",
    "operator_digest",
    "read_file",
    "read_folder",
    "search",
    "source_kind",
    "unpack",
    "validate_files",
]

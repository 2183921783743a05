"""The embedded data dir holds every user's conversations, memory and secrets: it is its owner's
alone however it came to exist (issue 25). A directory made 0755 and databases made 0644 (by an
older Sigil, by hand, under a loose umask) are tightened when the backend opens them, -wal and
-shm included; new ones are owner-only whatever the umask; and the commands that may be the first
to touch the data dir (`sigil skill install`, the identity commands) create it owner-only too."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest
from typer.testing import CliRunner

from shared.adapters.embedded import build_embedded_backend
from shared.cli import app
from shared.config import Settings
from shared.models import Session

DATABASES = ("sigil.db", "index.db", "queue.db")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def readable_by_others(data_dir: Path) -> dict[str, str]:
    """Every entry directly in the data dir (and the dir itself) that group or others may use."""
    loose = {str(p.name): oct(mode(p)) for p in data_dir.iterdir() if mode(p) & 0o077}
    if mode(data_dir) & 0o077:
        loose["."] = oct(mode(data_dir))
    return loose


@pytest.fixture
def umask() -> Iterator[None]:
    # The loosest umask: whatever is created then is created with exactly the mode asked for.
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_an_existing_world_readable_data_dir_is_restricted_when_opened(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a data dir as an older Sigil left it: 0755, databases 0644, one of them mid-WAL
    data_dir = tmp_path / ".sigil"
    data_dir.mkdir(mode=0o755)
    os.chmod(data_dir, 0o755)
    for name in DATABASES:
        apsw.Connection(str(data_dir / name)).close()
    other = apsw.Connection(str(data_dir / "sigil.db"))
    other.execute("PRAGMA journal_mode=WAL")
    other.execute("CREATE TABLE IF NOT EXISTS t (x)")
    (data_dir / "secrets.json").write_text("{}")
    for path in data_dir.iterdir():
        os.chmod(path, 0o644)
    assert {"sigil.db-wal", "sigil.db-shm"} <= {p.name for p in data_dir.iterdir()}
    assert readable_by_others(data_dir)

    # When the backend opens it
    with caplog.at_level(logging.WARNING):
        backend = build_embedded_backend(Settings(data_dir=data_dir, embedding_model="none"))
    try:
        backend.secrets.names()
        # Then nothing in it is readable by anyone else, and the change was logged
        assert readable_by_others(data_dir) == {}
        assert mode(data_dir) == 0o700
        assert mode(data_dir / "sigil.db-wal") == 0o600 and mode(data_dir / "sigil.db-shm") == 0o600
        assert "restricted to its owner" in caplog.text
    finally:
        backend.close()
        other.close()


def test_a_new_data_dir_is_owner_only_whatever_the_umask(tmp_path: Path, umask: None) -> None:
    data_dir = tmp_path / "deep" / ".sigil"
    backend = build_embedded_backend(Settings(data_dir=data_dir, embedding_model="none"))
    try:
        # A write leaves the main database with its -wal and -shm while the backend is open
        backend.sessions.save(Session(workspace_id="default", id="s1"), expected_version=0)
        backend.secrets.ensure("web/default")
        names = {p.name for p in data_dir.iterdir()}
        assert set(DATABASES) | {"sigil.db-wal", "sigil.db-shm", "secrets.json"} <= names
        assert readable_by_others(data_dir) == {}
        assert mode(data_dir) == 0o700
    finally:
        backend.close()


def test_a_skill_install_creates_the_data_dir_owner_only(tmp_path: Path, umask: None) -> None:
    folder = tmp_path / "src" / "notes"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: notes\ndescription: Notes.\n---\nBody.\n")
    data_dir = tmp_path / "fresh"

    result = CliRunner().invoke(
        app, ["skill", "install", str(folder), "-w", "ops", "--data-dir", str(data_dir)]
    )

    assert result.exit_code == 0, result.output
    assert mode(data_dir) == 0o700


def test_an_attached_file_is_owner_only_whatever_the_umask(tmp_path: Path, umask: None) -> None:
    # Given the loosest umask, when the turn stores a file a sender attached (docs/media.md)
    import hashlib

    from shared.media.ids import media_id
    from shared.models.media import MediaItem

    data_dir = tmp_path / "data"
    backend = build_embedded_backend(Settings(data_dir=data_dir))
    try:
        assert backend.media is not None
        data = b"%PDF-1.4 private"
        item = MediaItem(
            id=media_id("default", "telegram", "f1"),
            workspace_id="default",
            session_id="s",
            user_id="u",
            channel="telegram",
            source_id="f1",
            kind="document",
            mime_type="application/pdf",
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
        )
        backend.media.put(item, data)
    finally:
        backend.close()
    # Then the media folders are 0700 and the file 0600, as every other part of the data dir
    assert mode(data_dir / "media") == 0o700
    assert mode(data_dir / "media" / "default") == 0o700
    assert mode(data_dir / "media" / "default" / item.id) == 0o600

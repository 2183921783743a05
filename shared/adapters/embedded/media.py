"""MediaStore on the data directory: bytes in <data_dir>/media/<ws>/<id>, records in sigil.db.

The files are their owner's alone like the rest of the data dir (directories 0700, files 0600:
shared.adapters.embedded.owner_only): they are what people sent their agent. A file is written
to a temporary name and renamed over, so a reader never sees half of one; the record is written
after the bytes, so a record always has its file (a crash between the two leaves an orphan file,
which the next put of the same id overwrites: ids are derived from the platform's file id).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shared import serde
from shared.adapters.embedded.db import to_us
from shared.adapters.embedded.owner_only import FILE_MODE, open_data_dir
from shared.media.ids import check_media_id
from shared.models import WorkspaceConfig
from shared.models.media import MediaItem
from shared.skills import check_workspace

if TYPE_CHECKING:
    from shared.adapters.embedded.db import Database

_MIGRATIONS = [
    """
    CREATE TABLE media (
        workspace_id TEXT NOT NULL,
        id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        created_us INTEGER NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (workspace_id, id)
    ) WITHOUT ROWID;
    CREATE INDEX media_user ON media (workspace_id, user_id);
    CREATE INDEX media_created ON media (created_us);
    """,
]


class FileMediaStore:
    def __init__(self, db: Database, data_dir: Path) -> None:
        self._db = db
        self.root = Path(data_dir) / "media"
        db.migrate("media", _MIGRATIONS)

    def _path(self, workspace_id: str, media_id: str) -> Path:
        # Both names are checked: neither may climb out of the workspace's folder.
        return self.root / check_workspace(workspace_id) / check_media_id(media_id)

    def put(self, item: MediaItem, data: bytes) -> None:
        target = self._path(item.workspace_id, item.id)
        # Each level made (or tightened) owner-only: mkdir's `parents` would make them 0777 less
        # the umask.
        for folder in (self.root.parent, self.root, target.parent):
            open_data_dir(folder)
        staging = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}")
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            staging.replace(target)
        finally:
            staging.unlink(missing_ok=True)
        self._write(item)

    def _write(self, item: MediaItem) -> None:
        self._db.execute(
            "INSERT INTO media (workspace_id, id, user_id, session_id, created_us, record) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (workspace_id, id) DO UPDATE SET "
            "user_id = excluded.user_id, session_id = excluded.session_id, record = excluded.record",
            (
                item.workspace_id,
                item.id,
                item.user_id,
                item.session_id,
                to_us(item.created_at),
                serde.dumps(item),
            ),
        )

    def get(self, workspace_id: str, media_id: str) -> MediaItem | None:
        row = self._db.query_one(
            "SELECT record FROM media WHERE workspace_id = ? AND id = ?", (workspace_id, media_id)
        )
        return None if row is None else serde.loads(MediaItem, row[0])

    def read(self, workspace_id: str, media_id: str) -> bytes | None:
        path = self._path(workspace_id, media_id)
        if self.get(workspace_id, media_id) is None:
            return None
        if path.is_symlink() or not path.is_file():
            return None
        return path.read_bytes()

    def update(self, item: MediaItem) -> None:
        # Only an item already stored: its bytes stay as they were.
        if self.get(item.workspace_id, item.id) is not None:
            self._write(item)

    def list_media(
        self, workspace_id: str, *, user_id: str | None = None, session_id: str | None = None
    ) -> list[MediaItem]:
        sql = "SELECT record FROM media WHERE workspace_id = ?"
        params: list[Any] = [workspace_id]
        if user_id is not None:
            sql += " AND user_id = ?"
            params.append(user_id)
        if session_id is not None:
            sql += " AND session_id = ?"
            params.append(session_id)
        rows = self._db.query(sql + " ORDER BY created_us, id", params)
        return [serde.loads(MediaItem, row[0]) for row in rows]

    def delete_user(self, workspace_id: str, user_id: str) -> int:
        items = self.list_media(workspace_id, user_id=user_id)
        for item in items:
            self._delete(item.workspace_id, item.id)
        return len(items)

    def sweep(self, before: datetime, *, workspace_id: str | None = None) -> int:
        """Delete the files stored before `before` (the local stand-in for the bucket's lifecycle)."""
        sql = "SELECT workspace_id, id FROM media WHERE created_us < ?"
        params: list[Any] = [to_us(before)]
        if workspace_id is not None:
            sql += " AND workspace_id = ?"
            params.append(workspace_id)
        rows = self._db.query(sql, params)
        for ws, media_id in rows:
            self._delete(str(ws), str(media_id))
        return len(rows)

    def sweep_expired(self, workspaces: Iterable[WorkspaceConfig], now: datetime) -> int:
        """Delete each workspace's files older than its MediaLimits.retention_days: what the
        media bucket's lifecycle rule does in the cloud (the local gateway runs it hourly)."""
        return sum(
            self.sweep(now - timedelta(days=ws.media.retention_days), workspace_id=ws.id) for ws in workspaces
        )

    def _delete(self, workspace_id: str, media_id: str) -> None:
        # The bytes first: a record left by a crash here is found and deleted again next time.
        self._path(workspace_id, media_id).unlink(missing_ok=True)
        self._db.execute("DELETE FROM media WHERE workspace_id = ? AND id = ?", (workspace_id, media_id))

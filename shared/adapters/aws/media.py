"""MediaStore on the stack's media bucket (docs/media.md): `media/<ws>/<id>/bytes` and
`media/<ws>/<id>/record.json`.

Everything under one per-workspace prefix, so the bucket's lifecycle rule expires a file and its
record together and an IAM condition could scope a role to one workspace. The record is its own
object so a transcript or extracted text (up to MediaLimits.max_chars, too large for a DynamoDB
item at the top of its range) rewrites it without touching the bytes. Encrypted at rest
(S3-managed keys, as the bucket's default and asked for on every put).

Listing a workspace's files reads one record per file: the console and `sigil` erasure ask it,
never the turn, which finds a file by its id.
"""

from __future__ import annotations

from shared import serde
from shared.adapters.aws.s3 import S3Bucket
from shared.media.ids import check_media_id
from shared.models.media import MediaItem
from shared.skills import check_workspace

PREFIX = "media/"
BYTES = "bytes"
RECORD = "record.json"


class S3MediaStore(S3Bucket):
    def _prefix(self, workspace_id: str, media_id: str | None = None) -> str:
        base = f"{PREFIX}{check_workspace(workspace_id)}/"
        return base if media_id is None else f"{base}{check_media_id(media_id)}/"

    def _put(self, key: str, body: bytes, content_type: str) -> None:
        self.client.put_object(
            Bucket=self.bucket,
            Key=key,
            Body=body,
            ContentType=content_type,
            ServerSideEncryption="AES256",
        )

    def put(self, item: MediaItem, data: bytes) -> None:
        prefix = self._prefix(item.workspace_id, item.id)
        # The bytes first: a record always has its file.
        self._put(prefix + BYTES, data, item.mime_type)
        self._put(prefix + RECORD, serde.dumps(item).encode(), "application/json")

    def get(self, workspace_id: str, media_id: str) -> MediaItem | None:
        record = self._get(self._prefix(workspace_id, media_id) + RECORD)
        return None if record is None else serde.loads(MediaItem, record)

    def read(self, workspace_id: str, media_id: str) -> bytes | None:
        return self._get(self._prefix(workspace_id, media_id) + BYTES)

    def update(self, item: MediaItem) -> None:
        prefix = self._prefix(item.workspace_id, item.id)
        if self._get(prefix + RECORD) is not None:
            self._put(prefix + RECORD, serde.dumps(item).encode(), "application/json")

    def list_media(
        self, workspace_id: str, *, user_id: str | None = None, session_id: str | None = None
    ) -> list[MediaItem]:
        items = []
        for key in self._keys(self._prefix(workspace_id)):
            if not key.endswith("/" + RECORD):
                continue
            record = self._get(key)
            if record is None:  # expired or erased since the listing
                continue
            item: MediaItem = serde.loads(MediaItem, record)
            if user_id is not None and item.user_id != user_id:
                continue
            if session_id is not None and item.session_id != session_id:
                continue
            items.append(item)
        return sorted(items, key=lambda i: (i.created_at, i.id))

    def delete_user(self, workspace_id: str, user_id: str) -> int:
        items = self.list_media(workspace_id, user_id=user_id)
        keys = [self._prefix(workspace_id, i.id) + name for i in items for name in (BYTES, RECORD)]
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1,000 keys
            batch = [{"Key": k} for k in keys[start : start + 1000]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
        return len(items)

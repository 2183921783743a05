"""The chat page's uploads on the media bucket (ports.MediaUploads, shared.media.upload).

A browser posts a file straight to S3 with a presigned POST, to `media/<ws>/<id>/upload`: beside
the file's bytes and record (shared.adapters.aws.media), under the workspace's prefix, so the
bucket's lifecycle expires an upload nobody confirmed with everything else. The POST's policy
bounds the size (`content-length-range`), pins the key, the encryption and the slot's metadata
(the session and user it was issued for: the confirm step reads them back, so a page cannot post
into another person's slot), and expires in minutes.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from shared.adapters.aws.media import PREFIX, S3MediaStore
from shared.adapters.aws.s3 import is_missing
from shared.media.ids import check_media_id
from shared.ports import PresignedUpload, StagedUpload
from shared.skills import check_workspace

UPLOAD = "upload"


class S3MediaUploads:
    """Over the bucket and S3 client of the media store the uploads end up in."""

    def __init__(self, store: S3MediaStore) -> None:
        self.store = store

    def key(self, workspace_id: str, media_id: str) -> str:
        return f"{PREFIX}{check_workspace(workspace_id)}/{check_media_id(media_id)}/{UPLOAD}"

    def presign(
        self,
        workspace_id: str,
        media_id: str,
        *,
        max_bytes: int,
        metadata: dict[str, str],
        expires_s: int,
    ) -> PresignedUpload:
        fields = {"x-amz-server-side-encryption": "AES256"} | {
            f"x-amz-meta-{name}": value for name, value in metadata.items()
        }
        # Every field the form carries is pinned by a condition: a form that changes one, or
        # posts more than max_bytes, is refused by S3 itself.
        conditions: list[Any] = [["content-length-range", 1, max_bytes]]
        conditions += [{name: value} for name, value in fields.items()]
        post = self.store.client.generate_presigned_post(
            Bucket=self.store.bucket,
            Key=self.key(workspace_id, media_id),
            Fields=fields,
            Conditions=conditions,
            ExpiresIn=expires_s,
        )
        return PresignedUpload(url=str(post["url"]), fields={k: str(v) for k, v in post["fields"].items()})

    def _object(self, action: str, workspace_id: str, media_id: str) -> Any:
        """`action` (head_object, get_object) on the upload's object; None when there is none."""
        try:
            return getattr(self.store.client, action)(
                Bucket=self.store.bucket, Key=self.key(workspace_id, media_id)
            )
        except ClientError as exc:
            if is_missing(exc):
                return None
            raise

    def staged(self, workspace_id: str, media_id: str) -> StagedUpload | None:
        head = self._object("head_object", workspace_id, media_id)
        if head is None:
            return None
        return StagedUpload(size=int(head["ContentLength"]), metadata=dict(head.get("Metadata") or {}))

    def read_staged(self, workspace_id: str, media_id: str) -> bytes | None:
        got = self._object("get_object", workspace_id, media_id)
        if got is None:
            return None
        body: bytes = got["Body"].read()
        return body

    def discard(self, workspace_id: str, media_id: str) -> None:
        self.store.client.delete_object(Bucket=self.store.bucket, Key=self.key(workspace_id, media_id))

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

from shared.adapters.aws import clients
from shared.adapters.aws.media import PREFIX
from shared.media.ids import check_media_id
from shared.ports import PresignedUpload, StagedUpload
from shared.skills import check_workspace

UPLOAD = "upload"
_MISSING = {"NoSuchKey", "404", "NotFound"}


class S3MediaUploads:
    def __init__(self, bucket: str, *, region: str | None = None, client: Any = None) -> None:
        self.bucket = bucket
        self.region = region
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = clients.s3(self.region)
        return self._client

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
        post = self.client.generate_presigned_post(
            Bucket=self.bucket,
            Key=self.key(workspace_id, media_id),
            Fields=fields,
            Conditions=conditions,
            ExpiresIn=expires_s,
        )
        return PresignedUpload(url=str(post["url"]), fields={k: str(v) for k, v in post["fields"].items()})

    def staged(self, workspace_id: str, media_id: str) -> StagedUpload | None:
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self.key(workspace_id, media_id))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _MISSING:
                return None
            raise
        return StagedUpload(size=int(head["ContentLength"]), metadata=dict(head.get("Metadata") or {}))

    def read_staged(self, workspace_id: str, media_id: str) -> bytes | None:
        try:
            got = self.client.get_object(Bucket=self.bucket, Key=self.key(workspace_id, media_id))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _MISSING:
                return None
            raise
        body: bytes = got["Body"].read()
        return body

    def discard(self, workspace_id: str, media_id: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self.key(workspace_id, media_id))

"""One S3 bucket as the adapters use it: the client built on first use, a read that answers None
for a missing object, and the keys under a prefix (skills, media, the sandbox's compiled cache)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from botocore.exceptions import ClientError

from shared.adapters.aws import clients

# What S3 answers for a key that is not there: NoSuchKey to a GET, 404 to a HEAD (and, to a role
# without s3:ListBucket, 403 instead: the stack grants listing where a miss must read as one).
MISSING = frozenset({"NoSuchKey", "404", "NotFound"})


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def is_missing(exc: ClientError) -> bool:
    return error_code(exc) in MISSING


class S3Bucket:
    def __init__(self, bucket: str, *, region: str | None = None, client: Any = None) -> None:
        self.bucket = bucket
        self.region = region
        self._client = client

    @property
    def client(self) -> Any:
        # Built on first use: a turn that touches no object of this bucket never builds one.
        if self._client is None:
            self._client = clients.s3(self.region)
        return self._client

    def _get(self, key: str) -> bytes | None:
        try:
            body: bytes = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if is_missing(exc):
                return None
            raise
        return body

    def _keys(self, prefix: str) -> Iterator[str]:
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                yield item["Key"]

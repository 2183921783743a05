"""CompiledCodeStore on S3: the sandbox's compiled runtime, shared by the execution environments
(shared.sandbox.compiled; docs/sandbox.md#the-compile-and-its-cache).

Objects live under `sandbox/` of the stack's sandbox-cache bucket. Writes are conditional
(If-None-Match: *), so an object, once there, is never replaced; the bucket's policy refuses
every other put, and every writer but the precompile function's role
(infra/constructs/sandbox_cache.py). The agent only reads.
"""

from __future__ import annotations

import logging

from botocore.exceptions import ClientError

from shared.adapters.aws import clients
from shared.adapters.aws.s3 import S3Bucket, error_code

log = logging.getLogger("sigil.sandbox")

PREFIX = "sandbox/"
_TAKEN = {"PreconditionFailed", "412", "ConditionalRequestConflict"}


class S3CompiledCache(S3Bucket):
    def get(self, key: str) -> bytes | None:
        return self._get(PREFIX + key)

    def put_once(self, key: str, data: bytes) -> bool:
        try:
            self.client.put_object(Bucket=self.bucket, Key=PREFIX + key, Body=data, IfNoneMatch="*")
        except ClientError as exc:
            if error_code(exc) in _TAKEN:
                return False
            raise
        return True


class PrecompileRequest:
    """Asks the precompile function, asynchronously, to fill the cache: what an agent environment
    that found it empty does, since only that function may write there."""

    def __init__(self, function_name: str, *, region: str | None = None) -> None:
        self.function_name, self.region = function_name, region

    def __call__(self) -> None:
        try:
            clients.lambda_(self.region).invoke(
                FunctionName=self.function_name, InvocationType="Event", Payload=b"{}"
            )
        except ClientError:
            # The environment compiles for itself either way; the next deploy's trigger fills it.
            log.warning("sandbox precompile request failed", exc_info=True)

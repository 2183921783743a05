"""EmbeddingCache on DynamoDB: one item per (model id, content hash) in the memory table.

The memory table already has the TTL attribute this cache needs for its 30-day eviction, and the
agent and consolidate roles can already read and write it, so no table of its own is needed. The
items hold no text and no workspace data (a SHA-256 of a text and that text's vector), which is
why they are the one kind of base-table item whose key does not begin with `WS#` (see
docs/dynamodb.md): a workspace could only find an entry by already knowing the exact text.

Item: pk `EMBED#{model_id}#{sha256}`, sk `EMBEDDING`, `vector` (B: little-endian float32),
`ttl` (N). One partition per entry spreads a large backfill's writes over the table's partitions.
DynamoDB deletes expired items lazily (within days), so reads also skip an entry past its ttl.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from shared.adapters.aws.dynamodb.table import TTL_ATTRIBUTE, Table
from shared.memory.embeddings.cache import CACHE_TTL_DAYS, pack_vector, unpack_vector

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

SORT_KEY = "EMBEDDING"


def cache_pk(model_id: str, content_hash: str) -> str:
    return f"EMBED#{model_id}#{content_hash}"


class DynamoEmbeddingCache(Table):
    def __init__(
        self,
        table_name: str,
        *,
        client: DynamoDBClient | None = None,
        region: str | None = None,
        ttl: timedelta = timedelta(days=CACHE_TTL_DAYS),
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(table_name, client, region)
        self._ttl_s = int(ttl.total_seconds())
        self.clock = clock  # epoch seconds, as DynamoDB's TTL counts

    def get_many(self, model_id: str, hashes: Sequence[str]) -> dict[str, list[float]]:
        # BatchGetItem refuses a request that names one key twice.
        unique = list(dict.fromkeys(hashes))
        if not unique:
            return {}
        by_pk = {cache_pk(model_id, h): h for h in unique}
        keys = [{"pk": {"S": pk}, "sk": {"S": SORT_KEY}} for pk in by_pk]
        now = int(self.clock())
        found: dict[str, list[float]] = {}
        for item in self.batch_get(keys):
            if int(item[TTL_ATTRIBUTE]["N"]) <= now:
                continue
            content_hash = by_pk.get(item["pk"]["S"])
            if content_hash is not None:
                found[content_hash] = unpack_vector(bytes(item["vector"]["B"]))
        return found

    def put_many(self, model_id: str, vectors: Mapping[str, Sequence[float]]) -> None:
        if not vectors:
            return
        expires = int(self.clock()) + self._ttl_s
        requests: list[Any] = [
            {
                "PutRequest": {
                    "Item": {
                        "pk": {"S": cache_pk(model_id, h)},
                        "sk": {"S": SORT_KEY},
                        "vector": {"B": pack_vector(v)},
                        TTL_ATTRIBUTE: {"N": str(expires)},
                    }
                }
            }
            for h, v in vectors.items()
        ]
        self.batch_write(requests)

# Imports of opensearchpy, botocore and boto3 sit inside functions on purpose (see below).
"""MemoryIndex over OpenSearch (opensearch-py): BM25 on `text`, k-NN on `vector`, one index.

Isolation is structural: every document is written with `routing=workspace_id` under the id
`{workspace_id}:{doc.id}` (workspace ids cannot contain ':', so two workspaces never share an id),
and every read carries a `term` filter on `workspace_id` plus the same routing.

A document's conversational context (the neighbouring messages the memory writer puts in metadata
"context") is indexed in a `context` text field and searched with the text at half its weight
(`CONTEXT_BOOST`), as the embedded index weights its FTS5 context column; `_source` holds it there
and not in `metadata`, so it is stored once, and hits give it back in metadata as written.
The facts extracted from a message (metadata "facts", shared.memory.fact_keys) are a `facts` text
field the same way, matched at `FACTS_BOOST`; `get_docs` reads a record's documents back for
rewriting them with their facts.

Scopes (shared.memory.scope.visible): each document's `scope` object is mapped (conversation and
users as keywords, group and shared as booleans), and every search adds one filter clause, a
`bool` of `should` clauses with minimum_should_match 1 (its session, its conversation, one of its
users, shared), to the BM25 query's filters and to the k-NN query's own `filter`, so k-NN ranks
only the visible documents. A document without a scope (written before scopes existed) matches
only its session's clause. An index created before scopes gets the fields by put_mapping on
first use (adding fields to a strict mapping is allowed).

Search sends the BM25 and the k-NN query in one `_msearch` request (one round trip) and returns
both rankings untouched: fusing them is shared code above the port (shared.memory.fusion).

opensearchpy and botocore are imported inside the functions that need them, never at module
import: the webhook function imports shared.adapters.aws and must not pay for either SDK.

Local stand-ins: osmem-server (PyPI) accepts this index's mapping, `knn_vector` included, but
answers every `knn` query with an error, which this adapter raises as OpenSearchIndexError. For a
server that rejects the `knn_vector` mapping itself, `knn=False` creates the index without the
k-NN setting and field: vectors are then not stored and a query with a vector is an error, so a
misconfigured index can never pass for a working one.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import TYPE_CHECKING, Any, Final, Literal
from urllib.parse import urlsplit

from shared import serde
from shared.coldstart import gc_paused
from shared.deadline import current, cut, cut_by, out_of_time, passed
from shared.errors import SigilError
from shared.memory.search import CONTEXT_KEY, FACTS_KEY
from shared.memory.vectors import usable_vector
from shared.models import (
    ID_PATTERN,
    IndexDoc,
    IndexHit,
    IndexQuery,
    IndexResult,
    MemoryScope,
    MemoryTier,
    RecallScope,
)

if TYPE_CHECKING:
    from botocore.credentials import Credentials
    from opensearchpy import OpenSearch

    from shared.config import Settings

logger = logging.getLogger(__name__)

DEFAULT_INDEX = "sigil-memory"
# all-MiniLM-L6-v2, the offline embedding model of development, tests and benchmarks.
DEFAULT_DIMENSION = 384
# Amazon OpenSearch Service caps an HTTP request at 10 MiB on its smallest instance types; a bulk
# chunk well below that never trips the limit whatever the domain's size.
_MAX_BULK_CHUNK_BYTES = 5 * 1024 * 1024
_BULK_CHUNK_DOCS = 500
_WORKSPACE_RE = re.compile(ID_PATTERN)

# BM25 weight of the `context` field relative to `text` (the embedded index's DEFAULT_CONTEXT_WEIGHT).
CONTEXT_BOOST = 0.5
# BM25 weight of the `facts` field (the facts extracted from a message: fact-augmented keys,
# shared.memory.fact_keys) relative to `text` (the embedded index's DEFAULT_FACTS_WEIGHT).
FACTS_BOOST = 0.5
# The english analyser stems ("deployed" finds "deploy") and drops stop words.
_TEXT_FIELD: dict[str, Any] = {"type": "text", "analyzer": "english"}
# MemoryScope, as the filters match it (exact values: keywords and booleans).
_SCOPE_FIELD: dict[str, Any] = {
    "properties": {
        "conversation": {"type": "keyword"},
        "users": {"type": "keyword"},
        "group": {"type": "boolean"},
        "shared": {"type": "boolean"},
    }
}
# Records whose documents stamp_scopes looks up per request (each a terms and a prefix clause).
_STAMP_CHUNK = 100

Refresh = Literal["wait_for", "true", "false"]
Engine = Literal["lucene", "faiss"]


class OpenSearchIndexError(SigilError):
    """The index answered with an error, or some documents of a bulk request were refused."""

    code = "index_error"
    http_status = 502

    def __init__(self, message: str, *, failures: Sequence[Mapping[str, Any]] = ()) -> None:
        super().__init__(message)
        self.failures = list(failures)


# ---------------------------------------------------------------- client factory


def _normalise_endpoint(endpoint: str) -> str:
    # CDK's `domainEndpoint` and the console give a bare host name: that is always the HTTPS API.
    return endpoint if "://" in endpoint else f"https://{endpoint}"


@cache
def opensearch_client(
    endpoint: str,
    *,
    region: str | None = None,
    signed: bool | None = None,
    service: str = "es",
    credentials: Credentials | None = None,
    timeout: float = 10.0,
) -> OpenSearch:
    """One client per (endpoint, region, mode, credentials), made on first use and then reused.

    `signed=None` picks the mode from the scheme: https (an Amazon OpenSearch Service domain) is
    signed with SigV4; http (osmem-server or a local OpenSearch) is not. `service` is "es" for a
    managed domain and "aoss" for OpenSearch Serverless. Without `credentials`, the default AWS
    chain (the Lambda role's environment credentials) is used and refreshed as it expires.
    """
    with gc_paused():  # the client library's first import where no index was prepared yet
        from opensearchpy import OpenSearch, RequestsAWSV4SignerAuth

    url = _normalise_endpoint(endpoint)
    scheme = urlsplit(url).scheme
    use_ssl = scheme == "https"
    sign = use_ssl if signed is None else signed
    http_auth: RequestsAWSV4SignerAuth | None = None
    if sign:
        if credentials is None:
            import boto3

            session = boto3.Session(region_name=region)
            resolved = session.get_credentials()
            if resolved is None:
                raise OpenSearchIndexError(f"no AWS credentials to sign requests to {url}")
            credentials = resolved
            region = region or session.region_name
        if not region:
            raise OpenSearchIndexError(f"an AWS region is needed to sign requests to {url}")
        # RequestsAWSV4SignerAuth is the class opensearch-py documents as AWSV4SignerAuth (which
        # is now its deprecated alias); it signs with the credentials' frozen snapshot per request.
        http_auth = RequestsAWSV4SignerAuth(credentials, region, service)
    return OpenSearch(
        hosts=[url],
        http_auth=http_auth,
        use_ssl=use_ssl,
        verify_certs=use_ssl,
        connection_class=_deadline_connection(),
        timeout=timeout,
        # A dropped connection or a 502/503/504 from a node being replaced is retried in place
        # (never past the deadline in scope: the connection refuses the attempt).
        max_retries=2,
        retry_on_timeout=True,
    )


@cache
def _deadline_connection() -> type[Any]:
    """opensearch-py's requests connection, each request ending by the deadline in scope (a turn's,
    shared.deadline): its timeout cut to the time left, refused once it has passed, and
    a wait the cut ended raised as DeadlineExceeded, which the transport does not retry (it retries
    its own errors only). Outside a deadline's scope, the client's timeout and retries hold."""
    from opensearchpy import RequestsHttpConnection
    from opensearchpy.exceptions import ConnectionTimeout

    class DeadlineConnection(RequestsHttpConnection):
        def perform_request(
            self,
            method: str,
            url: str,
            params: Mapping[str, Any] | None = None,
            body: bytes | None = None,
            timeout: float | None = None,
            *args: Any,
            **kwargs: Any,
        ) -> Any:
            at = current()
            if at is None:
                return super().perform_request(method, url, params, body, timeout, *args, **kwargs)
            if passed(at):
                raise out_of_time("the OpenSearch request")
            cut_timeout = cut(timeout if timeout is not None else self.timeout, at)
            try:
                return super().perform_request(method, url, params, body, cut_timeout, *args, **kwargs)
            except ConnectionTimeout:
                if cut_by(at):
                    raise out_of_time("the OpenSearch request") from None
                raise

    return DeadlineConnection


# ---------------------------------------------------------------- index sizing

# What one primary shard should hold: about 30 GB at some 6 KB a document (a 1,024-dimension
# float vector, its HNSW graph and the text), inside AWS's advice of 10 to 50 GB a shard for a
# search workload (docs/scale.md#memory-shards).
DOCS_PER_SHARD: Final = 5_000_000


@dataclass(frozen=True)
class IndexSizing:
    """The memory index's primary shards, and over how many of them one workspace's documents
    spread (`index.routing_partition_size`): a document goes to shard (hash(workspace) +
    hash(id) % partitions) % shards, so a workspace reads and writes `partitions` shards, not one."""

    shards: int = 1
    routing_partitions: int = 1

    def __post_init__(self) -> None:
        if self.shards < 1 or self.routing_partitions < 1:
            raise ValueError("an index has at least one shard and one routing partition")
        # OpenSearch refuses a partition size of the shard count or more (then there would be no
        # routing at all): 1 (none) or 2 to shards - 1.
        if self.routing_partitions > 1 and self.routing_partitions >= self.shards:
            raise ValueError(
                f"routing_partitions must be below shards ({self.shards}), got {self.routing_partitions}"
            )


def index_sizing(*, total_docs: int, largest_workspace_docs: int, growth: float = 2.0) -> IndexSizing:
    """The sizing for a measured index (`OpenSearchIndex.measure`): enough shards for `growth`
    times today's documents at DOCS_PER_SHARD each, and the largest workspace spread over as many
    of them as its own share needs (at least 2 once it alone passes half a shard)."""
    shards = max(1, math.ceil(total_docs * growth / DOCS_PER_SHARD))
    wanted = math.ceil(largest_workspace_docs * growth / DOCS_PER_SHARD)
    if largest_workspace_docs * growth > DOCS_PER_SHARD / 2:
        wanted = max(wanted, 2)
    if wanted > 1:
        shards = max(shards, wanted + 1)
        return IndexSizing(shards=shards, routing_partitions=wanted)
    return IndexSizing(shards=shards)


# ---------------------------------------------------------------- index body


def index_body(
    *, dimension: int, knn: bool = True, engine: Engine = "lucene", sizing: IndexSizing | None = None
) -> dict[str, Any]:
    """Settings and mappings of the memory index.

    Mapping is strict, so a field written by mistake is refused rather than mapped dynamically.
    `metadata` is kept in _source only (`enabled: false`): nothing filters on it, and free-form
    keys mapped one field each would grow the mapping without bound.

    `sizing`, when given, sets the primary shards and the routing partition size (fixed at
    creation: another sizing is a new index and a reindex). A partitioned index must require
    routing, which every request of this adapter carries anyway.
    """
    properties: dict[str, Any] = {
        "id": {"type": "keyword"},
        "workspace_id": {"type": "keyword"},
        "session_id": {"type": "keyword"},
        "tier": {"type": "keyword"},
        "text": dict(_TEXT_FIELD),
        "context": dict(_TEXT_FIELD),
        "facts": dict(_TEXT_FIELD),
        "created_at": {"type": "date"},
        "metadata": {"type": "object", "enabled": False},
        "scope": _copy_field(_SCOPE_FIELD),
    }
    settings: dict[str, Any] = {}
    if knn:
        # https://docs.opensearch.org/latest/mappings/supported-field-types/knn-vector/ and
        # .../knn-methods-engines/: HNSW with cosine similarity; lucene and faiss both support
        # efficient filtering of a knn query, which the workspace filter relies on.
        settings["index"] = {"knn": True}
        properties["vector"] = {
            "type": "knn_vector",
            "dimension": dimension,
            "method": {"name": "hnsw", "space_type": "cosinesimil", "engine": engine},
        }
    mappings: dict[str, Any] = {"dynamic": "strict", "properties": properties}
    if sizing is not None:
        index = settings.setdefault("index", {})
        index["number_of_shards"] = sizing.shards
        if sizing.routing_partitions > 1:
            index["routing_partition_size"] = sizing.routing_partitions
            mappings["_routing"] = {"required": True}
    return {"settings": settings, "mappings": mappings}


# ---------------------------------------------------------------- the adapter


class OpenSearchIndex:
    """shared.ports.MemoryIndex over one OpenSearch index, created idempotently on first use."""

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        client: OpenSearch | None = None,
        index: str = DEFAULT_INDEX,
        dimension: int = DEFAULT_DIMENSION,
        knn: bool = True,
        engine: Engine = "lucene",
        region: str | None = None,
        signed: bool | None = None,
        refresh: Refresh = "wait_for",
        bulk_max_retries: int = 3,
        bulk_initial_backoff: int = 1,
        sizing: IndexSizing | None = None,
    ) -> None:
        """`endpoint` (or a ready `client`) names the cluster; nothing is contacted until first use.

        `refresh="wait_for"` makes a write return once it is searchable, so a search right after
        an upsert sees it, as with the embedded index, without forcing extra refreshes. Documents
        refused with 429 (a full write queue) are retried `bulk_max_retries` times, waiting
        `bulk_initial_backoff` seconds and doubling.
        """
        if client is None and endpoint is None:
            raise ValueError("OpenSearchIndex needs an endpoint or a client")
        if dimension < 1:
            raise ValueError("dimension must be positive")
        self._endpoint = endpoint
        self._client = client
        self._region = region
        self._signed = signed
        self.index = index
        self.dimension = dimension
        self.knn = knn
        self.engine: Engine = engine
        self.refresh: Refresh = refresh
        self.bulk_max_retries = bulk_max_retries
        self.bulk_initial_backoff = bulk_initial_backoff
        self.sizing = sizing
        self._ready = False
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings, **options: Any) -> OpenSearchIndex:
        if not settings.opensearch_endpoint:
            raise ValueError("SIGIL_OPENSEARCH_ENDPOINT is not set")
        if settings.opensearch_shards > 1 and "sizing" not in options:
            options["sizing"] = IndexSizing(
                shards=settings.opensearch_shards, routing_partitions=settings.opensearch_routing_partitions
            )
        return cls(settings.opensearch_endpoint, region=settings.aws_region, **options)

    @property
    def client(self) -> OpenSearch:
        if self._client is None:
            assert self._endpoint is not None  # guaranteed by __init__
            self._client = opensearch_client(self._endpoint, region=self._region, signed=self._signed)
        return self._client

    # ------------------------------------------------------------ index lifecycle

    def ensure_index(self) -> None:
        """Create the index unless it exists; check an existing one maps the expected vector."""
        if self._ready:
            return
        with gc_paused():  # the client library's first import, in the first turn (shared.coldstart)
            from opensearchpy.exceptions import NotFoundError

        with self._lock, _translate_errors(f"preparing index {self.index}"):
            if self._ready:
                return
            try:
                mapping = self.client.indices.get_mapping(index=self.index)
            except NotFoundError:
                self._create_index()
                mapping = None
            if mapping is not None:
                self._check_mapping(mapping)
                self._add_missing_fields(mapping)
            self._ready = True

    def _create_index(self) -> None:
        from opensearchpy.exceptions import RequestError

        body = index_body(dimension=self.dimension, knn=self.knn, engine=self.engine, sizing=self.sizing)
        try:
            self.client.indices.create(index=self.index, body=body)
        except RequestError as e:
            # Two cold starts racing to create the index: the loser finds it made, which is fine.
            if e.error != "resource_already_exists_exception":
                raise

    def _check_mapping(self, response: Mapping[str, Any]) -> None:
        if not self.knn:
            return  # vectors are neither written nor queried: whatever the index maps is fine
        # The response is keyed by concrete index name, which differs from ours behind an alias.
        for concrete in response.values():
            vector = concrete.get("mappings", {}).get("properties", {}).get("vector")
            found = vector.get("dimension") if isinstance(vector, dict) else None
            if found != self.dimension:
                raise OpenSearchIndexError(
                    f"index {self.index} maps `vector` with dimension {found}, expected {self.dimension}: "
                    "point the adapter at a new index for this embedding model and reindex into it"
                )

    def _add_missing_fields(self, response: Mapping[str, Any]) -> None:
        """An index created before the `context` or the `scope` field gets it (adding a field to
        a strict mapping is allowed; without it, every write of a document with one is refused,
        and a scope filter on an unmapped field would match nothing)."""
        wanted: dict[str, Any] = {
            "context": dict(_TEXT_FIELD),
            "facts": dict(_TEXT_FIELD),
            "scope": _copy_field(_SCOPE_FIELD),
        }
        missing: dict[str, Any] = {}
        for concrete in response.values():
            properties = concrete.get("mappings", {}).get("properties", {})
            for name, field in wanted.items():
                have = properties.get(name)
                if have is None or (
                    name == "scope" and set(have.get("properties", {})) != set(field["properties"])
                ):
                    missing[name] = field
        if missing:
            self.client.indices.put_mapping(index=self.index, body={"properties": missing})

    # ------------------------------------------------------------ MemoryIndex

    def upsert(self, workspace_id: str, docs: Sequence[IndexDoc]) -> None:
        _check_workspace(workspace_id)
        for doc in docs:
            if doc.workspace_id != workspace_id:
                raise ValueError(f"document {doc.id!r} belongs to {doc.workspace_id!r}, not {workspace_id!r}")
            if self.knn and usable_vector(doc.vector) and len(doc.vector or ()) != self.dimension:
                raise ValueError(
                    f"document {doc.id!r} has a {len(doc.vector or ())}-dimensional vector; "
                    f"index {self.index} holds {self.dimension}"
                )
        if not docs:
            return
        self.ensure_index()
        actions = [
            {
                "_op_type": "index",
                "_index": self.index,
                "_id": _doc_key(workspace_id, doc.id),
                "_routing": workspace_id,
                "_source": self._source(doc),
            }
            for doc in docs
        ]
        self._bulk(actions, "index", ok_statuses=())

    def delete(self, workspace_id: str, ids: Sequence[str]) -> None:
        _check_workspace(workspace_id)
        if not ids:
            return
        self.ensure_index()
        actions = [
            {
                "_op_type": "delete",
                "_index": self.index,
                "_id": _doc_key(workspace_id, i),
                "_routing": workspace_id,
            }
            for i in dict.fromkeys(ids)
        ]
        # Deleting an id that is not there is not an error: delete is idempotent at the port.
        self._bulk(actions, "delete", ok_statuses=(404,))

    def search(self, workspace_id: str, query: IndexQuery) -> IndexResult:
        _check_workspace(workspace_id)
        text = query.text if query.text and query.text.strip() else None
        # A zero or non-finite vector has no cosine neighbours (as in the embedded index): no k-NN.
        vector = query.vector if usable_vector(query.vector) else None
        if vector is not None:
            if not self.knn:
                raise OpenSearchIndexError(
                    f"index {self.index} was created without k-NN (knn=False): "
                    "it cannot answer a vector query"
                )
            if len(vector) != self.dimension:
                raise ValueError(
                    f"query vector has {len(vector)} dimensions; index {self.index} holds {self.dimension}"
                )
        visible = scope_clause(query.scope)
        # No tier allowed, or a scope that admits nothing, matches nothing: no round trip.
        if (text is None and vector is None) or query.tiers == [] or visible == _NOTHING:
            return IndexResult()
        self.ensure_index()

        filters = _filters(workspace_id, query)
        if visible is not None:
            filters.append(visible)
        header = {"index": self.index, "routing": workspace_id}
        searches: list[dict[str, Any]] = []
        parts: list[Literal["text", "vector"]] = []
        if text is not None:
            searches += [header, self._bm25_body(text, query.k, filters)]
            parts.append("text")
        if vector is not None:
            searches += [header, self._knn_body(vector, query.k, filters)]
            parts.append("vector")

        with _translate_errors(f"searching {self.index}"):
            # The index is in the path as well as in each header: an IAM policy scoped to the
            # index's resource path (domain/<name>/<index>/*) does not cover a bare /_msearch.
            response = self.client.msearch(body=searches, index=self.index)
        responses = response.get("responses", [])
        if len(responses) != len(parts):
            raise OpenSearchIndexError(f"_msearch answered {len(responses)} searches, {len(parts)} were sent")
        result = IndexResult()
        for part, sub in zip(parts, responses, strict=True):
            hits = _hits(sub, part, self.index)
            if part == "text":
                result.text_hits = hits
            else:
                result.vector_hits = hits
        return result

    def count(self, workspace_id: str) -> int:
        _check_workspace(workspace_id)
        self.ensure_index()
        with _translate_errors(f"counting {self.index}"):
            response = self.client.count(
                index=self.index,
                body={"query": {"term": {"workspace_id": workspace_id}}},
                routing=workspace_id,
            )
        return int(response["count"])

    def measure(self, *, largest: int = 10) -> tuple[int, dict[str, int]]:
        """The index's documents in all, and those of its `largest` workspaces: what
        `index_sizing` takes. One search of no hits with a terms aggregation on workspace_id (an
        operator's call, across workspaces; no turn makes it)."""
        self.ensure_index()
        body = {
            "size": 0,
            "track_total_hits": True,
            "aggs": {"workspaces": {"terms": {"field": "workspace_id", "size": largest}}},
        }
        with _translate_errors(f"measuring {self.index}"):
            response = self.client.search(index=self.index, body=body)
        total = int(response["hits"]["total"]["value"])
        buckets = response.get("aggregations", {}).get("workspaces", {}).get("buckets", [])
        return total, {str(b["key"]): int(b["doc_count"]) for b in buckets}

    def measured_sizing(self, *, growth: float = 2.0) -> IndexSizing:
        total, workspaces = self.measure(largest=1)
        return index_sizing(
            total_docs=total, largest_workspace_docs=max(workspaces.values(), default=0), growth=growth
        )

    def missing_vectors(
        self, workspace_id: str, *, tier: MemoryTier = "message", limit: int = 50
    ) -> list[IndexDoc]:
        """Documents of `tier` stored without a vector, oldest first (FindsMissingVectors): what
        maintenance re-embeds once the embedder answers again. Nothing on a knn=False index, which
        stores no vector at all."""
        _check_workspace(workspace_id)
        if not self.knn or limit < 1:
            return []
        self.ensure_index()
        body = {
            "size": limit,
            "track_total_hits": False,
            "query": {
                "bool": {
                    "filter": [{"term": {"workspace_id": workspace_id}}, {"term": {"tier": tier}}],
                    "must_not": [{"exists": {"field": "vector"}}],
                }
            },
            "sort": [{"created_at": "asc"}, {"id": "asc"}],
        }
        with _translate_errors(f"listing documents without vectors in {self.index}"):
            response = self.client.search(index=self.index, body=body, routing=workspace_id)
        return [_from_source(hit["_source"]) for hit in response["hits"]["hits"]]

    def stamp_scopes(self, workspace_id: str, scopes: Mapping[str, MemoryScope]) -> int:
        """Each record's documents (its id, and its chunks `{id}#{i}`, shared.memory.writer) get
        the scope by a partial update (bulk `update` with `doc`): osmem-server has no scripted
        _update_by_query, and a partial update leaves the text and vector as they are."""
        _check_workspace(workspace_id)
        if not scopes:
            return 0
        self.ensure_index()
        actions: list[dict[str, Any]] = []
        ids = list(scopes)
        for start in range(0, len(ids), _STAMP_CHUNK):
            part = ids[start : start + _STAMP_CHUNK]
            for hit in self._documents_of(workspace_id, part):
                source = hit["_source"]
                doc_id = str(source["id"])
                scope = scopes.get(doc_id) or scopes.get(doc_id.split("#", 1)[0])
                if scope is None:
                    continue
                jsonable = serde.to_jsonable(scope)
                if source.get("scope") == jsonable:
                    continue
                actions.append(
                    {
                        "_op_type": "update",
                        "_index": self.index,
                        "_id": hit["_id"],
                        "_routing": workspace_id,
                        "doc": {"scope": jsonable},
                    }
                )
        if actions:
            self._bulk(actions, "update", ok_statuses=(404,))
        return len(actions)

    def get_docs(self, workspace_id: str, record_ids: Sequence[str]) -> list[IndexDoc]:
        """The documents of these records (each record's own and its chunks'), with their vectors
        (ReadsDocs): what shared.memory.fact_keys rewrites with a record's facts."""
        _check_workspace(workspace_id)
        ids = list(dict.fromkeys(record_ids))
        out: list[IndexDoc] = []
        for start in range(0, len(ids), 200):
            hits = self._documents_of(workspace_id, ids[start : start + 200], source=True)
            out += [_from_source(hit["_source"]) for hit in hits]
        return out

    def _documents_of(
        self, workspace_id: str, record_ids: Sequence[str], *, source: bool = False
    ) -> list[dict[str, Any]]:
        body = {
            "size": 10_000,
            "track_total_hits": False,
            "_source": True if source else ["id", "scope"],
            "query": {
                "bool": {
                    "filter": [{"term": {"workspace_id": workspace_id}}],
                    "should": [
                        {"terms": {"id": list(record_ids)}},
                        *({"prefix": {"id": f"{r}#"}} for r in record_ids),
                    ],
                    "minimum_should_match": 1,
                }
            },
        }
        with _translate_errors(f"finding documents to stamp in {self.index}"):
            response = self.client.search(index=self.index, body=body, routing=workspace_id)
        return list(response["hits"]["hits"])

    # ------------------------------------------------------------ request bodies

    def _source(self, doc: IndexDoc) -> dict[str, Any]:
        source: dict[str, Any] = serde.to_jsonable(doc)
        metadata = source.get("metadata") or {}
        if CONTEXT_KEY in metadata:
            source["metadata"] = {k: v for k, v in metadata.items() if k != CONTEXT_KEY}
            source["context"] = metadata[CONTEXT_KEY]
        if FACTS_KEY in metadata:
            source["metadata"] = {k: v for k, v in source["metadata"].items() if k != FACTS_KEY}
            source["facts"] = metadata[FACTS_KEY]
        if doc.vector is not None and not usable_vector(doc.vector):
            # OpenSearch refuses a zero vector under cosinesimil, and NaN is not JSON: the text is
            # still worth indexing, as the embedded index does.
            logger.warning("index doc %s: vector is zero or not finite; indexed as text only", doc.id)
        if not self.knn or not usable_vector(doc.vector):
            # No field is better than a null one, and a knn=False index has no field to hold it.
            source.pop("vector", None)
        return source

    @staticmethod
    def _bm25_body(text: str, k: int, filters: list[dict[str, Any]]) -> dict[str, Any]:
        # `should` adds the two fields' scores (as the embedded index's weighted bm25() does),
        # where a multi_match would take the better one; one of them must match.
        return {
            "size": k,
            # Nothing reads the total: not counting every match saves work on large workspaces.
            "track_total_hits": False,
            "query": {
                "bool": {
                    "should": [
                        {"match": {"text": text}},
                        {"match": {"context": {"query": text, "boost": CONTEXT_BOOST}}},
                        {"match": {"facts": {"query": text, "boost": FACTS_BOOST}}},
                    ],
                    "minimum_should_match": 1,
                    "filter": filters,
                }
            },
        }

    @staticmethod
    def _knn_body(vector: list[float], k: int, filters: list[dict[str, Any]]) -> dict[str, Any]:
        # https://docs.opensearch.org/latest/query-dsl/specialized/k-nn/index/ — `filter` inside
        # the knn clause is efficient filtering (lucene, faiss): the workspace's k nearest, not the
        # index's k nearest with other workspaces' hits dropped afterwards.
        # https://docs.opensearch.org/latest/vector-search/filter-search-knn/efficient-knn-filtering/
        return {
            "size": k,
            "track_total_hits": False,
            "query": {"knn": {"vector": {"vector": vector, "k": k, "filter": {"bool": {"filter": filters}}}}},
        }

    # ------------------------------------------------------------ bulk

    def _bulk(self, actions: list[dict[str, Any]], what: str, *, ok_statuses: tuple[int, ...]) -> None:
        from opensearchpy.helpers import streaming_bulk

        failures: list[dict[str, Any]] = []
        with _translate_errors(f"bulk {what} into {self.index}"):
            # raise_on_error=False: with it on, the helper raises on the first rejected chunk and
            # never retries the documents refused with 429; off, it retries them and hands back
            # the final failures, which are raised below as one error naming each document.
            for ok, item in streaming_bulk(
                self.client,
                actions,
                chunk_size=_BULK_CHUNK_DOCS,
                max_chunk_bytes=_MAX_BULK_CHUNK_BYTES,
                max_retries=self.bulk_max_retries,
                initial_backoff=self.bulk_initial_backoff,
                raise_on_error=False,
                yield_ok=False,
                # POST /<index>/_bulk, for the same IAM reason as _msearch.
                index=self.index,
                refresh=self.refresh,
            ):
                if ok:
                    continue
                info = next(iter(item.values()))
                if info.get("status") not in ok_statuses:
                    failures.append(info)
        if failures:
            raise OpenSearchIndexError(
                f"{len(failures)} of {len(actions)} documents failed to {what} in {self.index}: "
                + "; ".join(_describe_failure(f) for f in failures[:5])
                + (" ..." if len(failures) > 5 else ""),
                failures=failures,
            )


# ---------------------------------------------------------------- helpers


def _check_workspace(workspace_id: str) -> None:
    # The id becomes routing and part of every document id: hold it to the models' alphabet.
    if not _WORKSPACE_RE.match(workspace_id):
        raise ValueError(f"invalid workspace id {workspace_id!r}")


def _doc_key(workspace_id: str, doc_id: str) -> str:
    return f"{workspace_id}:{doc_id}"


def _copy_field(field: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (_copy_field(v) if isinstance(v, Mapping) else v) for k, v in field.items()}


# A scope that admits nothing (no clause): search answers without a round trip.
_NOTHING: dict[str, Any] = {"match_none": {}}


def scope_clause(scope: RecallScope) -> dict[str, Any] | None:
    """shared.memory.scope.visible as a filter clause; None for a workspace-wide scope.

    A document written before scopes has `scope` null: only its session's clause can match it.
    """
    if scope.workspace_wide:
        return None
    should: list[dict[str, Any]] = []
    if scope.session_id is not None:
        should.append({"term": {"session_id": scope.session_id}})
    if scope.conversation is not None:
        should.append({"term": {"scope.conversation": scope.conversation}})
    if scope.users:
        should.append({"terms": {"scope.users": list(scope.users)}})
    if scope.shared:
        should.append({"term": {"scope.shared": True}})
    if not should:
        return _NOTHING
    return {"bool": {"should": should, "minimum_should_match": 1}}


def _filters(workspace_id: str, query: IndexQuery) -> list[dict[str, Any]]:
    filters: list[dict[str, Any]] = [{"term": {"workspace_id": workspace_id}}]
    if query.tiers is not None:
        filters.append({"terms": {"tier": list(dict.fromkeys(query.tiers))}})
    if query.session_id is not None:
        filters.append({"term": {"session_id": query.session_id}})
    window = time_clause(query)
    if window is not None:
        filters.append(window)
    return filters


def time_clause(query: IndexQuery) -> dict[str, Any] | None:
    """The query's window on when memories were said, as a `range` on the `created_at` date
    (mapped since the index's first version, so every document has it); None: no window. Bounds
    in epoch milliseconds, the resolution OpenSearch's `date` keeps."""
    bounds: dict[str, Any] = {}
    if query.created_from is not None:
        bounds["gte"] = _epoch_ms(query.created_from)
    if query.created_before is not None:
        bounds["lt"] = _epoch_ms(query.created_before)
    if not bounds:
        return None
    return {"range": {"created_at": {**bounds, "format": "epoch_millis"}}}


def _epoch_ms(at: datetime) -> int:
    aware = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    return (aware - _EPOCH) // timedelta(milliseconds=1)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _hits(sub: Mapping[str, Any], part: str, index: str) -> list[IndexHit]:
    if "error" in sub:
        error = sub["error"]
        reason = error.get("reason") if isinstance(error, dict) else error
        kind = error.get("type") if isinstance(error, dict) else "error"
        raise OpenSearchIndexError(f"{part} search on {index} failed ({sub.get('status')}): {kind}: {reason}")
    return [
        IndexHit(doc=_from_source(hit["_source"]), score=float(hit["_score"]))
        for hit in sub.get("hits", {}).get("hits", [])
    ]


def _from_source(source: Mapping[str, Any]) -> IndexDoc:
    """The document as written: its `context` field goes back into metadata."""
    fields = dict(source)
    context = fields.pop("context", None)
    if context:
        fields["metadata"] = {**(fields.get("metadata") or {}), CONTEXT_KEY: context}
    facts = fields.pop("facts", None)
    if facts:
        fields["metadata"] = {**(fields.get("metadata") or {}), FACTS_KEY: facts}
    return serde.from_jsonable(IndexDoc, fields)


def _describe_failure(info: Mapping[str, Any]) -> str:
    error = info.get("error")
    if isinstance(error, dict):
        detail = f"{error.get('type')}: {error.get('reason')}"
        caused = error.get("caused_by")
        if isinstance(caused, dict):
            detail += f" ({caused.get('reason')})"
    else:
        detail = str(error)
    return f"{info.get('_id')} [{info.get('status')}] {detail}"


@contextmanager
def _translate_errors(doing: str) -> Iterator[None]:
    """Turn opensearch-py's transport errors into OpenSearchIndexError, keeping the cause."""
    from opensearchpy.exceptions import TransportError

    try:
        yield
    except TransportError as e:
        raise OpenSearchIndexError(f"{doing}: {_describe_transport_error(e)}") from e


def _describe_transport_error(e: Any) -> str:
    status = getattr(e, "status_code", None)
    prefix = f"{status} " if isinstance(status, int) else ""  # a connection error has no status
    info = getattr(e, "info", None)
    if isinstance(info, dict) and isinstance(info.get("error"), dict):
        error = info["error"]
        return f"{prefix}{error.get('type')}: {error.get('reason')}"
    return f"{prefix}{getattr(e, 'error', e)}"

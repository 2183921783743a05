"""What OpenSearchIndex puts on the wire, checked against OpenSearch's documented REST API.

A small HTTP server in this file speaks just enough of the REST API (mapping, create index, _bulk,
_msearch, _count) for the real opensearch-py client to talk to it, and records every request.
k-NN cannot be exercised on osmem-server, so the k-NN and _msearch bodies are verified here.

References for the shapes asserted:
- k-NN query: https://docs.opensearch.org/latest/query-dsl/specialized/k-nn/index/
  `{"knn": {"<vector_field>": {"vector": [...], "k": k, "filter": {...}}}}`; `filter` is only
  valid with the lucene and faiss engines.
- Efficient k-NN filtering:
  https://docs.opensearch.org/latest/vector-search/filter-search-knn/efficient-knn-filtering/
- knn_vector mapping, HNSW, cosinesimil:
  https://docs.opensearch.org/latest/mappings/supported-field-types/knn-vector/ and
  https://docs.opensearch.org/latest/mappings/supported-field-types/knn-methods-engines/
- Multi-search: https://docs.opensearch.org/latest/api-reference/search-apis/multi-search/
  NDJSON metadata line / query line pairs; `index` and `routing` are valid in the metadata line.
- Bulk: https://docs.opensearch.org/latest/api-reference/document-apis/bulk/ (action line with
  `_index`, `_id`, `routing`).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from shared.adapters.aws.opensearch import (
    IndexSizing,
    OpenSearchIndex,
    OpenSearchIndexError,
    _normalise_endpoint,
    index_body,
    index_sizing,
    opensearch_client,
)
from shared.models import WORKSPACE_WIDE, IndexDoc, IndexQuery, IndexResult, RecallScope

INDEX = "mem-test"
DIM = 4


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def ndjson(self) -> list[Any]:
        text = self.body.decode()
        assert text.endswith("\n"), "NDJSON bodies must end with a newline"
        return [json.loads(line) for line in text.splitlines()]

    def json(self) -> Any:
        return json.loads(self.body)


Responder = Callable[[Recorded], tuple[int, Any] | None]


@dataclass
class FakeOpenSearch:
    """Records requests; answers like OpenSearch 2.x for the endpoints the adapter uses."""

    url: str = ""
    requests: list[Recorded] = field(default_factory=list)
    mappings: dict[str, Any] = field(default_factory=dict)
    # A hook consulted first: return (status, body) to override the default answer.
    override: Responder | None = None
    msearch_responses: list[Any] | None = None

    def of(self, method: str, suffix: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method and r.path.endswith(suffix)]

    def answer(self, req: Recorded) -> tuple[int, Any]:
        if self.override is not None:
            custom = self.override(req)
            if custom is not None:
                return custom
        parts = [p for p in req.path.split("/") if p]
        if req.method == "GET" and parts[-1:] == ["_mapping"]:
            name = parts[0]
            if name not in self.mappings:
                return 404, {
                    "error": {"type": "index_not_found_exception", "reason": f"no such index [{name}]"},
                    "status": 404,
                }
            return 200, {name: {"mappings": self.mappings[name]}}
        if req.method == "PUT" and len(parts) == 1:
            self.mappings[parts[0]] = req.json()["mappings"]
            return 200, {"acknowledged": True, "shards_acknowledged": True, "index": parts[0]}
        if req.method == "POST" and parts[-1:] == ["_bulk"]:
            lines = req.ndjson()
            items = []
            i = 0
            while i < len(lines):
                op, meta = next(iter(lines[i].items()))
                i += 1 if op == "delete" else 2
                status = 200 if op == "delete" else 201
                items.append({op: {"_index": meta["_index"], "_id": meta["_id"], "status": status}})
            return 200, {"took": 1, "errors": False, "items": items}
        if req.method == "POST" and parts[-1:] == ["_msearch"]:
            n = len(req.ndjson()) // 2
            responses = self.msearch_responses or [_search_response([])] * n
            return 200, {"took": 1, "responses": responses[:n]}
        if parts[-1:] == ["_count"]:
            return 200, {"count": 7, "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0}}
        return 400, {"error": {"type": "unexpected", "reason": f"{req.method} {req.path}"}, "status": 400}


def _search_response(hits: list[dict[str, Any]]) -> dict[str, Any]:
    return {"status": 200, "took": 1, "timed_out": False, "hits": {"max_score": None, "hits": hits}}


def _hit(doc: IndexDoc, score: float) -> dict[str, Any]:
    source = doc.model_dump(mode="json")
    return {"_index": INDEX, "_id": f"{doc.workspace_id}:{doc.id}", "_score": score, "_source": source}


@pytest.fixture
def fake() -> Iterator[FakeOpenSearch]:
    state = FakeOpenSearch()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            split = urlsplit(self.path)
            req = Recorded(self.command, split.path, parse_qs(split.query), dict(self.headers.items()), body)
            state.requests.append(req)
            status, payload = state.answer(req)
            data = b"" if self.command == "HEAD" else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    # A short poll interval keeps shutdown() (it waits for the next poll) from costing 0.5 s a test.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()
    thread.join()


def _adapter(fake: FakeOpenSearch, **options: Any) -> OpenSearchIndex:
    # A fresh unsigned client per test: the cached factory would share one across tests.
    client = opensearch_client.__wrapped__(fake.url)
    return OpenSearchIndex(client=client, index=INDEX, dimension=DIM, **options)


def _doc(ws: str, doc_id: str, text: str = "hello", **kw: Any) -> IndexDoc:
    return IndexDoc(id=doc_id, workspace_id=ws, tier="message", text=text, **kw)


# ---------------------------------------------------------------- _msearch and k-NN bodies


def test_hybrid_search_is_one_msearch_with_bm25_and_knn(fake: FakeOpenSearch) -> None:
    index = _adapter(fake)
    vector = [0.1, 0.2, 0.3, 0.4]
    index.search("ws1", IndexQuery(scope=WORKSPACE_WIDE, text="deploy the api", vector=vector, k=5))

    searches = fake.of("POST", "/_msearch")
    assert len(searches) == 1, "BM25 and k-NN must travel in one round trip"
    # In the path too, so an IAM policy scoped to the index's resource path covers it.
    assert searches[0].path == f"/{INDEX}/_msearch"
    lines = searches[0].ndjson()
    assert len(lines) == 4
    bm25_header, bm25, knn_header, knn = lines

    workspace_term = {"term": {"workspace_id": "ws1"}}
    assert bm25_header == {"index": INDEX, "routing": "ws1"}
    assert bm25["size"] == 5
    # The text, and the neighbours' context and the message's facts at half weight (the embedded
    # index's FTS5 weights).
    assert bm25["query"] == {
        "bool": {
            "should": [
                {"match": {"text": "deploy the api"}},
                {"match": {"context": {"query": "deploy the api", "boost": 0.5}}},
                {"match": {"facts": {"query": "deploy the api", "boost": 0.5}}},
            ],
            "minimum_should_match": 1,
            "filter": [workspace_term],
        }
    }

    assert knn_header == {"index": INDEX, "routing": "ws1"}
    # The documented shape: {"size": k, "query": {"knn": {"<field>": {"vector", "k", "filter"}}}}
    assert knn["size"] == 5
    assert knn["query"] == {
        "knn": {"vector": {"vector": vector, "k": 5, "filter": {"bool": {"filter": [workspace_term]}}}}
    }


def test_text_only_sends_only_bm25(fake: FakeOpenSearch) -> None:
    _adapter(fake).search("ws1", IndexQuery(scope=WORKSPACE_WIDE, text="alpha", k=3))
    lines = fake.of("POST", "/_msearch")[0].ndjson()
    assert len(lines) == 2
    assert "match" in lines[1]["query"]["bool"]["should"][0]


def test_vector_only_sends_only_knn(fake: FakeOpenSearch) -> None:
    _adapter(fake).search("ws1", IndexQuery(scope=WORKSPACE_WIDE, vector=[1, 0, 0, 0], k=3))
    lines = fake.of("POST", "/_msearch")[0].ndjson()
    assert len(lines) == 2
    assert set(lines[1]["query"]) == {"knn"}
    assert lines[1]["query"]["knn"]["vector"]["k"] == 3


def test_tier_and_session_filters_reach_both_queries(fake: FakeOpenSearch) -> None:
    _adapter(fake).search(
        "ws1",
        IndexQuery(
            scope=WORKSPACE_WIDE, text="x", vector=[1, 0, 0, 0], tiers=["summary", "fact"], session_id="s1"
        ),
    )
    _, bm25, _, knn = fake.of("POST", "/_msearch")[0].ndjson()
    expected = [
        {"term": {"workspace_id": "ws1"}},
        {"terms": {"tier": ["summary", "fact"]}},
        {"term": {"session_id": "s1"}},
    ]
    assert bm25["query"]["bool"]["filter"] == expected
    assert knn["query"]["knn"]["vector"]["filter"] == {"bool": {"filter": expected}}


def test_a_time_window_is_a_range_on_created_at_in_both_queries(fake: FakeOpenSearch) -> None:
    window = {
        "created_from": datetime(2026, 3, 2, tzinfo=UTC),
        "created_before": datetime(2026, 3, 9, tzinfo=UTC),
    }
    _adapter(fake).search("ws1", IndexQuery(scope=WORKSPACE_WIDE, text="x", vector=[1, 0, 0, 0], **window))
    _, bm25, _, knn = fake.of("POST", "/_msearch")[0].ndjson()
    # Epoch milliseconds, the resolution of a `date` field; from inclusive, before exclusive.
    during = {"range": {"created_at": {"gte": 1772409600000, "lt": 1773014400000, "format": "epoch_millis"}}}
    assert bm25["query"]["bool"]["filter"] == [{"term": {"workspace_id": "ws1"}}, during]
    assert knn["query"]["knn"]["vector"]["filter"] == {
        "bool": {"filter": [{"term": {"workspace_id": "ws1"}}, during]}
    }


def test_the_scope_is_one_filter_clause_in_both_queries_before_ranking(fake: FakeOpenSearch) -> None:
    scope = RecallScope(session_id="s1", conversation="slack.team", users=("u1", "u2"), shared=True)
    _adapter(fake).search("ws1", IndexQuery(scope=scope, text="x", vector=[1, 0, 0, 0], k=4))
    _, bm25, _, knn = fake.of("POST", "/_msearch")[0].ndjson()
    # shared.memory.scope.visible: any clause admits a document.
    clause = {
        "bool": {
            "should": [
                {"term": {"session_id": "s1"}},
                {"term": {"scope.conversation": "slack.team"}},
                {"terms": {"scope.users": ["u1", "u2"]}},
                {"term": {"scope.shared": True}},
            ],
            "minimum_should_match": 1,
        }
    }
    expected = [{"term": {"workspace_id": "ws1"}}, clause]
    assert bm25["query"]["bool"]["filter"] == expected
    # Inside the knn query's own filter (efficient filtering): the k nearest visible documents.
    assert knn["query"]["knn"]["vector"] == {
        "vector": [1, 0, 0, 0],
        "k": 4,
        "filter": {"bool": {"filter": expected}},
    }


def test_a_workspace_wide_read_adds_no_scope_clause_and_an_empty_scope_sends_nothing(
    fake: FakeOpenSearch,
) -> None:
    index = _adapter(fake)
    index.search("ws1", IndexQuery(scope=WORKSPACE_WIDE, text="x"))
    _, bm25 = fake.of("POST", "/_msearch")[0].ndjson()
    assert bm25["query"]["bool"]["filter"] == [{"term": {"workspace_id": "ws1"}}]
    # A scope with no clause admits nothing: answered without a round trip.
    assert (
        index.search("ws1", IndexQuery(scope=RecallScope(), text="x", vector=[1, 0, 0, 0])) == IndexResult()
    )
    assert len(fake.of("POST", "/_msearch")) == 1


def test_an_index_without_the_scope_fields_gets_them_by_put_mapping(fake: FakeOpenSearch) -> None:
    old = index_body(dimension=DIM)["mappings"]
    del old["properties"]["scope"]
    fake.mappings[INDEX] = old
    fake.override = lambda req: (200, {"acknowledged": True}) if req.method == "PUT" else None
    _adapter(fake).count("ws1")
    (put,) = fake.of("PUT", f"/{INDEX}/_mapping")
    assert put.json() == {
        "properties": {"scope": index_body(dimension=DIM)["mappings"]["properties"]["scope"]}
    }
    # An index that has them is left alone.
    fake.mappings[INDEX] = index_body(dimension=DIM)["mappings"]
    _adapter(fake).count("ws1")
    assert len(fake.of("PUT", f"/{INDEX}/_mapping")) == 1


def test_no_query_and_no_tiers_need_no_round_trip(fake: FakeOpenSearch) -> None:
    index = _adapter(fake)
    assert index.search("ws1", IndexQuery(scope=WORKSPACE_WIDE)).text_hits == []
    assert index.search("ws1", IndexQuery(scope=WORKSPACE_WIDE, text="  ")).text_hits == []
    assert index.search("ws1", IndexQuery(scope=WORKSPACE_WIDE, text="x", tiers=[])).text_hits == []
    assert fake.of("POST", "/_msearch") == []


def test_each_sub_response_becomes_its_own_ranking(fake: FakeOpenSearch) -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    a = _doc("ws1", "a", "alpha", session_id="s1", created_at=at, metadata={"role": "user"})
    b = _doc("ws1", "b", "beta", vector=[0.0, 1.0, 0.0, 0.0])
    fake.msearch_responses = [
        _search_response([_hit(a, 2.5), _hit(b, 1.0)]),
        _search_response([_hit(b, 0.9)]),
    ]
    result = _adapter(fake).search("ws1", IndexQuery(scope=WORKSPACE_WIDE, text="alpha", vector=[1, 0, 0, 0]))
    assert [(h.doc.id, h.score) for h in result.text_hits] == [("a", 2.5), ("b", 1.0)]
    assert [(h.doc.id, h.score) for h in result.vector_hits] == [("b", 0.9)]
    assert result.text_hits[0].doc == a
    assert result.vector_hits[0].doc == b


def test_a_failed_sub_search_raises_with_the_servers_reason(fake: FakeOpenSearch) -> None:
    fake.msearch_responses = [
        _search_response([]),
        {"status": 400, "error": {"type": "unsupported_operation_exception", "reason": "no knn here"}},
    ]
    with pytest.raises(OpenSearchIndexError, match=r"vector search .* no knn here"):
        _adapter(fake).search("ws1", IndexQuery(scope=WORKSPACE_WIDE, text="a", vector=[1, 0, 0, 0]))


def test_a_zero_query_vector_sends_no_knn(fake: FakeOpenSearch) -> None:
    # Cosine similarity to a zero vector is undefined; the embedded index returns no vector hits too.
    result = _adapter(fake).search(
        "ws1", IndexQuery(scope=WORKSPACE_WIDE, text="a", vector=[0.0, 0.0, 0.0, 0.0])
    )
    assert result.vector_hits == []
    lines = fake.of("POST", "/_msearch")[0].ndjson()
    assert len(lines) == 2 and "knn" not in lines[1]["query"]


def test_query_vector_of_the_wrong_dimension_is_refused_locally(fake: FakeOpenSearch) -> None:
    with pytest.raises(ValueError, match="3 dimensions"):
        _adapter(fake).search("ws1", IndexQuery(scope=WORKSPACE_WIDE, vector=[1, 0, 0]))
    assert fake.of("POST", "/_msearch") == []


def test_transport_failures_become_index_errors(fake: FakeOpenSearch) -> None:
    fake.override = lambda req: (
        (
            500,
            {
                "error": {"type": "search_phase_execution_exception", "reason": "all shards failed"},
                "status": 500,
            },
        )
        if req.path.endswith("/_count")
        else None
    )
    with pytest.raises(OpenSearchIndexError, match="counting mem-test: 500 search_phase_execution_exception"):
        _adapter(fake).count("ws1")
    refused = OpenSearchIndex(client=opensearch_client.__wrapped__("http://127.0.0.1:1"), index=INDEX)
    with pytest.raises(OpenSearchIndexError, match=r"preparing index mem-test: .*onnection") as e:
        refused.count("ws1")
    assert e.value.code == "index_error"


# ---------------------------------------------------------------- index creation


def test_index_is_created_once_with_the_knn_mapping(fake: FakeOpenSearch) -> None:
    index = _adapter(fake)
    index.count("ws1")
    index.count("ws1")
    index.search("ws1", IndexQuery(scope=WORKSPACE_WIDE, text="x"))

    assert len(fake.of("GET", "/_mapping")) == 1
    (create,) = fake.of("PUT", f"/{INDEX}")
    body = create.json()
    assert body["settings"] == {"index": {"knn": True}}
    props = body["mappings"]["properties"]
    assert props["vector"] == {
        "type": "knn_vector",
        "dimension": DIM,
        "method": {"name": "hnsw", "space_type": "cosinesimil", "engine": "lucene"},
    }
    assert props["text"] == {"type": "text", "analyzer": "english"}
    for keyword in ("workspace_id", "session_id", "tier", "id"):
        assert props[keyword] == {"type": "keyword"}
    assert props["created_at"] == {"type": "date"}
    assert props["metadata"] == {"type": "object", "enabled": False}
    assert props["scope"] == {
        "properties": {
            "conversation": {"type": "keyword"},
            "users": {"type": "keyword"},
            "group": {"type": "boolean"},
            "shared": {"type": "boolean"},
        }
    }
    assert body["mappings"]["dynamic"] == "strict"


def test_faiss_engine_and_knn_off() -> None:
    faiss = index_body(dimension=8, engine="faiss")
    assert faiss["mappings"]["properties"]["vector"]["method"]["engine"] == "faiss"
    plain = index_body(dimension=8, knn=False)
    assert "vector" not in plain["mappings"]["properties"]
    assert plain["settings"] == {}


def test_losing_the_creation_race_is_fine(fake: FakeOpenSearch) -> None:
    def already_exists(req: Recorded) -> tuple[int, Any] | None:
        if req.method == "PUT":
            return 400, {
                "error": {"type": "resource_already_exists_exception", "reason": "index already exists"},
                "status": 400,
            }
        return None

    fake.override = already_exists
    assert _adapter(fake).count("ws1") == 7


def test_existing_index_with_another_dimension_is_refused(fake: FakeOpenSearch) -> None:
    fake.mappings[INDEX] = index_body(dimension=DIM + 1)["mappings"]
    with pytest.raises(OpenSearchIndexError, match=f"dimension {DIM + 1}, expected {DIM}"):
        _adapter(fake).count("ws1")


# ---------------------------------------------------------------- bulk


def test_bulk_actions_are_routed_and_keyed_by_workspace(fake: FakeOpenSearch) -> None:
    docs = [_doc("ws1", "a", vector=[1, 0, 0, 0]), _doc("ws1", "b"), _doc("ws1", "z", vector=[0, 0, 0, 0])]
    _adapter(fake).upsert("ws1", docs)

    (bulk,) = fake.of("POST", "/_bulk")
    assert bulk.path == f"/{INDEX}/_bulk"
    assert bulk.query == {"refresh": ["wait_for"]}
    lines = bulk.ndjson()
    assert lines[0] == {"index": {"_index": INDEX, "_id": "ws1:a", "routing": "ws1"}}
    assert lines[1]["id"] == "a" and lines[1]["workspace_id"] == "ws1" and lines[1]["vector"] == [1, 0, 0, 0]
    assert lines[2] == {"index": {"_index": INDEX, "_id": "ws1:b", "routing": "ws1"}}
    assert "vector" not in lines[3]
    # A zero vector cannot be indexed under cosinesimil: the text goes in without it.
    assert lines[4]["index"]["_id"] == "ws1:z"
    assert "vector" not in lines[5] and lines[5]["text"] == "hello"


def test_documents_refused_with_429_are_retried(fake: FakeOpenSearch) -> None:
    calls: list[int] = []

    def throttle_b_once(req: Recorded) -> tuple[int, Any] | None:
        if not req.path.endswith("/_bulk"):
            return None
        calls.append(1)
        if len(calls) > 1:
            return None
        return 200, {
            "errors": True,
            "items": [
                {"index": {"_id": "ws1:a", "status": 201}},
                {
                    "index": {
                        "_id": "ws1:b",
                        "status": 429,
                        "error": {"type": "es_rejected_execution_exception"},
                    }
                },
            ],
        }

    fake.override = throttle_b_once
    _adapter(fake, bulk_initial_backoff=0).upsert("ws1", [_doc("ws1", "a"), _doc("ws1", "b")])
    first, second = fake.of("POST", "/_bulk")
    assert len(first.ndjson()) == 4
    assert [line for line in second.ndjson() if "index" in line] == [
        {"index": {"_index": INDEX, "_id": "ws1:b", "routing": "ws1"}}
    ]


def test_partial_bulk_failure_raises_naming_the_documents(fake: FakeOpenSearch) -> None:
    def refuse_b(req: Recorded) -> tuple[int, Any] | None:
        if not req.path.endswith("/_bulk"):
            return None
        error = {"type": "mapper_parsing_exception", "reason": "failed to parse field [vector]"}
        return 200, {
            "errors": True,
            "items": [
                {"index": {"_id": "ws1:a", "status": 201}},
                {"index": {"_id": "ws1:b", "status": 400, "error": error}},
            ],
        }

    fake.override = refuse_b
    with pytest.raises(
        OpenSearchIndexError, match=r"1 of 2 documents failed .* ws1:b \[400\] mapper_parsing"
    ) as e:
        _adapter(fake).upsert("ws1", [_doc("ws1", "a"), _doc("ws1", "b")])
    assert [f["_id"] for f in e.value.failures] == ["ws1:b"]


def test_delete_is_routed_and_missing_ids_are_fine(fake: FakeOpenSearch) -> None:
    def not_found(req: Recorded) -> tuple[int, Any] | None:
        if req.path.endswith("/_bulk"):
            return 200, {"errors": False, "items": [{"delete": {"_id": "ws1:gone", "status": 404}}]}
        return None

    fake.override = not_found
    _adapter(fake).delete("ws1", ["gone", "gone"])
    (bulk,) = fake.of("POST", "/_bulk")
    assert bulk.ndjson() == [{"delete": {"_index": INDEX, "_id": "ws1:gone", "routing": "ws1"}}]


def test_count_is_routed_and_filtered(fake: FakeOpenSearch) -> None:
    assert _adapter(fake).count("ws1") == 7
    (count,) = [r for r in fake.requests if r.path.endswith("/_count")]
    assert count.path == f"/{INDEX}/_count"
    assert count.query == {"routing": ["ws1"]}
    assert count.json() == {"query": {"term": {"workspace_id": "ws1"}}}


def test_workspace_is_checked_before_anything_is_sent(fake: FakeOpenSearch) -> None:
    index = _adapter(fake)
    with pytest.raises(ValueError, match="belongs to 'ws2'"):
        index.upsert("ws1", [_doc("ws2", "a")])
    with pytest.raises(ValueError, match="invalid workspace id"):
        index.count("ws1:evil")
    with pytest.raises(ValueError, match="5-dimensional"):
        index.upsert("ws1", [_doc("ws1", "a", vector=[0.1] * 5)])
    assert fake.requests == []


# ---------------------------------------------------------------- client factory and signing


def test_sigv4_signs_every_request_for_service_es(fake: FakeOpenSearch) -> None:
    creds = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "session-token")
    client = opensearch_client.__wrapped__(fake.url, region="eu-west-1", signed=True, credentials=creds)
    OpenSearchIndex(client=client, index=INDEX, dimension=DIM).upsert("ws1", [_doc("ws1", "a")])

    assert fake.requests, "nothing was sent"
    for req in fake.requests:
        auth = req.headers["Authorization"]
        assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
        assert "/eu-west-1/es/aws4_request" in auth
        assert req.headers["X-Amz-Security-Token"] == "session-token"
        assert req.headers["X-Amz-Content-SHA256"] == hashlib.sha256(req.body).hexdigest()
        _verify_signature(req, creds, "eu-west-1")


def _verify_signature(req: Recorded, creds: Credentials, region: str) -> None:
    """Recompute the signature the way the service does, from what arrived on the wire."""
    auth = req.headers["Authorization"]
    fields = dict(part.strip().split("=", 1) for part in auth.removeprefix("AWS4-HMAC-SHA256 ").split(","))
    signed = fields["SignedHeaders"].split(";")
    headers = {k: v for k, v in req.headers.items() if k.lower() in signed}
    query = "&".join(f"{k}={v}" for k, values in req.query.items() for v in values)
    url = f"http://{req.headers['Host']}{req.path}" + (f"?{query}" if query else "")
    aws = AWSRequest(method=req.method, url=url, data=req.body, headers=headers)
    aws.context["timestamp"] = req.headers["X-Amz-Date"]
    signer = SigV4Auth(creds, "es", region)
    expected = signer.signature(signer.string_to_sign(aws, signer.canonical_request(aws)), aws)
    assert fields["Signature"] == expected


def test_http_endpoint_is_unsigned(fake: FakeOpenSearch) -> None:
    _adapter(fake).count("ws1")
    assert fake.requests  # the count reached the server, so there are headers to look at
    assert all("Authorization" not in r.headers for r in fake.requests)


def test_factory_is_cached_and_defaults_to_https_for_bare_hosts() -> None:
    creds = Credentials("AKID", "secret")
    host = "search-sigil-abc.eu-west-1.es.amazonaws.com"
    client = opensearch_client(host, region="eu-west-1", credentials=creds)
    assert opensearch_client(host, region="eu-west-1", credentials=creds) is client
    assert _normalise_endpoint(host) == f"https://{host}"
    connection = client.transport.get_connection()
    assert connection.host == f"https://{host}:443"
    assert type(connection.session.auth).__name__ == "RequestsAWSV4SignerAuth"
    assert connection.session.auth.service == "es"
    assert connection.session.verify  # a CA bundle path: certificates are checked


def test_importing_the_adapter_pulls_no_sdk() -> None:
    code = (
        "import sys, shared.adapters.aws.opensearch as m\n"
        "m.OpenSearchIndex('http://127.0.0.1:1')\n"
        "bad = [n for n in ('opensearchpy', 'botocore', 'boto3') if n in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------- index sizing (issue 30)


def test_a_sized_index_is_created_with_its_shards_and_routing_partitions(fake: FakeOpenSearch) -> None:
    # Given a sizing that spreads each workspace over 3 of 6 shards
    index = _adapter(fake, sizing=IndexSizing(shards=6, routing_partitions=3))
    # When the index is first used
    index.upsert("ws1", [_doc("ws1", "d1")])
    # Then it is created with both settings, routing required (a partitioned index refuses
    # otherwise), and every write still routed by the workspace
    [create] = [r for r in fake.requests if r.method == "PUT" and r.path == f"/{INDEX}"]
    body = create.json()
    assert body["settings"]["index"] == {"knn": True, "number_of_shards": 6, "routing_partition_size": 3}
    assert body["mappings"]["_routing"] == {"required": True}
    [bulk] = fake.of("POST", "/_bulk")
    assert bulk.ndjson()[0]["index"]["routing"] == "ws1"


def test_an_unsized_index_keeps_opensearchs_defaults() -> None:
    body = index_body(dimension=DIM)
    assert "number_of_shards" not in body["settings"]["index"]
    assert "_routing" not in body["mappings"]
    # Shards alone: no partition setting, routing as before
    sharded = index_body(dimension=DIM, sizing=IndexSizing(shards=4))
    assert sharded["settings"]["index"] == {"knn": True, "number_of_shards": 4}
    assert "_routing" not in sharded["mappings"]


def test_measuring_is_one_search_of_no_hits_with_a_terms_aggregation(fake: FakeOpenSearch) -> None:
    def answer(req: Recorded) -> tuple[int, Any] | None:
        if req.method in {"GET", "POST"} and req.path == f"/{INDEX}/_search":
            return 200, {
                "hits": {"total": {"value": 9_000_000, "relation": "eq"}, "hits": []},
                "aggregations": {
                    "workspaces": {
                        "buckets": [{"key": "big", "doc_count": 4_000_000}, {"key": "s", "doc_count": 9}]
                    }
                },
            }
        return None

    fake.override = answer
    index = _adapter(fake)
    fake.mappings[INDEX] = index_body(dimension=DIM)["mappings"]

    total, workspaces = index.measure(largest=2)

    [search] = [r for r in fake.requests if r.path == f"/{INDEX}/_search"]
    assert search.json() == {
        "size": 0,
        "track_total_hits": True,
        "aggs": {"workspaces": {"terms": {"field": "workspace_id", "size": 2}}},
    }
    assert (total, workspaces) == (9_000_000, {"big": 4_000_000, "s": 9})
    # 18M docs in two years' growth: 4 shards; the 4M-doc workspace's 8M over 2 of them
    assert index.measured_sizing() == IndexSizing(shards=4, routing_partitions=2)


@pytest.mark.parametrize(
    ("total", "largest", "expected"),
    [
        (0, 0, IndexSizing()),
        (1_000_000, 10_000, IndexSizing()),
        # Many small workspaces: more shards, each workspace still on one
        (20_000_000, 50_000, IndexSizing(shards=8)),
        # One workspace past half a shard: spread over 2, with a shard more than that
        (2_000_000, 1_500_000, IndexSizing(shards=3, routing_partitions=2)),
        # One very large workspace: over as many shards as its share needs
        (30_000_000, 20_000_000, IndexSizing(shards=12, routing_partitions=8)),
    ],
)
def test_the_sizing_follows_the_measured_documents(total: int, largest: int, expected: IndexSizing) -> None:
    assert index_sizing(total_docs=total, largest_workspace_docs=largest) == expected


def test_a_partition_size_of_the_shard_count_or_more_is_refused() -> None:
    with pytest.raises(ValueError, match="below shards"):
        IndexSizing(shards=3, routing_partitions=3)

"""OpenAIEmbedder through the real openai SDK against a local embeddings server, and TitanEmbedder on
a real botocore bedrock-runtime client (Stubber, or an HTTP-level hook for concurrent calls)."""

from __future__ import annotations

import io
import json
import math
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from botocore.response import StreamingBody
from botocore.stub import Stubber

from shared.adapters.aws import build_aws_backend, clients
from shared.adapters.aws.dynamodb.embedding_cache import DynamoEmbeddingCache
from shared.adapters.embedded import FileSecretStore, build_embedded_backend
from shared.adapters.embedded.db import Database
from shared.adapters.embedded.embedding_cache import SqliteEmbeddingCache
from shared.config import OPENAI_KEY_SECRET, Settings
from shared.errors import EmbeddingError, SigilError
from shared.memory.embeddings import build_embedder
from shared.memory.embeddings.cache import CachedEmbedder, InProcessEmbeddingCache, content_hash
from shared.memory.embeddings.minilm import LocalMiniLM
from shared.memory.embeddings.openai import MAX_BATCH_INPUTS, OpenAIEmbedder
from shared.memory.embeddings.titan import TitanEmbedder
from shared.ports import Embedder
from tests.support.fake_openai_embeddings import FakeOpenAIEmbeddings, fake_vector
from tests.support.hashing_embedder import HashingEmbedder

KEY = "sk-test-0123456789abcdef"


def _close(actual: Any, expected: Any) -> None:
    np.testing.assert_allclose(np.array(actual), np.array(expected), rtol=1e-6, atol=1e-7)


def _norm(v: list[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


@pytest.fixture
def fake() -> Iterator[FakeOpenAIEmbeddings]:
    with FakeOpenAIEmbeddings() as server:
        yield server


def _openai(fake: FakeOpenAIEmbeddings, **kwargs: Any) -> OpenAIEmbedder:
    return OpenAIEmbedder(KEY, base_url=fake.base_url, **kwargs)


# ---------------------------------------------------------------- OpenAI


def test_openai_embeds_a_list_in_order(fake: FakeOpenAIEmbeddings) -> None:
    embedder = _openai(fake)
    assert isinstance(embedder, Embedder)
    assert (embedder.model_id, embedder.dimensions) == ("openai/text-embedding-3-small", 1536)

    vectors = embedder.embed(["first text", "second text"])

    _close(vectors, [fake_vector("first text", 1536), fake_vector("second text", 1536)])
    assert fake.requests == [
        {
            "model": "text-embedding-3-small",
            "input": ["first text", "second text"],
            "encoding_format": "float",
        }
    ]


def test_openai_reduced_dimensions_are_requested_and_named(fake: FakeOpenAIEmbeddings) -> None:
    embedder = _openai(fake, dimensions=512)
    assert embedder.model_id == "openai/text-embedding-3-small@512"

    [vector] = embedder.embed(["hello"])

    assert len(vector) == 512
    assert fake.requests[0]["dimensions"] == 512
    with pytest.raises(ValueError):
        _openai(fake, dimensions=4096)


def test_openai_retries_a_429_then_succeeds(fake: FakeOpenAIEmbeddings) -> None:
    fake.fail(429, code="rate_limit_exceeded")

    vectors = _openai(fake).embed(["hello"])

    _close(vectors, [fake_vector("hello", 1536)])
    assert len(fake.requests) == 2


def test_openai_400_is_not_retried_and_not_retryable(fake: FakeOpenAIEmbeddings) -> None:
    fake.fail(400, message=f"Incorrect API key provided: {KEY}.", code="invalid_request_error")

    with pytest.raises(EmbeddingError) as info:
        _openai(fake).embed(["hello"])

    assert info.value.retryable is False
    assert "HTTP 400" in info.value.message
    assert KEY not in info.value.message
    assert len(fake.requests) == 1


def test_openai_server_errors_are_retried_then_retryable(fake: FakeOpenAIEmbeddings) -> None:
    fake.fail(500, times=3, message="The server had an error.")

    with pytest.raises(EmbeddingError) as info:
        _openai(fake).embed(["hello"])

    assert info.value.retryable is True
    assert len(fake.requests) == 3  # the SDK's 3 attempts, as spec 003 asks


def test_openai_unreachable_server_is_retryable() -> None:
    with FakeOpenAIEmbeddings() as server:
        base_url = server.base_url
    # The port is closed now: the connection is refused.
    embedder = OpenAIEmbedder(KEY, base_url=base_url, max_retries=0)
    with pytest.raises(EmbeddingError) as info:
        embedder.embed(["hello"])
    assert info.value.retryable is True


def test_openai_splits_large_lists_into_batches_of_2048(fake: FakeOpenAIEmbeddings) -> None:
    # A compatible server's model: unknown to the table, so its width is given (and sent).
    embedder = _openai(fake, model="local-embed", dimensions=8)
    texts = [f"text {i}" for i in range(MAX_BATCH_INPUTS + 3)]

    vectors = embedder.embed(texts)

    assert [len(r["input"]) for r in fake.requests] == [MAX_BATCH_INPUTS, 3]
    _close(vectors[-1], fake_vector(texts[-1], 8))
    _close(vectors[0], fake_vector(texts[0], 8))
    with pytest.raises(ValueError, match="dimensions"):
        _openai(fake, model="local-embed")


def test_openai_blank_text_is_sent_as_a_space(fake: FakeOpenAIEmbeddings) -> None:
    vectors = _openai(fake).embed(["", "x"])
    assert fake.requests[0]["input"] == [" ", "x"]
    assert len(vectors) == 2


def test_openai_vectors_from_a_server_that_does_not_normalise_are_unit_length(
    fake: FakeOpenAIEmbeddings,
) -> None:
    fake.scale = 3.0
    [vector] = _openai(fake).embed(["hello"])
    assert _norm(vector) == pytest.approx(1.0)


def test_openai_wrong_width_is_an_error() -> None:
    with (
        FakeOpenAIEmbeddings(native_dimensions=10) as server,
        pytest.raises(EmbeddingError, match="10-dimensional"),
    ):
        OpenAIEmbedder(KEY, base_url=server.base_url).embed(["hello"])


# ---------------------------------------------------------------- Titan (Bedrock)

MODEL = "amazon.titan-embed-text-v2:0"


def _bedrock_client(**config: Any) -> Any:
    session = boto3.session.Session(
        aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="not-a-secret", region_name="us-east-1"
    )
    return session.client("bedrock-runtime", config=Config(**config))


def _titan_body(vector: list[float], tokens: int = 3) -> StreamingBody:
    data = json.dumps({"embedding": vector, "inputTextTokenCount": tokens}).encode()
    return StreamingBody(io.BytesIO(data), len(data))


def _request(text: str, dimensions: int = 1024) -> dict[str, Any]:
    return {
        "modelId": MODEL,
        "body": json.dumps({"inputText": text, "dimensions": dimensions, "normalize": True}),
        "contentType": "application/json",
        "accept": "application/json",
    }


@pytest.fixture
def stubbed() -> Iterator[tuple[Any, Stubber]]:
    client = _bedrock_client()
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def test_titan_sends_one_text_per_call(stubbed: tuple[Any, Stubber]) -> None:
    client, stubber = stubbed
    for text in ("alpha", " "):
        stubber.add_response(
            "invoke_model",
            {"body": _titan_body(fake_vector(text, 1024)), "contentType": "application/json"},
            _request(text),
        )
    embedder = TitanEmbedder("us-east-1", client=client, max_concurrency=1)
    assert isinstance(embedder, Embedder)
    assert (embedder.model_id, embedder.dimensions) == ("bedrock/amazon.titan-embed-text-v2:0", 1024)

    vectors = embedder.embed(["alpha", ""])  # the blank text goes as a space

    _close(vectors, [fake_vector("alpha", 1024), fake_vector(" ", 1024)])


def test_titan_smaller_dimensions(stubbed: tuple[Any, Stubber]) -> None:
    client, stubber = stubbed
    stubber.add_response(
        "invoke_model",
        {"body": _titan_body(fake_vector("a", 256)), "contentType": "application/json"},
        _request("a", 256),
    )
    embedder = TitanEmbedder("us-east-1", client=client, dimensions=256)
    assert embedder.model_id == "bedrock/amazon.titan-embed-text-v2:0@256"
    assert len(embedder.embed(["a"])[0]) == 256
    with pytest.raises(ValueError):
        TitanEmbedder("us-east-1", dimensions=384)


def test_titan_throttling_is_retryable(stubbed: tuple[Any, Stubber]) -> None:
    client, stubber = stubbed
    stubber.add_client_error(
        "invoke_model",
        service_error_code="ThrottlingException",
        service_message="Too many requests, please wait before trying again.",
        http_status_code=429,
        response_meta={"HTTPHeaders": {"retry-after": "2"}, "RequestId": "0c2a-req"},
    )
    with pytest.raises(EmbeddingError) as info:
        TitanEmbedder("us-east-1", client=client).embed(["a"])
    assert info.value.retryable is True
    assert info.value.retry_after_s == 2.0
    assert "embedding provider" in info.value.message


def test_titan_validation_error_is_not_retryable(stubbed: tuple[Any, Stubber]) -> None:
    client, stubber = stubbed
    stubber.add_client_error(
        "invoke_model",
        service_error_code="ValidationException",
        service_message="Malformed input request: #/dimensions: 300 is not a valid enum value",
        http_status_code=400,
    )
    with pytest.raises(EmbeddingError) as info:
        TitanEmbedder("us-east-1", client=client).embed(["a"])
    assert info.value.retryable is False


def test_titan_response_without_embedding_is_an_error(stubbed: tuple[Any, Stubber]) -> None:
    client, stubber = stubbed
    data = json.dumps({"message": "nope"}).encode()
    stubber.add_response(
        "invoke_model",
        {"body": StreamingBody(io.BytesIO(data), len(data)), "contentType": "application/json"},
    )
    with pytest.raises(EmbeddingError, match="without an embedding"):
        TitanEmbedder("us-east-1", client=client).embed(["a"])


class _Raw(io.BytesIO):
    """What botocore reads an HTTP response body from."""

    def stream(self, **_: object) -> Iterator[bytes]:
        yield self.getvalue()


def test_titan_concurrent_calls_keep_input_order() -> None:
    client = _bedrock_client(retries={"total_max_attempts": 1})
    seen: list[str] = []
    lock = threading.Lock()

    def send(request: Any, **_: object) -> AWSResponse:
        # Answer at the HTTP level with the vector of the text this request carries.
        body = json.loads(request.body)
        with lock:
            seen.append(body["inputText"])
        payload = json.dumps(
            {"embedding": fake_vector(body["inputText"], body["dimensions"]), "inputTextTokenCount": 2}
        ).encode()
        headers = {"content-type": "application/json", "content-length": str(len(payload))}
        return AWSResponse(request.url, 200, headers, _Raw(payload))

    client.meta.events.register("before-send.bedrock-runtime.InvokeModel", send)
    texts = [f"text number {i}" for i in range(12)]

    vectors = TitanEmbedder("us-east-1", client=client, max_concurrency=4).embed(texts)

    assert sorted(seen) == sorted(texts)
    _close(vectors, [fake_vector(t, 1024) for t in texts])


# ---------------------------------------------------------------- the cache in front of a model


def test_sqlite_cache_evicts_entries_older_than_30_days_at_open(tmp_path: Path) -> None:
    db = Database(tmp_path / "sigil.db")
    try:
        now = [1_800_000_000.0]
        cache = SqliteEmbeddingCache(db, clock=lambda: now[0])
        cache.put_many("m", {content_hash("old"): [1.0]})
        now[0] += 10 * 86_400
        cache.put_many("m", {content_hash("new"): [2.0]})
        now[0] += 25 * 86_400  # "old" is 35 days old, "new" 25

        reopened = SqliteEmbeddingCache(db, clock=lambda: now[0])

        assert db.query("SELECT count(*) FROM embedding_cache") == [(1,)]
        assert reopened.get_many("m", [content_hash("old"), content_hash("new")]) == {
            content_hash("new"): [2.0]
        }
    finally:
        db.close()


def test_a_failing_cache_does_not_fail_the_embedding(tmp_path: Path) -> None:
    db = Database(tmp_path / "sigil.db")
    cache = SqliteEmbeddingCache(db)
    model = HashingEmbedder(dimensions=8)
    embedder = CachedEmbedder(model, cache)
    db.close()  # every cache read and write now raises DatabaseClosed

    vectors = embedder.embed(["a", "b"])

    assert len(vectors) == 2
    assert model.calls == [2]


def test_cached_embedder_wraps_a_real_model_and_checks_its_answer(
    fake: FakeOpenAIEmbeddings, tmp_path: Path
) -> None:
    db = Database(tmp_path / "sigil.db")
    try:
        embedder = CachedEmbedder(_openai(fake, dimensions=64), SqliteEmbeddingCache(db))
        assert isinstance(embedder, Embedder)
        assert embedder.model_id == "openai/text-embedding-3-small@64"
        first = embedder.embed(["one", "two", "one"])
        again = embedder.embed(["two", "one"])
        assert [r["input"] for r in fake.requests] == [["one", "two"]]
        assert again == [first[1], first[0]]
    finally:
        db.close()


def test_content_hash_is_sha256_of_the_exact_text() -> None:
    assert content_hash("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert content_hash("a") != content_hash("a ")
    assert len(content_hash("\ud800 lone surrogate")) == 64


# ---------------------------------------------------------------- build_embedder and the backends


def _settings(tmp_path: Path, **values: Any) -> Settings:
    return Settings(data_dir=tmp_path / "data", **values)


def test_auto_on_the_embedded_backend_is_the_local_model_unloaded(tmp_path: Path) -> None:
    embedder = build_embedder(_settings(tmp_path), FileSecretStore(tmp_path / "s.json"))
    assert isinstance(embedder, LocalMiniLM)
    assert not embedder.loaded  # weights are read on the first embedding, not at build

    backend = build_embedded_backend(_settings(tmp_path))
    try:
        cached = backend.embedder
        assert isinstance(cached, CachedEmbedder)
        assert isinstance(cached.inner, LocalMiniLM) and not cached.inner.loaded
        assert isinstance(cached.cache, SqliteEmbeddingCache)
        assert cached.model_id.startswith("local/all-MiniLM-L6-v2@")
    finally:
        backend.close()


def test_none_and_auto_on_aws_mean_no_embeddings(tmp_path: Path) -> None:
    secrets = FileSecretStore(tmp_path / "s.json")
    assert build_embedder(_settings(tmp_path, embedding_model="none"), secrets) is None
    assert build_embedder(_settings(tmp_path, backend="aws"), secrets) is None
    backend = build_embedded_backend(_settings(tmp_path, embedding_model="none"))
    try:
        assert backend.embedder is None
    finally:
        backend.close()


def test_openai_key_comes_from_the_secret_store_at_first_use(
    tmp_path: Path, fake: FakeOpenAIEmbeddings
) -> None:
    secrets = FileSecretStore(tmp_path / "s.json")
    settings = _settings(
        tmp_path,
        embedding_model="openai/text-embedding-3-small",
        embedding_dimensions=256,
        openai_base_url=fake.base_url,
    )
    embedder = build_embedder(settings, secrets)
    assert isinstance(embedder, OpenAIEmbedder)
    assert (embedder.model_id, embedder.dimensions) == ("openai/text-embedding-3-small@256", 256)
    # Stored after the build: the key is read when the first embedding is asked for.
    secrets.set(OPENAI_KEY_SECRET, "sk-from-secrets-1234")

    assert len(embedder.embed(["hello"])[0]) == 256
    assert fake.headers[0]["authorization"] == "Bearer sk-from-secrets-1234"


def test_openai_without_a_key_or_base_url_fails_at_first_use(tmp_path: Path) -> None:
    embedder = build_embedder(
        _settings(tmp_path, embedding_model="openai/text-embedding-3-small"),
        FileSecretStore(tmp_path / "s.json"),
    )
    assert embedder is not None
    with pytest.raises(EmbeddingError, match="OPENAI_API_KEY") as info:
        embedder.embed(["hello"])
    assert info.value.retryable is False


def test_bedrock_embedder_and_the_aws_backend_wiring(tmp_path: Path) -> None:
    settings = Settings(
        backend="aws",
        sessions_table="sessions",
        memory_table="memory",
        queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/turns.fifo",
        event_bus_name="bus",
        opensearch_endpoint="https://search.example.com",
        aws_region="us-east-1",
        embedding_model="bedrock/amazon.titan-embed-text-v2:0",
        embedding_dimensions=512,
    )
    # Building makes no AWS call (no credentials or endpoint are needed for it). The boto3 clients
    # it builds are cached per process, so they are forgotten again: a later moto test must not
    # get a client made without moto's credentials.
    try:
        backend = build_aws_backend(settings)
        cached = backend.embedder
        assert isinstance(cached, CachedEmbedder)
        assert isinstance(cached.inner, TitanEmbedder)
        # The turn's backend caches in-process (no DynamoDB round trip); consolidation's shares
        # the DynamoDB cache.
        assert isinstance(cached.cache, InProcessEmbeddingCache)
        assert (cached.model_id, cached.dimensions) == ("bedrock/amazon.titan-embed-text-v2:0@512", 512)
        bulk = build_aws_backend(settings, persistent_embedding_cache=True).embedder
        assert isinstance(bulk, CachedEmbedder) and isinstance(bulk.cache, DynamoEmbeddingCache)
    finally:
        clients.reset()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"embedding_model": "cohere/embed-v3"}, "not one of"),
        ({"embedding_model": "openai/"}, "not one of"),
        ({"embedding_model": "openai/my-model"}, "dimensions"),
        ({"embedding_model": "local", "embedding_dimensions": 512}, "384"),
        ({"embedding_model": "bedrock/amazon.titan-embed-text-v2:0", "aws_region": None}, "region"),
        (
            {
                "embedding_model": "bedrock/amazon.titan-embed-text-v2:0",
                "embedding_dimensions": 300,
                "aws_region": "us-east-1",
            },
            "256, 512 or 1024",
        ),
    ],
)
def test_malformed_settings_are_refused_at_build(
    tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    # model_copy, not the constructor: AWS_REGION from the environment must not fill the region.
    settings = _settings(tmp_path).model_copy(update={"aws_region": None, "bedrock_region": None, **values})
    with pytest.raises(SigilError, match=message) as info:
        build_embedder(settings, FileSecretStore(tmp_path / "s.json"))
    assert info.value.code == "misconfigured"


def test_the_in_process_cache_keeps_the_most_recently_used_vectors() -> None:
    cache = InProcessEmbeddingCache(max_entries=2)
    cache.put_many("m", {"a": [1.0, 0.0], "b": [0.0, 1.0]})
    assert cache.get_many("m", ["a"]) == {"a": [1.0, 0.0]}  # "a" is now the most recent
    cache.put_many("m", {"c": [0.6, 0.8]})  # evicts "b", the least recently used
    assert cache.get_many("m", ["a", "b", "c"]) == {"a": [1.0, 0.0], "c": [0.6, 0.8]}
    # Vectors are keyed by model too: another model's entry is never returned.
    assert cache.get_many("other", ["a"]) == {}
    # What it hands out is a copy: a caller's edit does not change the cache.
    cache.get_many("m", ["a"])["a"][0] = 9.0
    assert cache.get_many("m", ["a"]) == {"a": [1.0, 0.0]}

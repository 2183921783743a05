"""Every outbound call a turn makes ends by the turn's deadline (issue 25, finding 3).

The turn's deadline used to bound the model call alone: the embedders, OpenSearch, the AWS
clients and the channel posts kept their own timeouts and retries (OpenAIEmbedder.embed inside a
1 s deadline, against a server that waits 6 s, returned after 6.7 s). Here each client makes one
real call, inside a 1 s deadline, to a real local server behind tests.support.slow_proxy that
holds its answer back 6 s: the call raises DeadlineExceeded, and the proxy saw the client hang up
before the answer was let through, on the one connection it opened (no retry started past the
deadline). Outside a deadline the same calls wait for the answer: the clients' own timeouts hold.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler

import httpx
import pytest
from osmem_server import OsmemServer

from shared.adapters.aws import clients
from shared.adapters.aws.opensearch import OpenSearchIndex
from shared.channels.ledger import MemorySendLedger
from shared.channels.out import ChannelRateLimited, build_senders
from shared.deadline import deadline
from shared.errors import DeadlineExceeded
from shared.memory.embeddings.openai import OpenAIEmbedder
from shared.memory.embeddings.titan import TitanEmbedder
from shared.models import IndexQuery, OutboundMessage, RecallScope
from shared.providers import bedrock
from tests.integration.test_outbound_requests import ListOutbox
from tests.support.fake_bedrock import FakeBedrock
from tests.support.fake_openai_embeddings import FakeOpenAIEmbeddings
from tests.support.fake_platforms import DictSecrets, FakeClock, FakePlatforms
from tests.support.served import FakeHTTPServer, Served
from tests.support.slow_proxy import SlowProxy

SLOW_S = 6.0  # how long the slow servers hold their answers
DEADLINE_S = 1.0
WAIT_S = 30.0  # the longest a test waits for the proxy to notice a hang-up (a bound, never a sleep)


def cut_short(proxy: SlowProxy, call: Callable[[], object]) -> DeadlineExceeded:
    """`call` inside a 1 s deadline: the DeadlineExceeded it raises, once the proxy has seen its
    one connection hung up before the answer."""
    with pytest.raises(DeadlineExceeded) as raised, deadline(time.monotonic() + DEADLINE_S):
        call()
    assert len(proxy.holds) == 1, "a retry started past the deadline"
    hold = proxy.holds[0]
    assert hold.done.wait(WAIT_S)
    assert hold.cut and not hold.forwarded, "the call waited for the slow answer"
    assert "deadline" in raised.value.message
    return raised.value


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    # Signed requests to a local server: any credentials will do, and none are looked up.
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


# ---------------------------------------------------------------- the embedders


@pytest.fixture
def embeddings() -> Iterator[FakeOpenAIEmbeddings]:
    with FakeOpenAIEmbeddings() as server:
        yield server


def openai_embedder(proxy: SlowProxy) -> OpenAIEmbedder:
    """Its client built now: importing the SDK takes a while on a busy machine, and that is not
    the call the deadline is about."""
    # The factory's timeout (30 s a wait) and the SDK's two retries: neither may outlast the deadline.
    embedder = OpenAIEmbedder("sk-test", base_url=f"{proxy.origin}/v1", timeout_s=30.0, max_retries=2)
    embedder._ensure_client()
    return embedder


def test_an_openai_embedding_ends_by_the_turns_deadline(embeddings: FakeOpenAIEmbeddings) -> None:
    with SlowProxy(embeddings.origin, delay_s=SLOW_S) as slow:
        embedder = openai_embedder(slow)
        cut_short(slow, lambda: embedder.embed(["what did I say about the garden?"]))
        # The server got the request: it was the wait for the answer that the deadline cut
        assert len(embeddings.requests) == 1


def test_outside_a_deadline_an_embedding_waits_for_a_slow_answer(embeddings: FakeOpenAIEmbeddings) -> None:
    with SlowProxy(embeddings.origin, delay_s=0.5) as slow:
        (vector,) = openai_embedder(slow).embed(["what did I say about the garden?"])
        assert len(vector) == 1536 and slow.holds[0].forwarded


def test_a_titan_embedding_ends_by_the_turns_deadline_on_every_thread(
    aws_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Bedrock's runtime is a local server whose answers are held back (what it would answer is
    # never read: the deadline comes first)
    with FakeBedrock() as runtime, SlowProxy(runtime.base_url, delay_s=SLOW_S) as slow:
        monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", slow.origin)
        bedrock.bedrock_client.cache_clear()
        try:
            embedder = TitanEmbedder("us-east-1", max_concurrency=2, timeout_s=30.0)
            assert embedder.client is not None  # built outside the deadline, as in a warm container
            # Two texts: embedded on two threads of the embedder's pool, each inside the deadline
            with pytest.raises(DeadlineExceeded), deadline(time.monotonic() + DEADLINE_S):
                embedder.embed(["first text", "second text"])
        finally:
            bedrock.bedrock_client.cache_clear()
        # Two connections (one a thread), both hung up before their answer, and no retry of either
        assert len(slow.holds) == 2
        assert all(h.done.wait(WAIT_S) and h.cut and not h.forwarded for h in slow.holds)


# ---------------------------------------------------------------- the AWS clients


def test_a_dynamodb_call_ends_by_the_turns_deadline_and_is_not_retried_past_it(aws_credentials: None) -> None:
    # A DynamoDB endpoint that holds its answers (any server behind it: none is ever read)
    with FakePlatforms() as upstream, SlowProxy(upstream.root, delay_s=SLOW_S) as slow:
        clients.reset()
        try:
            ddb = clients.dynamodb("us-east-1", endpoint_url=slow.origin)
            error = cut_short(slow, lambda: ddb.get_item(TableName="sessions", Key={"pk": {"S": "x"}}))
        finally:
            clients.reset()
    assert "dynamodb" in error.message


class Failing(Served):
    """An AWS endpoint that answers every request at once with a 500 (InternalServerError, which
    botocore's standard mode retries), counting them."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                with fake._lock:
                    fake.count += 1
                body = b'{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"boom"}'
                self.send_response(500)
                self.send_header("content-type", "application/x-amz-json-1.0")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = FakeHTTPServer(("127.0.0.1", 0), Handler)


def test_an_aws_retry_that_would_wait_past_the_deadline_is_not_started(aws_credentials: None) -> None:
    from botocore.exceptions import ClientError

    with Failing() as failing:
        clients.reset()
        try:
            ddb = clients.dynamodb("us-east-1", endpoint_url=failing.origin)
            # Under a second left: the retry handler's first backoff may be up to a second
            with pytest.raises(ClientError) as raised, deadline(time.monotonic() + 0.8):
                ddb.get_item(TableName="sessions", Key={"pk": {"S": "x"}})
        finally:
            clients.reset()
    # The server's answer stands, after the one attempt (the client's policy is four)
    assert raised.value.response["Error"]["Code"] == "InternalServerError"
    assert failing.count == 1


def test_an_aws_call_past_the_deadline_is_not_sent(aws_credentials: None) -> None:
    with FakePlatforms() as upstream, SlowProxy(upstream.root, delay_s=SLOW_S) as slow:
        clients.reset()
        try:
            s3 = clients.s3("us-east-1", endpoint_url=slow.origin)
            with pytest.raises(DeadlineExceeded), deadline(time.monotonic() - 1):
                s3.get_object(Bucket="skills", Key="default/skills/notes/SKILL.md")
        finally:
            clients.reset()
        assert slow.holds == []


# ---------------------------------------------------------------- OpenSearch


@pytest.fixture(scope="module")
def osmem() -> Iterator[OsmemServer]:
    server = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
    yield server
    server.close()


def test_an_opensearch_request_ends_by_the_turns_deadline_and_is_not_retried(osmem: OsmemServer) -> None:
    with SlowProxy(osmem.url, delay_s=SLOW_S) as slow:
        # The factory's client: 10 s a request, and two retries on a timeout
        index = OpenSearchIndex(slow.origin, index="deadline-mem", dimension=4, knn=False)
        query = IndexQuery(text="garden", k=5, scope=RecallScope(session_id="web.s1"))
        # The search's first request (the index's mapping, checked once) is the one held back
        cut_short(slow, lambda: index.search("default", query))


# ---------------------------------------------------------------- the channels


def test_a_channel_post_ends_by_the_turns_deadline() -> None:
    with FakePlatforms() as platforms, SlowProxy(platforms.root, delay_s=SLOW_S) as slow:
        urls = {name: url.replace(platforms.root, slow.origin) for name, url in platforms.base_urls.items()}
        with httpx.Client(timeout=30.0) as http:
            senders = build_senders(
                DictSecrets.for_fake(platforms),
                ListOutbox(),
                base_urls=urls,
                ledger=MemorySendLedger(),
                http=http,
            )
            message = OutboundMessage(
                workspace_id="ws1",
                session_id="s1",
                channel="telegram",
                chat_id="42",
                turn_id="t_1",
                part=0,
                seq=1,
                text="Your tomatoes need water.",
                in_reply_to="ev1",
            )
            error = cut_short(slow, lambda: senders.get("telegram").send(message))
    assert "telegram" in error.message


def test_a_rate_limit_whose_wait_would_pass_the_deadline_is_not_waited_out() -> None:
    with FakePlatforms() as platforms:
        platforms.rate_limit("telegram", retry_after=5)
        clock = FakeClock()
        with httpx.Client(timeout=30.0) as http:
            senders = build_senders(
                DictSecrets.for_fake(platforms),
                ListOutbox(),
                base_urls=platforms.base_urls,
                ledger=MemorySendLedger(),
                http=http,
                clock=clock,
                sleep=clock.sleep,
            )
            message = OutboundMessage(
                workspace_id="ws1",
                session_id="s1",
                channel="telegram",
                chat_id="42",
                turn_id="t_1",
                seq=1,
                text="Your tomatoes need water.",
            )
            # Two seconds left, and Telegram asks for five
            with pytest.raises(ChannelRateLimited), deadline(time.monotonic() + 2):
                senders.get("telegram").send(message)
        # Told at once: no wait, no second attempt (the policy would wait up to 30 s)
        assert len(platforms.calls("telegram", "sendMessage")) == 1

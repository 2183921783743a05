"""How long each outbound call of a turn takes inside a 1 s deadline, against a server that answers
after 6 s (issue 25, finding 3). Run by `make bench`.

Each client makes one real call to a local stand-in behind tests/support/slow_proxy.py, which
holds the answer back: the OpenAI embedder (the openai SDK against the fake embeddings server),
Titan (bedrock-runtime), DynamoDB and S3 (the adapters' boto3 clients), OpenSearch (osmem-server)
and a Telegram post (the channel's sender against the fake platforms). With every call bound to
the turn's deadline, each ends about 1 s after it started, with DeadlineExceeded; a client that
kept its own timeouts would wait the 6 s, or its retries' worth.
A benchmark, not a test: it prints a table.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/support is not installed; the bench runs from a plain clone

if TYPE_CHECKING:
    from tests.support.fake_platforms import FakePlatforms

DEADLINE_S = 1.0
SLOW_S = 6.0


@contextmanager
def slow(upstream: str) -> Iterator[str]:
    from tests.support.slow_proxy import SlowProxy

    with SlowProxy(upstream, delay_s=SLOW_S) as proxy:
        yield proxy.origin


def timed(call: Callable[[], object]) -> tuple[float, str]:
    from shared.deadline import deadline

    started = time.monotonic()
    try:
        with deadline(time.monotonic() + DEADLINE_S):
            call()
        outcome = "answered"
    except Exception as exc:  # noqa: BLE001 -- the outcome is what is reported
        outcome = type(exc).__name__
    return time.monotonic() - started, outcome


Row = tuple[str, float, str]


def embedders(vectors_origin: str, runtime_origin: str) -> list[Row]:
    from shared.memory.embeddings.openai import OpenAIEmbedder
    from shared.memory.embeddings.titan import TitanEmbedder
    from shared.providers import bedrock

    rows: list[Row] = []
    with slow(vectors_origin) as origin:
        embedder = OpenAIEmbedder("sk-bench", base_url=f"{origin}/v1", timeout_s=30.0, max_retries=2)
        embedder._ensure_client()  # the SDK's import is not the call measured
        rows.append(("OpenAI embedding (30 s a wait, 2 retries)", *timed(lambda: embedder.embed(["hi"]))))
    with slow(runtime_origin) as origin:
        os.environ["AWS_ENDPOINT_URL_BEDROCK_RUNTIME"] = origin
        bedrock.bedrock_client.cache_clear()
        titan = TitanEmbedder("us-east-1", timeout_s=30.0)
        assert titan.client is not None  # built before the call measured
        rows.append(("Titan embedding (30 s a wait, 3 attempts)", *timed(lambda: titan.embed(["hi"]))))
        os.environ.pop("AWS_ENDPOINT_URL_BEDROCK_RUNTIME")
        bedrock.bedrock_client.cache_clear()
    return rows


def stores(any_origin: str, osmem_url: str) -> list[Row]:
    from shared.adapters.aws import clients
    from shared.adapters.aws.opensearch import OpenSearchIndex
    from shared.models import IndexQuery, RecallScope

    rows: list[Row] = []
    with slow(any_origin) as origin:
        clients.reset()
        ddb = clients.dynamodb("us-east-1", endpoint_url=origin)
        key = {"pk": {"S": "x"}}
        rows.append(
            (
                "DynamoDB GetItem (60 s a wait, 5 attempts)",
                *timed(lambda: ddb.get_item(TableName="t", Key=key)),
            )
        )
    with slow(any_origin) as origin:
        s3 = clients.s3("us-east-1", endpoint_url=origin)
        rows.append(
            (
                "S3 GetObject, a skill (60 s a wait, 5 attempts)",
                *timed(lambda: s3.get_object(Bucket="b", Key="k")),
            )
        )
        clients.reset()
    with slow(osmem_url) as origin:
        index = OpenSearchIndex(origin, index="bench-deadline", dimension=4, knn=False)
        query = IndexQuery(text="garden", k=5, scope=RecallScope(session_id="web.s1"))
        rows.append(
            ("OpenSearch search (10 s a request, 2 retries)", *timed(lambda: index.search("default", query)))
        )
    return rows


def channel(platforms: FakePlatforms) -> list[Row]:
    import httpx

    from shared.adapters.embedded.db import Database
    from shared.adapters.embedded.outbox import SqliteOutbox
    from shared.channels.ledger import MemorySendLedger
    from shared.channels.out import build_senders
    from shared.models import OutboundMessage
    from tests.support.fake_platforms import DictSecrets

    with (
        slow(platforms.root) as origin,
        httpx.Client(timeout=10.0) as http,
        tempfile.TemporaryDirectory() as scratch,
    ):
        urls = {name: url.replace(platforms.root, origin) for name, url in platforms.base_urls.items()}
        outbox = SqliteOutbox(Database(Path(scratch) / "bench.db"))  # web's: a Telegram post never uses it
        senders = build_senders(
            DictSecrets.for_fake(platforms), outbox, base_urls=urls, ledger=MemorySendLedger(), http=http
        )
        message = OutboundMessage(
            workspace_id="ws1",
            session_id="s1",
            channel="telegram",
            chat_id="42",
            turn_id="t_1",
            seq=1,
            text="hi",
        )
        return [("Telegram sendMessage (10 s a wait)", *timed(lambda: senders.get("telegram").send(message)))]


def main() -> None:
    # Signed requests to local servers: any credentials will do.
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ[name] = "bench"
    os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
    os.environ.pop("AWS_ENDPOINT_URL", None)
    from osmem_server import OsmemServer

    from tests.support.fake_bedrock import FakeBedrock
    from tests.support.fake_openai_embeddings import FakeOpenAIEmbeddings
    from tests.support.fake_platforms import FakePlatforms

    with ExitStack() as stack:
        vectors = stack.enter_context(FakeOpenAIEmbeddings())
        platforms = stack.enter_context(FakePlatforms())
        runtime = stack.enter_context(FakeBedrock())
        osmem = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
        stack.callback(osmem.close)
        rows = (
            embedders(vectors.origin, runtime.base_url)
            + stores(platforms.root, osmem.url)
            + channel(platforms)
        )

    print(f"\nEach call inside a {DEADLINE_S:.0f} s deadline; every server answers after {SLOW_S:.0f} s.\n")
    print("| call (its client's own bounds) | elapsed | outcome |")
    print("|---|---|---|")
    for name, elapsed, outcome in rows:
        print(f"| {name} | {elapsed:.2f} s | {outcome} |")


if __name__ == "__main__":
    main()

"""A turn whose embedder, index or channel answers slowly ends by its deadline (issue 25, finding 3).

Each test slows one part of a real turn down, behind tests.support.slow_proxy, far past the
turn's deadline: the OpenAI embedder (the query embedding of the memory_search the model asks
for), the OpenSearch index (that search) or Telegram (the reply). The turn is cut at its deadline,
its attempt audited as failed, and the user's message handed back for redelivery; once the part
is quick again, the redelivered message is answered, once.

Both backends: the agent Lambda handler over moto with osmem-server as OpenSearch, and the local
gateway's lane worker on the embedded backend (SIGIL_TURN_TIMEOUT_S; its index is SQLite, in
process, so only the embedder and the channel can be slow there). The model is the real
anthropic SDK against the local fake, the embedder the real openai SDK against the local fake.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from moto import mock_aws
from osmem_server import OsmemServer

from functions.agent import handler as agent
from shared import cloud
from shared.adapters.aws import clients
from shared.channels.inbound import session_id
from shared.config import Settings
from shared.local.gateway import LocalGateway
from shared.models import AuditRecord, InboundMessage, LaneItem, Sender
from shared.observability import metrics
from tests.support.fake_anthropic import FakeAnthropic, FakeReply, Json
from tests.support.fake_openai_embeddings import FakeOpenAIEmbeddings
from tests.support.fake_platforms import FakePlatforms
from tests.support.lambda_context import LambdaContext
from tests.support.moto_aws import REGION, provision
from tests.support.slow_proxy import SlowProxy

EVENTS = Path(__file__).resolve().parents[2] / "events"
WS = "default"
CHAT = "4242"
WARM = "1111"  # the chat of the turn that warms the agent up
QUESTION = "What did I say about the tomatoes?"
ANSWER = "You said they need water."
SLOW_S = 60.0  # how long the slow part holds on: longer than any turn here may take
WAIT_S = 60.0  # the longest a test waits for a condition (a bound, never a sleep)


def model(body: Json) -> str | FakeReply:
    """Asks memory_search first (an embedding, then an index search), then answers."""
    last = body["messages"][-1]
    content = last.get("content")
    if isinstance(content, list) and any(b.get("type") == "tool_result" for b in content):
        return ANSWER
    # The user's words as the query: a text embedded before would come from the embedding cache
    words = (
        " ".join(b["text"] for b in content if b.get("type") == "text")
        if isinstance(content, list)
        else content
    )
    return FakeReply(tool_calls=[("memory_search", {"query": words})])


def telegram_item(chat: str = CHAT, event_id: str = "evt-slow-1", text: str = QUESTION) -> LaneItem:
    inbound = InboundMessage(
        event_id=event_id,
        channel="telegram",
        workspace_id=WS,
        session_id=session_id("telegram", chat, None),
        sender=Sender(id=chat, name="Ann"),
        chat_id=chat,
        chat_type="dm",
        text=text,
    )
    return LaneItem(inbound=inbound)


@dataclass
class SlowParts:
    """The stand-ins, each behind its own proxy (quick until a test slows it)."""

    anthropic: FakeAnthropic
    platforms: FakePlatforms
    embedder: SlowProxy
    channel: SlowProxy
    index: SlowProxy | None  # the aws backend's only

    def slow(self, part: str) -> SlowProxy:
        proxy = getattr(self, part)
        assert isinstance(proxy, SlowProxy)
        proxy.delay_s = SLOW_S
        return proxy

    def shown(self, chat: str = CHAT) -> list[str]:
        """What the Telegram chat shows now, message by message."""
        return [m.texts[-1] for m in self.platforms.messages.values() if m.chat == chat]


def wait_until(condition: Callable[[], bool], timeout: float = WAIT_S) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def stand_ins(stack: ExitStack, *, index: str | None) -> SlowParts:
    """The model, Telegram and the embedder (and OpenSearch at `index`), the last three behind
    their proxies."""
    anthropic = stack.enter_context(FakeAnthropic(model))
    platforms = stack.enter_context(FakePlatforms())
    vectors = stack.enter_context(FakeOpenAIEmbeddings())
    return SlowParts(
        anthropic=anthropic,
        platforms=platforms,
        embedder=stack.enter_context(SlowProxy(vectors.origin, delay_s=0)),
        # A platform slow to take the post: it never sees a post the turn gave up on, so the
        # redelivery's is the only one (a post it took and never answered would be posted again:
        # the send ledger knows only the posts that were answered).
        channel=stack.enter_context(SlowProxy(platforms.root, delay_s=0, hold="request")),
        index=stack.enter_context(SlowProxy(index, delay_s=0)) if index is not None else None,
    )


def common_settings(parts: SlowParts) -> dict[str, Any]:
    telegram = parts.platforms.base_urls["telegram"].replace(parts.platforms.root, parts.channel.origin)
    return {
        "model": "anthropic/fake-model",
        "ANTHROPIC_BASE_URL": parts.anthropic.base_url,
        "ANTHROPIC_API_KEY": "sk-ant-test",
        # The factory's embedder: 30 s a wait, two retries; what bounds it is the turn's deadline
        "embedding_model": "openai/text-embedding-3-small",
        "OPENAI_BASE_URL": f"{parts.embedder.origin}/v1",
        "OPENAI_API_KEY": "sk-test",
        "platform_base_urls": {"telegram": telegram},
        "provider_max_retries": 0,
    }


def cut_attempt(records: list[AuditRecord], deadline_s: float) -> AuditRecord:
    """The failed attempt's audit record: an error that names the deadline, over by then."""
    errors = [r for r in records if r.outcome == "error"]
    assert len(errors) == 1, [(r.outcome, r.error) for r in records]
    assert errors[0].error is not None and "deadline" in errors[0].error
    assert errors[0].duration_ms <= deadline_s * 1000
    return errors[0]


# ---------------------------------------------------------------- the agent Lambda over moto


@pytest.fixture
def aws_parts() -> Iterator[SlowParts]:
    with ExitStack() as stack:
        patch = stack.enter_context(pytest.MonkeyPatch.context())
        patch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
        stack.callback(metrics.clear_metrics)
        osmem = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
        stack.callback(osmem.close)
        parts = stand_ins(stack, index=osmem.url)
        stack.enter_context(mock_aws())
        stack.callback(cloud.reset)
        clients.reset()
        aws = provision("slowparts")
        clients.secretsmanager(REGION).create_secret(
            Name="sigil/telegram/bot-token", SecretString=parts.platforms.tokens["telegram"]
        )
        assert parts.index is not None
        cloud.reset(
            config=aws.settings(
                **common_settings(parts),
                secrets_prefix="sigil/",
                opensearch_endpoint=parts.index.origin,
                embedding_dimensions=384,  # the index's (its default width)
                turn_reserve_s=1,
                turn_min_s=1,
            )
        )
        yield parts


def sqs_record(item: LaneItem, receive_count: int) -> dict[str, Any]:
    """The sample lane record (events/agent_sqs_fifo_batch.json) carrying `item`."""
    sample = json.loads((EVENTS / "agent_sqs_fifo_batch.json").read_text())["Records"][0]
    record: dict[str, Any] = copy.deepcopy(sample)
    record["body"] = item.model_dump_json()
    record["attributes"]["MessageGroupId"] = f"{WS}.{item.inbound.session_id}"
    record["attributes"]["ApproximateReceiveCount"] = str(receive_count)
    return record


@pytest.mark.parametrize("part", ["embedder", "index", "channel"])
def test_a_lambda_turn_with_a_slow_part_ends_by_its_deadline_and_is_answered_once_redelivered(
    aws_parts: SlowParts, part: str
) -> None:
    # Given a warm agent (its SDKs imported, its clients built and the index made by a first turn
    # in another chat)
    warm = agent.lambda_handler(
        {"Records": [sqs_record(telegram_item(WARM, "evt-warm", "Hello there"), 1)]}, LambdaContext()
    )
    assert warm == {"batchItemFailures": []} and aws_parts.shown(WARM) == [ANSWER]
    # And the part slower than the whole invocation: 8 s left, 1 s of it kept back, so the turn's
    # deadline is 7 s away
    slow = aws_parts.slow(part)
    # When the agent handles a record, it fails (every record of the batch did: the processor
    # raises, and the batch goes back to the queue)
    with pytest.raises(BatchProcessingError):
        agent.lambda_handler({"Records": [sqs_record(telegram_item(), 1)]}, LambdaContext(remaining_ms=8_000))
    # Then the turn gave up on the slow part, hanging up on it while it held on
    assert slow.holds and wait_until(lambda: all(h.done.is_set() for h in slow.holds))
    assert any(h.cut for h in slow.holds)
    # And its attempt is audited as cut by the deadline, and nothing reached the chat
    cut_attempt(cloud.turn_deps().backend.audit.list_records(WS), deadline_s=7)
    assert aws_parts.shown() == []
    # When the part is quick again and the queue delivers the record a second time
    slow.delay_s = 0
    again = agent.lambda_handler({"Records": [sqs_record(telegram_item(), 2)]}, LambdaContext())
    # Then the user gets the answer, once
    assert again == {"batchItemFailures": []}
    assert aws_parts.shown() == [ANSWER]


# ---------------------------------------------------------------- the local gateway's lane worker


@pytest.fixture
def local_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[SlowParts, LocalGateway]]:
    for name in ("SIGIL_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "SIGIL_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    with ExitStack() as stack:
        parts = stand_ins(stack, index=None)
        settings = Settings(
            data_dir=tmp_path / "state",
            **common_settings(parts),
            lane_workers=1,
            turn_timeout_s=4,
        )
        gw = LocalGateway(settings)
        gw.backend.secrets.set("telegram/bot-token", parts.platforms.tokens["telegram"])
        gw.start()
        stack.callback(gw.stop)
        yield parts, gw


@pytest.mark.parametrize("part", ["embedder", "channel"])
def test_a_local_turn_with_a_slow_part_ends_by_its_deadline_and_is_answered_once_retried(
    local_parts: tuple[SlowParts, LocalGateway], part: str
) -> None:
    parts, gw = local_parts
    # Given a warm gateway (a first turn in another chat answered)
    assert gw.backend.lanes.submit(telegram_item(WARM, "evt-warm", "Hello there")).status == "queued"
    assert wait_until(lambda: parts.shown(WARM) == [ANSWER])
    # And the part slower than the turn's deadline (SIGIL_TURN_TIMEOUT_S=4)
    slow = parts.slow(part)
    # When a Telegram message reaches the lane
    assert gw.backend.lanes.submit(telegram_item()).status == "queued"
    # Then the turn gives up on the slow part: it hangs up while the part holds on
    assert wait_until(lambda: any(h.cut for h in slow.holds))
    assert wait_until(lambda: any(r.outcome == "error" for r in gw.backend.audit.list_records(WS)))
    cut_attempt(gw.backend.audit.list_records(WS), deadline_s=4)
    # When the part is quick again, the lane's retry answers the message, once
    slow.delay_s = 0
    assert wait_until(lambda: parts.shown() == [ANSWER])
    assert wait_until(lambda: len([r for r in gw.backend.audit.list_records(WS) if r.outcome == "ok"]) == 2)
    assert parts.shown() == [ANSWER]

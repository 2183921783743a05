"""Each platform fixture the webhook accepts, delivered 3 times at once: one turn, one reply.

The channels issue's acceptance check, through the real pieces. Each delivery is built and signed
as in test_webhook_channels (its CASES, the rows that queue a message) and sent three times
concurrently to functions.webhook.handler on moto, under moto_like_aws so that SQS FIFO
deduplication behaves as AWS documents it. Everything on the queue is then received and handed
to functions.agent.handler as SQS FIFO batch events (events/agent_sqs_fifo_batch.json's shape).
tests/support/fake_openai.py is the model. tests/support/fake_platforms.py stands in for every
platform API, reached the way a deployment reaches a stand-in: through
Settings.platform_base_urls, with the bot tokens in Secrets Manager under the stack's names.

Per fixture: one model call; one post at the endpoint the platform's outbound client uses,
edited as the reply streams in; and the final text in the platform's dialect. A redelivery
inside SQS's 5-minute window is dropped by the queue. One after it is queued again and
skipped by the turn, so no model call and no post follow.

The throttles run on a FakeClock that only sleeping advances, so a streamed reply is posted at
its first delta and the finish waits out the platform's window without real waiting. That
makes each row's edits deterministic.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws
from moto.sqs import models as sqs_models

from functions.agent import handler as agent
from functions.webhook import handler as webhook
from shared import cloud, serde
from shared.adapters.aws import clients
from shared.adapters.embedded.db import Database
from shared.adapters.embedded.index import SqliteMemoryIndex
from shared.channels.out import PlatformSender
from shared.models import LaneItem
from shared.models.media import MediaItem
from shared.observability import metrics
from shared.safety.redact import StreamRedactor
from tests.integration.test_media_fetch import PHOTO
from tests.integration.test_webhook_channels import (
    CASES,
    PHOTO_IDS,
    SECRETS,
    SIGNED_AT,
    Case,
    api_event,
    compact,
)
from tests.support import fake_openai
from tests.support.fake_openai import FakeOpenAI
from tests.support.fake_platforms import DISCORD_APPLICATION, PLATFORMS, FakeClock, FakePlatforms, Recorded
from tests.support.lambda_context import context_for
from tests.support.moto_aws import REGION, AwsResources, moto_like_aws, provision

ROOT = Path(__file__).resolve().parents[2]
WS = "default"
WEBHOOK_CONTEXT: Any = context_for("sigil-webhook")
AGENT_CONTEXT: Any = context_for("sigil-agent")
# One record of the sample batch: the fields and attribute names Lambda's SQS event carries.
RECORD_TEMPLATE: dict[str, Any] = json.loads((ROOT / "events" / "agent_sqs_fifo_batch.json").read_text())[
    "Records"
][0]

# The credentials the fake platforms accept, stored as the stack names them
# (shared.config CHANNEL_TOKENS). Discord interaction replies authenticate with
# the interaction's own token, but the stack has a bot token too, so it is stored like the others.
BOT_TOKENS = {
    "telegram": "123456:TEST-telegram-token",
    "slack": "xoxb-test-slack-token",
    "whatsapp": "EAATESTwhatsapptoken",
}
TOKEN_SECRETS = {
    "telegram/bot-token": BOT_TOKENS["telegram"],
    "slack/bot-token": BOT_TOKENS["slack"],
    "discord/bot-token": "discord-bot-token-for-tests",
    "whatsapp/access-token": BOT_TOKENS["whatsapp"],
}

# The model's answer. Bold, emphasis, inline code and a fenced block with a "<" cover what each
# dialect writes differently, escaping included.
REPLY = 'Here is **bold**, _emphasis_ and `code`:\n\n```python\nprint("a < b")\n```'
RENDERED = {
    "telegram": "Here is <b>bold</b>, <i>emphasis</i> and <code>code</code>:\n\n"
    '<pre><code class="language-python">print("a &lt; b")</code></pre>',
    "slack": 'Here is *bold*, _emphasis_ and `code`:\n\n```\nprint("a &lt; b")\n```',
    "discord": 'Here is **bold**, *emphasis* and `code`:\n\n```python\nprint("a < b")\n```',
    "whatsapp": 'Here is *bold*, _emphasis_ and `code`:\n\n```print("a < b")```',
}


# ---------------------------------------------------------------- the fixtures and their posts


def for_the_fake(case: Case) -> Case:
    """The delivery as sent here.

    The fake serves one Discord application's interaction webhooks, so the command variant
    names that application. Nothing else about the delivery changes.
    """
    if case.channel != "discord":
        return case
    data = json.loads(case.body)
    data["application_id"] = DISCORD_APPLICATION
    return dataclasses.replace(case, body=compact(data))


ACCEPTED = [for_the_fake(case) for case in CASES if case.queued is not None]


@dataclass(frozen=True)
class Post:
    """The request that creates the reply's message: its operation, path and JSON fields."""

    op: str  # as fake_platforms records it
    path: str  # below the platform's base URL
    fields: dict[str, Any]  # fields the request must carry, with these values
    absent: tuple[str, ...] = ()  # fields it must not carry


def telegram_post(chat: int, *, quoting: int, topic: int | None = None) -> Post:
    # The reply quotes the user's message; in a forum topic it goes to that topic.
    fields: dict[str, Any] = {
        "chat_id": chat,
        "parse_mode": "HTML",
        "reply_parameters": {"message_id": quoting, "allow_sending_without_reply": True},
    }
    if topic is not None:
        fields["message_thread_id"] = topic
    absent = () if topic is not None else ("message_thread_id",)
    return Post("sendMessage", f"/bot{BOT_TOKENS['telegram']}/sendMessage", fields, absent)


def slack_post(channel: str, *, thread: str | None = None) -> Post:
    fields: dict[str, Any] = {"channel": channel, "mrkdwn": True}
    if thread is not None:
        fields["thread_ts"] = thread
    absent = () if thread is not None else ("thread_ts",)
    return Post("chat.postMessage", "/api/chat.postMessage", fields, absent)


# The interaction was answered "thinking..." (type 5) by the webhook; the reply replaces that.
DISCORD_ORIGINAL = (
    f"/api/v10/webhooks/{DISCORD_APPLICATION}/ThisIsATokenFromDiscordThatIsVeryLong/messages/@original"
)

POSTS: dict[str, Post] = {
    "slack/signature_vectors.json[vector headers]": slack_post("G8PSS9T3V"),
    "slack/event_app_mention.json[signed]": slack_post("C111"),
    "slack/event_message_channels_no_thread.json[signed]": slack_post("C111"),
    "slack/event_message_channels_no_thread.json[variant: file_share with a file]": slack_post("C111"),
    "slack/event_message_channels_in_thread.json[signed]": slack_post("C111", thread="1726133698.626339"),
    "slack/event_message_im_in_thread.json[signed]": slack_post("D111", thread="1726133698.626339"),
    "slack/event_message_thread_broadcast.json[signed]": slack_post("C111", thread="1633663824.000500"),
    "telegram/update_message_text.json[secret token]": telegram_post(1111111, quoting=1365),
    "telegram/update_message_reply.json[secret token]": telegram_post(1111111, quoting=1365),
    "telegram/update_message_entities.json[secret token]": telegram_post(1111111, quoting=1365),
    "telegram/update_message_document.json[secret token]": telegram_post(1111111, quoting=1365),
    "telegram/updates_channel_post_and_forum_topic_thirdparty.json[variant: a person's text in the topic]": (
        telegram_post(-1001971186208, quoting=2392, topic=2391)
    ),
    "discord/interaction_application_command.json[variant: with the fields Discord always sends]": Post(
        "edit", DISCORD_ORIGINAL, {"allowed_mentions": {"parse": []}}
    ),
    # The photo fixtures (docs/media.md): the turn fetched the photo first, then replied as ever.
    "telegram/update_message_photo_caption.json[secret token]": telegram_post(1111111, quoting=1366),
    "slack/event_message_file_share.json[signed]": slack_post("D111"),
    "discord/interaction_command_attachment.json[signed]": Post(
        "edit",
        f"/api/v10/webhooks/{DISCORD_APPLICATION}/aW50ZXJhY3Rpb246Nzg3MDUzMDgwNDc4NjEzNTcxOnRva2Vu/messages/@original",
        {"allowed_mentions": {"parse": []}},
    ),
    "whatsapp/messages_image_notification.json[signed]": Post(
        "messages", "/v23.0/106540352242922/messages", {"to": "16505551234", "type": "text"}
    ),
    "whatsapp/messages_text_notification.json[signed]": Post(
        "messages",
        "/v23.0/106540352242922/messages",  # the business number the user wrote to
        {"to": "16505551234", "type": "text"},  # to the sender's number
    ),
}


# ---------------------------------------------------------------- one fixture, end to end


@dataclass
class Trace:
    """What one fixture's deliveries came to."""

    answers: list[tuple[int, str]]  # the webhook's answers to the three concurrent deliveries
    handed_to_agent: list[LaneItem]
    model_calls: int
    requests: list[Recorded]  # the platform's requests during the turn
    message_ids: list[str]  # the messages the platform created, as it named them
    shown: list[str]  # what those messages show in the end
    retry_answer: int  # the redelivery inside the 5-minute window ...
    retry_queued: int  # ... and how many messages it put on the lane
    late_answer: int  # the redelivery past the window ...
    late_queued: int  # ... how many it put on the lane ...
    outcomes: list[str]  # ... and the audited turn outcomes, oldest first
    model_calls_after: int  # model calls and platform requests once both redeliveries ran
    requests_after: int
    # The files the turn fetched and stored (name, sniffed kind and type): docs/media.md.
    media: list[tuple[str | None, str, str]] = dataclasses.field(default_factory=list)

    @property
    def posts(self) -> int:
        return len(self.message_ids)

    @property
    def edits(self) -> int:
        return len(self.requests) - self.posts


# Makes fake_openai's chunk stream for a run: see `paced`.
Pacer = Callable[[FakePlatforms, FakeClock], Callable[..., Iterator[bytes]]]
_traces: dict[str, Trace] = {}


def traced(case: Case, *, reply: str = REPLY, pacer: Pacer | None = None, key: str | None = None) -> Trace:
    """Run `case` end to end once per session. The per-fixture tests and the table share the runs."""
    key = key or case.id
    if key not in _traces:
        _traces[key] = run_end_to_end(case, reply=reply, pacer=pacer)
    return _traces[key]


def run_end_to_end(case: Case, *, reply: str, pacer: Pacer | None) -> Trace:
    with ExitStack() as stack:
        patch = stack.enter_context(pytest.MonkeyPatch.context())
        # Lambda runs one request per container at a time; the three deliveries are threads of
        # one process, whose powertools Metrics object would flush one metric set from three
        # threads at once. Disabled, it keeps what was added, so it is cleared at the end.
        patch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
        stack.callback(metrics.clear_metrics)
        stack.enter_context(mock_aws())
        model = stack.enter_context(FakeOpenAI(lambda _body: reply))
        platforms = stack.enter_context(FakePlatforms(tokens=BOT_TOKENS))
        serve_files(platforms)
        stack.callback(cloud.reset)
        aws = runtime(model, platforms)
        # moto has no OpenSearch: the turns' memory index is the embedded one (as the contract
        # suites' is), which a document's text is indexed into and the context pipeline searches.
        index_dir = Path(tempfile.mkdtemp(prefix="sigil-e2e-index-"))
        stack.callback(shutil.rmtree, index_dir, ignore_errors=True)
        index_db = Database(index_dir / "index.db", load_vec=True)
        stack.callback(index_db.close)
        cloud.turn_deps().backend.index = SqliteMemoryIndex(index_db)
        clock = FakeClock()
        throttles_on(clock, patch)
        if pacer is not None:
            patch.setattr(fake_openai, "_chunks", pacer(platforms, clock))
        stack.enter_context(moto_like_aws())

        # Given a warm webhook (clients built once, as each container's first request does)
        webhook.lambda_handler(api_event(case.channel, b"{}", {}), WEBHOOK_CONTEXT)
        # When the platform delivers the event three times at once, and the agent takes the lane
        answers = deliver_at_once(case.event(), times=3)
        handed = run_agent(aws)
        model_calls, requests = len(model.requests), replies_of(platforms)
        message_ids, shown = platforms.shown_ids(case.channel), platforms.shown(case.channel)

        # And the platform delivers it again inside SQS's 5-minute deduplication window: Slack
        # retries nearly at once, after ~1 minute and after ~5 minutes
        # (fixtures/slack/retry_headers_semantics.json) ...
        retry_answer = deliver(retry_of(case, 1))
        retry_queued = len(run_agent(aws))
        # ... and past it, as Slack's third retry can be, or a Telegram or WhatsApp delivery
        # re-sent after the webhook failed for a while. Shrinking moto's window to nothing is
        # that wait: both moto and moto_like_aws read it at each send.
        patch.setattr(sqs_models, "DEDUPLICATION_TIME_IN_SECONDS", 0)
        late_answer = deliver(retry_of(case, 3))
        late_queued = len(run_agent(aws))
        audited = cloud.turn_deps().backend.audit.list_records(WS)

        return Trace(
            answers=answers,
            handed_to_agent=handed,
            model_calls=model_calls,
            requests=requests,
            message_ids=message_ids,
            shown=shown,
            retry_answer=retry_answer,
            retry_queued=retry_queued,
            late_answer=late_answer,
            late_queued=late_queued,
            outcomes=[r.outcome for r in reversed(audited)],  # listed newest first
            model_calls_after=len(model.requests),
            requests_after=len(replies_of(platforms)),
            media=[(m.name, m.kind, m.mime_type) for m in stored_media(WS)],
        )


# The files the fixtures attach, as their platforms serve them: the turn fetches them
# (shared.media.fetch) into the stack's media bucket before the model call.
FILES = {
    ("telegram", "AwADBAADbXXXXXXXXXXXGBdhD2l6_XX", "Testfile.pdf"): b"%PDF-1.4\n%test file\n",
    ("slack", "F111", "notes.txt"): b"Hello from the notes.\n",
    # The photo fixtures' photos: the same PNG, whatever type each platform declares.
    **{(platform, file_id, "plant.png"): PHOTO for platform, file_id in PHOTO_IDS.items()},
}
# What the turn's sniffing finds them to be, by file id.
MEDIA_TYPES = {
    "AwADBAADbXXXXXXXXXXXGBdhD2l6_XX": ("document", "application/pdf"),
    "F111": ("document", "text/plain"),
    **{file_id: ("image", "image/png") for file_id in PHOTO_IDS.values()},
}


def serve_files(platforms: FakePlatforms) -> None:
    for (platform, file_id, name), data in FILES.items():
        platforms.add_file(platform, file_id, data, name=name)


def replies_of(platforms: FakePlatforms) -> list[Recorded]:
    """The platform requests that post or edit a reply (not the turn's file downloads)."""
    return [r for r in platforms.requests if r.method != "GET"]


def stored_media(workspace_id: str) -> list[MediaItem]:
    media = cloud.turn_deps().backend.media
    assert media is not None, "the stack has a media bucket"
    return media.list_media(workspace_id)


def runtime(model: FakeOpenAI, platforms: FakePlatforms) -> AwsResources:
    """Both functions' settings on moto: the stack's secrets, the fake model and platforms."""
    clients.reset()
    aws = provision("e2e")
    store = clients.secretsmanager(REGION)
    for name, value in {**SECRETS, **TOKEN_SECRETS}.items():
        store.create_secret(Name=f"sigil/{name}", SecretString=value)
    settings = aws.settings(
        secrets_prefix="sigil/",
        model="openai/fake-model",
        OPENAI_BASE_URL=model.base_url,
        OPENAI_API_KEY="sk-test",
        provider_max_retries=0,  # a failed model call is the turn's failure, not a hidden retry
        platform_base_urls=platforms.base_urls,
    )
    # The webhook verifies signatures made at SIGNED_AT, so its clock is pinned there.
    cloud.reset(config=settings, clock=lambda: float(SIGNED_AT))
    return aws


def throttles_on(clock: FakeClock, patch: pytest.MonkeyPatch) -> None:
    """Run the agent's own senders' throttles on `clock`.

    cloud.turn_deps() wires the senders to the platforms (through platform_base_urls), and that
    wiring is part of what is tested, so its registry is kept. Only the time source changes: the
    senders are built on time.monotonic, and their throttles read it through these attributes
    (monkeypatch raises if they are renamed, rather than patching nothing).
    """
    senders = cloud.turn_deps().senders
    for channel in PLATFORMS:
        sender = senders.get(channel)
        assert isinstance(sender, PlatformSender)
        patch.setattr(sender, "_clock", clock)
        patch.setattr(sender, "_sleep", clock.sleep)


def deliver(event: dict[str, Any]) -> int:
    status: int = webhook.lambda_handler(event, WEBHOOK_CONTEXT)["statusCode"]
    return status


def deliver_at_once(event: dict[str, Any], *, times: int) -> list[tuple[int, str]]:
    answers: list[tuple[int, str]] = []
    barrier = threading.Barrier(times)

    def send() -> None:
        barrier.wait()
        response = webhook.lambda_handler(copy.deepcopy(event), WEBHOOK_CONTEXT)
        answers.append((response["statusCode"], response.get("body") or ""))

    threads = [threading.Thread(target=send) for _ in range(times)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return answers


def retry_of(case: Case, attempt: int) -> dict[str, Any]:
    """The platform's redelivery of `case`: the same body (so the same event id), signed again."""
    event = case.event()
    if case.channel == "slack":
        # fixtures/slack/retry_headers_semantics.json: what a retry adds
        event["headers"].update({"x-slack-retry-num": str(attempt), "x-slack-retry-reason": "http_timeout"})
    return event


def run_agent(aws: AwsResources) -> list[LaneItem]:
    """Everything on the lane through the agent, as the SQS event source mapping does it.

    Each receive becomes one batch event; on success its messages are deleted (the mapping
    deletes what the function did not report failed). FIFO hands out a group's next message
    only after the previous one is deleted, hence the loop.
    """
    sqs = clients.sqs(REGION)
    arn = sqs.get_queue_attributes(QueueUrl=aws.queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    handed: list[LaneItem] = []
    while messages := sqs.receive_message(
        QueueUrl=aws.queue_url,
        MaxNumberOfMessages=10,
        VisibilityTimeout=30,
        MessageSystemAttributeNames=["All"],
    ).get("Messages", []):
        event = {"Records": [sqs_record(message, arn) for message in messages]}
        assert agent.lambda_handler(event, AGENT_CONTEXT) == {"batchItemFailures": []}
        for message in messages:
            sqs.delete_message(QueueUrl=aws.queue_url, ReceiptHandle=message["ReceiptHandle"])
        handed += [serde.loads(LaneItem, message["Body"]) for message in messages]
    return handed


def sqs_record(message: Mapping[str, Any], queue_arn: str) -> dict[str, Any]:
    """A received message as Lambda hands it over: the sample record with this message's values."""
    record = copy.deepcopy(RECORD_TEMPLATE)
    record.update(
        messageId=message["MessageId"],
        receiptHandle=message["ReceiptHandle"],
        body=message["Body"],
        md5OfBody=message["MD5OfBody"],
        eventSourceARN=queue_arn,
        awsRegion=REGION,
    )
    # Every system attribute the sample carries (MessageGroupId, ApproximateReceiveCount, ...),
    # as SQS reported it for this message.
    record["attributes"] = {name: message["Attributes"][name] for name in RECORD_TEMPLATE["attributes"]}
    return record


def text_of(request: Recorded) -> str:
    if request.platform == "discord":
        return str(request.json["content"])
    if request.platform == "whatsapp":
        return str(request.json["text"]["body"])
    return str(request.json["text"])


# ---------------------------------------------------------------- the tests


@pytest.mark.parametrize("case", ACCEPTED, ids=[c.id for c in ACCEPTED])
def test_three_concurrent_deliveries_make_one_turn_and_one_reply(case: Case) -> None:
    assert case.id in POSTS, "a fixture the webhook now accepts: write its expected post in POSTS"
    trace = traced(case)
    expected = POSTS[case.id]
    platform = case.channel

    # The three deliveries are answered alike, and the agent is handed one message
    assert len(trace.answers) == 3 and len(set(trace.answers)) == 1
    assert trace.answers[0][0] == 200
    [item] = trace.handed_to_agent
    assert item.inbound.channel == platform

    # One model call, and one message posted where the platform's client posts a reply
    assert trace.model_calls == 1
    assert trace.posts == 1
    [message_id] = trace.message_ids
    post, *edits = trace.requests
    assert {r.platform for r in trace.requests} == {platform}
    assert (post.op, post.path) == (expected.op, expected.path)
    assert {k: post.json.get(k) for k in expected.fields} == expected.fields
    assert not set(expected.absent) & set(post.json)

    # Every later request edits that same message as the reply streams in
    if platform == "telegram":
        assert all(e.op == "editMessageText" and e.json["message_id"] == int(message_id) for e in edits)
        assert all(r.json["parse_mode"] == "HTML" for r in trace.requests)
    elif platform == "slack":
        assert all(e.op == "chat.update" and e.json["ts"] == message_id for e in edits)
    elif platform == "discord":
        assert all(r.method == "PATCH" and r.path == expected.path for r in trace.requests)
    else:
        assert edits == []  # WhatsApp messages cannot be edited: the finished reply is posted once

    # And the message shows the model's reply in the platform's dialect, as the last request sent it
    assert trace.shown == [RENDERED[platform]]
    assert text_of(trace.requests[-1]) == RENDERED[platform]

    # A file the message carries was fetched with the bot's credentials into the media bucket,
    # its type read from its bytes; a redelivery stored nothing more (docs/media.md)
    assert trace.media == [(a.name, *MEDIA_TYPES[a.id or ""]) for a in item.inbound.attachments]

    # A retry inside SQS's deduplication window is acknowledged and dropped by the queue
    assert (trace.retry_answer, trace.retry_queued) == (200, 0)
    # One past it reaches the agent, whose turn finds the event committed and skips it
    assert (trace.late_answer, trace.late_queued) == (200, 1)
    assert trace.outcomes == ["ok", "skipped_duplicate"]
    # So neither brought another model call or another request to the platform
    assert (trace.model_calls_after, trace.requests_after) == (1, len(trace.requests))


# ---------------------------------------------------------------- a slow stream

STREAMED = "telegram/update_message_text.json[secret token]"
# Word-sized deltas (fake_openai's `_pieces`). The turn shows a stream through the output filter
# (shared.safety.redact.StreamRedactor), which holds back the last HOLD_BACK (96) characters and
# recomputes every 64 or so: a short reply would show nothing until its final text. So the stream
# is a few hundred characters long, and the bold word, at the end, shows only in the final text.
STREAM = (
    "Counting slowly, one word at a time so that you can watch the message grow: "
    + ", ".join(["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"] * 3)
    + ", and **done**."
)
STREAM_SHOWN = (
    "Counting slowly, one word at a time so that you can watch the message grow: "
    + ", ".join(["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"] * 3)
    + ", and <b>done</b>."
)
STREAM_GAP_S = 1.5  # between deltas on the throttles' clock: more than Telegram's 1 s per chat


def paced(platforms: FakePlatforms, clock: FakeClock) -> Callable[..., Iterator[bytes]]:
    """fake_openai's chunk stream, one text delta per STREAM_GAP_S of the throttles' clock.

    Before each text delta after the first, it waits until the agent has shown what the previous
    ones let it show (its request reached the platform), then moves the clock on. So the model is
    slow on the clock the throttles read, while the test waits only for the requests themselves,
    and each change meets a free throttle: a deterministic post-then-edit sequence. What the agent
    shows is what the turn's stream filter lets through, so a StreamRedactor here, fed the same
    text, counts the changes to wait for (most deltas change nothing that is shown).
    """
    chunks = fake_openai._chunks

    def slow(completion_id: str, body: dict[str, Any], reply: Any, cached: int = 0) -> Iterator[bytes]:
        text, shown, changes = "", "", 0
        visible = StreamRedactor(pii=False)
        for event in chunks(completion_id, body, reply, cached):
            if _is_text(event):
                if text:
                    _wait_for_requests(platforms, changes)
                    clock.advance(STREAM_GAP_S)
                text += json.loads(event.removeprefix(b"data: "))["choices"][0]["delta"]["content"]
                if (now := visible(text)) and now != shown:
                    shown, changes = now, changes + 1
            yield event

    return slow


def _is_text(event: bytes) -> bool:
    if not event.startswith(b"data: {"):
        return False
    choices = json.loads(event.removeprefix(b"data: "))["choices"]
    return bool(choices and choices[0]["delta"].get("content"))


def _wait_for_requests(platforms: FakePlatforms, count: int, timeout_s: float = 10.0) -> None:
    # On a timeout the stream goes on: the test's assertions then say what was missing.
    deadline = time.monotonic() + timeout_s
    while len(platforms.requests) < count and time.monotonic() < deadline:
        time.sleep(0.002)


def streamed() -> tuple[Case, Trace]:
    """The Telegram text fixture end to end, its reply paced (see `paced`)."""
    case = next(c for c in ACCEPTED if c.id == STREAMED)
    return case, traced(case, reply=STREAM, pacer=paced, key=f"{STREAMED} paced")


def test_a_slowly_streamed_reply_is_posted_once_then_edited_up_to_the_final_text() -> None:
    _, trace = streamed()
    # One turn, one Telegram message: posted once the stream filter lets some text through,
    # edited as more is let through, and edited to the final text at the finish
    assert trace.model_calls == 1
    texts = [r.json["text"] for r in trace.requests]
    assert [r.op for r in trace.requests] == ["sendMessage", *["editMessageText"] * (len(texts) - 1)]
    assert len(texts) >= 4  # a post, two edits while streaming at least, and the final text
    assert texts[-1] == STREAM_SHOWN
    # Each text shown while streaming is a prefix of the final one, and longer than the last
    assert all(STREAM_SHOWN.startswith(t) for t in texts[:-1])
    assert all(len(a) < len(b) for a, b in itertools.pairwise(texts))
    assert trace.posts == 1
    assert trace.shown == [STREAM_SHOWN]
    assert (trace.model_calls_after, trace.requests_after) == (1, len(texts))


# ---------------------------------------------------------------- the table


def test_every_fixture_is_one_model_call_and_one_post() -> None:
    # The runs above as one table (printed: run with -s to see it). A run whose test was
    # deselected happens here.
    rows = [(case.fixture, case.delivery, traced(case)) for case in ACCEPTED]
    case, trace = streamed()
    rows.append((case.fixture, f"{case.delivery}, paced stream", trace))
    print("\n" + table(rows))
    assert all(t.model_calls == t.model_calls_after == 1 and t.posts == 1 for *_, t in rows)


def table(rows: list[tuple[str, str, Trace]]) -> str:
    lines = [
        "| fixture | delivery | first request | model calls | posts | edits | retry in window / past it |",
        "|---|---|---|---|---|---|---|",
    ]
    for fixture, delivery, trace in rows:
        post = trace.requests[0]
        first = {"discord": "PATCH @original", "whatsapp": "POST messages"}.get(post.platform, post.op)
        if "message_thread_id" in post.json:
            first += f" (topic {post.json['message_thread_id']})"
        if "thread_ts" in post.json:
            first += " (thread_ts)"
        retries = f"{'dropped' if trace.retry_queued == 0 else 'queued'} / {trace.outcomes[-1]}"
        lines.append(
            f"| {fixture} | {delivery} | {first} | {trace.model_calls_after} | {trace.posts} "
            f"| {trace.edits} | {retries} |"
        )
    return "\n".join(lines) + "\n"

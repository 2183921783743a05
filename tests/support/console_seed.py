"""A workspace for the console's browser tests and screenshots, filled through the real code paths.

Two people talk to the agent through the real turn (shared.agent.turn.run_turn, a FunctionProvider
answering and calling memory_search when asked to look something up), in windows small enough that
their messages roll into Tier 1 and the index; then each session is compacted by the real
compaction with tests.support.consolidation.FakeConsolidator, one consolidation run per person,
which writes summaries and extracts facts; a maintenance run then prunes the facts that faded. A
second workspace holds one short conversation.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Iterable, Iterator
from datetime import timedelta
from pathlib import Path

from shared.agent.turn import TurnDeps, run_turn
from shared.backend import Backend
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.clock import utcnow
from shared.config import Settings
from shared.consolidation.compaction import compact_session
from shared.consolidation.maintenance.driver import run_maintenance
from shared.models import (
    DEFAULT_BUDGET,
    InboundMessage,
    LaneItem,
    Sender,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    WorkspaceConfig,
)
from shared.models.media import MediaItem
from shared.providers.base import ChatRequest, Provider, ProviderEvent, TextDelta, ToolCallEvent, Usage
from shared.providers.function import FunctionProvider, estimate_tokens
from tests.support import upload_files
from tests.support.consolidation import FakeConsolidator

WS = "default"
OTHER_WS = "research"
ALICE, BOB = "alice", "bob"
ALICE_SESSION, BOB_SESSION = "web.alice.notes", "web.bob.trip"
ALICE_RUN, BOB_RUN, MAINTENANCE_RUN = "run-alice-1", "run-bob-1", "maintenance-1"
# What maintenance prunes of Alice's facts a month after they were learnt (shared.consolidation
# .maintenance's decay by category): the decision and the style; the preference stays.
PRUNED = ("PostgreSQL", "short answers")

ALICE_SAYS = [
    "I prefer dark mode in every editor.",
    "My manager is Sarah Chen.",
    "look up: what editor theme did I ask for?",
    "We decided to use PostgreSQL for the project.",
    "Please keep answers short.",
    "small talk about the weather today",
    "small talk about lunch plans",
    "thanks, that is all for now",
]
BOB_SAYS = [
    "I prefer green tea in the morning.",
    "the harbour ferry leaves on sundays at nine",
    "look up: when does the ferry leave?",
    "small talk about the quokka sanctuary",
    "small talk about the weekend",
    "see you next week",
]
LOOK_UP = "look up: "


def answer(request: ChatRequest) -> str | Iterable[ProviderEvent]:
    """Calls memory_search for a message starting "look up: ", then answers from its result."""
    last = request.messages[-1]
    if isinstance(last, ToolResultMessage):
        return "I looked that up in my memory."
    assert isinstance(last, UserMessage)
    if last.content.startswith(LOOK_UP):
        query = last.content.removeprefix(LOOK_UP)
        return [
            TextDelta(text=""),
            ToolCallEvent(
                call=ToolCall(id="call-1", name="memory_search", arguments=json.dumps({"query": query}))
            ),
            Usage(input_tokens=estimate_tokens(request), output_tokens=12),
        ]
    return f"Noted: {last.content}"


def turn_deps(backend: Backend, settings: Settings) -> TurnDeps:
    model = FunctionProvider(answer)

    def provider(ref: str | None) -> tuple[Provider, str]:
        return model, "openai/gpt-4.1-mini"

    return TurnDeps(
        backend=backend,
        settings=settings,
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=provider,
    )


def say(deps: TurnDeps, workspace_id: str, session_id: str, user: str, text: str, n: int) -> None:
    inbound = InboundMessage(
        event_id=f"ev-{session_id}-{n}",
        channel="web",
        workspace_id=workspace_id,
        session_id=session_id,
        sender=Sender(id=user, name=user.title()),
        chat_id=session_id,
        text=text,
    )
    record = run_turn(deps, LaneItem(inbound=inbound))
    assert record.outcome == "ok", record


def seed(backend: Backend, settings: Settings) -> None:
    for config in (
        WorkspaceConfig(
            id=WS,
            name="Support desk",
            active_window=4,
            summary_batch=4,
            budget=DEFAULT_BUDGET.model_copy(deep=True),
        ),
        WorkspaceConfig(id=OTHER_WS, name="Research", active_window=4, summary_batch=4),
    ):
        backend.workspaces.put(config)
    deps = turn_deps(backend, settings)
    for n, text in enumerate(ALICE_SAYS):
        say(deps, WS, ALICE_SESSION, ALICE, text, n)
    for n, text in enumerate(BOB_SAYS):
        say(deps, WS, BOB_SESSION, BOB, text, n)
    say(deps, OTHER_WS, "web.carol.1", "carol", "what is new in the literature?", 0)
    # Compacted a month ago (the compaction's own clock), so that today's maintenance run finds
    # the decision and the style fact faded and prunes them: a change in their history.
    fake = FakeConsolidator()
    then = utcnow() - timedelta(days=30)
    compact_session(backend, fake.model, WS, ALICE_SESSION, run_id=ALICE_RUN, clock=lambda: then)
    compact_session(backend, fake.model, WS, BOB_SESSION, run_id=BOB_RUN, clock=lambda: then)
    run_maintenance(backend, WS, run_id=MAINTENANCE_RUN)
    seed_media(backend)


# Alice's files, as the chat page's upload and a turn's transcription leave them in the store.
PHOTO = upload_files.png(6, 4, (30, 140, 60))
PHOTO_NAME, VOICE_NAME = "fern.png", "voice-note.ogg"
VOICE_TRANSCRIPT = "Remind me to water the fern on Friday."


def seed_media(backend: Backend) -> None:
    if backend.media is None:
        return
    for n, (name, kind, mime, data, text) in enumerate(
        [
            (PHOTO_NAME, "image", "image/png", PHOTO, None),
            (VOICE_NAME, "audio", "audio/ogg", b"OggS" + bytes(60), VOICE_TRANSCRIPT),
        ]
    ):
        backend.media.put(
            MediaItem(
                id=f"m-seed{n}",
                workspace_id=WS,
                session_id=ALICE_SESSION,
                user_id=ALICE,
                channel="web",
                source_id=f"upload-seed{n}",
                kind=kind,
                mime_type=mime,
                size=len(data),
                sha256=hashlib.sha256(data).hexdigest(),
                name=name,
                text=text,
                text_source="transcript" if text else None,
            ),
            data,
        )


DEAD_TEXT = "this message's turn failed every time"


def dead_item(n: int = 0) -> LaneItem:
    """A message of Alice's session, as the webhook queues it."""
    return LaneItem(
        inbound=InboundMessage(
            event_id=f"ev-dead-{n}",
            channel="web",
            workspace_id=WS,
            session_id=ALICE_SESSION,
            sender=Sender(id=ALICE, name="Alice"),
            chat_id=ALICE_SESSION,
            text=DEAD_TEXT,
        )
    )


@contextlib.contextmanager
def embedded(base: Path) -> Iterator[tuple[Backend, Settings]]:
    """The embedded backend in `base`, with a deterministic embedder (hybrid search), seeded, and
    one dead letter: its item failed its one attempt on the embedded lanes."""
    from shared.adapters.embedded import EmbeddedLaneRunner, SqliteLanes, build_embedded_backend
    from tests.support.hashing_embedder import HashingEmbedder

    settings = Settings(data_dir=base / "state", embedding_model="none")
    backend = build_embedded_backend(settings)
    try:
        backend.embedder = HashingEmbedder()
        seed(backend, settings)
        assert isinstance(backend.lanes, SqliteLanes)
        backend.lanes.submit(dead_item())

        def fail(item: LaneItem) -> None:
            raise RuntimeError("the model provider answered 500 three times")

        with EmbeddedLaneRunner(backend.lanes, fail, workers=1, max_attempts=1, backoff_s=0.0) as runner:
            assert runner.wait_idle(60)
        yield backend, settings
    finally:
        backend.close()


@contextlib.contextmanager
def cloud(base: Path) -> Iterator[tuple[Backend, Settings]]:
    """The cloud backend (build_aws_backend) on moto, its index on osmem-server (BM25: osmem
    answers no k-NN query, so embeddings are off), seeded; and one dead letter that SQS moved to
    the dead-letter queue after its last receive, as the stack's redrive policy does."""
    from osmem_server import OsmemServer

    from shared.adapters.aws import build_aws_backend, clients
    from tests.support import moto_aws

    server = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
    try:
        with moto_aws.persistent_mock(), moto_aws.moto_like_aws():
            name = moto_aws.name_for(base)
            resources = moto_aws.provision(name)
            sqs = clients.sqs(moto_aws.REGION)
            fifo = {"FifoQueue": "true", "ContentBasedDeduplication": "false"}
            dlq_url = sqs.create_queue(QueueName=f"{name}-dlq.fifo", Attributes=fifo)["QueueUrl"]
            dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
                "QueueArn"
            ]
            turns_url = sqs.create_queue(
                QueueName=f"{name}-lane.fifo",
                Attributes={
                    **fifo,
                    "VisibilityTimeout": "30",
                    "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1}),
                },
            )["QueueUrl"]
            settings = resources.settings(
                embedding_model="none",
                opensearch_endpoint=server.url,
                queue_url=turns_url,
                dead_letter_queue_url=dlq_url,
            )
            backend = build_aws_backend(settings)
            try:
                seed(backend, settings)
                backend.lanes.submit(dead_item())
                # Its one receive fails (visible again at once); the next receive moves it.
                [got] = sqs.receive_message(QueueUrl=turns_url, MaxNumberOfMessages=1)["Messages"]
                sqs.change_message_visibility(
                    QueueUrl=turns_url, ReceiptHandle=got["ReceiptHandle"], VisibilityTimeout=0
                )
                assert not sqs.receive_message(QueueUrl=turns_url, MaxNumberOfMessages=1).get("Messages")
                yield backend, settings
            finally:
                backend.close()
    finally:
        server.close()


BACKENDS = {"embedded": embedded, "cloud": cloud}


@contextlib.contextmanager
def serve(app: object) -> Iterator[str]:
    """`app` on uvicorn on a free loopback port, on a thread; stopped when the block ends."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))  # type: ignore[arg-type]
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the console did not start")
            time.sleep(0.02)
        port = next(int(sock.getsockname()[1]) for s in server.servers for sock in s.sockets)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)

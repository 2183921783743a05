"""Issue 13's property at the tool level, on both backends: random workloads of several people in
direct and group conversations on several channels, written the way the product writes memory,
then every memory tool and the prompt's tacit facts asked from every person's seat under each
policy.

Where tests/contract/test_memory_scopes.py holds each store and index to shared.memory.scope.visible,
this file checks what a person can actually get out of the memory tools: the scope the turn builds
(shared.agent.turn.recall_scope_for, with the person's linked identities), the ToolContext it
builds from it, the tools' own reads and fallbacks, and what the result text says.

The writes are the product's: real turns (shared.agent.turn.run_turn, a window of two so every
turn rolls the one before into Tier 1 and the index), then real compaction
(shared.consolidation.compaction.compact_session: batch summaries, rolling summaries and extracted
facts with the scopes consolidation gives them), then `sigil memory share` on some facts
(shared.memory.sharing.set_shared). The models are FunctionProviders: the chat model echoes the
user's marker, the consolidation model summarises and extracts the markers it is shown.

Every message carries a marker naming its conversation (mk<conversation>x<n>), and every extracted
fact one of its own (fp<conversation>x<n> about the speaker, fe<conversation>x<n> about a shared
subject), so any tool output can be read back as "which conversations does this come from". Then,
for a person P asking from conversation C:

- personal (the default): nothing from a conversation P was not part of (a direct conversation
  is P's alone; P's identities on other channels count as P only when linked); in a group, nothing
  from outside the group; facts the workspace shared are the one exception;
- workspace: the markers of conversations P was not part of are found when asked for;
- conversation: nothing from outside C.

Backends: embedded (SQLite + FTS5 + sqlite-vec, with the hashing embedder so hybrid and vector
search run), and the cloud set (DynamoDB on moto, OpenSearch on osmem-server, BM25: osmem answers
no k-NN query, so on the cloud the vector path is asked once more per seat with an embedder, and
the search falls back to the conversation's recent messages, which must stay in scope too).
The counts are printed in the terminal summary (tests/integration/conftest.py).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from moto import mock_aws
from osmem_server import OsmemServer

from shared.adapters.aws import build_aws_backend, clients
from shared.adapters.embedded import build_embedded_backend
from shared.agent.turn import TurnDeps, _tool_context, recall_scope_for, run_turn
from shared.backend import Backend
from shared.channels.inbound import ChannelName, session_id
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.clock import new_id
from shared.config import Settings
from shared.consolidation.compaction import (
    ROLLING_SYSTEM,
    SUMMARY_SYSTEM,
    ConsolidationModel,
    compact_session,
)
from shared.consolidation.extraction import EXTRACTION_SYSTEM
from shared.identity import resolve_sender
from shared.memory.sharing import set_shared
from shared.memory.tacit import TacitFacts
from shared.models import (
    WORKSPACE_WIDE,
    Identity,
    InboundMessage,
    LaneItem,
    MemoryConfig,
    RecallPolicy,
    Sender,
    ToolCall,
    UserMessage,
    WorkspaceConfig,
)
from shared.providers.base import ChatRequest
from shared.providers.function import FunctionProvider
from shared.tools import ToolContext
from tests.support.hashing_embedder import HashingEmbedder
from tests.support.moto_aws import provision

# Read by tests/integration/conftest.py's terminal summary: workloads generated and reads checked.
COUNTS: Counter[str] = Counter()

CHANNELS: tuple[ChannelName, ...] = ("telegram", "slack", "discord")
POLICIES: tuple[RecallPolicy, ...] = ("personal", "workspace", "conversation")
# Words every message, summary and fact carries, so a query of them matches everything.
COMMON = "harbour lantern"
MARKER = re.compile(r"\b(mk|fp|fe)(\d+)x(\d+)\b")
# A turn's active window: every turn rolls the one before out into Tier 1 and the index.
WINDOW = 2
SUMMARY_BATCH = 3
# A turn on moto and osmem is a dozen requests where the embedded one is a few SQLite statements:
# fewer workloads there keep the file within about half a minute on a loaded two-core machine.
EXAMPLES = {"embedded": 20, "cloud": 6}
SETTINGS = settings(
    deadline=None,
    derandomize=True,
    database=None,
    # No shrinking: a workload is dozens of turns, and shrinking one that leaks would outlast the
    # test timeout. The failure names the seat, policy, tool, marker and conversation instead.
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# ---------------------------------------------------------------- workloads


@dataclass(frozen=True)
class Conversation:
    index: int
    channel: ChannelName
    chat: str
    group: bool
    members: tuple[int, ...]  # people (indices into the workload's users)

    @property
    def session(self) -> str:
        return session_id(self.channel, self.chat, None)


@dataclass(frozen=True)
class Workload:
    users: int
    linked: tuple[bool, ...]  # whose identities on every channel are linked to one Sigil user
    conversations: tuple[Conversation, ...]
    turns: tuple[tuple[int, int], ...]  # (conversation, speaker) in the order they speak

    def person(self, user: int, channel: ChannelName) -> str:
        """The Sigil user `user` is on `channel`: one id everywhere when linked, else the id the
        channel's first contact derives (shared.identity.derived_user_id)."""
        return f"p{user}" if self.linked[user] else f"{channel}:{sender_id(user, channel)}"

    def people_of(self, conversation: Conversation) -> set[str]:
        return {self.person(u, conversation.channel) for u in conversation.members}


def sender_id(user: int, channel: ChannelName) -> str:
    return f"{channel[0]}{user}"


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    users = draw(st.integers(3, 5))
    channels = draw(st.lists(st.sampled_from(CHANNELS), min_size=2, max_size=3, unique=True))
    linked = tuple(draw(st.lists(st.booleans(), min_size=users, max_size=users)))
    pairs = [(u, c) for u in range(users) for c in channels]
    dms = draw(st.lists(st.sampled_from(pairs), min_size=2, max_size=4, unique=True))
    conversations: list[Conversation] = []
    for user, channel in dms:
        chat = sender_id(user, channel) if channel == "telegram" else f"D{sender_id(user, channel)}"
        conversations.append(Conversation(len(conversations), channel, chat, False, (user,)))
    for g in range(draw(st.integers(1, 2))):
        channel = draw(st.sampled_from(channels))
        members = draw(st.lists(st.integers(0, users - 1), min_size=2, max_size=users, unique=True))
        chat = f"-100{g}" if channel == "telegram" else f"G{g}"
        conversations.append(Conversation(len(conversations), channel, chat, True, tuple(sorted(members))))
    turns = [
        (c.index, member)
        for c in conversations
        for member in c.members
        for _ in range(draw(st.integers(1, 2)))
    ]
    # Conversations interleave, as they do in a workspace; within one, the order is the draw's.
    order = draw(st.permutations(turns))
    return Workload(users, linked, tuple(conversations), tuple(order))


# ---------------------------------------------------------------- the models


def chat_model(request: ChatRequest) -> str:
    """Acknowledges the user's message with its marker (so replies carry their conversation's)."""
    last = request.messages[-1]
    assert isinstance(last, UserMessage)
    return f"noted {' '.join(m.group(0) for m in MARKER.finditer(last.content))}"


def consolidation_answer(request: ChatRequest) -> str:
    """Summaries list the markers they are shown; extraction makes two facts per message marker,
    one about the speaker and one about the shared subject "harbour", each with a marker of its own."""
    last = request.messages[-1]
    assert isinstance(last, UserMessage)
    markers = sorted({m.group(0) for m in MARKER.finditer(last.content) if m.group(1) == "mk"})
    if request.system in (SUMMARY_SYSTEM, ROLLING_SYSTEM):
        return f"{COMMON} talk about {' '.join(markers) or 'nothing'}"
    assert request.system == EXTRACTION_SYSTEM
    tokens = [m.removeprefix("mk") for m in markers]
    return json.dumps(
        {
            "preferences": [{"key": f"likes fp{t}", "value": f"{COMMON} fp{t}"} for t in tokens],
            "entities": [
                {"subject": "harbour", "key": f"note fe{t}", "value": f"lantern fe{t}"} for t in tokens
            ],
            "decisions": [],
            "styles": [],
            "artifacts": [],
        }
    )


CONSOLIDATION = ConsolidationModel(FunctionProvider(consolidation_answer), "test-consolidation")


# ---------------------------------------------------------------- writing a workload


def inbound(ws: str, conversation: Conversation, user: int, n: int, text: str) -> InboundMessage:
    channel = conversation.channel
    return InboundMessage.model_validate(
        {
            "event_id": f"e{n}",
            "channel": channel,
            "workspace_id": ws,
            "session_id": conversation.session,
            "sender": Sender(id=sender_id(user, channel), name=f"User{user}"),
            "chat_id": conversation.chat,
            "chat_type": ("group" if channel == "telegram" else "channel") if conversation.group else "dm",
            "text": text,
        }
    )


def write(backend: Backend, settings_: Settings, ws: str, workload: Workload) -> TurnDeps:
    """The workload's turns, then the consolidation of every conversation; the turns' deps."""
    backend.workspaces.put(WorkspaceConfig(id=ws, active_window=WINDOW, summary_batch=SUMMARY_BATCH))
    # `sigil identity link`: a linked person's identities on every channel are one Sigil user.
    for user, linked in enumerate(workload.linked):
        if linked:
            for channel in CHANNELS:
                backend.identities.create(
                    Identity(
                        workspace_id=ws,
                        channel=channel,
                        channel_user_id=sender_id(user, channel),
                        user_id=f"p{user}",
                        status="approved",
                    )
                )
    outbox = OutboxSender(backend.outbox)
    deps = TurnDeps(
        backend=backend,
        settings=settings_,
        senders=SenderRegistry({channel: outbox for channel in CHANNELS}),
        provider_factory=lambda ref: (FunctionProvider(chat_model), "test-model"),
        facts=TacitFacts(backend.memory),
    )
    for n, (c, user) in enumerate(workload.turns):
        conversation = workload.conversations[c]
        text = f"{COMMON} mk{c}x{n} quay"
        run_turn(deps, LaneItem(inbound=inbound(ws, conversation, user, n, text)))
    for conversation in workload.conversations:
        result = compact_session(backend, CONSOLIDATION, ws, conversation.session, run_id=f"run-{ws}")
        assert result.status == "done", result
    return deps


def share_some(backend: Backend, ws: str, data: st.DataObject) -> set[str]:
    """`sigil memory share` on some of the extracted facts; the markers they carry."""
    facts = backend.memory.list_triples(ws, scope=WORKSPACE_WIDE, limit=1000)
    if not facts:
        return set()
    # Chosen by what they say, not by id: ids hash the workspace id, new in every run.
    by_text = {f"{t.subject} {t.predicate} {t.object}": t for t in facts}
    chosen = data.draw(st.sets(st.sampled_from(sorted(by_text)), max_size=3), label="shared")
    shared: set[str] = set()
    for text in sorted(chosen):
        set_shared(backend.memory, backend.index, ws, by_text[text].id, shared=True)
        shared |= {m.group(0) for m in MARKER.finditer(text)}
    return shared


def stored_markers(backend: Backend, ws: str, workload: Workload) -> dict[int, set[str]]:
    """The message markers that reached Tier 1, by conversation (the rest are still in a window)."""
    found: dict[int, set[str]] = {c.index: set() for c in workload.conversations}
    for c in workload.conversations:
        for record in backend.memory.get_messages(ws, c.session, limit=1000):
            found[c.index] |= {m.group(0) for m in MARKER.finditer(record.text) if m.group(1) == "mk"}
    return found


# ---------------------------------------------------------------- reading from every seat


def markers_in(text: str) -> set[tuple[str, int]]:
    """(marker, the conversation it names) for every marker in `text`."""
    return {(m.group(0), int(m.group(2))) for m in MARKER.finditer(text)}


def reachable(policy: RecallPolicy, conversation: Conversation, mine: set[int]) -> set[int] | None:
    """The conversations whose markers a seat may get under `policy` (None: any)."""
    if policy == "workspace":
        return None
    if policy == "conversation" or conversation.group:
        # Narrowed: this conversation. Personal in a group: the group's own conversation.
        return {conversation.index}
    return mine  # personal in a direct conversation: every conversation the asker was part of


def reads_of(
    deps: TurnDeps,
    workspace: WorkspaceConfig,
    seat: InboundMessage,
    me: str,
    *,
    own: list[str],
    foreign: list[str],
    knn: Backend | None,
) -> dict[str, str]:
    """What every memory tool answers, and the tacit facts, for `me` asking in `seat`'s
    conversation under `workspace`'s policy: the scope and ToolContext built as the turn builds
    them (shared.agent.turn), the tools run through the turn's registry."""
    assert deps.facts is not None
    scope = recall_scope_for(deps.backend, workspace, seat, me)
    ctx = _tool_context(deps, seat, me, new_id("turn"), scope)

    def call(name: str, args: dict[str, Any], context: ToolContext = ctx) -> str:
        result = deps.tools.execute(
            ToolCall(id="r", name=name, arguments=json.dumps(args)), context, workspace
        )
        assert not result.is_error, (name, args, result.content)
        return result.content

    outputs = {
        "memory_search (common words)": call("memory_search", {"query": COMMON, "k": 20}),
        "memory_semantic (common words)": call("memory_semantic", {"query": COMMON, "k": 20}),
        "memory_summary": call("memory_summary", {}),
        "memory_recall (me)": call("memory_recall", {"topic": "me"}),
        "memory_recall (harbour)": call("memory_recall", {"topic": "harbour"}),
        # As the turn's system prompt asks for them (shared.agent.turn.system_prompt).
        "tacit facts": "\n".join(
            f"{t.subject} {t.predicate} {t.object}" for t in deps.facts(workspace.id, me, scope)
        ),
    }
    if own:
        outputs["memory_search (own markers)"] = call("memory_search", {"query": " ".join(own), "k": 20})
    if foreign:
        outputs["memory_search (foreign markers)"] = call(
            "memory_search", {"query": " ".join(foreign), "k": 20}
        )
    if knn is not None:
        outputs["memory_semantic (k-NN refused)"] = call(
            "memory_semantic", {"query": COMMON, "k": 20}, replace(ctx, backend=knn)
        )
    return outputs


def check_seats(
    deps: TurnDeps, ws: str, workload: Workload, shared: set[str], *, knn: Backend | None = None
) -> int:
    """Every memory tool and the prompt's tacit facts, from every seat under every policy; returns
    the number of reads checked. `knn`: the same stores with an embedder, whose vector queries
    osmem refuses (so the search falls back to the conversation's recent messages)."""
    backend = deps.backend
    # The tacit facts as a turn a minute on reads them: the turns' own instance still holds what
    # it read before consolidation wrote any fact (shared.memory.tacit caches for a minute).
    deps = replace(deps, facts=TacitFacts(backend.memory))
    stored = stored_markers(backend, ws, workload)
    base = backend.workspaces.get(ws)
    assert base is not None
    reads = answered = 0
    tacit_seen = False
    for conversation in workload.conversations:
        for user in conversation.members:
            seat = inbound(ws, conversation, user, 10_000 + user, "what do you remember")
            # The turn's sender resolution: the asker's Sigil user, linked or not.
            me = resolve_sender(backend.identities, base, seat).user_id
            assert me == workload.person(user, conversation.channel)
            mine = {c.index for c in workload.conversations if me in workload.people_of(c)}
            own = sorted(stored[conversation.index])
            foreign = sorted(m for c, ms in stored.items() if c not in mine for m in ms)
            for policy in POLICIES:
                workspace = base.model_copy(update={"memory": MemoryConfig(recall=policy)})
                outputs = reads_of(deps, workspace, seat, me, own=own, foreign=foreign, knn=knn)
                reads += len(outputs)
                answered += sum(1 for text in outputs.values() if MARKER.search(text))
                tacit_seen |= bool(outputs["tacit facts"])
                allowed = reachable(policy, conversation, mine)
                for what, text in outputs.items():
                    for marker, c in markers_in(text):
                        if allowed is None or c in allowed:
                            continue
                        if policy == "personal" and marker in shared:
                            COUNTS["shared facts recalled outside their conversation"] += 1
                            continue
                        pytest.fail(
                            f"{what} under the {policy!r} policy, asked by {me} in conversation "
                            f"{conversation.index} ({conversation.session}), returned {marker} of "
                            f"conversation {c} ({workload.conversations[c].session}); the asker's "
                            f"conversations: {sorted(mine)}\n{text}"
                        )
                # The controls: this conversation's rolled-out messages are found under every
                # policy, and under the widened one those of conversations the asker was not in.
                if own:
                    text = outputs["memory_search (own markers)"]
                    assert {m for m, _ in markers_in(text)} & set(own), (policy, me, conversation, text)
                if foreign and policy == "workspace":
                    text = outputs["memory_search (foreign markers)"]
                    assert {m for m, _ in markers_in(text)} & set(foreign), (me, conversation, text)
                    COUNTS["widened seats that found another conversation"] += 1
    # The tacit facts were exercised: where consolidation learnt facts about someone, some were told.
    people = {workload.person(u, c.channel) for c in workload.conversations for u in c.members}
    about = {t.subject for t in backend.memory.list_triples(ws, scope=WORKSPACE_WIDE, limit=1000)}
    assert tacit_seen or not (about & people), about
    COUNTS["reads that returned markers"] += answered
    return reads


# ---------------------------------------------------------------- the backends


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Backend, Settings]]:
    settings_ = Settings(data_dir=tmp_path_factory.mktemp("privacy"), embedding_model="none")
    backend = build_embedded_backend(settings_)
    backend.embedder = HashingEmbedder()  # hybrid and vector search for real, no model download
    yield backend, settings_
    backend.close()


@pytest.fixture(scope="module")
def cloud() -> Iterator[tuple[Backend, Settings]]:
    with ExitStack() as stack:
        osmem = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
        stack.callback(osmem.close)
        stack.enter_context(mock_aws())
        clients.reset()
        stack.callback(clients.reset)
        settings_ = provision("privacyprops").settings(opensearch_endpoint=osmem.url, embedding_model="none")
        yield build_aws_backend(settings_), settings_


@given(workload=workloads(), data=st.data())
@settings(SETTINGS, max_examples=EXAMPLES["embedded"])
def test_no_memory_tool_reaches_past_the_policy_on_the_embedded_backend(
    embedded: tuple[Backend, Settings], workload: Workload, data: st.DataObject
) -> None:
    backend, settings_ = embedded
    ws = new_id("ws")
    deps = write(backend, settings_, ws, workload)
    shared = share_some(backend, ws, data)
    COUNTS["embedded workloads"] += 1
    COUNTS["embedded reads"] += check_seats(deps, ws, workload, shared)


@given(workload=workloads(), data=st.data())
@settings(SETTINGS, max_examples=EXAMPLES["cloud"])
def test_no_memory_tool_reaches_past_the_policy_on_dynamodb_and_opensearch(
    cloud: tuple[Backend, Settings], workload: Workload, data: st.DataObject
) -> None:
    backend, settings_ = cloud
    ws = new_id("ws")
    deps = write(backend, settings_, ws, workload)
    shared = share_some(backend, ws, data)
    COUNTS["cloud workloads"] += 1
    COUNTS["cloud reads"] += check_seats(
        deps, ws, workload, shared, knn=replace(backend, embedder=HashingEmbedder())
    )

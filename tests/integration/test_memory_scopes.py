"""Memory scopes through the turn on the embedded backend (issue 13): what a turn writes carries
its MemoryScope, every memory read of the turn passes the RecallScope the turn built under the
workspace's policy (never one from the model), the prompt's tacit facts follow the same policy,
facts keep their owners, and maintenance backfills records written before scopes existed.

Where the stores and the index apply a scope, that is the adapters' part (tests/contract); here
the scopes built and handed to them are checked, and what the stores then return.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.agent.turn import TurnDeps, owner_for, recall_scope_for, run_turn
from shared.backend import Backend
from shared.channels.inbound import conversation_key, session_id
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.consolidation.compaction import ConsolidationModel, compact_session
from shared.consolidation.extraction import EXTRACTION_SYSTEM, ExtractedFact, FactWriter
from shared.consolidation.maintenance.driver import run_maintenance
from shared.identity import UserAliases, derived_user_id, user_aliases
from shared.memory.facts import fact_index_doc
from shared.memory.scope import legacy_scope, owner_scope
from shared.memory.tacit import TacitFacts
from shared.memory.writer import MemoryWriter
from shared.models import (
    WORKSPACE_WIDE,
    Channel,
    Identity,
    InboundMessage,
    IndexQuery,
    LaneItem,
    MemoryConfig,
    MemoryRecord,
    RecallPolicy,
    RecallScope,
    Sender,
    Summary,
    ToolCall,
    Triple,
    UserMessage,
    WorkspaceConfig,
)
from shared.providers.base import ChatRequest, ProviderEvent, ToolCallEvent
from shared.providers.function import FunctionProvider
from shared.tools import ToolContext
from shared.tools.builtin import agent_registry

WS = "ws1"
NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
ANN, BOB, EVE = "telegram:111", "telegram:222", "telegram:999"
GROUP = "-1001"


def inbound(
    sender: str,
    *,
    chat: str | None = None,
    chat_type: str = "dm",
    thread: str | None = None,
    channel: Channel = "telegram",
    event: str = "e1",
    text: str = "hello",
) -> InboundMessage:
    chat = chat or sender
    return InboundMessage.model_validate(
        {
            "event_id": event,
            "channel": channel,
            "workspace_id": WS,
            "session_id": session_id(channel, chat, thread),
            "sender": Sender(id=sender, name=f"User{sender}"),
            "chat_id": chat,
            "chat_type": chat_type,
            "thread_id": thread,
            "text": text,
        }
    )


def deps_for(backend: Backend, settings: Settings, provider: FunctionProvider, **extra: Any) -> TurnDeps:
    outbox = OutboxSender(backend.outbox)
    return TurnDeps(
        backend=backend,
        settings=settings,
        senders=SenderRegistry({"telegram": outbox, "slack": outbox, "web": outbox}),
        provider_factory=lambda ref: (provider, "test-model"),
        **extra,
    )


def workspace(policy: RecallPolicy = "personal", **fields: Any) -> WorkspaceConfig:
    return WorkspaceConfig(id=WS, memory=MemoryConfig(recall=policy), **fields)


# ---------------------------------------------------------------- what a turn writes


def test_the_turn_stamps_its_records_and_their_documents_in_direct_group_and_thread(
    backend: Backend, settings: Settings
) -> None:
    # A window of 2: every turn rolls the one before out to Tier 1 and the index
    backend.workspaces.put(workspace(active_window=2))
    deps = deps_for(backend, settings, FunctionProvider(lambda request: "noted"))
    dm = [inbound("111", event=f"d{i}", text=f"dm {i}") for i in range(3)]
    group = [
        inbound(
            "111" if i % 2 == 0 else "222", chat=GROUP, chat_type="group", event=f"g{i}", text=f"group {i}"
        )
        for i in range(4)
    ]
    thread = [
        inbound("U1", chat="C1", chat_type="channel", thread="1726.01", channel="slack", event=f"t{i}")
        for i in range(3)
    ]
    for message in [*dm, *group, *thread]:
        run_turn(deps, LaneItem(inbound=message))

    docs = {h.doc.id: h.doc for h in _all_docs(backend)}

    def stamped(session: str) -> list[MemoryRecord]:
        records = backend.memory.get_messages(WS, session, limit=100)
        assert records, f"nothing rolled out of {session}"
        for r in records:
            assert r.scope is not None, r
            assert docs[r.id].scope == r.scope  # the index document carries the record's scope
        return records

    # A direct conversation: the person's, replies included
    for r in stamped(dm[0].session_id):
        assert r.scope == owner_scope(conversation_key("telegram", "111"), [ANN], group=False)
    # A group: the group's conversation; each person's own words theirs, replies the group's
    for r in stamped(group[0].session_id):
        assert r.scope is not None and r.scope.conversation == conversation_key("telegram", GROUP)
        assert r.scope.group and r.scope.users == ((r.user_id,) if r.role == "user" else ())
    # A thread: its channel's conversation, a session of its own
    for r in stamped(thread[0].session_id):
        assert r.session_id != conversation_key("slack", "C1")
        assert r.scope is not None and r.scope.conversation == conversation_key("slack", "C1")


def _all_docs(backend: Backend) -> list[Any]:
    query = IndexQuery(text="dm group hello noted", k=1000, scope=WORKSPACE_WIDE)
    return backend.index.search(WS, query).text_hits


def test_the_writer_stamps_every_chunk_of_a_long_message(backend: Backend) -> None:
    scope = owner_scope("telegram.111", [ANN], group=False)
    long = MemoryRecord(
        id="m0", workspace_id=WS, session_id="telegram.111", role="user", text="word " * 1000,
        seq=0, created_at=NOW, user_id=ANN, scope=scope,
    )  # fmt: skip
    result = MemoryWriter(backend.index, None).write_messages(WS, [long])
    assert result.docs > 1
    hits = backend.index.search(WS, IndexQuery(text="word", k=100, scope=WORKSPACE_WIDE)).text_hits
    assert len(hits) == result.docs and all(h.doc.scope == scope for h in hits)


# ---------------------------------------------------------------- what a turn may recall


def test_the_recall_scope_a_turn_builds_under_each_policy(backend: Backend) -> None:
    # Ann wrote from Telegram, then from Slack; an admin linked both identities to "ann"
    for channel, channel_user in (("telegram", "111"), ("slack", "U9")):
        backend.identities.create(
            Identity(workspace_id=WS, channel=channel, channel_user_id=channel_user, user_id="ann")
        )
    direct = inbound("111")
    in_group = inbound("111", chat=GROUP, chat_type="group")
    group_conversation = conversation_key("telegram", GROUP)

    def scope(policy: RecallPolicy, message: InboundMessage) -> RecallScope:
        return recall_scope_for(backend, workspace(policy), message, "ann")

    # Personal (the default): in a DM, the person under every id they wrote as, and shared facts
    assert workspace().memory.recall == "personal"
    assert scope("personal", direct) == RecallScope(
        session_id=direct.session_id, users=("ann", "slack:U9", "telegram:111"), shared=True
    )
    # in a group, the group's conversation (all its threads) and shared facts, nobody's own
    assert scope("personal", in_group) == RecallScope(
        session_id=in_group.session_id, conversation=group_conversation, shared=True
    )
    # Widened: the whole workspace; narrowed: this conversation only, in a DM and a group alike
    for message in (direct, in_group):
        assert scope("workspace", message) == WORKSPACE_WIDE
        assert scope("conversation", message) == RecallScope(session_id=message.session_id)
    # What the turn's tools write is the sender's, in this conversation
    assert owner_for(in_group, "ann") == owner_scope(group_conversation, ["ann"], group=True)


def test_aliases_are_read_once_a_minute_per_workspace(backend: Backend) -> None:
    backend.identities.create(
        Identity(workspace_id=WS, channel="telegram", channel_user_id="111", user_id="ann")
    )
    reads: list[str] = []
    store = backend.identities

    class Counting:
        def list_identities(self, workspace_id: str, **kw: Any) -> list[Identity]:
            reads.append(workspace_id)
            return store.list_identities(workspace_id, **kw)

    now = [0.0]
    aliases = UserAliases(Counting(), clock=lambda: now[0])  # type: ignore[arg-type]
    assert aliases(WS, "ann") == ("ann", "telegram:111")
    assert aliases(WS, "bob") == ("bob",)  # someone without an identity: their own id
    assert reads == [WS]  # one read serves every user of the workspace for the minute
    # A link made meanwhile applies once the minute is over
    store.create(Identity(workspace_id=WS, channel="slack", channel_user_id="U9", user_id="ann"))
    assert aliases(WS, "ann") == ("ann", "telegram:111")
    now[0] = 61.0
    assert aliases(WS, "ann") == ("ann", "slack:U9", "telegram:111")
    assert reads == [WS, WS]
    assert user_aliases(store.list_identities(WS), "nobody") == ("nobody",)


class _Recording:
    """Passes everything through to a real store or index, noting the scope of each read."""

    def __init__(self, inner: Any, seen: list[tuple[str, RecallScope]]) -> None:
        self._inner, self._seen = inner, seen

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in (
            "search",
            "list_summaries",
            "list_triples",
            "triples_by_subject",
            "triples_by_object",
        ):
            return attr

        def read(*args: Any, **kwargs: Any) -> Any:
            scope = args[1].scope if name == "search" else kwargs["scope"]
            self._seen.append((name, scope))
            return attr(*args, **kwargs)

        return read


def test_the_tools_read_with_the_turns_scope_never_one_from_the_model(
    backend: Backend, settings: Settings
) -> None:
    seen: list[tuple[str, RecallScope]] = []
    recorded = replace(
        backend, index=_Recording(backend.index, seen), memory=_Recording(backend.memory, seen)
    )
    widen = {"session_id": session_id("telegram", "111", None), "user_id": ANN, "workspace_id": WS}
    script: list[tuple[str, dict[str, Any]]] = [
        ("memory_search", {"query": "bank pin", **widen}),  # refused: unknown arguments
        ("memory_store", {"predicate": "pin", "object": "1234", "user_id": ANN}),  # refused too
        ("memory_search", {"query": "bank pin"}),
        ("memory_semantic", {"query": "bank pin"}),
        ("memory_summary", {"scope": "workspace"}),
        ("memory_recall", {"topic": "me"}),
    ]

    def model(request: ChatRequest) -> str | list[ProviderEvent]:
        done = sum(1 for m in request.messages if getattr(m, "kind", "") == "tool")
        if done < len(script):
            name, args = script[done]
            return [ToolCallEvent(call=ToolCall(id=f"c{done}", name=name, arguments=json.dumps(args)))]
        return "done"

    provider = FunctionProvider(model)
    run_turn(deps_for(recorded, settings, provider), LaneItem(inbound=inbound("999")))

    # The refused calls are argument errors the model reads, and read nothing
    results = [m for m in provider.requests[-1].messages if getattr(m, "kind", "") == "tool"]
    assert [r.is_error for r in results] == [True, True, False, False, False, False]
    assert "session_id" in results[0].content and "user_id" in results[1].content
    # Every read the tools made passed the stranger's own scope: their DM, their own records
    # (the embedder-less search has no vector side, but the query names the scope all the same)
    mine = RecallScope(session_id=session_id("telegram", "999", None), users=(EVE,), shared=True)
    names = {name for name, _ in seen}
    assert {"search", "list_summaries", "triples_by_subject", "triples_by_object"} <= names
    assert all(scope == mine for _, scope in seen), seen


def test_tacit_facts_follow_the_policy(backend: Backend, settings: Settings) -> None:
    dm, g1, g2 = (conversation_key("telegram", c) for c in ("111", GROUP, "-1002"))

    def about_ann(fid: str, obj: str, scope: Any) -> Triple:
        return Triple(id=fid, workspace_id=WS, subject="ann", predicate="likes", object=obj, scope=scope)

    for t in (
        about_ann("own", "said in her DM", owner_scope(dm, ["ann"], group=False)),
        about_ann("hers-in-g1", "said by her in g1", owner_scope(g1, ["ann"], group=True)),
        about_ann("g1", "the g1 group's", owner_scope(g1, [], group=True)),
        about_ann("g2", "the g2 group's", owner_scope(g2, [], group=True)),
        about_ann("shared", "shared by the workspace", owner_scope(None, [], group=False, shared=True)),
        about_ann(
            "bobs", "said in Bob's DM", owner_scope(conversation_key("telegram", "222"), ["bob"], group=False)
        ),
    ):
        backend.memory.put_triple(t)
    backend.identities.create(
        Identity(workspace_id=WS, channel="telegram", channel_user_id="111", user_id="ann")
    )
    tacit = TacitFacts(backend.memory)

    def facts(policy: RecallPolicy, message: InboundMessage) -> set[str]:
        return {t.id for t in tacit(WS, "ann", recall_scope_for(backend, workspace(policy), message, "ann"))}

    # Personal, in her DM: her own facts (from wherever she said them) and shared ones
    assert facts("personal", inbound("111")) == {"own", "hers-in-g1", "shared"}
    # Personal, in group g1: the group's and shared ones; her DM fact is not told to the group
    assert facts("personal", inbound("111", chat=GROUP, chat_type="group")) == {"hers-in-g1", "g1", "shared"}
    # Widened: all of them; narrowed to the conversation: none of these (none was said in it)
    assert facts("workspace", inbound("111")) == {"own", "hers-in-g1", "g1", "g2", "shared", "bobs"}
    assert facts("conversation", inbound("111")) == set()

    # And the prompt says what the tacit facts say: in g1, not her DM's fact
    provider = FunctionProvider(lambda request: "ok")
    deps = deps_for(backend, settings, provider, facts=tacit)
    run_turn(deps, LaneItem(inbound=inbound("111", chat=GROUP, chat_type="group", event="p1")))
    assert "said by her in g1" in provider.requests[-1].system
    assert "said in her DM" not in provider.requests[-1].system


# ---------------------------------------------------------------- facts keep their owners


def test_the_same_fact_stored_by_two_people_stays_two_peoples(backend: Backend) -> None:
    for user in ("111", "222"):
        backend.identities.create(
            Identity(workspace_id=WS, channel="telegram", channel_user_id=user, user_id=f"telegram:{user}")
        )
    registry = agent_registry()

    def store(sender: str, fact: dict[str, str]) -> str:
        message = inbound(sender)
        user = f"telegram:{sender}"
        ctx = ToolContext(
            workspace_id=WS,
            session_id=message.session_id,
            user_id=user,
            turn_id=f"t-{sender}",
            backend=backend,
            scope=recall_scope_for(backend, workspace(), message, user),
            owner=owner_for(message, user),
        )
        call = ToolCall(id="c", name="memory_store", arguments=json.dumps(fact))
        result = registry.execute(call, ctx, workspace())
        assert not result.is_error, result.content
        return result.content

    office = {"subject": "the office", "predicate": "door code", "object": "4711"}
    assert store("111", office).startswith("Stored")
    # Bob states the same: his own fact, not Ann's refreshed (he can't see hers) nor overwritten
    assert store("222", office).startswith("Stored")
    stored = backend.memory.triples_by_subject(WS, "the office", scope=WORKSPACE_WIDE)
    assert sorted(t.scope.users for t in stored if t.scope) == [(ANN,), (BOB,)]
    assert len({t.id for t in stored}) == 2


def test_a_groups_extracted_facts_belong_to_the_speaker_or_to_the_group(backend: Backend) -> None:
    group = owner_scope(conversation_key("telegram", GROUP), [ANN, BOB], group=True)
    writer = FactWriter(
        memory=backend.memory,
        index=backend.index,
        embedder=None,
        workspace_id=WS,
        session_id=session_id("telegram", GROUP, None),
        user_id=ANN,
        scope=group,
        run_id="run-1",
        provenance=["m0"],
        now=NOW,
    )
    outcome = writer.store(
        [
            ExtractedFact("preference", "drink", "green tea"),  # about the speaker
            ExtractedFact("entity", "is", "the team's lead", subject="person/sam"),  # about someone else
        ]
    )
    by_subject = {t.subject: t.scope for t in outcome.written}
    assert by_subject[ANN] == owner_scope(group.conversation, [ANN], group=True)
    assert by_subject["person/sam"] == owner_scope(group.conversation, [], group=True)


# ---------------------------------------------------------------- maintenance's backfill


def test_backfill_stamps_records_written_before_scopes_and_counts_them(backend: Backend) -> None:
    session = "telegram.111"
    message = MemoryRecord(
        id="old-m", workspace_id=WS, session_id=session, role="user", text="my old kayak trip",
        seq=0, created_at=NOW, user_id=ANN, message=UserMessage(id="old-m", content="my old kayak trip"),
    )  # fmt: skip
    summary = Summary(
        id="old-s", workspace_id=WS, session_id=session, text="they planned a kayak trip",
        first_seq=0, last_seq=0, start_at=NOW, end_at=NOW, user_id=ANN,
    )  # fmt: skip
    fact = Triple(
        id="old-f", workspace_id=WS, subject=ANN, predicate="likes", object="kayaks",
        session_id=session, user_id=ANN, updated_at=NOW,
    )  # fmt: skip
    backend.memory.append_messages(WS, [message])
    backend.memory.put_summary(summary)
    backend.memory.put_triple(fact)
    MemoryWriter(backend.index, None).write_messages(WS, [message])
    backend.index.upsert(WS, [fact_index_doc(fact)])
    ann_elsewhere = RecallScope(session_id="slack.D1", users=(ANN,), shared=True)

    def found() -> set[str]:
        query = IndexQuery(text="kayak kayaks", k=10, scope=ann_elsewhere)
        return {h.doc.id for h in backend.index.search(WS, query).text_hits}

    # Before: visible in their own session and workspace-wide only
    assert {r.id for r in backend.memory.unscoped(WS)} == {"old-m", "old-s", "old-f"}
    assert found() == set()

    report = run_maintenance(backend, WS, run_id="maint-1", clock=lambda: NOW)

    assert report.scopes_backfilled == 3
    assert report.metrics()["MaintenanceScopesBackfilled"] == 3
    assert backend.memory.unscoped(WS) == []
    legacy = legacy_scope(session, ANN)
    assert backend.memory.get_messages(WS, session)[0].scope == legacy
    assert backend.memory.list_summaries(WS, scope=WORKSPACE_WIDE)[0].scope == legacy
    assert backend.memory.list_triples(WS, scope=WORKSPACE_WIDE)[0].scope == legacy
    # The index documents too: the person finds their old records from their other conversations
    assert found() == {"old-m", "old-f"}
    # Nothing left: the next run stamps nothing
    assert run_maintenance(backend, WS, run_id="maint-2", clock=lambda: NOW).scopes_backfilled == 0


def test_recalling_me_after_a_link_finds_what_was_learnt_under_the_older_id(backend: Backend) -> None:
    # Learnt from Ann's Telegram DM before an admin linked her identities to "ann"
    dm = conversation_key("telegram", "111")
    backend.memory.put_triple(
        Triple(
            id="before-link",
            workspace_id=WS,
            subject=ANN,
            predicate="home-city",
            object="Lyon",
            session_id=dm,
            user_id=ANN,
            scope=owner_scope(dm, [ANN], group=False),
        )
    )
    for channel, channel_user in (("telegram", "111"), ("slack", "U9")):
        backend.identities.create(
            Identity(workspace_id=WS, channel=channel, channel_user_id=channel_user, user_id="ann")
        )
    # Now she asks from her Slack DM
    message = inbound("U9", chat="D9", channel="slack")
    ctx = ToolContext(
        workspace_id=WS,
        session_id=message.session_id,
        user_id="ann",
        turn_id="t1",
        backend=backend,
        scope=recall_scope_for(backend, workspace(), message, "ann"),
        owner=owner_for(message, "ann"),
    )
    result = agent_registry().execute(
        ToolCall(id="c", name="memory_recall", arguments=json.dumps({"topic": "me"})), ctx, workspace()
    )
    assert not result.is_error and "home-city Lyon" in result.content
    # Bob asking about himself in his DM does not get it
    bob = inbound("222")
    bobs = replace(
        ctx,
        session_id=bob.session_id,
        user_id=BOB,
        scope=recall_scope_for(backend, workspace(), bob, BOB),
        owner=owner_for(bob, BOB),
    )
    theirs = agent_registry().execute(
        ToolCall(id="c", name="memory_recall", arguments=json.dumps({"topic": ANN})), bobs, workspace()
    )
    assert "Lyon" not in theirs.content


def _extract_a_preference(request: ChatRequest) -> str:
    """Extraction finds a preference only in a batch that mentions one; summaries say anything."""
    if request.system != EXTRACTION_SYSTEM:
        return "a talk about drinks"
    said = request.messages[-1].content if request.messages else ""
    preference = [{"key": "drink", "value": "green tea"}] if "green tea" in str(said) else []
    return json.dumps({"preferences": preference, "entities": []})


@pytest.mark.parametrize(
    "speakers",
    [
        (ANN, ANN),  # Ann, who opened the group, spoke alone: hers
        (BOB, BOB),  # Bob alone, in the group Ann opened: Bob's, never Ann's
        (ANN, BOB),  # both in one batch: the prompt cannot tell them apart, so only the group's
    ],
)
def test_a_groups_facts_about_the_user_go_to_the_one_who_spoke_or_to_the_group(
    backend: Backend, settings: Settings, speakers: tuple[str, str]
) -> None:
    backend.workspaces.put(workspace(active_window=2, summary_batch=4))
    deps = deps_for(backend, settings, FunctionProvider(lambda request: "ok"))
    # Ann opens the group (the session's user); her first batch mentions no preference. The
    # speakers' two messages make the second batch; Ann's goodbyes push it out of the window.
    said = [(ANN, "hi all"), (ANN, "hello again"), *((who, "I drink green tea") for who in speakers)]
    said += [(ANN, "bye"), (ANN, "bye again")]
    for n, (who, text) in enumerate(said):
        item = inbound(who, chat=GROUP, chat_type="group", event=f"e{n}", text=text)
        run_turn(deps, LaneItem(inbound=item))
    model = ConsolidationModel(FunctionProvider(_extract_a_preference), "test-consolidation")
    result = compact_session(backend, model, WS, session_id("telegram", GROUP, None), run_id="run-1")
    assert result.status == "done" and result.facts_extracted == 1, result

    facts = [t for t in backend.memory.list_triples(WS, scope=WORKSPACE_WIDE) if t.predicate == "drink"]
    spoke = {derived_user_id("telegram", who) for who in speakers}
    subject, users = (next(iter(spoke)), tuple(spoke)) if len(spoke) == 1 else ("user", ())
    assert [(t.subject, t.scope) for t in facts] == [
        (subject, owner_scope(conversation_key("telegram", GROUP), users, group=True))
    ]

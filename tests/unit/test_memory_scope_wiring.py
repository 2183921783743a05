"""Memory scopes as the write path stamps them and maintenance treats them (issue 13): the scope of
a rolled-out message in a direct conversation, a group and a thread; a summary's union; who owns
a fact (ids, dedup, merging); per-scope decay; and the arguments a tool may not declare."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import BaseModel

from shared.agent.window import origin_of, tier1_records
from shared.channels.inbound import conversation_key, session_id
from shared.consolidation.compaction import union_scope
from shared.consolidation.maintenance.merging import exact_merges
from shared.consolidation.maintenance.policy import DEFAULT_POLICY, lifetime_days, relevance
from shared.consolidation.maintenance.scope import Scope
from shared.memory.facts import fact_id, may_join, owner_key, same_owner
from shared.memory.scope import legacy_scope, owner_scope
from shared.memory.writer import message_scope
from shared.models import (
    AssistantMessage,
    Channel,
    InboundMessage,
    MemoryConfig,
    MemoryRecord,
    MemoryScope,
    Sender,
    Session,
    ToolCall,
    ToolResultMessage,
    Triple,
    UserMessage,
    WorkspaceConfig,
)
from shared.tools.core import Tool, ToolContext, tool

WS = "ws1"
NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
ANN, BOB = "telegram:111", "telegram:222"


def inbound(
    channel: Channel, chat_id: str, sender: str, *, chat_type: str = "dm", thread: str | None = None
) -> InboundMessage:
    return InboundMessage.model_validate(
        {
            "event_id": "e1",
            "channel": channel,
            "workspace_id": WS,
            "session_id": session_id(channel, chat_id, thread),
            "sender": Sender(id=sender),
            "chat_id": chat_id,
            "chat_type": chat_type,
            "thread_id": thread,
            "text": "hi",
        }
    )


def turn(user: str, n: int) -> list[UserMessage | AssistantMessage | ToolResultMessage]:
    """A user message, a tool call and its result, and the reply: one turn of `user`."""
    return [
        UserMessage(id=f"u{n}", content=f"question {n}", user_id=user, sender_name=user),
        AssistantMessage(id=f"c{n}", tool_calls=[ToolCall(id=f"t{n}", name="memory_search")]),
        ToolResultMessage(id=f"r{n}", tool_call_id=f"t{n}", name="memory_search", content="found"),
        AssistantMessage(id=f"a{n}", content=f"answer {n}"),
    ]


# ---------------------------------------------------------------- the scope of a rolled-out message


def test_a_direct_conversation_stamps_every_message_with_the_person_it_is_with() -> None:
    message = inbound("telegram", "111", "111")
    session = Session(id=message.session_id, workspace_id=WS, user_id=ANN, channel="telegram")
    records = tier1_records(session, turn(ANN, 0), origin_of(message))
    dm = MemoryScope(conversation=conversation_key("telegram", "111"), users=(ANN,), group=False)
    # The writer's own words, and the replies and tool results that answered them
    assert [r.scope for r in records] == [dm] * 4
    assert [r.user_id for r in records] == [ANN] * 4


def test_a_group_stamps_the_writer_on_their_words_and_the_group_on_the_replies() -> None:
    message = inbound("telegram", "-1001", "111", chat_type="group")
    session = Session(id=message.session_id, workspace_id=WS, user_id=ANN, channel="telegram")
    records = tier1_records(session, [*turn(ANN, 0), *turn(BOB, 1)], origin_of(message))
    group = conversation_key("telegram", "-1001")
    assert all(r.scope is not None and r.scope.conversation == group and r.scope.group for r in records)
    # Each person's own words are theirs; a reply belongs to the group, not to who asked
    assert [r.scope.users for r in records if r.scope is not None] == [(ANN,), (), (), (), (BOB,), (), (), ()]
    # Erasure still finds the person answered by user_id
    assert [r.user_id for r in records] == [ANN] * 4 + [BOB] * 4


def test_a_thread_belongs_to_its_channels_conversation() -> None:
    message = inbound("slack", "C1", "U1", chat_type="channel", thread="1726.0001")
    assert message.session_id != conversation_key("slack", "C1")  # the thread is a session of its own
    session = Session(id=message.session_id, workspace_id=WS, user_id="slack:U1", channel="slack")
    (record, *_) = tier1_records(session, turn("slack:U1", 0), origin_of(message))
    assert record.session_id == message.session_id
    assert record.scope == MemoryScope(
        conversation=conversation_key("slack", "C1"), users=("slack:U1",), group=True
    )


def test_message_scope_drops_an_unknown_person_and_never_marks_shared() -> None:
    assert message_scope("user", None, conversation="web.s1", group=False) == MemoryScope(
        conversation="web.s1"
    )
    assert not message_scope("assistant", ANN, conversation="web.s1", group=False).shared


# ---------------------------------------------------------------- a summary's scope


def record(seq: int, user: str | None, scope: MemoryScope | None) -> MemoryRecord:
    return MemoryRecord(
        id=f"m{seq}", workspace_id=WS, session_id="telegram.g", role="user", text="x", seq=seq,
        created_at=NOW, user_id=user, scope=scope,
    )  # fmt: skip


def test_a_summary_carries_the_union_of_its_messages_scopes() -> None:
    g = "telegram.g"
    records = [
        record(0, ANN, owner_scope(g, [ANN], group=True)),
        record(1, ANN, owner_scope(g, [], group=True)),  # a reply in the group
        record(2, BOB, owner_scope(g, [BOB], group=True)),
    ]
    assert union_scope(records) == MemoryScope(conversation=g, users=(ANN, BOB), group=True)
    # Direct messages only: the person's
    dm = owner_scope("telegram.111", [ANN], group=False)
    assert union_scope([record(0, ANN, dm), record(1, ANN, dm)]) == dm
    # Written before scopes: the summary waits for the backfill too; mixed, the legacy record's
    # user counts as its backfill will say
    assert union_scope([record(0, ANN, None)]) is None
    mixed = union_scope([record(0, BOB, None), record(1, ANN, owner_scope(g, [ANN], group=True))])
    assert mixed is not None and set(mixed.users) == {ANN, BOB} and mixed.group


# ---------------------------------------------------------------- who owns a fact


def fact(fid: str, scope: MemoryScope | None, *, obj: str = "green tea", user: str | None = ANN) -> Triple:
    return Triple(
        id=fid, workspace_id=WS, subject="ada", predicate="likes", object=obj, session_id="telegram.111",
        user_id=user, scope=scope, updated_at=NOW, created_at=NOW,
    )  # fmt: skip


def test_the_same_statement_by_two_people_is_two_facts() -> None:
    ann = owner_scope("telegram.111", [ANN], group=False)
    bob = owner_scope("telegram.222", [BOB], group=False)
    assert fact_id(WS, "Ada", "likes", "tea", ann) != fact_id(WS, "Ada", "likes", "tea", bob)
    # The same person's fact from another of their direct conversations is the same fact
    ann_on_slack = owner_scope("slack.D1", [ANN], group=False)
    assert fact_id(WS, "Ada", "likes", "tea", ann) == fact_id(WS, "Ada", "likes", "tea", ann_on_slack)
    assert same_owner(ann, ann_on_slack) and not same_owner(ann, bob)
    # Two groups' facts are not one, nor a group's and a person's
    g1, g2 = owner_scope("telegram.g1", [], group=True), owner_scope("telegram.g2", [], group=True)
    assert not same_owner(g1, g2) and not same_owner(g1, ann)
    assert owner_key(owner_scope(None, [ANN], group=False, shared=True)) != owner_key(ann)
    # Without an owner, the id facts had before scopes
    assert fact_id(WS, "Ada", "likes", "tea") == fact_id(WS, "ada", "LIKES", "Tea")


def test_a_fact_from_before_scopes_joins_only_its_own_persons_statement_in_its_session() -> None:
    ann = owner_scope("telegram.111", [ANN], group=False)
    legacy = fact("old", None)
    assert may_join(legacy, ann, user_id=ANN, session_id="telegram.111")
    assert not may_join(legacy, ann, user_id=BOB, session_id="telegram.111")
    assert not may_join(legacy, ann, user_id=ANN, session_id="telegram.g")
    assert not may_join(
        fact("b", owner_scope("telegram.222", [BOB], group=False)), ann, user_id=ANN, session_id="x"
    )


def test_maintenance_never_merges_the_same_fact_of_two_owners() -> None:
    ann = owner_scope("telegram.111", [ANN], group=False)
    bob = owner_scope("telegram.222", [BOB], group=False)
    scope = Scope()
    for t in (fact("a1", ann), fact("a2", ann, obj="Green Tea!"), fact("b1", bob, user=BOB)):
        scope.add(t)
    # Ann's two spellings merge; Bob's identical fact stays his own
    assert exact_merges(scope) == [("a2", "a1")]
    # A fact from before scopes merges as the owner the backfill gives it: its user's, private
    scope.add(fact("l1", None, obj="green  tea"))
    merged = dict(exact_merges(scope))
    assert "b1" not in merged and "b1" not in merged.values()
    assert legacy_scope("telegram.111", ANN).users == (ANN,)
    assert set(merged) == {"a2", "l1"}


# ---------------------------------------------------------------- per-scope decay


def test_a_workspace_without_decay_settings_scores_exactly_as_before() -> None:
    plain = DEFAULT_POLICY.for_workspace(WorkspaceConfig(id=WS))
    assert plain is DEFAULT_POLICY
    also_plain = DEFAULT_POLICY.for_workspace(WorkspaceConfig(id=WS, memory=MemoryConfig(recall="workspace")))
    scopes = [
        None,
        owner_scope("telegram.111", [ANN], group=False),
        owner_scope("telegram.g", [], group=True),
        owner_scope(None, [], group=False, shared=True),
    ]
    for scope in scopes:
        for category in ("style", "fact", "entity"):
            t = fact("f", scope).model_copy(update={"category": category, "access_count": 2})
            for age in (0, 3, 30, 400):
                at = NOW + timedelta(days=age)
                assert relevance(t, at, also_plain) == relevance(t, at, DEFAULT_POLICY)
            assert lifetime_days(t, also_plain) == lifetime_days(t, DEFAULT_POLICY)


def test_a_channel_decay_of_two_keeps_a_group_fact_twice_as_long() -> None:
    policy = DEFAULT_POLICY.for_workspace(WorkspaceConfig(id=WS, memory=MemoryConfig(decay={"channel": 2.0})))
    group = fact("g", owner_scope("telegram.g", [], group=True))
    personal = fact("p", owner_scope("telegram.111", [ANN], group=False))
    base = lifetime_days(group, DEFAULT_POLICY)
    assert lifetime_days(group, policy) == 2 * base
    assert lifetime_days(personal, policy) == lifetime_days(personal, DEFAULT_POLICY)  # not a group's
    # At the default lifetime a group fact has faded to the prune threshold; with the factor it is
    # there at twice the age, and the same relevance comes at twice the age throughout
    at = NOW + timedelta(days=base)
    assert relevance(group, at, DEFAULT_POLICY) == pytest.approx(DEFAULT_POLICY.prune_below)
    assert relevance(group, at, policy) > 0.05
    for days in (1, 10, base):
        later = NOW + timedelta(days=2 * days)
        assert relevance(group, later, policy) == pytest.approx(relevance(group, NOW + timedelta(days=days)))


# ---------------------------------------------------------------- what a tool may not declare


class _Sneaky(BaseModel):
    query: str
    session_id: str | None = None


def test_a_tool_may_not_declare_who_or_where_it_reads_for() -> None:
    def search(args: _Sneaky, ctx: ToolContext) -> str:
        """Search another conversation, if the model names one."""
        return args.query

    with pytest.raises(ValueError, match="session_id"):
        tool(search)
    for name in ("workspace_id", "session_id", "user_id", "recall_scope"):
        model = type(f"Args_{name}", (BaseModel,), {"__annotations__": {name: str}})
        with pytest.raises(ValueError, match=name):
            Tool(name="t", description="d", args=model, fn=lambda a, c: "")

"""Memory scopes: who a memory belongs to (MemoryScope) and what a reader may recall (RecallScope).

`visible` is the one statement of the rule. Every adapter reproduces it in its own query (SQLite
WHERE, DynamoDB key conditions and filters, OpenSearch filter clauses), so nothing is filtered
after the fact; the contract tests hold each adapter to this function.

The policies (WorkspaceConfig.memory.recall, docs/privacy.md); a conversation is
shared.channels.inbound.conversation_key:

- personal (the default): in a direct conversation, this session, the asker's own records on
  every channel (their linked identities) and shared facts; in a group, this session, the group's
  conversation (all its threads) and shared facts.
- workspace: everything in the workspace.
- conversation: this session only.
"""

from __future__ import annotations

from collections.abc import Iterable

from shared.models import InboundMessage, MemoryScope, RecallPolicy, RecallScope, ScopeLevel


def is_group(inbound: InboundMessage) -> bool:
    return inbound.chat_type != "dm"


def owner_scope(
    conversation: str | None, users: Iterable[str | None], *, group: bool, shared: bool = False
) -> MemoryScope:
    """The scope a record is written with: users sorted and distinct, None dropped."""
    return MemoryScope(
        conversation=conversation,
        users=tuple(sorted({u for u in users if u})),
        group=group,
        shared=shared,
    )


def recall_scope(
    policy: RecallPolicy,
    *,
    session_id: str,
    conversation: str | None,
    group: bool,
    user_aliases: Iterable[str],
) -> RecallScope:
    """What a turn in `session_id` may recall under `policy`.

    `user_aliases` are the asker's Sigil user id and every id their linked identities wrote under
    before they were linked (shared.identity.user_aliases).
    """
    if policy == "workspace":
        return RecallScope(workspace_wide=True)
    if policy == "conversation":
        return RecallScope(session_id=session_id)
    if group:
        return RecallScope(session_id=session_id, conversation=conversation, shared=True)
    return RecallScope(session_id=session_id, users=tuple(sorted(set(user_aliases))), shared=True)


def visible(scope: RecallScope, session_id: str | None, owner: MemoryScope | None) -> bool:
    """Whether a record of `session_id` owned by `owner` may be recalled under `scope`.

    A record without a scope (written before scopes existed) is visible in its own session and
    under the workspace-wide policy only.
    """
    if scope.workspace_wide:
        return True
    if scope.session_id is not None and session_id == scope.session_id:
        return True
    if owner is None:
        return False
    if scope.conversation is not None and owner.conversation == scope.conversation:
        return True
    if scope.users and not set(scope.users).isdisjoint(owner.users):
        return True
    return scope.shared and owner.shared


def scope_level(owner: MemoryScope | None) -> ScopeLevel:
    """Spec 001's scope of a memory, for its decay rate: shared with the workspace; a group's
    (the channel conversation); a person's own across channels (account); else its conversation."""
    if owner is None:
        return "conversation"
    if owner.shared:
        return "workspace"
    if owner.group:
        return "channel"
    if owner.users:
        return "account"
    return "conversation"


def legacy_scope(session_id: str | None, user_id: str | None) -> MemoryScope:
    """The scope maintenance's backfill gives a record written before scopes existed: its session
    as its conversation (a thread's session is narrower than its channel: never wider) and its
    user as its owner. Never shared, never marked a group's: private unless said otherwise."""
    return MemoryScope(conversation=session_id, users=(user_id,) if user_id else (), group=False)

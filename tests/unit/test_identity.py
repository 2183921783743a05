"""shared.identity: the unknown-sender policies, pairing codes, the admin actions and the cache."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shared import identity as ident
from shared.adapters.embedded import Database, SqliteIdentityStore
from shared.errors import BadRequest, NotFound
from shared.identity import (
    PAIRING_REPLY,
    REFUSAL_REPLY,
    CachedIdentities,
    approve,
    block,
    new_pairing_code,
    normalize_code,
    resolve_sender,
)
from shared.models import (
    PAIRING_CODE_PATTERN,
    Identity,
    IdentityStatus,
    InboundMessage,
    Sender,
    WorkspaceConfig,
)

WS = "ws1"
NOW = datetime(2025, 6, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteIdentityStore]:
    db = Database(tmp_path / "sigil.db")
    yield SqliteIdentityStore(db)
    db.close()


def workspace(policy: str = "allow", allowed: list[str] | None = None) -> WorkspaceConfig:
    return WorkspaceConfig.model_validate(
        {"id": WS, "unknown_sender_policy": policy, "allowed_senders": allowed or []}
    )


def message(sender: str = "42", *, channel: str = "telegram", bot: bool = False) -> InboundMessage:
    return InboundMessage.model_validate(
        {
            "event_id": "e1",
            "channel": channel,
            "workspace_id": WS,
            "session_id": f"{channel}.chat",
            "sender": Sender(id=sender, name="Ada", is_bot=bot),
            "chat_id": sender,
            "text": "hello",
        }
    )


def seeded(
    store: SqliteIdentityStore, status: IdentityStatus, sender: str = "42", **fields: object
) -> Identity:
    stored = Identity.model_validate(
        {
            "workspace_id": WS,
            "channel": "telegram",
            "channel_user_id": sender,
            "user_id": f"telegram:{sender}",
            "status": status,
            **fields,
        }
    )
    store.put(stored)
    return stored


# ---------------------------------------------------------------- allow


def test_allow_admits_and_stores_an_approved_identity_on_first_contact(store: SqliteIdentityStore) -> None:
    first = resolve_sender(store, workspace("allow"), message("42"), now=NOW)
    assert first.admitted and first.user_id == "telegram:42" and first.reply is None
    [stored] = store.list_identities(WS)
    assert (stored.status, stored.user_id, stored.display_name) == ("approved", "telegram:42", "Ada")
    assert stored.created_at == stored.approved_at == NOW and stored.pairing_code is None
    # Again: the same identity, nothing new
    again = resolve_sender(store, workspace("allow"), message("42"))
    assert again.admitted and again.identity == stored
    assert store.list_identities(WS) == [stored]


def test_a_web_user_is_their_own_sigil_user(store: SqliteIdentityStore) -> None:
    resolution = resolve_sender(store, workspace("allow"), message("alice", channel="web"))
    assert resolution.user_id == "alice"
    assert store.get(WS, "web", "alice") is not None


def test_an_approved_identity_speaks_as_its_user(store: SqliteIdentityStore) -> None:
    seeded(store, "approved", user_id="ada")
    for policy in ("allow", "allow_list", "pairing"):
        resolution = resolve_sender(store, workspace(policy), message("42"))
        assert resolution.admitted and resolution.user_id == "ada"


# ---------------------------------------------------------------- allow list


def test_the_allow_list_admits_listed_senders_without_storing_them(store: SqliteIdentityStore) -> None:
    ws = workspace("allow_list", ["telegram:42", "bob"])
    assert resolve_sender(store, ws, message("42")).admitted
    # The bare id stands for a web user only
    assert resolve_sender(store, ws, message("bob", channel="web")).admitted
    assert not resolve_sender(store, ws, message("bob", channel="slack")).admitted
    # Taking a sender off the list is enough: nothing was stored that would still admit them
    assert store.list_identities(WS) == []
    assert not resolve_sender(store, workspace("allow_list", []), message("42")).admitted


def test_the_allow_list_refuses_anyone_else_with_a_reply(store: SqliteIdentityStore) -> None:
    refused = resolve_sender(store, workspace("allow_list", ["telegram:1"]), message("42"))
    assert refused.admission == "sender_refused"
    assert refused.reply == REFUSAL_REPLY and refused.reason == "not on the allow list"
    assert refused.user_id == "telegram:42"
    assert store.list_identities(WS) == []


# ---------------------------------------------------------------- pairing


def test_pairing_gives_an_unknown_sender_a_code_and_the_same_code_again(store: SqliteIdentityStore) -> None:
    first = resolve_sender(store, workspace("pairing"), message("42"), now=NOW)
    assert first.admission == "pairing_required" and not first.admitted
    [pending] = store.list_identities(WS, status="pending")
    code = pending.pairing_code
    assert code is not None and re.fullmatch(PAIRING_CODE_PATTERN, code)
    assert first.reply == PAIRING_REPLY.format(code=code)
    assert f"sigil pairing approve {code}" in first.reply
    # Writing again: the same code, still one identity
    again = resolve_sender(store, workspace("pairing"), message("42"))
    assert again.reply == first.reply
    assert store.list_identities(WS) == [pending]


def test_an_approved_code_admits_the_sender_as_the_user_the_admin_named(store: SqliteIdentityStore) -> None:
    resolve_sender(store, workspace("pairing"), message("42"))
    [pending] = store.list_identities(WS)
    assert pending.pairing_code is not None
    # Typed in lower case with a dash in the middle
    typed = f"{pending.pairing_code[:4].lower()}-{pending.pairing_code[4:]}"
    approved = approve(store, WS, typed, user_id="ada", now=NOW)
    assert (approved.status, approved.user_id, approved.approved_at) == ("approved", "ada", NOW)
    assert approved.pairing_code is None
    assert store.get(WS, "telegram", "42") == approved
    resolution = resolve_sender(store, workspace("pairing"), message("42"))
    assert resolution.admitted and resolution.user_id == "ada"
    # The code was good once
    with pytest.raises(NotFound):
        approve(store, WS, pending.pairing_code)


def test_approve_keeps_the_derived_user_when_none_is_named(store: SqliteIdentityStore) -> None:
    resolve_sender(store, workspace("pairing"), message("42"))
    [pending] = store.list_identities(WS)
    assert pending.pairing_code is not None
    assert approve(store, WS, pending.pairing_code).user_id == "telegram:42"


def test_a_new_code_is_never_one_already_handed_out(
    store: SqliteIdentityStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    seeded(store, "pending", "1", pairing_code="TAKEN234")
    codes = iter(["TAKEN234", "TAKEN234", "FREE2345"])
    monkeypatch.setattr(ident, "new_pairing_code", lambda: next(codes))
    resolve_sender(store, workspace("pairing"), message("2"))
    fresh = store.get(WS, "telegram", "2")
    assert fresh is not None and fresh.pairing_code == "FREE2345"


def test_a_pending_sender_follows_a_later_change_of_policy(store: SqliteIdentityStore) -> None:
    resolve_sender(store, workspace("pairing"), message("42"))
    assert resolve_sender(store, workspace("allow"), message("42")).admitted
    assert not resolve_sender(store, workspace("allow_list"), message("42")).admitted
    assert resolve_sender(store, workspace("allow_list", ["telegram:42"]), message("42")).admitted


# ---------------------------------------------------------------- blocked and bots


@pytest.mark.parametrize("policy", ["allow", "allow_list", "pairing"])
def test_a_blocked_sender_is_refused_silently_under_every_policy(
    store: SqliteIdentityStore, policy: str
) -> None:
    seeded(store, "blocked", user_id="mallory")
    # Even when the allow list names them: the block is the admin's later word
    resolution = resolve_sender(store, workspace(policy, ["telegram:42"]), message("42"))
    assert resolution.admission == "sender_refused"
    assert (resolution.reply, resolution.reason, resolution.user_id) == (None, "blocked", "mallory")


@pytest.mark.parametrize("policy", ["allow", "allow_list", "pairing"])
def test_a_bot_is_refused_silently_and_never_stored(store: SqliteIdentityStore, policy: str) -> None:
    resolution = resolve_sender(store, workspace(policy, ["telegram:42"]), message("42", bot=True))
    assert resolution.admission == "sender_refused" and resolution.reply is None
    assert resolution.reason == "bot sender"
    assert store.list_identities(WS) == []


def test_block_by_code_or_by_channel_id(store: SqliteIdentityStore) -> None:
    resolve_sender(store, workspace("pairing"), message("42"))
    [pending] = store.list_identities(WS)
    assert pending.pairing_code is not None
    blocked = block(store, WS, pending.pairing_code)
    assert (blocked.status, blocked.pairing_code) == ("blocked", None)
    assert store.find_by_pairing_code(WS, pending.pairing_code) is None
    # A sender never seen can be blocked ahead of their first message
    block(store, WS, "slack:U666", now=NOW)
    unseen = store.get(WS, "slack", "U666")
    assert unseen is not None and (unseen.status, unseen.user_id) == ("blocked", "slack:U666")
    assert resolve_sender(store, workspace("allow"), message("U666", channel="slack")).reason == "blocked"


def test_admin_actions_reject_what_they_cannot_find(store: SqliteIdentityStore) -> None:
    with pytest.raises(NotFound):
        approve(store, WS, "ZZZZ2222")
    with pytest.raises(NotFound):
        block(store, WS, "ZZZZ2222")
    with pytest.raises(BadRequest):
        block(store, WS, "fax:123")
    resolve_sender(store, workspace("pairing"), message("42"))
    [pending] = store.list_identities(WS)
    assert pending.pairing_code is not None
    with pytest.raises(BadRequest):
        approve(store, WS, pending.pairing_code, user_id="x" * 301)
    assert store.get(WS, "telegram", "42") == pending


# ---------------------------------------------------------------- codes


def test_pairing_codes_are_short_unambiguous_and_random() -> None:
    codes = {new_pairing_code() for _ in range(200)}
    assert len(codes) == 200
    for code in codes:
        assert re.fullmatch(PAIRING_CODE_PATTERN, code)
        assert not set(code) & set("01IO")


def test_a_typed_code_is_normalised() -> None:
    assert normalize_code(" abcd-2345 ") == "ABCD2345"


# ---------------------------------------------------------------- the cache


class CountingStore:
    """An identity store that counts reads of `get`."""

    def __init__(self, store: SqliteIdentityStore) -> None:
        self.store = store
        self.gets = 0

    def get(self, workspace_id: str, channel: str, channel_user_id: str) -> Identity | None:
        self.gets += 1
        return self.store.get(workspace_id, channel, channel_user_id)

    def put(self, identity: Identity) -> None:
        self.store.put(identity)

    def create(self, identity: Identity) -> Identity:
        return self.store.create(identity)

    def list_identities(self, workspace_id: str, *, status: IdentityStatus | None = None) -> list[Identity]:
        return self.store.list_identities(workspace_id, status=status)

    def find_by_pairing_code(self, workspace_id: str, code: str) -> Identity | None:
        return self.store.find_by_pairing_code(workspace_id, code)

    def delete(self, workspace_id: str, channel: str, channel_user_id: str) -> None:
        self.store.delete(workspace_id, channel, channel_user_id)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_cache_keeps_approved_and_unknown_answers_for_its_ttl(store: SqliteIdentityStore) -> None:
    counting, clock = CountingStore(store), Clock()
    cache = CachedIdentities(counting, ttl_s=60, clock=clock)
    approved = seeded(store, "approved", "1")
    assert cache.get(WS, "telegram", "1") == approved
    assert cache.get(WS, "telegram", "2") is None
    assert cache.get(WS, "telegram", "1") == approved
    assert cache.get(WS, "telegram", "2") is None
    assert counting.gets == 2
    # A change made behind the cache's back shows after the TTL
    store.put(approved.model_copy(update={"status": "blocked"}))
    assert cache.get(WS, "telegram", "1") == approved
    clock.now = 61
    found = cache.get(WS, "telegram", "1")
    assert found is not None and found.status == "blocked"
    assert counting.gets == 3


def test_the_cache_never_keeps_a_pending_answer(store: SqliteIdentityStore) -> None:
    counting = CountingStore(store)
    cache = CachedIdentities(counting, clock=Clock())
    pending = seeded(store, "pending", "1", pairing_code="ABCD2345")
    assert cache.get(WS, "telegram", "1") == pending
    # An admin approves in another process: the next message is admitted at once
    approve(store, WS, "ABCD2345", user_id="ada")
    found = cache.get(WS, "telegram", "1")
    assert found is not None and found.user_id == "ada"
    assert counting.gets == 2


def test_writes_through_the_cache_apply_at_once(store: SqliteIdentityStore) -> None:
    counting = CountingStore(store)
    cache = CachedIdentities(counting, clock=Clock())
    assert cache.get(WS, "telegram", "1") is None
    created = cache.create(seeded(store, "approved", "1").model_copy(update={"user_id": "other"}))
    # create returned the stored identity (the first write won), and the cache holds that one
    assert created.user_id == "telegram:1"
    assert cache.get(WS, "telegram", "1") == created
    block(cache, WS, "telegram:1")
    found = cache.get(WS, "telegram", "1")
    assert found is not None and found.status == "blocked"
    cache.delete(WS, "telegram", "1")
    assert cache.get(WS, "telegram", "1") is None
    assert counting.gets == 2  # the first miss, and the read after the delete
    # Answers are copies: changing one does not change what the cache holds
    cache.put(seeded(store, "approved", "3"))
    got = cache.get(WS, "telegram", "3")
    assert got is not None
    got.user_id = "changed"
    again = cache.get(WS, "telegram", "3")
    assert again is not None and again.user_id == "telegram:3"


def test_the_cache_is_bounded(store: SqliteIdentityStore) -> None:
    counting = CountingStore(store)
    cache = CachedIdentities(counting, clock=Clock(), max_entries=2)
    for sender in ("1", "2", "3"):
        cache.get(WS, "telegram", sender)
    cache.get(WS, "telegram", "3")
    cache.get(WS, "telegram", "1")  # the stalest entry went
    assert counting.gets == 4


def test_the_longest_channel_user_id_still_derives_a_storable_user(store: SqliteIdentityStore) -> None:
    sender = "9" * 256
    assert resolve_sender(store, workspace("allow"), message(sender, channel="whatsapp")).admitted
    assert store.get(WS, "whatsapp", sender) is not None
    refused = resolve_sender(store, workspace("allow"), message("9" * 257, channel="whatsapp"))
    assert (refused.admission, refused.reason) == ("sender_refused", "unusable sender id")

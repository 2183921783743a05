"""Who is writing: channel user → Sigil user, under the workspace's unknown-sender policy (spec 000).

The webhook puts every platform message in one workspace (Settings.resolved_channel_workspace;
the web channel: the workspace in its URL) and makes no store call; the agent resolves the sender
there, at the start of the turn, with `resolve_sender`:

- an identity that is blocked refuses the sender, silently (audited, never answered);
- an approved identity admits them as its `user_id`;
- otherwise the workspace's policy decides:
  - "allow": everyone is admitted, and first contact stores an approved identity (user id
    derived from the channel user, see `derived_user_id`) that an admin can later rename or block;
  - "allow_list": admitted if `{channel}:{sender id}` (the bare id for web) is in
    `allowed_senders`, refused with a short reply otherwise. No identity is stored for a listed
    sender, so taking them off the list is enough to shut them out;
  - "pairing": first contact stores a pending identity with a pairing code, and the reply tells
    the sender the code and that an admin must run `sigil pairing approve <code>`. A pending
    sender who writes again gets the same code.

Bots are refused silently whatever the policy: the platform channels drop their messages
already, and answering a bot could start two bots talking forever.

A refused or pending sender costs no model call and leaves nothing in the session (see
shared.agent.turn); the turn's audit record carries the outcome, the user id and the reason.
Nothing here logs, and nothing here reads the message's text.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal
from weakref import WeakKeyDictionary

from cachetools import TTLCache
from pydantic import ValidationError

from shared.clock import utcnow
from shared.errors import BadRequest, NotFound, SigilError
from shared.models import Channel, Identity, IdentityStatus, InboundMessage, WorkspaceConfig
from shared.ports import IdentityStore

# No 0/O or 1/I: a code read aloud or typed on a phone has one reading.
PAIRING_ALPHABET: Final = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
PAIRING_CODE_LENGTH: Final = 8
# A fresh code is checked against the workspace's pending ones; with 32^8 codes a second try is
# already unlikely, and a fifth would mean the generator is broken.
_CODE_ATTEMPTS: Final = 5
MAX_CHANNEL_USER_ID: Final = 256

PAIRING_REPLY: Final = (
    "Hi! This assistant only talks to people an admin has approved. Your pairing code is {code}. "
    "Please ask an admin to run: sigil pairing approve {code}"
)
REFUSAL_REPLY: Final = (
    "Sorry, this assistant only answers people on its allow list. Please ask an admin to add you."
)

Admission = Literal["admitted", "pairing_required", "sender_refused"]


@dataclass(frozen=True)
class Resolution:
    """What the turn does with a sender: admit them as `user_id`, or answer `reply` (None: nothing).

    `user_id` is set for refused senders too (their identity's, or the derived one), so the audit
    record says who was turned away. `reason` is for the audit record, never shown to the sender.
    """

    admission: Admission
    user_id: str
    reply: str | None = None
    reason: str | None = None
    identity: Identity | None = None

    @property
    def admitted(self) -> bool:
        return self.admission == "admitted"


def derived_user_id(channel: str, channel_user_id: str) -> str:
    """The Sigil user of a sender nobody named: the web client's user id as it is (the signed web
    client speaks for its users), `{channel}:{id}` for a platform user."""
    return channel_user_id if channel == "web" else f"{channel}:{channel_user_id}"


def user_aliases(identities: Iterable[Identity], user_id: str) -> tuple[str, ...]:
    """Every id `user_id`'s memories may have been written under: the id itself, and the derived
    id of each identity that is this user (`derived_user_id`). Identities linked to one Sigil user
    wrote under their derived ids before they were linked; with these, "my memory" finds them
    (shared.memory.scope.recall_scope). Sorted and distinct."""
    derived = (derived_user_id(i.channel, i.channel_user_id) for i in identities if i.user_id == user_id)
    return tuple(sorted({user_id, *derived}))


ALIASES_TTL_S: Final = 60.0
_MAX_ALIAS_WORKSPACES: Final = 1024


class UserAliases:
    """`aliases(workspace_id, user_id)`: `user_aliases` over the workspace's identities, read at
    most once a minute per workspace and process, so a warm turn adds no store call. An identity
    linked or renamed through another process applies here within the minute."""

    def __init__(
        self,
        identities: IdentityStore,
        *,
        ttl_s: float = ALIASES_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._identities = identities
        # workspace -> user id -> that user's aliases (only users with an identity are listed).
        self._cache: TTLCache[str, dict[str, tuple[str, ...]]] = TTLCache(
            _MAX_ALIAS_WORKSPACES, ttl_s, timer=clock
        )
        # The local gateway's lane workers share one instance.
        self._lock = threading.Lock()

    def __call__(self, workspace_id: str, user_id: str) -> tuple[str, ...]:
        try:
            with self._lock:
                by_user = self._cache[workspace_id]
        except KeyError:
            # Read outside the lock: two threads missing at once both read, which is harmless.
            grouped: dict[str, list[Identity]] = {}
            for identity in self._identities.list_identities(workspace_id):
                grouped.setdefault(identity.user_id, []).append(identity)
            by_user = {u: user_aliases(mine, u) for u, mine in grouped.items()}
            with self._lock:
                self._cache[workspace_id] = by_user
        return by_user.get(user_id, (user_id,))


# One per identity store, so every turn of a process shares its cache.
_ALIASES_BY_STORE: WeakKeyDictionary[IdentityStore, UserAliases] = WeakKeyDictionary()


def aliases_of(identities: IdentityStore) -> UserAliases:
    try:
        aliases = _ALIASES_BY_STORE.get(identities)
        if aliases is None:
            aliases = _ALIASES_BY_STORE[identities] = UserAliases(identities)
    except TypeError:  # a store that can't be weakly referenced or hashed: no shared cache
        aliases = UserAliases(identities)
    return aliases


def on_allow_list(workspace: WorkspaceConfig, channel: str, channel_user_id: str) -> bool:
    entries = set(workspace.allowed_senders)
    if f"{channel}:{channel_user_id}" in entries:
        return True
    return channel == "web" and channel_user_id in entries


def new_pairing_code() -> str:
    return "".join(secrets.choice(PAIRING_ALPHABET) for _ in range(PAIRING_CODE_LENGTH))


def normalize_code(text: str) -> str:
    """A code as an admin typed it: any case, spaces or dashes in it."""
    return "".join(ch for ch in text.upper() if ch not in " -")


def resolve_sender(
    identities: IdentityStore,
    workspace: WorkspaceConfig,
    inbound: InboundMessage,
    *,
    now: datetime | None = None,
) -> Resolution:
    """Admit, give a pairing code to, or refuse the sender of `inbound` in `workspace` (see the module)."""
    channel, sender_id = inbound.channel, inbound.sender.id
    derived = derived_user_id(channel, sender_id)
    if inbound.sender.is_bot:
        return Resolution("sender_refused", derived, reason="bot sender")
    if not 0 < len(sender_id) <= MAX_CHANNEL_USER_ID:
        # No identity can be stored for it; the channels never produce one, so refuse quietly.
        return Resolution("sender_refused", derived, reason="unusable sender id")
    found = identities.get(workspace.id, channel, sender_id)
    if found is None and workspace.unknown_sender_policy != "allow_list":
        # The first write wins: a sender racing themself in two lanes gets one identity (one code).
        found = identities.create(_first_contact(identities, workspace, inbound, now or utcnow()))
    return _judge(workspace, channel, sender_id, found)


def _first_contact(
    identities: IdentityStore, workspace: WorkspaceConfig, inbound: InboundMessage, now: datetime
) -> Identity:
    allow = workspace.unknown_sender_policy == "allow"
    return Identity(
        workspace_id=workspace.id,
        channel=inbound.channel,
        channel_user_id=inbound.sender.id,
        user_id=derived_user_id(inbound.channel, inbound.sender.id),
        display_name=inbound.sender.name,
        status="approved" if allow else "pending",
        pairing_code=None if allow else _unused_code(identities, workspace.id),
        created_at=now,
        approved_at=now if allow else None,
    )


def _unused_code(identities: IdentityStore, workspace_id: str) -> str:
    # A code must name one sender: an admin approving it must never let a second one in.
    for _ in range(_CODE_ATTEMPTS):
        code = new_pairing_code()
        if identities.find_by_pairing_code(workspace_id, code) is None:
            return code
    raise SigilError("no free pairing code after several tries", code="pairing_unavailable")


def _judge(workspace: WorkspaceConfig, channel: str, sender_id: str, found: Identity | None) -> Resolution:
    policy = workspace.unknown_sender_policy
    if found is not None and found.status == "blocked":
        return Resolution("sender_refused", found.user_id, reason="blocked", identity=found)
    if found is not None and found.status == "approved":
        return Resolution("admitted", found.user_id, identity=found)
    user_id = found.user_id if found is not None else derived_user_id(channel, sender_id)
    # Unknown or pending from here on. A pending identity outlives a change of policy: under
    # "allow" it is admitted, under "allow_list" the list decides, as for anyone unknown.
    if policy == "allow" or (policy == "allow_list" and on_allow_list(workspace, channel, sender_id)):
        return Resolution("admitted", user_id, identity=found)
    if policy == "allow_list":
        return Resolution(
            "sender_refused", user_id, reply=REFUSAL_REPLY, reason="not on the allow list", identity=found
        )
    if found is None or found.pairing_code is None:
        # Only a pending identity whose code an admin cleared by hand gets here: it waits for an
        # admin to approve or block it by its channel id, and hears nothing in the meantime.
        return Resolution("sender_refused", user_id, reason="pending without a code", identity=found)
    return Resolution(
        "pairing_required",
        user_id,
        reply=PAIRING_REPLY.format(code=found.pairing_code),
        reason="awaiting approval",
        identity=found,
    )


# ---------------------------------------------------------------- admin actions (the CLI)


def approve(
    identities: IdentityStore,
    workspace_id: str,
    code: str,
    *,
    user_id: str | None = None,
    now: datetime | None = None,
) -> Identity:
    """Approve the pending sender holding `code`, as `user_id` (default: the id derived at contact)."""
    found = _by_code(identities, workspace_id, code)
    approved = _changed(
        found,
        status="approved",
        user_id=user_id or found.user_id,
        # A code is good for one approval: cleared, it can never let anyone else in.
        pairing_code=None,
        approved_at=now or utcnow(),
    )
    identities.put(approved)
    return approved


def block(identities: IdentityStore, workspace_id: str, who: str, *, now: datetime | None = None) -> Identity:
    """Block a sender, by pairing code or as `{channel}:{channel user id}`.

    By channel id it works for a sender not seen yet too: the blocked identity is stored before
    their first message arrives.
    """
    channel, sep, channel_user_id = who.partition(":")
    if not sep:
        found = _by_code(identities, workspace_id, who)
    else:
        existing = identities.get(workspace_id, channel, channel_user_id)
        found = existing or _changed(
            None,
            workspace_id=workspace_id,
            channel=channel,
            channel_user_id=channel_user_id,
            user_id=derived_user_id(channel, channel_user_id),
            created_at=now or utcnow(),
        )
    blocked = _changed(found, status="blocked", pairing_code=None)
    identities.put(blocked)
    return blocked


def _by_code(identities: IdentityStore, workspace_id: str, code: str) -> Identity:
    found = identities.find_by_pairing_code(workspace_id, normalize_code(code))
    if found is None:
        raise NotFound(f"no pending sender has pairing code {code!r} in workspace {workspace_id!r}")
    return found


def _changed(identity: Identity | None, **fields: object) -> Identity:
    """`identity` with `fields` changed, validated (model_copy would not check an admin's input)."""
    base = {} if identity is None else identity.model_dump()
    try:
        return Identity.model_validate(base | fields)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise BadRequest(f"not a valid identity: {problems}") from exc


# ---------------------------------------------------------------- the agent's cache

IDENTITY_TTL_S: Final = 60.0
MAX_ENTRIES: Final = 4096

_Key = tuple[str, str, str]


class CachedIdentities:
    """An IdentityStore answering `get` from memory for `ttl_s` seconds, so a warm turn reads none.

    Approved, blocked and unknown answers are kept; pending ones never are, so a sender an admin
    has just approved is admitted on their next message. The price, as for workspace configs
    (shared.workspace_cache): a block, a rename, or a first identity stored by another process
    takes up to the TTL to apply in this one. Writes through the cache apply here at once.
    """

    def __init__(
        self,
        store: IdentityStore,
        *,
        ttl_s: float = IDENTITY_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        self.store = store
        self.ttl_s = ttl_s
        # None is an answer too (an unknown sender). Full, the least recently used goes.
        self._cache: TTLCache[_Key, Identity | None] = TTLCache(max_entries, ttl_s, timer=clock)
        # The local gateway's lane workers share one instance.
        self._lock = threading.Lock()

    def get(self, workspace_id: str, channel: str, channel_user_id: str) -> Identity | None:
        key = (workspace_id, channel, channel_user_id)
        try:
            with self._lock:
                found = self._cache[key]
        except KeyError:
            # Read outside the lock: two threads missing at once both read, which is harmless.
            found = self.store.get(workspace_id, channel, channel_user_id)
            self._remember(key, found)
        return _copy(found)

    def put(self, identity: Identity) -> None:
        self.store.put(identity)
        self._remember(_key(identity), _copy(identity))

    def create(self, identity: Identity) -> Identity:
        stored = self.store.create(identity)
        self._remember(_key(stored), _copy(stored))
        return stored

    def list_identities(self, workspace_id: str, *, status: IdentityStatus | None = None) -> list[Identity]:
        # An admin path: always the store's current list.
        return self.store.list_identities(workspace_id, status=status)

    def find_by_pairing_code(self, workspace_id: str, code: str) -> Identity | None:
        return self.store.find_by_pairing_code(workspace_id, code)

    def delete(self, workspace_id: str, channel: str, channel_user_id: str) -> None:
        self.store.delete(workspace_id, channel, channel_user_id)
        with self._lock:
            self._cache.pop((workspace_id, channel, channel_user_id), None)

    def _remember(self, key: _Key, found: Identity | None) -> None:
        with self._lock:
            # Pending answers are never kept: an approval must apply on the sender's next message.
            if found is not None and found.status == "pending":
                self._cache.pop(key, None)
            else:
                self._cache[key] = found


def _key(identity: Identity) -> _Key:
    return (identity.workspace_id, identity.channel, identity.channel_user_id)


def _copy(identity: Identity | None) -> Identity | None:
    # Identities are mutable: a caller changing what it got must not change the cached answer.
    return None if identity is None else identity.model_copy(deep=True)


# ---------------------------------------------------------------- linking (`sigil identity ...`)


def _channels() -> frozenset[str]:
    from typing import get_args  # here, not above: one import line fewer for the linking section

    return frozenset(get_args(Channel))


CHANNELS: Final = _channels()


def parse_channel_user(who: str) -> tuple[str, str]:
    """`{channel}:{channel user id}` as (channel, id); a BadRequest naming the problem otherwise."""
    channel, sep, channel_user_id = who.strip().partition(":")
    if not sep or channel not in CHANNELS or not channel_user_id:
        raise BadRequest(
            f"{who!r} is not CHANNEL:USER with CHANNEL one of {', '.join(sorted(CHANNELS))} "
            "(e.g. telegram:12345, slack:U0123ABC)"
        )
    if len(channel_user_id) > MAX_CHANNEL_USER_ID:
        raise BadRequest(f"a channel user id is at most {MAX_CHANNEL_USER_ID} characters")
    return channel, channel_user_id


def link_target(identities: IdentityStore, workspace_id: str, to: str) -> str:
    """The Sigil user `to` names: the user of the identity `{channel}:{id}` (which must exist,
    or the link would join a typo), or else `to` itself as a Sigil user id."""
    channel, sep, _ = to.strip().partition(":")
    if sep and channel in CHANNELS:
        found = identities.get(workspace_id, *parse_channel_user(to))
        if found is None:
            raise NotFound(f"no identity {to!r} in workspace {workspace_id!r} (see `sigil identity list`)")
        return found.user_id
    if not to.strip():
        raise BadRequest("the Sigil user to link to is empty")
    return to.strip()


def link_identity(
    identities: IdentityStore,
    workspace_id: str,
    who: str,
    to_user_id: str,
    *,
    now: datetime | None = None,
) -> Identity:
    """Make the channel user `who` (`{channel}:{id}`) the Sigil user `to_user_id`, so their
    memory under the personal policy is one across channels (docs/privacy.md).

    An identity not stored yet (a sender under the "allow" policy who has not written, or one to
    be admitted in advance) is stored approved as that user; an existing one keeps its status (a
    blocked sender stays blocked, a pending one still waits for `sigil pairing approve`).
    """
    channel, channel_user_id = parse_channel_user(who)
    existing = identities.get(workspace_id, channel, channel_user_id)
    stamp = now or utcnow()
    if existing is None:
        linked = _changed(
            None,
            workspace_id=workspace_id,
            channel=channel,
            channel_user_id=channel_user_id,
            user_id=to_user_id,
            status="approved",
            created_at=stamp,
            approved_at=stamp,
        )
    else:
        linked = _changed(existing, user_id=to_user_id)
    identities.put(linked)
    return linked


def unlink_identity(identities: IdentityStore, workspace_id: str, who: str) -> Identity:
    """Give the channel user `who` back the Sigil user derived from it (`derived_user_id`): it
    stops sharing memory with the user it was linked to. What it wrote while linked stays that
    user's."""
    channel, channel_user_id = parse_channel_user(who)
    existing = identities.get(workspace_id, channel, channel_user_id)
    if existing is None:
        raise NotFound(f"no identity {who!r} in workspace {workspace_id!r} (see `sigil identity list`)")
    unlinked = _changed(existing, user_id=derived_user_id(channel, channel_user_id))
    identities.put(unlinked)
    return unlinked

"""IdentityStore contract: round trip, first write wins, pairing codes, status changes, isolation."""

from __future__ import annotations

from shared.models import Identity, IdentityStatus

from .builders import at
from .conftest import OpenBackend
from .factories import ContractBackend


def identity(workspace_id: str, channel_user_id: str = "42", **fields: object) -> Identity:
    data: dict[str, object] = {
        "workspace_id": workspace_id,
        "channel": "telegram",
        "channel_user_id": channel_user_id,
        "user_id": f"telegram:{channel_user_id}",
        "display_name": "Ada Lovelace ✨",
        "status": "pending",
        "pairing_code": None,
        "created_at": at(0),
        **fields,
    }
    return Identity.model_validate(data)


def test_an_identity_round_trips_and_is_replaced_by_put(contract: ContractBackend, ws_a: str) -> None:
    store = contract.backend.identities
    assert store.get(ws_a, "telegram", "42") is None

    pending = identity(ws_a, pairing_code="ABCD2345")
    store.put(pending)
    assert store.get(ws_a, "telegram", "42") == pending
    # The same user id on another channel is another identity
    assert store.get(ws_a, "slack", "42") is None

    approved = pending.model_copy(
        update={"status": "approved", "user_id": "ada", "pairing_code": None, "approved_at": at(5)}
    )
    store.put(approved)
    assert store.get(ws_a, "telegram", "42") == approved
    assert store.list_identities(ws_a) == [approved]


def test_create_keeps_the_first_identity(contract: ContractBackend, ws_a: str) -> None:
    store = contract.backend.identities
    first = identity(ws_a, pairing_code="FRST2345")
    assert store.create(first) == first
    # A second first contact (another lane, the same sender) gets the first one back
    second = identity(ws_a, pairing_code="SECND234", created_at=at(1))
    assert store.create(second) == first
    assert store.get(ws_a, "telegram", "42") == first
    assert store.find_by_pairing_code(ws_a, "SECND234") is None


def test_a_pairing_code_finds_its_pending_identity_until_it_is_cleared(
    contract: ContractBackend, ws_a: str
) -> None:
    store = contract.backend.identities
    ada = identity(ws_a, "42", pairing_code="ABCD2345")
    bob = identity(ws_a, "43", pairing_code="WXYZ6789", display_name=None)
    store.put(ada)
    store.create(bob)
    assert store.find_by_pairing_code(ws_a, "ABCD2345") == ada
    assert store.find_by_pairing_code(ws_a, "WXYZ6789") == bob
    assert store.find_by_pairing_code(ws_a, "ZZZZ2222") is None

    # Approving clears the code: it finds nobody any more
    store.put(ada.model_copy(update={"status": "approved", "pairing_code": None, "approved_at": at(2)}))
    assert store.find_by_pairing_code(ws_a, "ABCD2345") is None
    # A new code replaces the old one
    store.put(bob.model_copy(update={"pairing_code": "NEWCQDE2"}))
    assert store.find_by_pairing_code(ws_a, "WXYZ6789") is None
    found = store.find_by_pairing_code(ws_a, "NEWCQDE2")
    assert found is not None and found.channel_user_id == "43"


def test_status_changes_and_listing_by_status(contract: ContractBackend, ws_a: str) -> None:
    store = contract.backend.identities
    store.put(identity(ws_a, "3", status="approved", approved_at=at(1)))
    store.put(identity(ws_a, "1", pairing_code="AAAA2222"))
    store.put(identity(ws_a, "2", pairing_code="BBBB3333"))
    store.put(identity(ws_a, "U9", channel="slack", user_id="slack:U9", status="blocked"))

    def ids(status: IdentityStatus | None = None) -> list[str]:
        listed = store.list_identities(ws_a, status=status)
        return [f"{i.channel}:{i.channel_user_id}" for i in listed]

    # By channel, then channel user
    assert ids() == ["slack:U9", "telegram:1", "telegram:2", "telegram:3"]
    assert ids("pending") == ["telegram:1", "telegram:2"]
    assert ids("approved") == ["telegram:3"]
    assert ids("blocked") == ["slack:U9"]

    # Pending → blocked, blocked → approved
    one = store.get(ws_a, "telegram", "1")
    assert one is not None
    store.put(one.model_copy(update={"status": "blocked", "pairing_code": None}))
    u9 = store.get(ws_a, "slack", "U9")
    assert u9 is not None
    store.put(u9.model_copy(update={"status": "approved", "approved_at": at(3)}))
    assert ids("pending") == ["telegram:2"]
    assert ids("blocked") == ["telegram:1"]
    assert ids("approved") == ["slack:U9", "telegram:3"]

    store.delete(ws_a, "telegram", "2")
    assert store.get(ws_a, "telegram", "2") is None
    assert store.find_by_pairing_code(ws_a, "BBBB3333") is None
    assert ids() == ["slack:U9", "telegram:1", "telegram:3"]


def test_workspaces_never_see_each_others_identities(contract: ContractBackend, ws_a: str, ws_b: str) -> None:
    store = contract.backend.identities
    mine = identity(ws_a, "42", pairing_code="ABCD2345")
    theirs = identity(ws_b, "42", pairing_code="ABCD2345", user_id="someone-else")
    store.put(mine)
    store.put(theirs)
    # Same channel user, same code, two workspaces: each sees its own
    assert store.get(ws_a, "telegram", "42") == mine
    assert store.get(ws_b, "telegram", "42") == theirs
    assert store.find_by_pairing_code(ws_a, "ABCD2345") == mine
    assert store.find_by_pairing_code(ws_b, "ABCD2345") == theirs
    assert store.list_identities(ws_a) == [mine]

    store.delete(ws_b, "telegram", "42")
    assert store.get(ws_a, "telegram", "42") == mine
    assert store.list_identities(ws_b) == []
    # create in one workspace is not blocked by the same key in another
    fresh = identity(ws_b, "42", status="approved")
    assert store.create(fresh) == fresh


def test_identities_survive_a_restart(open_backend: OpenBackend, ws_a: str) -> None:
    stored = identity(ws_a, "-1001234", pairing_code="REST4RTS", display_name="A channel")
    approved = identity(ws_a, "7", status="approved", user_id="grace", approved_at=at(9))
    with open_backend() as first:
        first.backend.identities.put(stored)
        first.backend.identities.create(approved)
    # A new backend, so no cache in front of the store answers from what it saw written
    with open_backend() as second:
        store = second.backend.identities
        assert store.get(ws_a, "telegram", "-1001234") == stored
        assert store.get(ws_a, "telegram", "7") == approved
        assert store.find_by_pairing_code(ws_a, "REST4RTS") == stored
        assert store.list_identities(ws_a, status="pending") == [stored]

"""The right to erasure on both adapter sets (embedded, and the AWS adapters on moto with the
embedded index, as the contract suites run them): after erase_user nothing of the person is
found by any read path, and the other user's data in the same workspace is exactly as it was."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from shared.backend import Backend
from shared.clock import new_id
from shared.memory.erasure import ERASED_TEXT, erase_user
from shared.memory.keys import normalize_key
from shared.memory.writer import RECENT_TAILS, MemoryWriter, RecentTails, index_rolled_out, record_doc_ids
from shared.models import (
    WORKSPACE_WIDE,
    AssistantMessage,
    AuditRecord,
    Identity,
    IndexDoc,
    IndexQuery,
    MemoryRecord,
    Message,
    OutboundMessage,
    Session,
    Summary,
    Triple,
    UserMessage,
)
from tests.contract.builders import at
from tests.contract.factories import BACKEND_FACTORIES

ALICE, BOB = "alice", "bob"
# Alice's platform id; group messages carry it, not her Sigil user id.
ALICE_TG, BOB_TG = "111", "222"


@pytest.fixture(params=sorted(BACKEND_FACTORIES))
def backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Backend]:
    with BACKEND_FACTORIES[request.param](tmp_path / "backend") as contract:
        yield contract.backend


@pytest.fixture
def ws() -> str:
    return new_id("ws")


def _user(text: str, sender: str, n: int) -> UserMessage:
    return UserMessage(id=f"m-{sender}-{n}", content=text, sender_id=sender, created_at=at(n))


def _assistant(text: str, n: int) -> AssistantMessage:
    return AssistantMessage(id=f"a-{n}-{text[:6]}", content=text, created_at=at(n))


def _session(ws: str, session_id: str, user: str, window: list[Message]) -> Session:
    return Session(id=session_id, workspace_id=ws, user_id=user, channel="telegram", active_messages=window)


def _records(ws: str, session_id: str, messages: list[tuple[Message, str | None]]) -> list[MemoryRecord]:
    out = []
    for seq, (m, user) in enumerate(messages):
        text = m.content if isinstance(m, (UserMessage, AssistantMessage)) else ""
        out.append(
            MemoryRecord(
                id=f"{session_id}-r{seq}",
                workspace_id=ws,
                session_id=session_id,
                role="user" if isinstance(m, UserMessage) else "assistant",
                text=text,
                seq=seq,
                created_at=at(seq),
                message=m,
                user_id=user,
            )
        )
    return out


def _triple(ws: str, triple_id: str, subject: str, obj: str, **kw: object) -> Triple:
    return Triple.model_validate(
        {"id": triple_id, "workspace_id": ws, "subject": subject, "predicate": "likes", "object": obj, **kw}
    )


def _summary(ws: str, summary_id: str, session_id: str, text: str, **kw: object) -> Summary:
    return Summary.model_validate(
        {
            "id": summary_id,
            "workspace_id": ws,
            "session_id": session_id,
            "text": text,
            "first_seq": 0,
            "last_seq": 1,
            "start_at": at(0),
            "end_at": at(1),
            **kw,
        }
    )


def _reply(ws: str, session_id: str, turn: str, text: str) -> OutboundMessage:
    return OutboundMessage(
        workspace_id=ws,
        session_id=session_id,
        channel="web",
        chat_id="c",
        turn_id=turn,
        part=0,
        seq=1,
        text=text,
    )


def _audit(ws: str, session_id: str, user: str, turn: str) -> AuditRecord:
    return AuditRecord(workspace_id=ws, session_id=session_id, user_id=user, turn_id=turn, outcome="ok")


def populate(b: Backend, ws: str) -> None:
    """Alice's DM, Bob's DM and Bob's group where Alice speaks too, in every store."""
    for channel_user, user in ((ALICE_TG, ALICE), (BOB_TG, BOB)):
        b.identities.put(
            Identity(
                workspace_id=ws,
                channel="telegram",
                channel_user_id=channel_user,
                user_id=user,
                status="approved",
            )
        )
    dm_alice = [
        (_user("my zanzibar passport number", ALICE_TG, 0), ALICE),
        (_assistant("noted zanzibar", 1), ALICE),
    ]
    dm_bob = [(_user("my kilimanjaro trip", BOB_TG, 0), BOB), (_assistant("enjoy kilimanjaro", 1), BOB)]
    # The group's Tier-1 records carry no user id: Alice's are recognised by her sender id.
    group = [
        (_user("alice says marrakesh", ALICE_TG, 0), None),
        (_user("bob says timbuktu", BOB_TG, 1), None),
        (_assistant("both noted", 2), None),
    ]
    window_group = [
        _user("alice whispers samarkand", ALICE_TG, 3),
        _user("bob whispers valparaiso", BOB_TG, 4),
    ]
    for session_id, user, history, window in (
        ("dm-alice", ALICE, dm_alice, [m for m, _ in dm_alice]),
        ("dm-bob", BOB, dm_bob, [m for m, _ in dm_bob]),
        ("group", BOB, group, window_group),
    ):
        b.sessions.save(_session(ws, session_id, user, window), expected_version=0)
        records = _records(ws, session_id, history)
        b.memory.append_messages(ws, records)
        # Indexed as the turn indexes them: each with its neighbours' text as context.
        MemoryWriter(b.index, None).write_messages(ws, records)
    summaries = [
        _summary(ws, "sum-alice", "dm-alice", "alice discussed zanzibar"),
        _summary(ws, "sum-bob", "dm-bob", "bob discussed kilimanjaro"),
        _summary(ws, "sum-group-alice", "group", "alice mentioned marrakesh", user_id=ALICE),
        _summary(ws, "sum-group", "group", "the group chatted about timbuktu"),
    ]
    triples = [
        _triple(ws, "t-alice", ALICE, "zanzibar spices", user_id=ALICE, session_id="dm-alice"),
        _triple(
            ws, "t-alice-old", ALICE, "zanzibar tea", user_id=ALICE, status="merged", merged_into="t-alice"
        ),
        _triple(ws, "t-about-alice", "Alice", "marrakesh rugs", user_id=BOB, session_id="group"),
        _triple(ws, "t-from-dm", "the project", "zanzibar launch", user_id=None, session_id="dm-alice"),
        _triple(ws, "t-bob", BOB, "kilimanjaro maps", user_id=BOB, session_id="dm-bob"),
        _triple(ws, "t-team", "the team", "timbuktu offsite", user_id=None, session_id="group"),
    ]
    for s in summaries:
        b.memory.put_summary(s)
    b.memory.put_triples(ws, triples)
    b.index.upsert(ws, [_doc(ws, s.id, "summary", s.text, s.session_id) for s in summaries])
    b.index.upsert(
        ws, [_doc(ws, t.id, "fact", f"{t.subject} {t.predicate} {t.object}", t.session_id) for t in triples]
    )
    b.outbox.append(_reply(ws, "dm-alice", "turn-a", "about zanzibar"))
    b.outbox.append(_reply(ws, "dm-bob", "turn-b", "about kilimanjaro"))
    b.audit.append(_audit(ws, "dm-alice", ALICE, "turn-a"))
    b.audit.append(_audit(ws, "group", ALICE, "turn-g"))
    b.audit.append(_audit(ws, "dm-bob", BOB, "turn-b"))


def _doc(ws: str, doc_id: str, tier: str, text: str, session_id: str | None) -> IndexDoc:
    return IndexDoc.model_validate(
        {
            "id": doc_id,
            "workspace_id": ws,
            "session_id": session_id,
            "tier": tier,
            "text": text,
            "created_at": at(0),
        }
    )


def search(b: Backend, ws: str, text: str) -> set[str]:
    return {
        h.doc.id for h in b.index.search(ws, IndexQuery(scope=WORKSPACE_WIDE, text=text, k=100)).text_hits
    }


def bobs_view(b: Backend, ws: str) -> dict[str, object]:
    """Everything of Bob's, read through every read path."""
    group = b.sessions.get(ws, "group")
    assert group is not None
    return {
        "session": b.sessions.get(ws, "dm-bob"),
        "messages": b.memory.get_messages(ws, "dm-bob"),
        "group messages of bob": [
            r
            for r in b.memory.get_messages(ws, "group")
            if isinstance(r.message, UserMessage) and r.message.sender_id == BOB_TG
        ],
        "group window of bob": [
            m for m in group.active_messages if isinstance(m, UserMessage) and m.sender_id == BOB_TG
        ],
        "summaries": b.memory.list_summaries(ws, scope=WORKSPACE_WIDE, session_id="dm-bob"),
        "triples": b.memory.triples_by_subject(ws, BOB, scope=WORKSPACE_WIDE),
        "team": b.memory.triples_by_subject(ws, "the team", scope=WORKSPACE_WIDE),
        "outbox": b.outbox.read(ws, "dm-bob"),
        "identity": b.identities.get(ws, "telegram", BOB_TG),
        "audit": [r for r in b.audit.list_records(ws) if r.user_id == BOB],
        # Less her group message, whose context held Bob's words next to it.
        "search": {w: search(b, ws, w) - {"group-r0"} for w in ("kilimanjaro", "timbuktu", "valparaiso")},
    }


def test_nothing_of_the_user_is_left_and_the_other_user_is_untouched(backend: Backend, ws: str) -> None:
    other_ws = new_id("ws")
    populate(backend, ws)
    populate(backend, other_ws)  # the same people in another workspace: not touched at all
    bob_before = bobs_view(backend, ws)
    other_before = (bobs_view(backend, other_ws), backend.memory.list_triples(other_ws, scope=WORKSPACE_WIDE))
    assert search(backend, ws, "zanzibar") and search(backend, ws, "marrakesh")

    report = erase_user(backend, ws, ALICE)

    b = backend
    # Sessions, Tier 1, the outbox.
    assert b.sessions.get(ws, "dm-alice") is None
    assert all(s.user_id != ALICE for s in b.sessions.list_sessions(ws))
    assert b.memory.get_messages(ws, "dm-alice") == [] and b.memory.count_messages(ws, "dm-alice") == 0
    assert b.outbox.read(ws, "dm-alice") == []
    group = b.memory.get_messages(ws, "group")
    assert not any(isinstance(r.message, UserMessage) and r.message.sender_id == ALICE_TG for r in group)
    assert "marrakesh" not in " ".join(r.text for r in group)
    # The group's window keeps its shape, without her words or her id.
    window = b.sessions.get(ws, "group")
    assert window is not None
    assert [m.content for m in window.active_messages if isinstance(m, UserMessage)] == [
        ERASED_TEXT,
        "bob whispers valparaiso",
    ]
    assert all(m.sender_id != ALICE_TG for m in window.active_messages if isinstance(m, UserMessage))
    # Tiers 2 and 3, by every access path, whatever the status.
    assert {s.id for s in b.memory.list_summaries(ws, scope=WORKSPACE_WIDE, limit=100)} == {
        "sum-bob",
        "sum-group",
    }
    assert (
        b.memory.triples_by_subject(ws, ALICE, scope=WORKSPACE_WIDE) == []
        and b.memory.triples_by_object(ws, "zanzibar spices", scope=WORKSPACE_WIDE) == []
    )
    assert {t.id for t in b.memory.list_triples(ws, scope=WORKSPACE_WIDE)} == {"t-bob", "t-team"}
    assert all(
        t.user_id != ALICE and normalize_key(t.subject) != ALICE
        for t in b.memory.list_triples(ws, scope=WORKSPACE_WIDE)
    )
    # The index: her messages, summaries and facts, in every tier.
    for word in ("zanzibar", "marrakesh", "samarkand", "passport"):
        assert search(b, ws, word) == set(), word
    # Identities go; audit records stay, without her.
    assert b.identities.get(ws, "telegram", ALICE_TG) is None
    assert all(i.user_id != ALICE for i in b.identities.list_identities(ws))
    audit = b.audit.list_records(ws)
    assert len(audit) == 3 and not any(r.user_id == ALICE or r.session_id == "dm-alice" for r in audit)

    assert bobs_view(backend, ws) == bob_before
    assert (
        bobs_view(backend, other_ws),
        backend.memory.list_triples(other_ws, scope=WORKSPACE_WIDE),
    ) == other_before
    assert report.sessions_deleted == 1 and report.windows_redacted == 1
    assert report.messages_deleted == 3 and report.summaries_deleted == 2 and report.triples_deleted == 4
    assert report.identities_deleted == 1 and report.audit_records_anonymised == 2

    again = erase_user(backend, ws, ALICE)
    assert set(again.model_dump(exclude={"workspace_id", "user_id"}).values()) == {0}
    assert bobs_view(backend, ws) == bob_before


def test_every_chunk_of_a_long_message_and_the_remembered_neighbours_go(backend: Backend, ws: str) -> None:
    """A message longer than one chunk is indexed as several documents (the writer's chunk ids):
    all of them go, and so does what this process remembers of her words as roll-out context."""
    populate(backend, ws)
    # Past 1,920 characters, so at least two chunks; the word only the last chunk holds.
    long_text = "alice pastes her itinerary " * 80 + "ending in quetzaltenango"
    assert len(long_text) > 1920
    record = MemoryRecord(
        id="dm-alice-r2",
        workspace_id=ws,
        session_id="dm-alice",
        role="user",
        text=long_text,
        seq=2,
        created_at=at(2),
        message=_user(long_text, ALICE_TG, 2),
        user_id=ALICE,
    )
    backend.memory.append_messages(ws, [record])
    tails = RecentTails()
    index_rolled_out(backend.index, backend.memory, None, [record], tails=tails)
    doc_ids = record_doc_ids(record.id, record.text)
    assert len(doc_ids) >= 2
    # The index itself returns chunk documents (memory search folds them into their record).
    assert search(backend, ws, "itinerary") == set(doc_ids)
    assert search(backend, ws, "quetzaltenango") == {doc_ids[-1]}
    RECENT_TAILS.put([record])
    assert RECENT_TAILS.get(ws, "dm-alice", record.seq + 1) is not None

    report = erase_user(backend, ws, ALICE)

    for word in ("quetzaltenango", "itinerary", "pastes"):
        assert search(backend, ws, word) == set(), word
    hits = backend.index.search(
        ws, IndexQuery(scope=WORKSPACE_WIDE, text="alice pastes itinerary quetzaltenango", k=100)
    )
    assert not any(
        h.doc.id in doc_ids or h.doc.metadata.get("record_id") == record.id for h in hits.text_hits
    )
    assert RECENT_TAILS.get(ws, "dm-alice", record.seq + 1) is None
    assert report.index_docs_deleted >= len(doc_ids)


def test_erasure_removes_the_files_the_person_attached_and_only_theirs(backend: Backend, ws: str) -> None:
    import hashlib

    from shared.media.ids import media_id
    from shared.models.media import MediaItem

    media = backend.media
    assert media is not None

    def attach(user: str, file_id: str) -> MediaItem:
        data = f"%PDF-1.4 {user} {file_id}".encode()
        item = MediaItem(
            id=media_id(ws, "telegram", file_id),
            workspace_id=ws,
            session_id=f"tg.{user}",
            user_id=user,
            channel="telegram",
            source_id=file_id,
            kind="document",
            mime_type="application/pdf",
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
        )
        media.put(item, data)
        return item

    theirs = [attach(ALICE, "f1"), attach(ALICE, "f2")]
    kept = attach(BOB, "f3")
    report = erase_user(backend, ws, ALICE)
    assert report.media_deleted == 2
    for item in theirs:
        assert media.get(ws, item.id) is None and media.read(ws, item.id) is None
    assert media.list_media(ws) == [kept]
    assert media.read(ws, kept.id) == f"%PDF-1.4 {BOB} f3".encode()
    assert erase_user(backend, ws, ALICE).media_deleted == 0

"""The right to erasure: everything a workspace holds of one person, from every store.

`erase_user(backend, workspace_id, user_id)` finds the person by their Sigil user id and by the
channel user ids their identities map to (a group's messages carry the platform sender id), and:

- sessions: the sessions they own (`Session.user_id`) are deleted. In sessions others own
  (groups), their messages in the active window become "[erased]" without a sender id (deleting
  them would break the window's turn structure);
- Tier 1: every message of their sessions; in other sessions, the messages with their user id
  or sent from one of their channel ids;
- Tier 2: the summaries of their sessions and those carrying their user id;
- Tier 3: triples with their user id, about them (subject = their user id) or learnt in their
  sessions, whatever the status;
- the index: the documents of all of those messages, summaries and facts (ids are the records'),
  every chunk document of a long message or summary (`record_doc_ids`), and the neighbour texts
  this process remembers for the workspace's next roll-out (`RECENT_TAILS.forget`), so none of
  their words comes back as another record's context;
- the outbox: every web reply of their sessions;
- the audit log is anonymised, not deleted: records keep the workspace's accounting (time,
  model, tools, tokens, cost, outcome) and lose user, session, event id and error text
  (AuditLog.anonymise);
- identities mapping a channel user to them are deleted, last: an erasure cut short is finished
  by running it again, and that needs them to recognise group messages.

Left as they are, by design: the send ledger (platform message ids and text digests, expiring
after 7 days), budget counters (numbers only, keyed by user id, expiring 35 days after their
period), the embedding cache (vectors by content hash, no text, shared by every workspace), the
lanes and events in flight (transient), consolidation checkpoints (sequence numbers), and what
others wrote about them in their own words (another user's messages and the summaries of
another's sessions are that user's data).

Listing and deleting read whole workspace partitions (sessions, summaries, triples, audit):
an admin operation, not a turn's path. Every step is idempotent, so an erasure interrupted by a
failure is completed by running it again. Run it once the person's channel access is blocked:
a message arriving mid-erasure may survive it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel

from shared.errors import ConcurrencyConflict
from shared.memory.keys import normalize_key
from shared.memory.writer import RECENT_TAILS, record_doc_ids
from shared.models import MemoryRecord, Session, UserMessage

if TYPE_CHECKING:
    from shared.backend import Backend

log = logging.getLogger("sigil.memory.erasure")

ERASED_TEXT = "[erased]"
_ALL = 1_000_000
_PAGE = 1_000
_INDEX_CHUNK = 500
_SAVE_ATTEMPTS = 5


class ErasureReport(BaseModel):
    workspace_id: str
    user_id: str
    sessions_deleted: int = 0
    windows_redacted: int = 0
    messages_deleted: int = 0
    summaries_deleted: int = 0
    triples_deleted: int = 0
    index_docs_deleted: int = 0
    outbox_entries_deleted: int = 0
    audit_records_anonymised: int = 0
    identities_deleted: int = 0


def _theirs(record: MemoryRecord, user_id: str, sender_ids: set[str]) -> bool:
    if record.user_id == user_id:
        return True
    message = record.message
    return isinstance(message, UserMessage) and message.sender_id in sender_ids


def _all_messages(backend: Backend, workspace_id: str, session_id: str) -> list[MemoryRecord]:
    found: list[MemoryRecord] = []
    after = -1
    while page := backend.memory.get_messages(workspace_id, session_id, after_seq=after, limit=_PAGE):
        found += page
        after = page[-1].seq
        if len(page) < _PAGE:
            break
    return found


def _redact_window(backend: Backend, session: Session, sender_ids: set[str]) -> bool:
    """Replace the person's messages in another's session window; False when it held none."""
    for _ in range(_SAVE_ATTEMPTS):
        hits = [
            i
            for i, m in enumerate(session.active_messages)
            if isinstance(m, UserMessage) and m.sender_id in sender_ids
        ]
        if not hits:
            return False
        window = list(session.active_messages)
        for i in hits:
            message = window[i]
            assert isinstance(message, UserMessage)
            window[i] = message.model_copy(update={"content": ERASED_TEXT, "sender_id": None})
        try:
            backend.sessions.save(
                session.model_copy(update={"active_messages": window}), expected_version=session.version
            )
            return True
        except ConcurrencyConflict:
            # A turn committed meanwhile: redo it on the session as it now is.
            fresh = backend.sessions.get(session.workspace_id, session.id)
            if fresh is None:
                return False
            session = fresh
    raise ConcurrencyConflict(f"session {session.id} kept changing; run the erasure again")


def _unindex(backend: Backend, workspace_id: str, ids: Sequence[str]) -> int:
    unique = list(dict.fromkeys(ids))
    for lo in range(0, len(unique), _INDEX_CHUNK):
        backend.index.delete(workspace_id, unique[lo : lo + _INDEX_CHUNK])
    return len(unique)


def erase_user(backend: Backend, workspace_id: str, user_id: str) -> ErasureReport:
    """Erase `user_id` from `workspace_id` in every store; see the module docstring."""
    report = ErasureReport(workspace_id=workspace_id, user_id=user_id)
    identities = [i for i in backend.identities.list_identities(workspace_id) if i.user_id == user_id]
    sender_ids = {i.channel_user_id for i in identities} | {user_id}
    sessions = backend.sessions.list_sessions(workspace_id, limit=_ALL)
    owned = {s.id for s in sessions if s.user_id == user_id}

    # Find everything first, so the index goes before the stores (a search never returns a
    # document whose record is gone for good, and a rerun finds what is left).
    summaries = [
        s
        for s in backend.memory.list_summaries(workspace_id, limit=_ALL)
        if s.session_id in owned or s.user_id == user_id
    ]
    subject = normalize_key(user_id)
    triples = []
    after: str | None = None
    while page := backend.memory.list_triples(workspace_id, after=after, limit=_PAGE):
        after = page[-1].id
        triples += [
            t
            for t in page
            if t.user_id == user_id or normalize_key(t.subject) == subject or t.session_id in owned
        ]
    # Tier-1 partitions are per session: every session of the workspace is read, plus sessions
    # known only from Tier 2 and 3 (a session item deleted before its messages).
    session_ids = {s.id for s in sessions} | {s.session_id for s in summaries}
    session_ids |= {t.session_id for t in triples if t.session_id}
    messages: dict[str, list[MemoryRecord]] = {}
    for session_id in sorted(session_ids):
        records = _all_messages(backend, workspace_id, session_id)
        if session_id not in owned:
            records = [r for r in records if _theirs(r, user_id, sender_ids)]
        if records:
            messages[session_id] = records

    report.index_docs_deleted = _unindex(
        backend,
        workspace_id,
        [doc_id for records in messages.values() for r in records for doc_id in record_doc_ids(r.id, r.text)]
        + [doc_id for s in summaries for doc_id in record_doc_ids(s.id, s.text)]
        + [t.id for t in triples],
    )
    RECENT_TAILS.forget(workspace_id)
    for session_id, records in messages.items():
        ids = None if session_id in owned else [r.id for r in records]
        report.messages_deleted += backend.memory.delete_messages(workspace_id, session_id, ids)
    backend.memory.delete_summaries(workspace_id, [s.id for s in summaries])
    report.summaries_deleted = len(summaries)
    for lo in range(0, len(triples), _PAGE):
        backend.memory.delete_triples(workspace_id, [t.id for t in triples[lo : lo + _PAGE]])
    report.triples_deleted = len(triples)

    for session in sessions:
        if session.id in owned:
            report.outbox_entries_deleted += backend.outbox.delete_session(workspace_id, session.id)
            backend.sessions.delete(workspace_id, session.id)
            report.sessions_deleted += 1
        elif _redact_window(backend, session, sender_ids):
            report.windows_redacted += 1

    report.audit_records_anonymised = backend.audit.anonymise(
        workspace_id, user_id=user_id, session_ids=sorted(owned)
    )
    for identity in identities:
        backend.identities.delete(workspace_id, identity.channel, identity.channel_user_id)
    report.identities_deleted = len(identities)
    log.info("user erased", extra={"workspace_id": workspace_id, **report.model_dump(exclude={"user_id"})})
    return report

"""The right to erasure: everything a workspace holds of one person, from every store.

`erase_user(backend, workspace_id, user_id)` finds the person by their Sigil user id, the ids
their identities wrote under before they were linked to it (shared.identity.derived_user_id),
the channel user ids those identities map to (a group's messages carry the platform sender id),
and the display names they went by (their identities', and the sender names on their messages),
and:

- sessions: the sessions they own (`Session.user_id`) are deleted. In sessions others own
  (groups), their messages in the active window become "[erased]" with no sender id, user id or
  sender name (deleting them would break the window's turn structure);
- Tier 1: every message of their sessions; in other sessions, the messages with their user id
  (their own, and the replies that answered them) or sent from one of their channel ids;
- Tier 2: the summaries of their sessions and those carrying their user id, or scoped to them
  alone;
- Tier 3: triples with their user id, about them (subject = one of their ids or names), learnt
  in their sessions or from their messages, or scoped to them alone, whatever the status;
- what is left and still names them is scrubbed, not deleted (it is other people's data): in
  every other message, window, session summary, Tier-2 summary and fact of the workspace, their
  names and ids, and the text of their erased messages where it is quoted, become "[erased]";
  they leave the `users` of every scope and the `user_id` of every summary and fact; and the
  index documents of what changed, and of every message whose neighbour text (metadata
  "context") may have quoted them, are written again from the scrubbed records;
- the index: the documents of all of the deleted messages, summaries and facts (ids are the
  records'), every chunk document of a long message or summary (`record_doc_ids`), and the
  neighbour texts this process remembers for the workspace's next roll-out
  (`RECENT_TAILS.forget`), so none of their words comes back as another record's context;
- the outbox: every web reply of their sessions;
- their files (shared.media, docs/media.md): every file they attached, record and bytes, under
  each of their user ids (MediaStore.delete_user): the data dir locally, the media bucket in
  the cloud;
- the audit log is anonymised, not deleted: records keep the workspace's accounting (time,
  model, tools, tokens, cost, outcome) and lose user, session, event id and error text
  (AuditLog.anonymise);
- identities mapping a channel user to them are deleted, last: an erasure cut short is finished
  by running it again, and that needs them to recognise group messages.

A name or id shorter than MIN_SCRUB_CHARS is not scrubbed from text (it would also hit ordinary
words), and a display name that is an ordinary word ("Will") is scrubbed wherever it stands as a
word: erasure prefers losing a word of someone else's message to keeping a name. What others
said in their own words about them without naming them (a summary's paraphrase of a group's
exchange) is not recognisable, and stays.

Left as they are, by design: the send ledger (platform message ids and text digests, expiring
after 7 days), budget counters (numbers only, keyed by user id, expiring 35 days after their
period), consolidation leases and checkpoints (keyed by session id, which for a direct
conversation holds the channel's chat id; sequence numbers and record ids, never text, and the
ports have no delete: a fact key waiting there for its message to roll out names a deleted fact,
which then keys nothing), the embedding cache (vectors by content hash, no text, shared by every
workspace), and the lanes and events in flight (transient).

Listing and deleting read whole workspace partitions (sessions, summaries, triples, audit):
an admin operation, not a turn's path. Every step is idempotent, so an erasure interrupted by a
failure is completed by running it again. Run it once the person's channel access is blocked:
a message arriving mid-erasure may survive it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from pydantic import BaseModel

from shared.errors import ConcurrencyConflict
from shared.memory.fact_keys import drop_fact_keys
from shared.memory.facts import fact_index_doc
from shared.memory.keys import normalize_key
from shared.memory.paging import all_messages, all_triples
from shared.memory.writer import RECENT_TAILS, MemoryWriter, record_doc_ids, summary_doc
from shared.models import (
    WORKSPACE_WIDE,
    AssistantMessage,
    Identity,
    MemoryRecord,
    MemoryScope,
    Message,
    Session,
    Summary,
    ToolResultMessage,
    Triple,
    UserMessage,
)

if TYPE_CHECKING:
    from shared.backend import Backend

log = logging.getLogger("sigil.memory.erasure")

ERASED_TEXT: Final = "[erased]"
# Names and ids shorter than this are not looked for in text; their erased messages' texts
# shorter than QUOTE_MIN_CHARS neither ("ok" is quoted everywhere without being theirs).
MIN_SCRUB_CHARS: Final = 3
QUOTE_MIN_CHARS: Final = 12
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
    events_deleted: int = 0  # events the bus still held for a deleted session (the local bus)
    audit_records_anonymised: int = 0
    identities_deleted: int = 0
    # Their reminders and scheduled tasks (shared.schedules): each carries their words.
    schedules_cancelled: int = 0
    # The files they attached (shared.media, docs/media.md): their records and bytes.
    media_deleted: int = 0
    # Others' data that named them, rewritten without it.
    messages_scrubbed: int = 0
    summaries_scrubbed: int = 0
    triples_scrubbed: int = 0
    index_docs_rewritten: int = 0


@dataclass
class _Person:
    """Everything that identifies the person, and the rules that recognise and scrub it."""

    user_ids: set[str]
    sender_ids: set[str]
    names: set[str] = field(default_factory=set)
    quotes: set[str] = field(default_factory=set)
    _pattern: re.Pattern[str] | None = None

    @classmethod
    def of(cls, user_id: str, identities: Sequence[Identity]) -> _Person:
        # The ids their identities wrote under before being linked: shared.identity.derived_user_id
        # (memory may not import identity, a sibling).
        derived = {
            i.channel_user_id if i.channel == "web" else f"{i.channel}:{i.channel_user_id}"
            for i in identities
        }
        user_ids = {user_id} | derived
        person = cls(user_ids=user_ids, sender_ids={i.channel_user_id for i in identities} | {user_id})
        person.names |= {i.display_name for i in identities if i.display_name}
        return person

    def wrote(self, message: Message | None) -> bool:
        return isinstance(message, UserMessage) and (
            message.sender_id in self.sender_ids or message.user_id in self.user_ids
        )

    def owns(self, record: MemoryRecord) -> bool:
        return record.user_id in self.user_ids or self.wrote(record.message)

    def learn(self, record: MemoryRecord | None = None, message: Message | None = None) -> None:
        """Note the names they went by and the words they wrote, to find them elsewhere."""
        if record is not None:
            if record.author:
                self.names.add(record.author)
            message = record.message
            theirs = self.wrote(message) or (record.role == "user" and record.user_id in self.user_ids)
            if theirs and len(record.text.strip()) >= QUOTE_MIN_CHARS:
                self.quotes.add(record.text.strip())
        if isinstance(message, UserMessage) and self.wrote(message):
            if message.sender_name:
                self.names.add(message.sender_name)
            if len(message.content.strip()) >= QUOTE_MIN_CHARS:
                self.quotes.add(message.content.strip())
        self._pattern = None

    def keys(self) -> set[str]:
        return {normalize_key(v) for v in self.user_ids | self.names}

    def alone(self, scope: MemoryScope | None) -> bool:
        """A scope that belongs to them and nobody else (their own memory, not a group's)."""
        return (
            scope is not None and bool(scope.users) and set(scope.users) <= self.user_ids and not scope.group
        )

    def scope(self, scope: MemoryScope | None) -> MemoryScope | None:
        if scope is None or self.user_ids.isdisjoint(scope.users):
            return scope
        return scope.model_copy(update={"users": tuple(u for u in scope.users if u not in self.user_ids)})

    def scrub(self, text: str) -> str:
        if not text:
            return text
        # Whole quotes first: a quote holds their name, and would not be found once that is gone.
        for quote in sorted(self.quotes, key=len, reverse=True):
            if quote in text:
                text = text.replace(quote, ERASED_TEXT)
        if self._pattern is None:
            terms = {t for t in self.names | self.user_ids | self.sender_ids if len(t) >= MIN_SCRUB_CHARS}
            alternatives = "|".join(re.escape(t) for t in sorted(terms, key=len, reverse=True))
            self._pattern = re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE) if terms else None
        return self._pattern.sub(ERASED_TEXT, text) if self._pattern is not None else text

    def scrub_opt(self, text: str | None) -> str | None:
        return None if text is None else self.scrub(text)

    def scrub_message(self, message: Message) -> Message:
        if isinstance(message, UserMessage):
            if self.wrote(message):
                return message.model_copy(
                    update={"content": ERASED_TEXT, "sender_id": None, "user_id": None, "sender_name": None}
                )
            return message.model_copy(update={"content": self.scrub(message.content)})
        if isinstance(message, AssistantMessage):
            calls = [c.model_copy(update={"arguments": self.scrub(c.arguments)}) for c in message.tool_calls]
            return message.model_copy(update={"content": self.scrub(message.content), "tool_calls": calls})
        assert isinstance(message, ToolResultMessage)
        return message.model_copy(update={"content": self.scrub(message.content)})

    def scrub_record(self, record: MemoryRecord) -> MemoryRecord:
        author = record.author
        if author is not None and (author in self.names or normalize_key(author) in self.keys()):
            author = None
        return record.model_copy(
            update={
                "text": self.scrub(record.text),
                "message": None if record.message is None else self.scrub_message(record.message),
                "author": author,
                "user_id": None if record.user_id in self.user_ids else record.user_id,
                "scope": self.scope(record.scope),
            }
        )

    def scrub_summary(self, summary: Summary) -> Summary:
        return summary.model_copy(
            update={
                "text": self.scrub(summary.text),
                "user_id": None if summary.user_id in self.user_ids else summary.user_id,
                "scope": self.scope(summary.scope),
            }
        )

    def scrub_triple(self, triple: Triple) -> Triple:
        return triple.model_copy(
            update={
                "subject": self.scrub(triple.subject),
                "predicate": self.scrub(triple.predicate),
                "object": self.scrub(triple.object),
                "user_id": None if triple.user_id in self.user_ids else triple.user_id,
                "scope": self.scope(triple.scope),
            }
        )


def _scrub_session(session: Session, person: _Person) -> Session:
    return session.model_copy(
        update={
            "active_messages": [person.scrub_message(m) for m in session.active_messages],
            "summary": person.scrub(session.summary),
            "active_task": person.scrub_opt(session.active_task),
        }
    )


def _redact_window(backend: Backend, session: Session, person: _Person) -> bool:
    """Erase their messages from another's session, and their names from the rest of it (its
    window, running summary and task); False when it named them nowhere."""
    for _ in range(_SAVE_ATTEMPTS):
        scrubbed = _scrub_session(session, person)
        if scrubbed == session:
            return False
        try:
            backend.sessions.save(scrubbed, expected_version=session.version)
            return True
        except ConcurrencyConflict:
            # A turn committed meanwhile: redo it on the session as it now is.
            fresh = backend.sessions.get(session.workspace_id, session.id)
            if fresh is None:
                return False
            session = fresh
    raise ConcurrencyConflict(f"session {session.id} kept changing; run the erasure again")


def _unindex(backend: Backend, workspace_id: str, ids: Iterable[str]) -> int:
    unique = list(dict.fromkeys(ids))
    for lo in range(0, len(unique), _INDEX_CHUNK):
        backend.index.delete(workspace_id, unique[lo : lo + _INDEX_CHUNK])
    return len(unique)


@dataclass
class _SessionPlan:
    """One session's Tier 1 as it was, and what erasure does to it."""

    records: list[MemoryRecord]
    gone: list[MemoryRecord] = field(default_factory=list)
    rewritten: dict[str, MemoryRecord] = field(default_factory=dict)  # id -> the scrubbed record

    def survivors(self) -> list[MemoryRecord]:
        gone = {r.id for r in self.gone}
        return [self.rewritten.get(r.id, r) for r in self.records if r.id not in gone]

    def to_reindex(self, before: int, after: int) -> list[list[MemoryRecord]]:
        """Runs of surviving records (consecutive among the survivors) whose index documents may
        hold what changed: the changed records, and those whose neighbour text took in a changed
        one (the writer's rule: up to `before`/`after` records away, in the same session, each
        record in between and the changed one of the same user)."""
        changed = {r.id for r in self.gone} | set(self.rewritten)
        near = set(self.rewritten)
        for j, r in enumerate(self.records):
            for step, reach in ((-1, before), (1, after)):
                for k in range(j + step, j + step * (reach + 1), step):
                    if not 0 <= k < len(self.records) or self.records[k].user_id != r.user_id:
                        break
                    if self.records[k].id in changed:
                        near.add(r.id)
        runs: list[list[MemoryRecord]] = []
        current: list[MemoryRecord] = []
        for r in self.survivors():
            if r.id in near:
                current.append(r)
            elif current:
                runs.append(current)
                current = []
        if current:
            runs.append(current)
        return runs


@dataclass
class _Found:
    """What erasure deletes and what it scrubs, found before anything is changed."""

    sessions: list[Session]
    owned: set[str]
    plans: dict[str, _SessionPlan]
    summaries: list[Summary]
    summaries_gone: list[Summary]
    summaries_scrubbed: list[Summary]
    triples_gone: list[Triple]
    triples_scrubbed: list[Triple]


def _find(backend: Backend, workspace_id: str, person: _Person) -> _Found:
    sessions = backend.sessions.list_sessions(workspace_id, limit=_ALL)
    owned = {s.id for s in sessions if s.user_id in person.user_ids}
    for session in sessions:
        for message in session.active_messages:
            person.learn(message=message)
    summaries = backend.memory.list_summaries(workspace_id, scope=WORKSPACE_WIDE, limit=_ALL)
    triples = all_triples(backend.memory, workspace_id)
    # Tier-1 partitions are per session: every session of the workspace is read, plus sessions
    # known only from Tier 2 and 3 (a session item deleted before its messages).
    session_ids = {s.id for s in sessions} | {s.session_id for s in summaries}
    session_ids |= {t.session_id for t in triples if t.session_id}
    plans: dict[str, _SessionPlan] = {}
    for session_id in sorted(session_ids):
        plan = _SessionPlan(all_messages(backend.memory, workspace_id, session_id))
        plan.gone = [r for r in plan.records if session_id in owned or person.owns(r)]
        for r in plan.gone:
            # Only from their own records: a session they own holds others' words too.
            if person.owns(r):
                person.learn(record=r)
        plans[session_id] = plan
    theirs = {r.id for plan in plans.values() for r in plan.gone}
    theirs |= {m.id for s in sessions for m in s.active_messages if person.wrote(m)}

    keys = person.keys()
    summaries_gone = [
        s for s in summaries if s.session_id in owned or s.user_id in person.user_ids or person.alone(s.scope)
    ]
    triples_gone = [
        t
        for t in triples
        if t.user_id in person.user_ids
        or normalize_key(t.subject) in keys
        or t.session_id in owned
        or person.alone(t.scope)
        or not theirs.isdisjoint(t.message_ids)
    ]
    # Everything else that names them, scrubbed (now that every name and quote is known).
    gone_ids = {s.id for s in summaries_gone} | {t.id for t in triples_gone}
    for plan in plans.values():
        gone = {r.id for r in plan.gone}
        for r in plan.records:
            if r.id not in gone and (scrubbed := person.scrub_record(r)) != r:
                plan.rewritten[r.id] = scrubbed
    return _Found(
        sessions=sessions,
        owned=owned,
        plans=plans,
        summaries=summaries,
        summaries_gone=summaries_gone,
        summaries_scrubbed=[
            new for s in summaries if s.id not in gone_ids and (new := person.scrub_summary(s)) != s
        ],
        triples_gone=triples_gone,
        triples_scrubbed=[
            fact for t in triples if t.id not in gone_ids and (fact := person.scrub_triple(t)) != t
        ],
    )


def _unindex_found(backend: Backend, workspace_id: str, found: _Found) -> int:
    """Their documents, and the chunks a rewritten record's shorter text no longer has."""
    stale = [
        doc_id for plan in found.plans.values() for r in plan.gone for doc_id in record_doc_ids(r.id, r.text)
    ]
    stale += [doc_id for s in found.summaries_gone for doc_id in record_doc_ids(s.id, s.text)]
    stale += [t.id for t in found.triples_gone]
    deleted = _unindex(backend, workspace_id, stale)
    shrunk = [
        doc_id
        for plan in found.plans.values()
        for r in plan.records
        if r.id in plan.rewritten
        for doc_id in set(record_doc_ids(r.id, r.text)) - set(record_doc_ids(r.id, plan.rewritten[r.id].text))
    ]
    before = {s.id: s for s in found.summaries}
    shrunk += [
        doc_id
        for s in found.summaries_scrubbed
        for doc_id in set(record_doc_ids(s.id, before[s.id].text)) - set(record_doc_ids(s.id, s.text))
    ]
    _unindex(backend, workspace_id, shrunk)
    return deleted


def _write_memory(backend: Backend, workspace_id: str, found: _Found, report: ErasureReport) -> None:
    for session_id, plan in found.plans.items():
        if plan.gone:
            ids = None if session_id in found.owned else [r.id for r in plan.gone]
            report.messages_deleted += backend.memory.delete_messages(workspace_id, session_id, ids)
        if plan.rewritten:
            # Tier 1 keeps the first write of a record: a scrubbed one replaces it by delete and append.
            backend.memory.delete_messages(workspace_id, session_id, list(plan.rewritten))
            backend.memory.append_messages(workspace_id, list(plan.rewritten.values()))
            report.messages_scrubbed += len(plan.rewritten)
    backend.memory.delete_summaries(workspace_id, [s.id for s in found.summaries_gone])
    report.summaries_deleted = len(found.summaries_gone)
    for summary in found.summaries_scrubbed:
        backend.memory.put_summary(summary)
    report.summaries_scrubbed = len(found.summaries_scrubbed)
    gone = found.triples_gone
    for lo in range(0, len(gone), _PAGE):
        backend.memory.delete_triples(workspace_id, [t.id for t in gone[lo : lo + _PAGE]])
    report.triples_deleted = len(gone)
    if found.triples_scrubbed:
        backend.memory.put_triples(workspace_id, found.triples_scrubbed)
    report.triples_scrubbed = len(found.triples_scrubbed)


def erase_user(backend: Backend, workspace_id: str, user_id: str) -> ErasureReport:
    """Erase `user_id` from `workspace_id` in every store; see the module docstring."""
    report = ErasureReport(workspace_id=workspace_id, user_id=user_id)
    identities = [i for i in backend.identities.list_identities(workspace_id) if i.user_id == user_id]
    person = _Person.of(user_id, identities)
    # Find everything first, so the index goes before the stores (a search never returns a
    # document whose record is gone for good, and a rerun finds what is left).
    found = _find(backend, workspace_id, person)
    report.index_docs_deleted = _unindex_found(backend, workspace_id, found)
    RECENT_TAILS.forget(workspace_id)
    _write_memory(backend, workspace_id, found, report)
    # The index again: what was scrubbed, and the neighbours whose context may have quoted them.
    report.index_docs_rewritten = _reindex(
        backend, workspace_id, found.plans, found.summaries_scrubbed, found.triples_scrubbed
    )
    # The messages keyed with a deleted or scrubbed fact (fact-augmented keys) hold its text too.
    report.index_docs_rewritten += drop_fact_keys(
        backend.index,
        backend.memory,
        backend.embedder,
        workspace_id,
        gone=found.triples_gone,
        replaced=found.triples_scrubbed,
    ).docs

    for session in found.sessions:
        if session.id in found.owned:
            report.outbox_entries_deleted += backend.outbox.delete_session(workspace_id, session.id)
            report.events_deleted += backend.events.forget_session(workspace_id, session.id)
            backend.sessions.delete(workspace_id, session.id)
            report.sessions_deleted += 1
        elif _redact_window(backend, session, person):
            report.windows_redacted += 1

    report.audit_records_anonymised = backend.audit.anonymise(
        workspace_id, user_id=user_id, session_ids=sorted(found.owned)
    )
    for alias in sorted(person.user_ids - {user_id}):
        report.audit_records_anonymised += backend.audit.anonymise(workspace_id, user_id=alias)
    if backend.schedules is not None:
        schedules = backend.schedules
        theirs = [
            s
            for s in schedules.list_schedules(workspace_id)
            if s.user_id in person.user_ids or s.session_id in found.owned
        ]
        report.schedules_cancelled = sum(schedules.cancel(workspace_id, s.id) for s in theirs)
    if backend.media is not None:
        # Under every id they sent files as (a file is its sender's, in any session).
        media = backend.media
        report.media_deleted = sum(media.delete_user(workspace_id, uid) for uid in sorted(person.user_ids))
    for identity in identities:
        backend.identities.delete(workspace_id, identity.channel, identity.channel_user_id)
    report.identities_deleted = len(identities)
    log.info("user erased", extra={"workspace_id": workspace_id, **report.model_dump(exclude={"user_id"})})
    return report


def _reindex(
    backend: Backend,
    workspace_id: str,
    plans: dict[str, _SessionPlan],
    summaries: Sequence[Summary],
    triples: Sequence[Triple],
) -> int:
    writer = MemoryWriter(backend.index, backend.embedder)
    written = 0
    scopes: dict[str, MemoryScope] = {}
    for plan in plans.values():
        survivors = plan.survivors()
        position = {r.id: i for i, r in enumerate(survivors)}
        for run in plan.to_reindex(writer.context_before, writer.context_after):
            lo, hi = position[run[0].id], position[run[-1].id] + 1
            written += writer.write_messages(
                workspace_id,
                run,
                before=survivors[max(0, lo - writer.context_before) : lo],
                after=survivors[hi : hi + writer.context_after],
            ).docs
            scopes |= {r.id: r.scope for r in run if r.scope is not None}
    docs = [summary_doc(s) for s in summaries]
    docs += [fact_index_doc(t).model_copy(update={"scope": t.scope}) for t in triples]
    if docs:
        written += writer.write_docs(workspace_id, docs).docs
        scopes |= {d.id: d.scope for d in docs if d.scope is not None}
    if scopes:
        # The writer copies a record's scope onto its documents; stamped again so every chunk
        # carries the scrubbed one whatever the writer did.
        backend.index.stamp_scopes(workspace_id, scopes)
    return written

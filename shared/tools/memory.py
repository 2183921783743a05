"""The agent's memory tools (spec 000's tiers, spec 003's sanitisation, keys and dedup).

    memory_search(query, k)       Tier 1: rolled-out messages, hybrid BM25 + vectors
    memory_summary(dates, scope)  Tier 2: summaries overlapping a date range
    memory_recall(topic)          Tier 3: facts by subject, by object, and by a fact-tier search
    memory_semantic(query, k)     every tier, by meaning (vectors)
    memory_store(fact)            Tier 3: one fact, normalised, sanitised, deduplicated, indexed

The model decides when to call them; nothing here is put into a prompt on its own (the small
tacit-facts budget is shared.memory.tacit's). The workspace, session and user always come from
the ToolContext, and so does the reach of every read: the turn's RecallScope, built from the
workspace's memory policy (docs/privacy.md), which each store and index applies in its own query.
Under the default policy a person recalls their own conversations and shared facts in a direct
conversation, and the group's conversation and shared facts in a group. The arguments models
forbid unknown fields, so a `workspace_id`, `session_id` or `user_id` the model invents is an
argument error, never a wider scope. A stored fact carries the turn's owner scope.

Every result is text bounded in tokens (MAX_RESULT_TOKENS) that names, per hit, the tier, the
date and the session it came from, and says how the search was answered: "hybrid", "bm25 only:
<why>" or "recent messages: <why>" (shared.memory.search's fallback chain). Bad input (empty,
over 100 KB, control characters in a query) raises BadRequest, which the tool registry turns
into a structured error result.
"""

# Annotations are not postponed here: pydantic makes this module's models at import, and would
# evaluate each field's annotation from its text (shared/models/__init__.py).

import logging
import math
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.errors import BadRequest
from shared.memory.facts import (
    MAX_KEY_CHARS,
    MAX_VALUE_CHARS,
    fact_id,
    fact_index_doc,
    fact_text,
    may_join,
)
from shared.memory.keys import normalize_key
from shared.memory.people import people_of
from shared.memory.search import MAX_QUERY_BYTES, MemoryHit, MemorySearch, SearchOutcome, validate_query
from shared.models import FactCategory, Summary, Triple
from shared.safety.injection import scan
from shared.safety.redact import redact
from shared.tools.core import Tool, ToolContext, tool
from shared.tools.registry import MAX_RESULT_BYTES

log = logging.getLogger("sigil.memory.tools")

# A result's share of the context: several memory calls in one turn still leave room to answer.
MAX_RESULT_TOKENS = 1500
# One long message or summary may not take the whole budget from the hits after it.
MAX_ENTRY_TOKENS = 400
# The registry cuts a result at MAX_RESULT_BYTES; staying under it keeps the "cut" note ours.
_MAX_RESULT_BYTES = MAX_RESULT_BYTES - 256
# Spec 003's content limits for a stored memory: keys (subject, predicate) and the value (object).
# Triples read per subject for dedup and for resolving fact hits: far more than one subject has.
_SUBJECT_SCAN = 200
_MAX_RESOLVED_SUBJECTS = 10
_MAX_PROVENANCE_IDS = 20
# Facts the topic search adds after the key lookups: k-NN always answers its k nearest, related or
# not, so few, each marked "found by search".
RECALL_SEARCH_K = 5
MAX_SUMMARIES = 50  # read per call, oldest first

# Control characters: rejected in queries (shared.memory.search), stripped from stored facts.
_LINE_BREAKS = re.compile(r"[\t\n\r\x0b\x0c\x85\u2028\u2029]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# What a model passes as the topic when it means the person it is talking to.
_SELF_TOPICS = frozenset({"me", "my", "myself", "i", "user", "the user", "the-user", "you"})


class UnsafeFact(BadRequest):
    """A fact that reads like an instruction to the model: storing it would replay the injection."""

    code = "injection_detected"


# ---------------------------------------------------------------- arguments


class _Args(BaseModel):
    # Unknown fields are errors: a model-supplied workspace_id is refused, never ignored.
    model_config = ConfigDict(extra="forbid")


class MemorySearchArgs(_Args):
    query: str = Field(description="Words to look for in earlier messages (names, places, topics).")
    k: int = Field(default=10, ge=1, le=20, description="How many messages to return (at most 20).")


class MemorySummaryArgs(_Args):
    start_date: str | None = Field(
        default=None, description="ISO date or date-time, e.g. '2025-01-31'; omitted: no lower bound."
    )
    end_date: str | None = Field(
        default=None, description="ISO date or date-time, inclusive; omitted: no upper bound."
    )
    scope: Literal["workspace", "session"] = Field(
        default="workspace",
        description="'session': this conversation only; 'workspace': every conversation you may recall.",
    )


class MemoryRecallArgs(_Args):
    topic: str = Field(
        description="A person, thing or subject to recall facts about, e.g. 'Ada', 'favourite drink'; "
        "'me' means the user you are talking to."
    )


class MemorySemanticArgs(_Args):
    query: str = Field(description="What you are looking for, in your own words.")
    k: int = Field(default=5, ge=1, le=20, description="How many memories to return (at most 20).")


class MemoryStoreArgs(_Args):
    subject: str | None = Field(
        default=None, description="Who or what the fact is about; omitted: the user you are talking to."
    )
    predicate: str = Field(
        description="The specific attribute, e.g. 'favourite drink', 'home city', 'works at'. A subject "
        "has one value per predicate: storing a new value replaces the old one."
    )
    object: str = Field(description="The value, e.g. 'green tea', 'Lyon'.")
    category: FactCategory = Field(
        default="fact",
        description="preference, entity, decision, style (how the user likes you to write), artifact, "
        "or fact.",
    )


# ---------------------------------------------------------------- the tools


@tool(untrusted_output=True)
def memory_search(args: MemorySearchArgs, ctx: ToolContext) -> str:
    """Search earlier messages (older ones are not in your context) of the conversations you may
    recall here: this one and, by the workspace's memory policy, the user's other conversations
    or the group's. Use it when the user refers to something said before.

    Returns the best matching messages, each with its date and conversation."""
    outcome = _searcher(ctx).search(
        ctx.workspace_id,
        args.query,
        scope=ctx.scope,
        k=args.k,
        tiers=["message"],
        recent_from=ctx.session_id,
        now=ctx.now(),  # "last week", "in May": the turn's time, not the model's guess of it
    )
    entries = [_hit_entry(h, outcome) for h in outcome.hits]
    return _render(f"memory_search: {len(entries)} messages", _mode_line(outcome), entries, "messages")


@tool(untrusted_output=True)
def memory_summary(args: MemorySummaryArgs, ctx: ToolContext) -> str:
    """Read summaries of earlier conversation, optionally between two dates. Use it for "what did we
    talk about last week" questions."""
    start = _parse_date(args.start_date, "start_date", end=False)
    end = _parse_date(args.end_date, "end_date", end=True)
    if start is not None and end is not None and start > end:
        raise BadRequest("start_date is after end_date")
    session = ctx.session_id if args.scope == "session" else None
    summaries = ctx.backend.memory.list_summaries(
        ctx.workspace_id, scope=ctx.scope, session_id=session, start=start, end=end, limit=MAX_SUMMARIES
    )
    entries = [_summary_entry(s) for s in summaries]
    span = f"from {start:%Y-%m-%d} " if start else ""
    span += f"to {end:%Y-%m-%d}" if end else ""
    where = "this conversation" if session else "the conversations you may recall"
    header = f"memory_summary: {len(entries)} summaries of {where} {span}".rstrip()
    if len(summaries) == MAX_SUMMARIES:
        header += f" (the oldest {MAX_SUMMARIES}; a later start_date finds the rest)"
    return _render(header, None, entries, "summaries")


@tool(untrusted_output=True)
def memory_recall(args: MemoryRecallArgs, ctx: ToolContext) -> str:
    """Recall stored facts about a person, thing or topic (knowledge learnt in earlier
    conversations), with where each was learnt."""
    topic = _checked(args.topic, "topic")
    memory, ws = ctx.backend.memory, ctx.workspace_id
    # "me": the user under every id they wrote as (their linked identities' older ids, when the
    # turn's scope names them), so facts learnt before a `sigil identity link` are theirs too.
    mine = [ctx.user_id, *ctx.scope.users] if topic.casefold() in _SELF_TOPICS else []
    subjects = list(dict.fromkeys([topic, *mine]))
    found: dict[str, tuple[Triple, str]] = {}  # id -> (fact, how it was found), in order found
    for subject in subjects:
        for t in memory.triples_by_subject(ws, subject, scope=ctx.scope):
            found.setdefault(t.id, (t, "subject"))
    for t in memory.triples_by_object(ws, topic, scope=ctx.scope):
        found.setdefault(t.id, (t, "object"))
    direct = sorted(
        ((t, how) for t, how in found.values() if t.status == "active"),
        key=lambda pair: (-pair[0].confidence, -pair[0].updated_at.timestamp()),
    )
    outcome = _searcher(ctx).search(ws, topic, scope=ctx.scope, k=RECALL_SEARCH_K, tiers=["fact"])
    searched = [(t, "search") for t in _active_facts(ctx, outcome.hits) if t.id not in found]
    facts = [*direct, *searched]
    entries = [_fact_entry(t, how, ctx.user_id) for t, how in facts]
    if outcome.mode == "recent":  # no recent-messages stand-in for facts: the key lookups are it
        mode = (
            f"fact search unavailable ({(outcome.degraded or '').split(';')[0]}): by subject and object only"
        )
    else:
        mode = _mode_line(outcome, prefix="fact search")
    text, shown = _render_counted(f"memory_recall: {len(entries)} facts", mode, entries, "facts")
    _touch(ctx, [t for t, _ in facts[:shown]])
    return text


@tool(untrusted_output=True)
def memory_semantic(args: MemorySemanticArgs, ctx: ToolContext) -> str:
    """Search the memory you may recall here (messages, summaries, facts) by meaning rather than
    exact words. Use it when memory_search finds nothing or the wording may differ."""
    outcome = _searcher(ctx).search(
        ctx.workspace_id,
        args.query,
        scope=ctx.scope,
        k=args.k,
        mode="vector",
        recent_from=ctx.session_id,
        now=ctx.now(),
    )
    facts = [h for h in outcome.hits if h.tier == "fact"]
    active = {t.id for t in _active_facts(ctx, facts)}
    hits = [h for h in outcome.hits if h.tier != "fact" or h.id in active]
    entries = [_hit_entry(h, outcome) for h in hits]
    return _render(f"memory_semantic: {len(entries)} memories", _mode_line(outcome), entries, "memories")


@tool(untrusted_output=True)
def memory_store(args: MemoryStoreArgs, ctx: ToolContext) -> str:
    """Remember a fact for later conversations, as subject / predicate / object (e.g. the user /
    favourite drink / green tea).

    Store what the user asks you to remember or what will matter later, not what the known facts
    already say. A new value for the same subject and predicate replaces the old one."""
    pii = _pii(ctx)
    # No subject, or one that names the person talking ("me", "user"): the user's Sigil id, which
    # the tacit facts and memory_recall("me") look up.
    named = (args.subject or "").strip()
    subject = _fact_part(
        ctx.user_id if not named or named.casefold() in _SELF_TOPICS else named, "subject", MAX_KEY_CHARS, pii
    )
    predicate = _fact_part(args.predicate, "predicate", MAX_KEY_CHARS, pii)
    obj = _fact_part(args.object, "object", MAX_VALUE_CHARS, pii)
    found = scan(f"{subject}\n{predicate}\n{obj}")
    if found.flagged:
        raise UnsafeFact(
            "This fact reads like an instruction to an assistant "
            f"(injection rules: {', '.join(found.rules)}), so it was not stored. "
            "Store plain statements about the user or the world."
        )
    predicate = normalize_key(predicate)  # the key, stored as spec 003 normalises it
    outcome, fact = _upsert_fact(ctx, subject, predicate, obj, args.category)
    searchable = _index_fact(ctx, fact)
    line = f"{_subject_label(fact.subject, ctx.user_id)} {fact.predicate} {fact.object}"
    note = "" if searchable else " It is stored but not yet searchable (the memory index is unavailable)."
    where = f"fact {fact.id} · {fact.category} · observed {fact.reinforced_count} times"
    return f"{outcome}: {line} [{where}].{note}"


MEMORY_TOOLS: tuple[Tool[Any], ...] = (
    memory_search,
    memory_summary,
    memory_recall,
    memory_semantic,
    memory_store,
)


# ---------------------------------------------------------------- the Tier-3 write path


def _upsert_fact(
    ctx: ToolContext, subject: str, predicate: str, obj: str, category: FactCategory
) -> tuple[str, Triple]:
    """Dedup (spec 003), then one put: (what happened, the fact as stored).

    Only the turn's owner's facts are candidates (shared.memory.facts.may_join; a fact from before
    scopes counts when it is the user's own in this session, and takes the owner scope): a fact
    someone else stated is theirs, never updated by this user, and the new fact's id includes its
    owner, so it does not overwrite theirs either."""
    memory, ws, now, owner = ctx.backend.memory, ctx.workspace_id, ctx.now(), ctx.owner
    # The turn's user message (shared.agent.turn names it "<turn>.u"): provenance, and what makes a
    # retried turn's second store of a style observation a no-op rather than a second reinforcement.
    marker = f"{ctx.turn_id}.u"
    # Active facts only (the lookups return no others): a merged or pruned fact stated again is
    # learnt again, under the same deterministic id when the tool stored it the first time.
    same_key = [
        t
        for t in memory.triples_by_subject(ws, subject, scope=ctx.scope, limit=_SUBJECT_SCAN)
        if normalize_key(t.predicate) == predicate
        and t.status == "active"
        and may_join(t, owner, user_id=ctx.user_id, session_id=ctx.session_id)
    ]
    exact = next((t for t in same_key if normalize_key(t.object) == normalize_key(obj)), None)
    current = exact or next(iter(same_key), None)  # newest first
    if current is None:
        fact = Triple(
            id=fact_id(ws, subject, predicate, obj, owner),
            workspace_id=ws,
            subject=subject,
            predicate=predicate,
            object=obj,
            session_id=ctx.session_id,
            message_ids=[marker],
            created_at=now,
            updated_at=now,
            user_id=ctx.user_id,
            scope=owner,
            category=category,
            source="tool",
        )
        fact = fact.model_copy(update=_embedding(ctx, fact))
        memory.put_triple(fact)
        return "Stored", fact

    again = marker in current.message_ids
    reinforce = category == "style" and not again
    changed = current is not exact
    update: dict[str, object] = {
        "confidence": 1.0,
        "relevance": 1.0,
        "updated_at": now,
        "session_id": ctx.session_id,
        "message_ids": [*(m for m in current.message_ids if m != marker), marker][-_MAX_PROVENANCE_IDS:],
        "reinforced_count": current.reinforced_count + (1 if reinforce else 0),
        # The owner's (a fact from before scopes takes it; the same person's from another of
        # their conversations moves to this one, which the same people recall).
        "scope": owner,
    }
    if changed:
        # A new value for the same key: the preference changed (style: the newest wording).
        update |= {"object": obj, "category": category, "source": "tool"}
    fact = current.model_copy(update=update)
    if changed:
        fact = fact.model_copy(update=_embedding(ctx, fact))
    memory.put_triple(fact)
    if changed:
        return f"Updated (was: {current.object})", fact
    if reinforce:
        return "Reinforced", fact
    return "Already known (refreshed)", fact


def _embedding(ctx: ToolContext, fact: Triple) -> dict[str, object]:
    embedder = ctx.backend.embedder
    if embedder is None:
        return {"embedding": None, "embedding_model": None}
    try:
        (vector,) = embedder.embed([fact_text(fact)])
    except Exception as exc:  # noqa: BLE001 -- a fact without a vector is still found by BM25 and key
        log.warning(
            "fact not embedded", extra={"workspace_id": fact.workspace_id, "error_type": type(exc).__name__}
        )
        return {"embedding": None, "embedding_model": None}
    return {"embedding": vector, "embedding_model": embedder.model_id}


def _index_fact(ctx: ToolContext, fact: Triple) -> bool:
    """Upsert the fact's index document; False (logged) when the index refused it."""
    try:
        ctx.backend.index.upsert(ctx.workspace_id, [fact_index_doc(fact, fact.embedding)])
    except Exception as exc:  # noqa: BLE001 -- the fact is stored; recall by key still finds it
        log.warning(
            "fact not indexed", extra={"workspace_id": ctx.workspace_id, "error_type": type(exc).__name__}
        )
        return False
    return True


def _fact_part(value: str, what: str, limit: int, pii: bool) -> str:
    """Spec 003's sanitisation: control characters stripped (line breaks become spaces), secrets
    redacted (a fact is stored text), then the length limit; BadRequest when nothing is left."""
    if len(value.encode("utf-8", errors="surrogatepass")) > MAX_QUERY_BYTES:
        raise BadRequest(f"the {what} is longer than {MAX_QUERY_BYTES // 1024} KB")
    cleaned = _CONTROL.sub("", _LINE_BREAKS.sub(" ", value)).strip()
    cleaned = redact(cleaned, pii=pii).text
    if not cleaned or not normalize_key(cleaned):
        raise BadRequest(f"the {what} is empty")
    if len(cleaned) > limit:
        raise BadRequest(f"the {what} has {len(cleaned)} characters; at most {limit} are stored")
    return cleaned


def _pii(ctx: ToolContext) -> bool:
    config = ctx.backend.workspaces.get(ctx.workspace_id)
    return bool(config and config.pii_redaction)


# ---------------------------------------------------------------- reading facts


def _active_facts(ctx: ToolContext, hits: Sequence[MemoryHit]) -> list[Triple]:
    """The active triples behind fact-tier hits, in hit order.

    The index may lag the store (a fact merged or pruned by maintenance), so each hit is checked
    against the store by its subject (metadata "subject", see fact_index_doc); a hit that can't
    be checked is left out rather than recalled unverified.
    """
    subjects = list(
        dict.fromkeys(h.metadata["subject"] for h in hits if h.tier == "fact" and "subject" in h.metadata)
    )
    stored: dict[str, Triple] = {}
    for subject in subjects[:_MAX_RESOLVED_SUBJECTS]:
        for t in ctx.backend.memory.triples_by_subject(
            ctx.workspace_id, subject, scope=ctx.scope, limit=_SUBJECT_SCAN
        ):
            stored[t.id] = t
    return [stored[h.id] for h in hits if h.id in stored and stored[h.id].status == "active"]


def _touch(ctx: ToolContext, facts: Iterable[Triple]) -> None:
    """Count a recall (maintenance ranks by use); best effort, one conditional put per fact. The
    put applies only to the triple as read: one that maintenance merged or pruned meanwhile is not
    brought back to life by a stale copy, and loses this count instead."""
    now = ctx.now()
    for t in facts:
        try:
            ctx.backend.memory.replace_triple(
                t, t.model_copy(update={"access_count": t.access_count + 1, "last_accessed_at": now})
            )
        except Exception as exc:  # noqa: BLE001 -- a missed count must not cost the model its answer
            log.warning(
                "fact access not counted",
                extra={"workspace_id": ctx.workspace_id, "error_type": type(exc).__name__},
            )


# ---------------------------------------------------------------- search plumbing


def _searcher(ctx: ToolContext) -> MemorySearch:
    return MemorySearch(
        ctx.backend.index, ctx.backend.memory, ctx.backend.embedder, people=people_of(ctx.backend.identities)
    )


def _mode_line(outcome: SearchOutcome, *, prefix: str = "search") -> str:
    line = _answered_by(outcome, prefix)
    # The window a time in the query resolved to: the model sees what "last week" was taken as.
    # A "when did ..." question has none: every hit's date is its answer.
    if outcome.time is None or outcome.time.mode == "when":
        return line
    return f"{line}; time: {outcome.time.describe()}"


def _answered_by(outcome: SearchOutcome, prefix: str) -> str:
    if outcome.mode == "recent":
        return f"{prefix}: recent messages of this conversation: {outcome.degraded}"
    if outcome.mode == "bm25" and outcome.degraded:
        return f"{prefix}: bm25 only: {outcome.degraded}"
    described = {"hybrid": "hybrid (BM25 + vectors)", "bm25": "bm25", "vector": "vector"}
    return f"{prefix}: {described[outcome.mode]}"


def _checked(value: str, what: str) -> str:
    """validate_query's rules (empty, over 100 KB, control characters), named for the argument."""
    try:
        return validate_query(value)
    except BadRequest as exc:
        raise BadRequest(exc.message.replace("the search query", f"the {what}")) from None


def _parse_date(value: str | None, what: str, *, end: bool) -> datetime | None:
    """An ISO date or date-time, in UTC when it names no zone; a bare end date includes its day."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            return datetime.combine(day, time.max if end else time.min, tzinfo=UTC)
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadRequest(f"{what} {text[:40]!r} is not an ISO date such as 2025-01-31") from None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


# ---------------------------------------------------------------- rendering


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def _clip(text: str, tokens: int = MAX_ENTRY_TOKENS) -> str:
    flat = " ".join(text.split())
    room = tokens * 4
    return flat if len(flat) <= room else flat[: room - 2].rstrip() + " …"


def _when(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _hit_entry(h: MemoryHit, outcome: SearchOutcome) -> str:
    where = [h.tier, _when(h.created_at), f"session {h.session_id or '-'}"]
    if h.tier == "message" and "role" in h.metadata:
        where.append(h.metadata["role"])
    if outcome.mode != "recent":  # recent messages are not ranked: a score would mislead
        where.append(f"score {h.score:.2f}")
    return f"[{' · '.join(where)}] {_clip(h.text)}"


def _summary_entry(s: Summary) -> str:
    where = [
        f"summary ({s.kind})",
        f"{_when(s.start_at)} to {_when(s.end_at)}",
        f"session {s.session_id}",
        f"messages {s.first_seq} to {s.last_seq}",
    ]
    return f"[{' · '.join(where)}] {_clip(s.text)}"


def _subject_label(subject: str, user_id: str) -> str:
    return f"{subject} (the user)" if normalize_key(subject) == normalize_key(user_id) else subject


def _fact_entry(t: Triple, how: str, user_id: str) -> str:
    where = [
        f"fact · {t.category}",
        f"stored {_when(t.updated_at)}",
        f"session {t.session_id or '-'}",
        f"confidence {t.confidence:.2f}",
    ]
    if t.reinforced_count > 1:
        where.append(f"observed {t.reinforced_count} times")
    where.append(f"found by {how}")
    return f"[{' · '.join(where)}] {_clip(f'{_subject_label(t.subject, user_id)} {t.predicate} {t.object}')}"


def _render(header: str, mode: str | None, entries: Sequence[str], noun: str) -> str:
    return _render_counted(header, mode, entries, noun)[0]


def _render_counted(header: str, mode: str | None, entries: Sequence[str], noun: str) -> tuple[str, int]:
    """(text, how many entries it shows): entries in order while they fit the token budget, and a
    note saying how many were cut."""
    total = len(entries)

    def cut_note(cut: int) -> list[str]:
        if not cut:
            return []
        return [
            f"[{cut} of {total} {noun} cut to stay within {MAX_RESULT_TOKENS} tokens; narrow the question]"
        ]

    lines = [f"{header} ({mode})" if mode else header]
    if not entries:
        lines.append(f"No {noun} found.")
    shown = 0
    for i, entry in enumerate(entries, 1):
        numbered = f"{i}. {entry}"
        # Room is kept for the note the next entry would need, so the note always fits.
        if not _fits("\n".join([*lines, numbered, *cut_note(total - i)])):
            break
        lines.append(numbered)
        shown = i
    return "\n".join([*lines, *cut_note(total - shown)]), shown


def _fits(text: str) -> bool:
    return estimate_tokens(text) <= MAX_RESULT_TOKENS and len(text.encode()) <= _MAX_RESULT_BYTES


__all__ = [
    "MAX_RESULT_TOKENS",
    "MEMORY_TOOLS",
    "MemoryRecallArgs",
    "MemorySearchArgs",
    "MemorySemanticArgs",
    "MemoryStoreArgs",
    "MemorySummaryArgs",
    "UnsafeFact",
    "fact_id",
    "fact_index_doc",
    "fact_text",
    "memory_recall",
    "memory_search",
    "memory_semantic",
    "memory_store",
    "memory_summary",
]

"""LoCoMo retrieval benchmark through Sigil's own memory path. Prints markdown tables.

Protocol: ../shared/bench/locomo/README.md. Each turn of a conversation is one Tier-1 memory
record, "[<session date_time>] <speaker>: <text>" (+ " [shares <caption>]"), id = its dia_id, its
author the speaker (as a channel's sender name becomes a record's author), in
the conversation's own workspace, one Sigil session per LoCoMo session. The two speakers share
one group conversation: each record is scoped to it (MemoryScope(conversation, its speaker,
group=True)) and every question is asked with the group's RecallScope under the default
(personal) policy, so the index's scope filter runs on every search. Records are written as
the turn writes them: two at a time (a turn's exchange rolling out of the window), through
shared.memory.writer.index_rolled_out (MemoryWriter: context, vectors, chunking; the context
before a batch from RecentTails, after it from the messages still in the window), into a fresh
embedded index (SqliteMemoryIndex in a temp dir) with the offline MiniLM embedder,
and every question is asked, raw, through shared.memory.search.MemorySearch over its
conversation's workspace: BM25 only, vector only, and hybrid with both fusion methods.

Metrics per category: recall@1/5/10/20 (share of a question's evidence turns in the top k),
full-hit@10 (all of them), MRR (first evidence turn). Headline: recall@10 over categories 1-4;
category 5 (adversarial) apart.

Embeddings are cached by content hash under .benchmarks/ (gitignored): the first run embeds ~4,000
texts (minutes on a shared two-core machine), later runs none. The LoCoMo data is CC BY-NC and is
only read, never copied: nothing derived from it is written outside the temp dir and that cache
(which holds vectors keyed by hashes, no text).

    .venv/bin/python bench/locomo.py [path/to/locomo.json] [--fusion minmax rrf] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the bench runs from a plain clone

from bench.embedding_cache import FileEmbeddingCache  # noqa: E402
from shared.adapters.embedded import Database, SqliteMemoryIndex, SqliteMemoryStore  # noqa: E402
from shared.adapters.embedded.identities import SqliteIdentityStore  # noqa: E402
from shared.adapters.embedded.index import DEFAULT_CONTEXT_WEIGHT  # noqa: E402
from shared.channels.inbound import conversation_key  # noqa: E402
from shared.memory.embeddings.cache import CachedEmbedder  # noqa: E402
from shared.memory.embeddings.minilm import PINNED_WEIGHTS_SHA256, LocalMiniLM  # noqa: E402
from shared.memory.fact_keys import attach_fact_keys, fact_key  # noqa: E402
from shared.memory.facts import fact_id, fact_index_doc  # noqa: E402
from shared.memory.fusion import FusionMethod  # noqa: E402
from shared.memory.people import WorkspacePeople  # noqa: E402
from shared.memory.scope import owner_scope, recall_scope  # noqa: E402
from shared.memory.search import DEFAULT_MIN_SCORE, STOP_WORDS, MemorySearch  # noqa: E402
from shared.memory.second_step import NEIGHBOUR_WEIGHT  # noqa: E402
from shared.memory.writer import MemoryWriter, RecentTails, index_rolled_out, summary_doc  # noqa: E402
from shared.models import Identity, MemoryRecord, RecallScope, Summary, Triple  # noqa: E402
from shared.ports import Embedder  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "bench" / "locomo" / "locomo-dev.json"
KS = (1, 5, 10, 20)
EXCHANGE = 2  # messages a turn rolls out of a full window: the user's and the reply
WINDOW = 20  # WorkspaceConfig.active_window's default: what is still in the window after a batch
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
HEADLINE = (1, 2, 3, 4)

SearchKind = Literal["bm25", "vector", "hybrid"]


# ---------------------------------------------------------------- data


@dataclass
class Question:
    text: str
    evidence: list[str]
    category: int


@dataclass
class Conversation:
    sample_id: str
    workspace_id: str
    conversation: str  # the group conversation both speakers share (MemoryScope.conversation)
    sessions: list[list[MemoryRecord]]
    questions: list[Question]
    # LoCoMo's own annotations, replayed as what the product's models would return (never as
    # questions or answers): per session, the observations (speaker, text, the turns it cites) as
    # the extraction model's facts, and the session summary as the consolidation model's.
    observations: list[list[tuple[str, str, list[str]]]] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)
    dropped_evidence: int = 0
    skipped_questions: int = 0


_EVIDENCE_SPLIT = re.compile(r"[;,\s]+")
_EVIDENCE_ID = re.compile(r"D:?(\d+):(\d+)")
_DATE = re.compile(r"(\d{1,2}):(\d{2})\s*(am|pm)\s+on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})", re.IGNORECASE)


def normalise_evidence(raw: str) -> list[str]:
    """Protocol step 2: split on ; , and whitespace; "D:11:26" -> "D11:26", "D30:05" -> "D30:5"."""
    out = []
    for part in _EVIDENCE_SPLIT.split(raw):
        m = _EVIDENCE_ID.fullmatch(part)
        if m:
            out.append(f"D{int(m.group(1))}:{int(m.group(2))}")
        elif part:
            out.append(part)  # kept as is: it will match no turn and be counted as dropped
    return out


def parse_date(text: str) -> datetime:
    """ "1:56 pm on 8 May, 2023" as a UTC datetime (the records' created_at)."""
    m = _DATE.search(text)
    if not m:
        raise ValueError(f"unrecognised session date {text!r}")
    hour, minute, half, day, month, year = m.groups()
    h = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
    parsed = datetime.strptime(f"{day} {month} {year}", "%d %B %Y")
    return parsed.replace(hour=h, minute=int(minute), tzinfo=UTC)


def load(path: Path) -> list[Conversation]:
    data = json.loads(path.read_text(encoding="utf-8"))
    conversations = []
    for sample in data:
        sample_id = str(sample["sample_id"])
        workspace_id = "locomo-" + re.sub(r"[^A-Za-z0-9._-]", "-", sample_id)
        # One group conversation for both speakers, as a channel's group chat would be.
        conversation = conversation_key("web", workspace_id)
        conv = sample["conversation"]
        sessions: list[list[MemoryRecord]] = []
        seq = 0
        n = 1
        while f"session_{n}" in conv:
            date_text = str(conv.get(f"session_{n}_date_time", ""))
            created = parse_date(date_text)
            records = []
            for turn in conv[f"session_{n}"]:
                text = f"[{date_text}] {turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    text += f" [shares {turn['blip_caption']}]"
                records.append(
                    MemoryRecord(
                        id=str(turn["dia_id"]),
                        workspace_id=workspace_id,
                        session_id=f"session-{n}",
                        role="user",
                        text=text,
                        seq=seq,
                        created_at=created,
                        # Who said it, as a channel's sender name reaches the turn's records.
                        author=str(turn["speaker"]),
                        # Whose it is: the speaker's (their identity's user id), in the group.
                        scope=owner_scope(conversation, [str(turn["speaker"]).casefold()], group=True),
                    )
                )
                seq += 1
            sessions.append(records)
            n += 1
        turn_ids = {r.id for s in sessions for r in s}
        c = Conversation(sample_id, workspace_id, conversation, sessions, [])
        observed = sample.get("observation") or {}
        summarised = sample.get("session_summary") or {}
        for n in range(1, len(sessions) + 1):
            notes: list[tuple[str, str, list[str]]] = []
            for speaker, items in (observed.get(f"session_{n}_observation") or {}).items():
                for item in items:
                    text, cited = str(item[0]), item[1] if len(item) > 1 else []
                    raw = cited if isinstance(cited, list) else [cited]
                    ids = [e for r in raw for e in normalise_evidence(str(r)) if e in turn_ids]
                    if text.strip() and ids:
                        notes.append((str(speaker), text, list(dict.fromkeys(ids))))
            c.observations.append(notes)
            c.summaries.append(str(summarised.get(f"session_{n}_summary") or ""))
        for qa in sample["qa"]:
            ids = [e for raw in qa.get("evidence", []) for e in normalise_evidence(str(raw))]
            kept = list(dict.fromkeys(e for e in ids if e in turn_ids))
            c.dropped_evidence += len([e for e in ids if e not in turn_ids])
            if not kept:
                c.skipped_questions += 1
                continue
            c.questions.append(Question(str(qa["question"]), kept, int(qa["category"])))
        conversations.append(c)
    return conversations


# ---------------------------------------------------------------- metrics


@dataclass
class Scores:
    recall: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    full10: list[float] = field(default_factory=list)
    rr: list[float] = field(default_factory=list)

    def add(self, ranked: Sequence[str], evidence: Sequence[str]) -> None:
        for k in KS:
            top = set(ranked[:k])
            self.recall[k].append(sum(e in top for e in evidence) / len(evidence))
        self.full10.append(float(all(e in set(ranked[:10]) for e in evidence)))
        wanted = set(evidence)
        self.rr.append(next((1.0 / (i + 1) for i, r in enumerate(ranked) if r in wanted), 0.0))

    def merge(self, other: Scores) -> None:
        for k in KS:
            self.recall[k].extend(other.recall[k])
        self.full10.extend(other.full10)
        self.rr.extend(other.rr)


def pct(values: Sequence[float]) -> str:
    return f"{100 * statistics.fmean(values):.1f}" if values else "-"


def pctl(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


# ---------------------------------------------------------------- run


@dataclass(frozen=True)
class Variant:
    label: str
    mode: SearchKind
    fusion: FusionMethod


def variants(fusions: Sequence[FusionMethod]) -> list[Variant]:
    out = [Variant("bm25", "bm25", "minmax"), Variant("vector", "vector", "minmax")]
    out += [Variant(f"hybrid ({f})", "hybrid", f) for f in fusions]
    return out


@dataclass(frozen=True)
class Setup:
    """Which retrieval mechanisms a build and its searches use (each switchable for ablation)."""

    label: str = "defaults"
    # Kept (gains on at least four of the five conversations, alone and added to the others):
    facts: bool = True  # fact-augmented keys: observations replayed as extracted facts
    # Measured and not kept (fewer than four of five): off by default, on for the ablation rows.
    neighbours: bool = False  # a message gains a share of the score of the candidates beside it
    summaries: bool = False  # session summaries as search units pointing to their messages
    fact_units: bool = False  # facts as search units pointing to the messages they were read from
    feedback: bool = False  # a second search seeded by the first's best hits (pseudo-relevance feedback)
    writer: tuple[tuple[str, Any], ...] = ()  # MemoryWriter settings
    index: tuple[tuple[str, Any], ...] = ()  # SqliteMemoryIndex settings
    search: tuple[tuple[str, Any], ...] = ()  # MemorySearch settings

    def search_kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"summary_weight": SUMMARY_WEIGHT if self.summaries else 0.0}
        out.update(SUMMARY_SEARCH if self.summaries else {})
        out["fact_weight"] = FACT_WEIGHT if self.fact_units else 0.0
        out.update(FACT_SEARCH if self.fact_units else {})
        out.update(FEEDBACK_SEARCH if self.feedback else {})
        out["neighbour_weight"] = NEIGHBOUR_WEIGHT if self.neighbours else 0.0
        out.update(dict(self.search))
        return out


# The kept mechanisms' settings (docs/memory.md, "LoCoMo retrieval").
SUMMARY_WEIGHT = 0.3
FACT_WEIGHT = 0.3
SUMMARY_SEARCH: dict[str, Any] = {"summary_top": 3, "summary_bring_in": False}
FACT_SEARCH: dict[str, Any] = {"fact_top": 10}
# shared.memory.second_step: measured, not kept (docs/memory.md).
# (NEIGHBOUR_WEIGHT: the share a neighbour lends when --neighbours is on.)
FEEDBACK_SEARCH: dict[str, Any] = {
    "feedback_weight": 0.3,
    "feedback_docs": 3,
    "feedback_terms": 4,
    "feedback_beta": 0.5,
}


@dataclass
class Built:
    index: SqliteMemoryIndex
    memory: SqliteMemoryStore
    people: WorkspacePeople
    dbs: tuple[Database, Database]
    seconds: float = 0.0
    records: int = 0
    docs: int = 0

    def close(self) -> None:
        for db in self.dbs:
            db.close()


def build(tmp: Path, conversations: list[Conversation], embedder: Embedder, setup: Setup) -> Built:
    """Every turn written as the turn writes it: an exchange at a time, context from the tails.
    Then, per session, what the product's models would add: the extraction model's facts through
    attach_fact_keys, the consolidation model's summary as a Tier-2 summary and its document."""
    tmp.mkdir(parents=True, exist_ok=True)
    dbs = (Database(tmp / "index.db", load_vec=True), Database(tmp / "sigil.db"))
    index, memory, identities = (
        SqliteMemoryIndex(dbs[0], **dict(setup.index)),
        SqliteMemoryStore(dbs[1]),
        SqliteIdentityStore(dbs[1]),
    )
    writer = MemoryWriter(index, embedder, **dict(setup.writer))
    tails = RecentTails()
    built = Built(index, memory, WorkspacePeople(identities), dbs)
    for c in conversations:
        # Its two speakers are the workspace's people, as the identities a channel's senders
        # become (shared.identity records their display names).
        for speaker in sorted({r.author for s in c.sessions for r in s if r.author}):
            identities.create(
                Identity(
                    workspace_id=c.workspace_id,
                    channel="web",
                    channel_user_id=speaker,
                    user_id=speaker.casefold(),
                    display_name=speaker,
                    status="approved",
                )
            )
        began = time.perf_counter()
        for session in c.sessions:
            for i in range(0, len(session), EXCHANGE):
                batch = session[i : i + EXCHANGE]
                window = session[i + EXCHANGE : i + EXCHANGE + WINDOW]
                result = index_rolled_out(index, memory, embedder, batch, window, tails=tails, writer=writer)
                memory.append_messages(c.workspace_id, batch)  # the commit's archive, after the index
                built.docs += result.docs
                if result.text_only:
                    raise SystemExit(f"{len(result.text_only)} documents without vectors: {result.error}")
            built.records += len(session)
        for n, session in enumerate(c.sessions):
            facts = observation_facts(c, n) if setup.facts or setup.fact_units else []
            if facts:
                # As the extraction path stores them: Tier 3, each with its fact-tier document.
                memory.put_triples(c.workspace_id, facts)
                built.docs += writer.write_docs(c.workspace_id, [fact_index_doc(t) for t in facts]).docs
            if setup.facts and facts:
                attach_fact_keys(index, memory, embedder, c.workspace_id, facts, writer=writer)
            if setup.summaries and c.summaries[n] and session:
                summary = session_summary(c, n)
                memory.put_summary(summary)
                built.docs += writer.write_docs(c.workspace_id, [summary_doc(summary)]).docs
        built.seconds += time.perf_counter() - began
    return built


def observation_facts(c: Conversation, n: int) -> list[Triple]:
    """Session n's observations as the facts a function-backed extraction model returns for the
    turns they cite: subject the speaker, the observation the object, provenance the turns. No
    model runs here: this is LoCoMo's annotation replayed as realistic extraction output."""
    session = c.sessions[n]
    out = []
    for speaker, text, cited in c.observations[n]:
        scope = owner_scope(c.conversation, [speaker.casefold()], group=True)
        out.append(
            Triple(
                id=fact_id(c.workspace_id, speaker, "noted", text, scope),
                workspace_id=c.workspace_id,
                subject=speaker,
                predicate="noted",
                object=text[:2048],
                session_id=session[0].session_id,
                message_ids=cited,
                user_id=speaker.casefold(),
                scope=scope,
                category="fact",
                source="consolidation",
                created_at=session[0].created_at,
                updated_at=session[0].created_at,
            )
        )
    return out


def session_summary(c: Conversation, n: int) -> Summary:
    """Session n's LoCoMo summary as the consolidation model's batch summary of its turns."""
    session = c.sessions[n]
    return Summary(
        id=f"summary-{n + 1}",
        workspace_id=c.workspace_id,
        session_id=session[0].session_id,
        text=c.summaries[n],
        first_seq=session[0].seq,
        last_seq=session[-1].seq,
        start_at=session[0].created_at,
        end_at=session[-1].created_at,
        scope=owner_scope(c.conversation, sorted({str(r.author).casefold() for r in session}), group=True),
    )


def group_scope(c: Conversation) -> RecallScope:
    """What a question asked in the conversation's group may recall under the default policy:
    the group's conversation (every session of it) and shared facts."""
    last = c.sessions[-1][0].session_id if c.sessions and c.sessions[-1] else "session-1"
    return recall_scope("personal", session_id=last, conversation=c.conversation, group=True, user_aliases=())


def check_scopes(conversations: list[Conversation], search: MemorySearch) -> int:
    """Every conversation's questions asked from outside its group (another conversation, no
    shared facts) find nothing: the scope filter is live, not just passed along. Returns how many
    searches were checked."""
    checked = 0
    for c in conversations:
        outsider = recall_scope(
            "personal", session_id="elsewhere", conversation="web.elsewhere", group=True, user_aliases=()
        )
        for q in c.questions[:20]:
            outcome = search.search(c.workspace_id, q.text, scope=outsider, k=max(KS), tiers=["message"])
            if outcome.hits:
                raise SystemExit(f"an outsider's search found {len(outcome.hits)} hits in {c.sample_id}")
            checked += 1
    return checked


def evaluate(
    conversations: list[Conversation], search: MemorySearch, mode: SearchKind
) -> tuple[dict[int, Scores], list[float]]:
    """Scores per category, and per conversation under keys "conv-26" etc. (categories 1-4)."""
    scores: dict[Any, Scores] = defaultdict(Scores)
    latencies: list[float] = []
    for c in conversations:
        scope = group_scope(c)
        for q in c.questions:
            began = time.perf_counter()
            # Over Tier 1, as memory_search asks, with the group's scope as a turn there builds it.
            outcome = search.search(
                c.workspace_id, q.text, scope=scope, k=max(KS), mode=mode, tiers=["message"]
            )
            latencies.append(time.perf_counter() - began)
            if outcome.mode != mode:
                raise SystemExit(f"{mode} answered as {outcome.mode}: {outcome.degraded}")
            ranked = [h.id for h in outcome.hits]
            scores[q.category].add(ranked, q.evidence)
            if q.category in HEADLINE:
                scores[c.sample_id].add(ranked, q.evidence)
    return scores, latencies


# The context pipeline's modes and budgets (shared.agent.pipeline, docs/context.md): (label,
# mode, budget_tokens). Pointers keep their own small budget.
PIPELINE_MODES: tuple[tuple[str, Literal["pointers", "inject"], int], ...] = (
    ("pointers", "pointers", 2000),
    ("inject, 500 tokens", "inject", 500),
    ("inject, 1,000 tokens", "inject", 1000),
    ("inject, 2,000 tokens (spec 004)", "inject", 2000),
    ("inject, 4,000 tokens", "inject", 4000),
)


@dataclass
class PipelineRow:
    label: str
    held: list[float] = field(default_factory=list)  # share of a question's evidence shown
    full: list[float] = field(default_factory=list)  # all of it shown
    tokens: list[int] = field(default_factory=list)  # what the selection adds to the prompt
    ms: list[float] = field(default_factory=list)


def evaluate_pipeline(conversations: list[Conversation], search: MemorySearch) -> list[PipelineRow]:
    """For each mode and budget: how much of each question's evidence (cats 1-4) the pipeline's
    selection alone puts in the prompt (an item counts when it is shown, not merely selected),
    and the tokens it adds."""
    from shared.agent.pipeline import select_context
    from shared.models import ContextConfig

    rows = []
    for label, mode, budget in PIPELINE_MODES:
        row, config = PipelineRow(label), ContextConfig(mode=mode, budget_tokens=budget, max_items=10)
        for c in conversations:
            scope = group_scope(c)
            for q in c.questions:
                if q.category not in HEADLINE:
                    continue
                picked = select_context(
                    search, c.workspace_id, config, q.text, scope=scope, session_id="bench.question"
                )
                shown = {p.id for p in picked.picks if p.kind == "memory" and p.tokens}
                row.held.append(sum(e in shown for e in q.evidence) / len(q.evidence))
                row.full.append(float(all(e in shown for e in q.evidence)))
                row.tokens.append(picked.tokens)
                row.ms.append(picked.elapsed_ms)
        rows.append(row)
    return rows


def report_pipeline(rows: list[PipelineRow], tools_recall10: str) -> None:
    print("\n### The context pipeline's selection alone (cats 1-4)\n")
    print(
        "How much of a question's evidence the pipeline puts in the prompt before the first model "
        f"call, beside recall@10 of the tools' search (memory_search, hybrid): **{tools_recall10}**. "
        "Tokens: what the selection adds to each turn's prompt (characters / 4).\n"
    )
    print("| mode | evidence shown | all evidence shown | tokens / turn (mean) | p95 tokens | p95 ms |")
    print("|---|---|---|---|---|---|")
    # `off` selects nothing: the evidence reaches the prompt only if the model searches (above).
    print("| off (tools only) | 0.0 | 0.0 | 0 | 0 | 0.0 |")
    for r in rows:
        print(
            f"| {r.label} | **{pct(r.held)}** | {pct(r.full)} | {statistics.fmean(r.tokens):.0f} | "
            f"{pctl([float(t) for t in r.tokens], 0.95):.0f} | {pctl(r.ms, 0.95):.1f} |"
        )


# Rows that take one mechanism away at a time (--ablations), hybrid min-max. The first group is
# this (fact-augmented keys, neighbours lending their score, summaries and facts pointing
# to their messages, a second search seeded by the first's hits): each off in turn and each
# alone. The second is the earlier mechanisms (context, authors), with this off.
NO_CONTEXT: tuple[tuple[str, Any], ...] = (("context_before", 0), ("context_after", 0))
NO_AUTHORS: tuple[tuple[str, Any], ...] = (("author_boost", 0.0), ("people", None))
BEFORE: dict[str, Any] = {
    "facts": False,
    "summaries": False,
    "fact_units": False,
    "feedback": False,
    "neighbours": False,
}
ALL: dict[str, Any] = dict.fromkeys(BEFORE, True)
ABLATIONS: list[Setup] = [
    Setup("none of this issue's mechanisms (the defaults before fact keys)", **BEFORE),
    Setup("+ neighbours lend 0.1 of their score", neighbours=True),
    Setup("without fact-augmented keys", facts=False),
    Setup("+ facts pointing to their messages", fact_units=True),
    Setup("+ summaries pointing to their messages", summaries=True),
    Setup("+ a second search seeded by the first's hits", feedback=True),
    Setup(
        "+ the second search, its names only (no Rocchio vector)",
        feedback=True,
        search=(("feedback_beta", 0.0),),
    ),
    Setup(
        "+ the second search, its Rocchio vector only (no names)",
        feedback=True,
        search=(("feedback_terms", 0),),
    ),
    Setup("+ neighbours lend 0.05 of their score", neighbours=True, search=(("neighbour_weight", 0.05),)),
    Setup("+ neighbours lend 0.2 of their score", neighbours=True, search=(("neighbour_weight", 0.2),)),
    Setup("all five", **ALL),
    Setup(
        "all five, summaries also bring in messages that were not candidates",
        **ALL,
        search=(("summary_bring_in", True),),
    ),
    Setup("neighbours alone", **{**BEFORE, "neighbours": True}),
    Setup("facts pointing to their messages alone", **{**BEFORE, "fact_units": True}),
    Setup("summaries pointing to their messages alone", **{**BEFORE, "summaries": True}),
    Setup("the second search alone", **{**BEFORE, "feedback": True}),
    Setup("over-fetch 25 (min-max over a deeper pool)", search=(("overfetch", 25),)),
    Setup("fact keys in BM25 only (no vector blend)", writer=(("fact_vector_weight", 0.0),)),
    Setup("fact keys in the vector only (BM25 weight 0)", index=(("facts_weight", 0.0),)),
    Setup(
        "none; no context, no authors, 0.3/0.7 (the issue's reference setup)",
        **BEFORE,
        writer=NO_CONTEXT,
        search=(("text_weight", 0.3), ("vector_weight", 0.7), *NO_AUTHORS),
    ),
    Setup("none; context, no authors, 0.5/0.5", **BEFORE, search=NO_AUTHORS),
]
# The per-conversation gain of each mechanism, alone (against none of them), added to the
# defaults (against the defaults without it; for a mechanism that is off, the defaults with it)
# and added to the other four: (label, with it, without it). A mechanism is kept when it gains
# on at least four of the five conversations.
GAINS: list[tuple[str, Setup, Setup]] = []
for _name, _label in (
    ("facts", "fact-augmented keys"),
    ("neighbours", "neighbours lending 0.1 of their score"),
    ("fact_units", "facts pointing to their messages"),
    ("summaries", "summaries pointing to their messages"),
    ("feedback", "a second search seeded by the first's hits"),
):
    _on: dict[str, Any] = {_name: True}
    _off: dict[str, Any] = {_name: False}
    GAINS += [
        (f"{_label}, alone", Setup(**{**BEFORE, **_on}), Setup(**BEFORE)),
        (f"{_label}, added to the defaults", Setup(**_on), Setup(**_off)),
        (f"{_label}, added to the other four", Setup(**ALL), Setup(**{**ALL, **_off})),
    ]


def setup_from(args: argparse.Namespace) -> Setup:
    writer: dict[str, Any] = {}
    index: dict[str, Any] = {}
    search: dict[str, Any] = {}
    if args.fact_vector_weight is not None:
        writer["fact_vector_weight"] = args.fact_vector_weight
    if args.facts_weight is not None:
        index["facts_weight"] = args.facts_weight
    if args.summary_weight is not None:
        search["summary_weight"] = args.summary_weight
    if args.summary_top is not None:
        search["summary_top"] = args.summary_top
    if args.bring_in:
        search["summary_bring_in"] = True
    if args.fact_weight is not None:
        search["fact_weight"] = args.fact_weight
    if args.feedback_weight is not None:
        search["feedback_weight"] = args.feedback_weight
    if args.neighbour_weight is not None:
        search["neighbour_weight"] = args.neighbour_weight
    return Setup(
        "this run",
        facts=not args.no_facts,
        summaries=args.summaries,
        fact_units=args.fact_units,
        feedback=args.feedback,
        neighbours=args.neighbours,
        writer=tuple(writer.items()),
        index=tuple(index.items()),
        search=tuple(search.items()),
    )


def run_setup(
    tmp: Path, name: str, conversations: list[Conversation], embedder: Embedder, setup: Setup
) -> dict[Any, Scores]:
    """Build an index for `setup` and evaluate its hybrid min-max search."""
    built = build(tmp / name, conversations, embedder, setup)
    search = MemorySearch(
        built.index, built.memory, embedder, **{"people": built.people, **setup.search_kwargs()}
    )
    scores = evaluate(conversations, search, "hybrid")[0]
    built.close()
    return scores


def run(args: argparse.Namespace) -> None:  # noqa: PLR0915 (one table after another)
    conversations = load(Path(args.data))
    if args.limit:
        conversations = conversations[: args.limit]
    model = LocalMiniLM()
    cache = FileEmbeddingCache()
    embedder = CachedEmbedder(model, cache)
    fusions: list[FusionMethod] = args.fusion
    runs = variants(fusions)
    scores: dict[str, dict[Any, Scores]] = {}
    latencies: dict[str, list[float]] = {}
    chosen = setup_from(args)

    # Embeddings first (cached after the first run), so the build time is the index's own.
    began = time.perf_counter()
    texts = [r.text for c in conversations for s in c.sessions for r in s]
    texts += [q.text for c in conversations for q in c.questions]
    facts = [t for c in conversations for n in range(len(c.sessions)) for t in observation_facts(c, n)]
    texts += [fact_key(t).text for t in facts]
    texts += [text for c in conversations for text in c.summaries if text]
    for start in range(0, len(texts), 256):  # in parts, so an interrupted run keeps its work
        embedder.embed(texts[start : start + 256])
    print(
        f"embeddings ready in {time.perf_counter() - began:.1f} s ({len(texts)} texts, cache {cache.path})",
        file=sys.stderr,
    )

    with tempfile.TemporaryDirectory(prefix="locomo-") as tmp:
        built = build(Path(tmp) / "product", conversations, embedder, chosen)
        for v in runs:
            search = MemorySearch(
                built.index,
                built.memory,
                embedder,
                fusion=v.fusion,
                min_score=args.min_score,
                people=built.people,
                **chosen.search_kwargs(),
            )
            scores[v.label], latencies[v.label] = evaluate(conversations, search, v.mode)
        outsider_checks = check_scopes(conversations, search)
        # The pipeline over the product's search: hybrid, min-max (the defaults).
        pipeline = evaluate_pipeline(
            conversations,
            MemorySearch(built.index, built.memory, embedder, people=built.people, **chosen.search_kwargs()),
        )
        built.close()
        ablations: list[tuple[str, dict[Any, Scores]]] = []
        gains: list[tuple[str, dict[Any, Scores], dict[Any, Scores]]] = []
        if args.ablations:
            done: dict[Setup, dict[Any, Scores]] = {}

            def measured(setup: Setup) -> dict[Any, Scores]:
                key = replace(setup, label="")
                if key not in done:
                    done[key] = run_setup(Path(tmp), f"setup{len(done)}", conversations, embedder, setup)
                return done[key]

            product = next(v.label for v in runs if v.mode == "hybrid")
            done[replace(chosen, label="")] = scores[product]
            for setup in ABLATIONS:
                ablations.append((setup.label, measured(setup)))
            for label, on, off in GAINS:
                gains.append((label, measured(on), measured(off)))

    throughput = measure_throughput(model, [r.text for r in conversations[0].sessions[0]][:64])
    report(
        Results(conversations, runs, scores, latencies, built.seconds, built.records, built.docs, throughput),
        chosen,
    )
    print(
        f"\nScopes: each conversation's records belong to its group; {outsider_checks} of its "
        "questions asked from outside the group found 0 hits."
    )
    product = next(v.label for v in runs if v.mode == "hybrid")
    report_pipeline(pipeline, headline_recall(scores[product]))
    print("\n### recall@10 per conversation (cats 1-4, hybrid)\n")
    ids = [c.sample_id for c in conversations]
    print("| setup | " + " | ".join(ids) + " |")
    print("|---|" + "---|" * len(ids))
    print(f"| {chosen.label} | " + " | ".join(pct(scores[product][i].recall[10]) for i in ids) + " |")
    if gains:
        print("\n### Per-conversation gains of each mechanism (recall@10, cats 1-4)\n")
        print("| change | all | " + " | ".join(ids) + " | gains on |")
        print("|---|---|" + "---|" * len(ids) + "---|")
        for change, with_it, without in gains:
            cells: list[str] = []
            wins = 0
            for i in ids:
                a, b = statistics.fmean(with_it[i].recall[10]), statistics.fmean(without[i].recall[10])
                wins += a > b
                cells.append(f"{100 * b:.1f} → {100 * a:.1f} ({100 * (a - b):+.1f})")
            whole = f"{headline_recall(without)} → {headline_recall(with_it)}"
            print(f"| {change} | {whole} | " + " | ".join(cells) + f" | {wins} of {len(ids)} |")
    if ablations:
        print("\n### Ablations (hybrid, recall@10)\n")
        print("| setup | cats 1-4 | 1 | 2 | 3 | 4 | 5 |")
        print("|---|---|---|---|---|---|---|")
        for row, by_cat in [(f"defaults ({describe(chosen)})", scores[product]), *ablations]:
            per_cat = " | ".join(pct(by_cat[cat].recall[10]) for cat in CATEGORIES)
            print(f"| {row} | **{headline_recall(by_cat)}** | {per_cat} |")


def headline_recall(by_cat: dict[Any, Scores]) -> str:
    headline = Scores()
    for cat in HEADLINE:
        headline.merge(by_cat[cat])
    return pct(headline.recall[10])


def describe(setup: Setup) -> str:
    parts = [
        "fact keys" if setup.facts else "no fact keys",
        "facts pointing to messages" if setup.fact_units else "no fact pointers",
        "summaries pointing to messages" if setup.summaries else "no summaries",
        "second search" if setup.feedback else "no second search",
        "neighbours lend" if setup.neighbours else "no neighbour lending",
    ]
    parts += [f"{k}={v}" for k, v in (*setup.writer, *setup.index, *setup.search)]
    return ", ".join(parts)


def measure_throughput(model: LocalMiniLM, sample: list[str]) -> float:
    """Texts per second of the model itself (no cache), on one batch of real turns."""
    model.load()
    began = time.perf_counter()
    model.embed(sample)
    return len(sample) / (time.perf_counter() - began)


# ---------------------------------------------------------------- report


@dataclass
class Results:
    conversations: list[Conversation]
    runs: list[Variant]
    scores: dict[str, dict[int, Scores]]
    latencies: dict[str, list[float]]
    build_s: float
    records: int
    docs: int
    throughput: float


def report(r: Results, setup: Setup) -> None:
    conversations, runs, scores, latencies = r.conversations, r.runs, r.scores, r.latencies
    build_s, records, docs, throughput = r.build_s, r.records, r.docs, r.throughput
    questions = [q for c in conversations for q in c.questions]
    counts = {cat: sum(q.category == cat for q in questions) for cat in CATEGORIES}
    probe = MemorySearch.__init__.__kwdefaults__ or {}
    writer_defaults: dict[str, Any] = MemoryWriter.__init__.__kwdefaults__ or {}
    print("## LoCoMo retrieval (Sigil memory path)\n")
    print(
        f"- data: {len(conversations)} conversations, {records} turns ({docs} index documents), "
        f"{len(questions)} questions "
        f"(skipped without evidence: {sum(c.skipped_questions for c in conversations)}, "
        f"evidence ids dropped: {sum(c.dropped_evidence for c in conversations)})"
    )
    print(
        "- index: embedded SqliteMemoryIndex, searched in its in-memory copy of the workspace: BM25 "
        "with FTS5's formula and tokenizer (`porter unicode61 remove_diacritics 2`, k1=1.2, b=0.75, "
        f"IDF floored at 1e-6, the workspace's own statistics), own text weight 1.0, context weight "
        f"{DEFAULT_CONTEXT_WEIGHT}; exact cosine k-NN"
    )
    print(
        f"- query: BM25 half without {len(STOP_WORDS)} English stop words (shared.memory.search.STOP_WORDS), "
        "vector half the raw question"
    )
    print(
        f"- embeddings: all-MiniLM-L6-v2 (local, numpy), weights SHA-256 {PINNED_WEIGHTS_SHA256[:16]}…, "
        f"384 dims; throughput {throughput:.0f} texts/s (batch of 64 turns, this machine)"
    )
    print(
        f"- writer: context {writer_defaults.get('context_before')} before / "
        f"{writer_defaults.get('context_after')} after (same session and user; BM25 field + blended vector), "
        f"context vector weight {writer_defaults.get('context_vector_weight')}"
    )
    print(
        f"- fusion: min-max text {probe.get('text_weight')} / vector {probe.get('vector_weight')}; "
        f"RRF k=60 with the same weights; over-fetch {probe.get('overfetch')}x; author boost "
        f"{probe.get('author_boost')} x the best score for a turn whose speaker the question names, "
        "and the speakers' names left out of the question's embedding (MemorySearch's people: the "
        "workspace's identities, one per speaker); "
        f"default {probe.get('fusion')}; min score "
        f"{DEFAULT_MIN_SCORE[probe.get('fusion', 'minmax')] or 'none'}"
    )
    print(
        f"- retrieval mechanisms: {describe(setup)} (facts: LoCoMo's observations replayed as the "
        "extraction model's output through shared.memory.fact_keys; summaries: LoCoMo's session "
        "summaries replayed as the consolidation model's batch summaries)"
    )
    per_turn = 1000 * build_s / max(records, 1)
    print(
        f"- index build: {build_s:.2f} s for {records} turns ({per_turn:.2f} ms/turn, written "
        f"{EXCHANGE} at a time as the turn rolls them out; embeddings cached)\n"
    )

    print("### recall@10 by category\n")
    head = " | ".join(f"{cat} {CATEGORIES[cat]} (n={counts[cat]})" for cat in CATEGORIES)
    print(f"| search | **cats 1-4 (n={sum(counts[c] for c in HEADLINE)})** | {head} | p50 ms | p95 ms |")
    print("|---|---|" + "---|" * len(CATEGORIES) + "---|---|")
    for v in runs:
        by_cat = scores[v.label]
        headline = Scores()
        for cat in HEADLINE:
            headline.merge(by_cat[cat])
        cells = " | ".join(pct(by_cat[cat].recall[10]) for cat in CATEGORIES)
        lat = latencies[v.label]
        print(
            f"| {v.label} | **{pct(headline.recall[10])}** | {cells} | "
            f"{1000 * pctl(lat, 0.5):.1f} | {1000 * pctl(lat, 0.95):.1f} |"
        )

    print("\n### cats 1-4 and cat 5, all metrics\n")
    print("| search | set | R@1 | R@5 | R@10 | R@20 | full@10 | MRR |")
    print("|---|---|---|---|---|---|---|---|")
    for v in runs:
        for label, cats in (("1-4", HEADLINE), ("5", (5,))):
            s = Scores()
            for cat in cats:
                s.merge(scores[v.label][cat])
            recalls = " | ".join(pct(s.recall[k]) for k in KS)
            print(
                f"| {v.label} | {label} | {recalls} | {pct(s.full10)} | {statistics.fmean(s.rr or [0]):.3f} |"
            )
    print(
        "\nLatency: MemorySearch.search per question (k=20, one index round trip; the query's "
        "embedding comes from the cache)."
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("data", nargs="?", default=str(DEFAULT_DATA), help="a LoCoMo-format JSON file")
    parser.add_argument("--fusion", nargs="+", choices=["minmax", "rrf"], default=["minmax", "rrf"])
    parser.add_argument("--limit", type=int, default=0, help="only the first N conversations")
    parser.add_argument("--ablations", action="store_true", help="also rows without context / other weights")
    parser.add_argument(
        "--min-score", type=float, default=None, help="MemorySearch's min_score (default: its own)"
    )
    parser.add_argument("--no-facts", action="store_true", help="without fact-augmented keys")
    parser.add_argument("--summaries", action="store_true", help="with summaries pointing to their messages")
    parser.add_argument("--fact-units", action="store_true", help="with facts pointing to their messages")
    parser.add_argument("--fact-weight", type=float, default=None, help="share of a fact hit's score lent")
    parser.add_argument("--facts-weight", type=float, default=None, help="BM25 weight of the facts field")
    parser.add_argument("--fact-vector-weight", type=float, default=None, help="facts' weight in the vector")
    parser.add_argument("--summary-weight", type=float, default=None, help="share of a summary's score lent")
    parser.add_argument("--summary-top", type=int, default=None, help="summaries that lend their score")
    parser.add_argument(
        "--feedback", action="store_true", help="with a second search seeded by the first's hits"
    )
    parser.add_argument(
        "--feedback-weight", type=float, default=None, help="weight of the second search's scores"
    )
    parser.add_argument("--neighbours", action="store_true", help="with neighbours lending their score")
    parser.add_argument(
        "--neighbour-weight", type=float, default=None, help="share of a neighbour's score lent"
    )
    parser.add_argument("--bring-in", action="store_true", help="summaries bring non-candidate messages in")
    args = parser.parse_args(argv)
    if not Path(args.data).is_file():
        # The data is CC BY-NC and never ships with the project: it is read from the kit beside it.
        parser.exit(2, f"locomo.py: no LoCoMo file at {args.data}; pass the path of one\n")
    run(args)


if __name__ == "__main__":
    main()

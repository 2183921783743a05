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
from dataclasses import dataclass, field
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
from shared.memory.fusion import FusionMethod  # noqa: E402
from shared.memory.people import WorkspacePeople  # noqa: E402
from shared.memory.scope import owner_scope, recall_scope  # noqa: E402
from shared.memory.search import DEFAULT_MIN_SCORE, STOP_WORDS, MemorySearch  # noqa: E402
from shared.memory.writer import MemoryWriter, RecentTails, index_rolled_out  # noqa: E402
from shared.models import Identity, MemoryRecord, RecallScope  # noqa: E402
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


def build(
    tmp: Path, conversations: list[Conversation], embedder: Embedder, writer_kwargs: dict[str, Any]
) -> Built:
    """Every turn written as the turn writes it: an exchange at a time, context from the tails."""
    dbs = (Database(tmp / "index.db", load_vec=True), Database(tmp / "sigil.db"))
    index, memory, identities = (
        SqliteMemoryIndex(dbs[0]),
        SqliteMemoryStore(dbs[1]),
        SqliteIdentityStore(dbs[1]),
    )
    writer = MemoryWriter(index, embedder, **writer_kwargs)
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
        built.seconds += time.perf_counter() - began
    return built


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
    scores: dict[int, Scores] = defaultdict(Scores)
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
            scores[q.category].add([h.id for h in outcome.hits], q.evidence)
    return scores, latencies


# Rows that take one mechanism away at a time (--ablations): (label, writer settings, MemorySearch
# settings), hybrid min-max.
NO_CONTEXT: dict[str, Any] = {"context_before": 0, "context_after": 0}
NO_AUTHORS: dict[str, Any] = {"author_boost": 0.0, "people": None}
ABLATIONS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "no context, no authors, 0.3/0.7 (the issue's reference setup)",
        NO_CONTEXT,
        {"text_weight": 0.3, "vector_weight": 0.7, **NO_AUTHORS},
    ),
    ("no context, no authors, 0.6/0.4", NO_CONTEXT, {"text_weight": 0.6, "vector_weight": 0.4, **NO_AUTHORS}),
    ("context, no authors, 0.6/0.4", {}, {"text_weight": 0.6, "vector_weight": 0.4, **NO_AUTHORS}),
    ("context, no authors, 0.5/0.5", {}, NO_AUTHORS),
    (
        "context, author boost 0.15, names kept in the query's embedding, 0.6/0.4",
        {},
        {"text_weight": 0.6, "vector_weight": 0.4, "author_boost": 0.15, "people": None},
    ),
    ("context, author boost 0.25, names kept in the query's embedding, 0.5/0.5", {}, {"people": None}),
    ("context, names left out of the query's embedding, no author boost, 0.5/0.5", {}, {"author_boost": 0.0}),
]


def run(args: argparse.Namespace) -> None:
    conversations = load(Path(args.data))
    if args.limit:
        conversations = conversations[: args.limit]
    model = LocalMiniLM()
    cache = FileEmbeddingCache()
    embedder = CachedEmbedder(model, cache)
    fusions: list[FusionMethod] = args.fusion
    runs = variants(fusions)
    scores: dict[str, dict[int, Scores]] = {}
    latencies: dict[str, list[float]] = {}

    # Embeddings first (cached after the first run), so the build time is the index's own.
    began = time.perf_counter()
    texts = [r.text for c in conversations for s in c.sessions for r in s]
    texts += [q.text for c in conversations for q in c.questions]
    for start in range(0, len(texts), 256):  # in parts, so an interrupted run keeps its work
        embedder.embed(texts[start : start + 256])
    print(
        f"embeddings ready in {time.perf_counter() - began:.1f} s ({len(texts)} texts, cache {cache.path})",
        file=sys.stderr,
    )

    with tempfile.TemporaryDirectory(prefix="locomo-") as tmp:
        built = build(Path(tmp) / "product", conversations, embedder, {})
        for v in runs:
            search = MemorySearch(
                built.index,
                built.memory,
                embedder,
                fusion=v.fusion,
                min_score=args.min_score,
                people=built.people,
            )
            scores[v.label], latencies[v.label] = evaluate(conversations, search, v.mode)
        outsider_checks = check_scopes(conversations, search)
        ablations: list[tuple[str, dict[int, Scores]]] = []
        for label, writer_kwargs, search_kwargs in ABLATIONS if args.ablations else []:
            other = build(Path(tmp) / f"ablation{len(ablations)}", conversations, embedder, writer_kwargs)
            search = MemorySearch(
                other.index, other.memory, embedder, **{"people": other.people, **search_kwargs}
            )
            ablations.append((label, evaluate(conversations, search, "hybrid")[0]))
            other.close()
        built.close()

    throughput = measure_throughput(model, [r.text for r in conversations[0].sessions[0]][:64])
    report(
        Results(conversations, runs, scores, latencies, built.seconds, built.records, built.docs, throughput)
    )
    print(
        f"\nScopes: each conversation's records belong to its group; {outsider_checks} of its "
        "questions asked from outside the group found 0 hits."
    )
    if ablations:
        print("\n### Ablations (hybrid, recall@10)\n")
        print("| setup | cats 1-4 | 1 | 2 | 3 | 4 | 5 |")
        print("|---|---|---|---|---|---|---|")
        product = next(v.label for v in runs if v.mode == "hybrid")
        defaults = (
            "product defaults: context, author boost 0.25, names left out of the query's embedding, "
            f"{product} 0.5/0.5"
        )
        for label, by_cat in [(defaults, scores[product]), *ablations]:
            headline = Scores()
            for cat in HEADLINE:
                headline.merge(by_cat[cat])
            cells = " | ".join(pct(by_cat[cat].recall[10]) for cat in CATEGORIES)
            print(f"| {label} | **{pct(headline.recall[10])}** | {cells} |")


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


def report(r: Results) -> None:
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
    args = parser.parse_args(argv)
    if not Path(args.data).is_file():
        # The data is CC BY-NC and never ships with the project: it is read from the kit beside it.
        parser.exit(2, f"locomo.py: no LoCoMo file at {args.data}; pass the path of one\n")
    run(args)


if __name__ == "__main__":
    main()

"""Memory search latency at 1k / 10k / 100k memories in ONE workspace on the embedded index.

Synthetic but shaped like the product's documents: chat-like messages whose words follow a Zipf
law (so common words match a large share of the index, as they do in real chats, and FTS5 has long
posting lists to rank), each with the writer's context (its two neighbours before and after,
metadata "context"), one in three with the text of facts extracted from it (metadata "facts": the
fact-augmented keys of shared.memory.fact_keys), and a 384-dimension unit vector (all-
MiniLM-L6-v2's width; random, which is fine for timing). Documents go in through
SqliteMemoryIndex.upsert in batches, as the writer's would; queries are question-like texts with
their own random vectors, asked through MemorySearch (hybrid, k=10, the product defaults), whose
query embedding is excluded here (a fixed-vector embedder) and reported apart: MiniLM's own time
for one question. Past 20,000 vectors the index's k-NN is prefiltered by sign bits; random vectors
say nothing about its recall, so that is measured on real MiniLM vectors (the LoCoMo benchmark's
embedding cache, when present).

Memory scopes: each session is a conversation of one of 50 users (four in five direct, the rest
groups of three), and every document carries the scope the writer gives it. Each size is searched
twice in the same run: workspace-wide (the widened policy, no scope filter: what every search
did before scopes) and under the default personal policy of one user in a direct conversation
(their own conversations, ~2% of the workspace, plus shared facts), so the cost of the scope
filter reads off the same table.

    .venv/bin/python bench/memory_scale.py [--sizes 1000 10000 100000] [--queries 200]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the bench runs from a plain clone

import numpy as np  # noqa: E402

from shared.adapters.embedded import Database, SqliteMemoryIndex, SqliteMemoryStore  # noqa: E402
from shared.memory.scope import owner_scope, recall_scope, visible  # noqa: E402
from shared.memory.search import CONTEXT_KEY, FACT_IDS_KEY, FACTS_KEY, MemorySearch  # noqa: E402
from shared.models import WORKSPACE_WIDE, IndexDoc, IndexQuery, MemoryScope, RecallScope  # noqa: E402

DIM = 384
WORKSPACE = "bench-scale"
USERS = 50
SESSION_SIZE = 200  # messages a session


def session_owner(session: int) -> tuple[str, MemoryScope]:
    """The conversation of a session and the scope its messages get (one user's DM, or a group)."""
    user = f"u{session % USERS:02d}"
    if session % 5:
        return f"telegram.dm-{user}", owner_scope(f"telegram.dm-{user}", [user], group=False)
    members = [f"u{(session + j) % USERS:02d}" for j in range(3)]
    return f"slack.g{session % 17}", owner_scope(f"slack.g{session % 17}", members, group=True)


# The reader of the personal measurements: u07 in a direct conversation of theirs.
PERSONAL: RecallScope = recall_scope(
    "personal",
    session_id=f"s{7:05d}",
    conversation="telegram.dm-u07",
    group=False,
    user_aliases=["u07"],
)
POLICIES: dict[str, RecallScope] = {"workspace": WORKSPACE_WIDE, "personal": PERSONAL}
FUNCTION_WORDS = [
    "i",
    "you",
    "we",
    "the",
    "a",
    "to",
    "and",
    "of",
    "it",
    "was",
    "so",
    "that",
    "is",
    "in",
    "my",
]
SYLLABLES = ["ka", "lo", "mi", "ra", "te", "su", "no", "vi", "pe", "da", "ri", "ko", "ma", "zu", "be", "lu"]


class Vocabulary:
    """Pseudo-words with Zipf frequencies: rank r is drawn with probability ~ 1/r."""

    def __init__(self, rng: random.Random, size: int = 20_000) -> None:
        words: dict[str, None] = {}
        while len(words) < size:
            words["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))] = None
        self.words = list(words)
        weights = [1.0 / (r + 1) for r in range(size)]
        total = sum(weights)
        acc = 0.0
        self.cumulative = []
        for w in weights:
            acc += w / total
            self.cumulative.append(acc)

    def draw(self, rng: random.Random, n: int) -> list[str]:
        import bisect

        return [
            self.words[min(bisect.bisect(self.cumulative, rng.random()), len(self.words) - 1)]
            for _ in range(n)
        ]


def message(rng: random.Random, vocab: Vocabulary) -> str:
    words = []
    for content in vocab.draw(rng, rng.randint(6, 24)):
        if rng.random() < 0.5:
            words.append(rng.choice(FUNCTION_WORDS))
        words.append(content)
    return " ".join(words).capitalize() + rng.choice([".", "!", "?"])


def unit_vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v


def build_docs(n: int, seed: int = 7) -> list[IndexDoc]:
    rng = random.Random(seed)  # noqa: S311 - synthetic data, not secrets
    vocab = Vocabulary(rng)
    vectors = unit_vectors(np.random.default_rng(seed), n)
    texts = [message(rng, vocab) for _ in range(n)]
    # Fact-augmented keys (shared.memory.fact_keys): one message in three keyed with one or two
    # facts extracted from it. A generator of their own, so the texts are those of earlier runs.
    facts_rng = random.Random(seed + 1)  # noqa: S311 - synthetic data, not secrets
    keyed = {
        i: [f"user {' '.join(vocab.draw(facts_rng, 2))}: {' '.join(vocab.draw(facts_rng, 4))}"]
        * facts_rng.randint(1, 2)
        for i in range(0, n, 3)
    }
    start = datetime(2025, 1, 1, tzinfo=UTC)
    docs = []
    for i, text in enumerate(texts):
        session = i // SESSION_SIZE
        around = [
            texts[j] for j in (i - 2, i - 1, i + 1, i + 2) if 0 <= j < n and j // SESSION_SIZE == session
        ]
        docs.append(
            IndexDoc(
                id=f"m{i:07d}",
                workspace_id=WORKSPACE,
                session_id=f"s{session:05d}",
                tier="message",
                text=text,
                vector=vectors[i].tolist(),
                created_at=start + timedelta(minutes=i),
                metadata={
                    "role": "user" if i % 2 == 0 else "assistant",
                    "seq": str(i % SESSION_SIZE),
                    CONTEXT_KEY: "\n".join(around),
                    **(
                        {
                            FACTS_KEY: "\n".join(keyed[i]),
                            FACT_IDS_KEY: " ".join(f"f{i}-{k}" for k in range(len(keyed[i]))),
                        }
                        if i in keyed
                        else {}
                    ),
                },
                scope=session_owner(session)[1],
            )
        )
    return docs


def questions(n: int, seed: int = 11) -> list[tuple[str, list[float]]]:
    rng = random.Random(seed)  # noqa: S311 - synthetic data, not secrets
    vocab = Vocabulary(random.Random(7))  # noqa: S311 - the documents' vocabulary
    vectors = unit_vectors(np.random.default_rng(seed), n)
    out = []
    for i in range(n):
        words = vocab.draw(rng, rng.randint(2, 5))
        out.append(
            (
                f"{rng.choice(['When did', 'What did', 'Where did', 'Why did'])} we {' '.join(words)}?",
                vectors[i].tolist(),
            )
        )
    return out


class FixedEmbedder:
    """Returns each question's precomputed vector: the query's embedding is not what is timed."""

    model_id = "bench/random"
    dimensions = DIM

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self.vectors = vectors

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.vectors[t] for t in texts]


def pctl(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(size: int, n_queries: int, batch: int) -> dict[str, float]:
    docs = build_docs(size)
    qs = questions(n_queries)
    with tempfile.TemporaryDirectory(prefix="memscale-") as tmp:
        db = Database(Path(tmp) / "index.db", load_vec=True)
        main = Database(Path(tmp) / "sigil.db")
        index = SqliteMemoryIndex(db)
        began = time.perf_counter()
        for start in range(0, size, batch):
            index.upsert(WORKSPACE, docs[start : start + batch])
        build = time.perf_counter() - began
        embedder = FixedEmbedder(dict(qs))
        search = MemorySearch(index, SqliteMemoryStore(main), embedder)
        out: dict[str, float] = {"size": size, "build_s": build}
        # The first search of a process loads the workspace into the index's in-memory copy.
        t0 = time.perf_counter()
        search.search(WORKSPACE, qs[0][0], k=10, scope=WORKSPACE_WIDE)
        out["first_s"] = time.perf_counter() - t0
        # Policies interleaved query by query, so a slow spell of a shared machine hits both.
        for mode in ("hybrid", "bm25", "vector"):
            for q, _ in qs[:5]:  # warm-up: first-use caches, page cache
                for scope in POLICIES.values():
                    search.search(WORKSPACE, q, k=10, mode=mode, scope=scope)
            times: dict[str, list[float]] = {policy: [] for policy in POLICIES}
            for q, _ in qs:
                for policy, scope in POLICIES.items():
                    t0 = time.perf_counter()
                    outcome = search.search(WORKSPACE, q, k=10, mode=mode, scope=scope)
                    times[policy].append(time.perf_counter() - t0)
                    assert outcome.mode == mode, outcome
            for policy, taken in times.items():
                out[f"{policy}_{mode}_p50"] = 1000 * pctl(taken, 0.5)
                out[f"{policy}_{mode}_p95"] = 1000 * pctl(taken, 0.95)
        visible_count = sum(visible(PERSONAL, d.session_id, d.scope) for d in docs)
        out["personal_share"] = visible_count / size
        # The round trip alone, both rankings at the over-fetch MemorySearch asks for (k*8).
        times = {policy: [] for policy in POLICIES}
        for q, v in qs:
            for policy, scope in POLICIES.items():
                t0 = time.perf_counter()
                result = index.search(WORKSPACE, IndexQuery(scope=scope, text=q, vector=v, k=80))
                times[policy].append(time.perf_counter() - t0)
                if policy == "personal":
                    # A personal search still gets its k nearest, every one of them visible.
                    assert len(result.vector_hits) == min(80, visible_count), len(result.vector_hits)
                    assert all(visible(scope, h.doc.session_id, h.doc.scope) for h in result.vector_hits)
        for policy, taken in times.items():
            out[f"{policy}_index_p50"] = 1000 * pctl(taken, 0.5)
            out[f"{policy}_index_p95"] = 1000 * pctl(taken, 0.95)
        out |= pipeline_ms(search, qs)
        out["db_mb"] = sum(f.stat().st_size for f in Path(tmp).glob("index.db*")) / 1e6
        db.close()
        main.close()
    return out


def pipeline_ms(search: MemorySearch, qs: Sequence[tuple[str, list[float]]]) -> dict[str, float]:
    """The context pipeline (shared.agent.pipeline) before a turn's first model call, under the
    personal policy: the hybrid search of every tier, a 30-skill catalogue matched against the
    question and the default config's rendering (inject, 10 items within 1,000 tokens), the
    Refinement Gate off (its model call is the gate's cost, bench/gate_cost.py). No model call:
    0 tokens."""
    from shared.agent.pipeline import select_context
    from shared.models import ContextConfig
    from shared.skills import Skill

    config = ContextConfig()  # the default: inject within 1,000 tokens, the gate off
    assert config.mode == "inject" and not config.gate
    skills = [Skill(name=f"skill-{i:02d}", description=f"How to handle topic {i} well.") for i in range(30)]
    session = "telegram.dm-u00"

    found: list[int] = []

    def run(q: str) -> float:
        t0 = time.perf_counter()
        picked = select_context(
            search, WORKSPACE, config, q, scope=PERSONAL, session_id=session, skills=skills
        )
        taken = time.perf_counter() - t0
        assert picked.mode == "inject", picked
        found.append(sum(p.kind == "memory" for p in picked.picks))
        return taken

    for q, _ in qs[:5]:
        run(q)  # warm-up, as above
    del found[:]
    times = [run(q) for q, _ in qs]
    return {
        "pipeline_p50": 1000 * pctl(times, 0.5),
        "pipeline_p95": 1000 * pctl(times, 0.95),
        "pipeline_items": statistics.mean(found),
    }


def query_embedding_ms(n: int = 20) -> tuple[float, float] | None:
    try:
        from shared.memory.embeddings.minilm import LocalMiniLM, local_model_available
    except ImportError:
        return None
    if not local_model_available():
        return None
    model = LocalMiniLM()
    model.load()
    times = []
    for q, _ in questions(n, seed=3):
        t0 = time.perf_counter()
        model.embed([q])
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times), 1000 * pctl(times, 0.95)


def prefilter_recall(path: Path, size: int = 100_000) -> str | None:
    """Recall of the sign-bit prefilter on real all-MiniLM-L6-v2 vectors (the LoCoMo benchmark's
    embedding cache, when it exists), shortlisting the share of vectors the index shortlists at
    `size` (4096 of 100k, ~4%) and rescoring exactly, against exact k-NN."""
    import sqlite3

    from shared.adapters.embedded.index_cache import PREFILTER_MIN_CANDIDATES, sign_bits
    from shared.memory.embeddings.minilm import minilm_model_id

    if not path.exists():
        return None
    conn = sqlite3.connect(str(path))
    rows = conn.execute("SELECT vec FROM vectors WHERE model = ?", (minilm_model_id(),)).fetchall()
    conn.close()
    if len(rows) < 2000:
        return None
    matrix = np.array([np.frombuffer(r[0], dtype="<f4") for r in rows], dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    rng = np.random.default_rng(0)
    picked = rng.choice(len(matrix), 300, replace=False)
    corpus = np.delete(matrix, picked, axis=0)
    bits = np.array([sign_bits(v) for v in corpus])
    shortlist = max(1, round(len(corpus) * PREFILTER_MIN_CANDIDATES / size))
    out = []
    for k in (10, 80):
        recalls = []
        for q in matrix[picked]:
            exact = set(np.argsort(-(corpus @ q))[:k])
            cand = np.argpartition(np.bitwise_count(bits ^ sign_bits(q)).sum(axis=1), shortlist)[:shortlist]
            found = cand[np.argsort(-(corpus[cand] @ q))[:k]]
            recalls.append(len(exact & set(found.tolist())) / k)
        out.append(f"recall@{k} {statistics.fmean(recalls):.3f}")
    return (
        f"Sign-bit prefilter on {len(corpus):,} real MiniLM vectors, shortlisting {shortlist} "
        f"({100 * shortlist / len(corpus):.1f}%, the share at {size:,}): "
        + ", ".join(out)
        + " (300 queries)."
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--batch", type=int, default=500, help="documents per upsert")
    args = parser.parse_args(argv)

    rows = []
    for size in args.sizes:
        print(f"measuring {size} documents...", file=sys.stderr)
        rows.append(measure(size, args.queries, args.batch))
    print("## Memory search at scale (one workspace, embedded index)\n")
    print(
        f"{args.queries} queries per size and policy; MemorySearch k=10 with the product defaults; "
        "query embedding excluded (below); 384-dim random unit vectors; Zipf-distributed words. "
        "First search: the process loads the workspace into the index's in-memory copy. Index round "
        "trip: one IndexQuery (k=80, vectors read back). Policy: `workspace` reads the whole "
        "workspace (no scope filter); `personal` is one user's recall in a direct conversation "
        f"({100 * rows[-1]['personal_share']:.1f}% of the documents visible at the largest size).\n"
    )
    print("| memories | build s | docs/s | index MB | first search s |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {int(r['size']):,} | {r['build_s']:.1f} | {r['size'] / r['build_s']:,.0f} | "
            f"{r['db_mb']:.0f} | {r['first_s']:.1f} |"
        )
    print()
    print(
        "| memories | policy | hybrid p50 ms | **hybrid p95 ms** | bm25 p50 / p95 | vector p50 / p95 | "
        "index round trip p50 / p95 |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        for policy in POLICIES:
            m = {key[len(policy) + 1 :]: value for key, value in r.items() if key.startswith(f"{policy}_")}
            print(
                f"| {int(r['size']):,} | {policy} | {m['hybrid_p50']:.1f} | **{m['hybrid_p95']:.1f}** | "
                f"{m['bm25_p50']:.1f} / {m['bm25_p95']:.1f} | "
                f"{m['vector_p50']:.1f} / {m['vector_p95']:.1f} | "
                f"{m['index_p50']:.1f} / {m['index_p95']:.1f} |"
            )
    print(
        "\nThe context pipeline before a turn's first model call (shared.agent.pipeline, inject mode, "
        "the default config: 10 items within 1,000 tokens, the gate off; a 30-skill catalogue matched, "
        "personal policy; query embedding excluded as above; no model call, so 0 tokens):\n"
    )
    print("| memories | pipeline p50 ms | **pipeline p95 ms** | memories selected (mean) | model tokens |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {int(r['size']):,} | {r['pipeline_p50']:.1f} | **{r['pipeline_p95']:.1f}** | "
            f"{r['pipeline_items']:.1f} | 0 |"
        )
    largest = rows[-1]
    change = 100 * (largest["personal_hybrid_p95"] / largest["workspace_hybrid_p95"] - 1)
    print(
        f"\nAt {int(largest['size']):,} memories, the personal policy's hybrid p95 is "
        f"{abs(change):.1f}% {'above' if change > 0 else 'below'} the workspace-wide one's (the same run)."
    )
    emb = query_embedding_ms()
    if emb:
        print(f"\nQuery embedding (local MiniLM, one question): p50 {emb[0]:.1f} ms, p95 {emb[1]:.1f} ms.")
    from bench.embedding_cache import DEFAULT_PATH

    recall = prefilter_recall(DEFAULT_PATH)
    if recall:
        print(f"\n{recall}")


if __name__ == "__main__":
    main()

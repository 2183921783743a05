"""Consolidation maintenance at scale, and bounded memory. A benchmark, not a test: it prints tables.

1. Maintenance over N facts in one workspace (one user: the worst case, a single dedup bucket) on
   the embedded backend (SQLite in a temp dir, facts indexed with their vectors), 384-dim
   vectors, ~5% near-duplicates (cosine 0.95-0.99 to another fact, different text, so only the
   embedding layer can find them), ~5% faded past their lifetime, a few used often. Run 1 is the
   first run over the data (it writes most relevance values); run 2 is the next hourly run
   (steady state: nothing left to merge or prune). Wall and CPU seconds: the machine is shared,
   CPU time is the steadier figure. Goal: < 5 s at 10,000 and near-linear. Then, for a size
   over the cap of 10,000, the run that enforces it.
2. Dedup alone on the same vectors: the candidate pairs LSH compares against n²/2, and its
   recall against an exact blocked matrix product (up to 10,000: the reference is quadratic).
3. Bounded memory: T turns each restating one of F distinct facts through the memory_store tool
   in varied surface forms (tests/support/fact_workload.py), maintenance every 500 turns and at
   the end; what is left active per distinct fact. Goal: exactly one.

    .venv/bin/python bench/consolidation.py                      # 1k, 10k, 50k; 5,000 turns
    .venv/bin/python bench/consolidation.py --sizes 1000,10000 --turns 1000 --minilm
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/support is not installed; the bench runs from a plain clone

from shared.adapters.embedded import build_embedded_backend  # noqa: E402
from shared.backend import Backend  # noqa: E402
from shared.config import Settings  # noqa: E402
from shared.consolidation.dedup import brute_force_pairs, near_duplicate_pairs  # noqa: E402
from shared.consolidation.maintenance import (  # noqa: E402
    DEFAULT_POLICY,
    MaintenancePolicy,
    MaintenanceReport,
)
from shared.consolidation.maintenance.driver import run_maintenance  # noqa: E402
from shared.models import FactCategory, Triple  # noqa: E402
from shared.tools.memory import fact_index_doc  # noqa: E402

WS = "bench"
DIM = 384
MODEL = "bench/synthetic-384"
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
CATEGORIES: list[FactCategory] = ["preference", "entity", "fact", "artifact", "decision"]


class SyntheticEmbedder:
    """Names the model the synthetic vectors were made with, so nothing is re-embedded."""

    model_id = MODEL
    dimensions = DIM

    def embed(self, texts: object) -> list[list[float]]:
        raise AssertionError("the synthetic facts all have vectors of the current model")


def synthetic(n: int, seed: int = 3) -> tuple[list[Triple], np.ndarray]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    dups = n // 20
    sources = rng.integers(0, n - dups, dups)
    noise = rng.standard_normal((dups, DIM)).astype(np.float32)
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    mix = rng.uniform(0.1, 0.3, (dups, 1)).astype(np.float32)  # cosine ~0.95-0.99 to the source
    vectors[n - dups :] = vectors[sources] * np.sqrt(1 - mix**2) + noise * mix
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    pick = random.Random(seed)  # noqa: S311 -- synthetic data, not secrets
    triples = []
    for i in range(n):
        faded = i % 20 == 7
        used = i % 50 == 3
        triples.append(
            Triple(
                id=f"f{i:06d}",
                workspace_id=WS,
                subject=f"entity {i}",
                predicate="has property",
                object=f"value {i} of kind {pick.randrange(1000)}",
                user_id="u1",
                session_id=f"s{i // 100}",
                message_ids=[f"m{i}"],
                category=CATEGORIES[i % len(CATEGORIES)],
                created_at=NOW - timedelta(days=3000 if faded else pick.uniform(0, 20)),
                updated_at=NOW - timedelta(days=3000 if faded else pick.uniform(0, 20)),
                access_count=5 if used else 0,
                last_accessed_at=NOW - timedelta(hours=1) if used else None,
                embedding=vectors[i].tolist(),
                embedding_model=MODEL,
            )
        )
    return triples, vectors


def seed(backend: Backend, triples: list[Triple]) -> None:
    for lo in range(0, len(triples), 1000):
        chunk = triples[lo : lo + 1000]
        backend.memory.put_triples(WS, chunk)
        backend.index.upsert(WS, [fact_index_doc(t, t.embedding) for t in chunk])


def timed(
    backend: Backend, run_id: str, now: datetime, policy: MaintenancePolicy
) -> tuple[MaintenanceReport, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    report = run_maintenance(backend, WS, run_id=run_id, clock=lambda: now, policy=policy)
    return report, time.perf_counter() - wall, time.process_time() - cpu


def scale_table(sizes: list[int]) -> None:
    print("\n## Maintenance over N facts in one scope (embedded backend, 384-dim, ~5% near-duplicates)\n")
    print("The cap is lifted to N here, so every size measures the same work; the next table applies it.\n")
    print(
        "| N | seed s | run 1 wall s | run 1 cpu s | run 2 wall s | run 2 cpu s | cpu µs/fact (run 2) "
        "| scored | promoted | pruned | merged | written (run 1 / 2) | comparisons | n²/2 |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        triples, _ = synthetic(n)
        with tempfile.TemporaryDirectory(prefix="sigil-bench-") as tmp:
            backend = build_embedded_backend(Settings(data_dir=Path(tmp)))
            backend.embedder = SyntheticEmbedder()
            try:
                t0 = time.perf_counter()
                seed(backend, triples)
                seeded = time.perf_counter() - t0
                del triples
                policy = MaintenancePolicy(cap=max(n, DEFAULT_POLICY.cap))
                first, w1, c1 = timed(backend, "r1", NOW, policy)
                second, w2, c2 = timed(backend, "r2", NOW + timedelta(hours=1), policy)
            finally:
                backend.close()
        assert first.complete and second.complete
        print(
            f"| {n:,} | {seeded:.1f} | {w1:.2f} | {c1:.2f} | {w2:.2f} | {c2:.2f} | {c2 / n * 1e6:.0f} "
            f"| {first.scored:,} | {first.promoted:,} | {first.pruned:,} | {first.merged:,} "
            f"| {first.written:,} / {second.written:,} | {first.dedup_comparisons:,} | {n * (n - 1) // 2:,} |"
        )


def cap_table(n: int) -> None:
    """The default cap over a scope that outgrew it: a one-time cost, then ordinary runs."""
    triples, _ = synthetic(n)
    with tempfile.TemporaryDirectory(prefix="sigil-bench-") as tmp:
        backend = build_embedded_backend(Settings(data_dir=Path(tmp)))
        backend.embedder = SyntheticEmbedder()
        try:
            seed(backend, triples)
            del triples
            first, w1, c1 = timed(backend, "r1", NOW, DEFAULT_POLICY)
            second, w2, c2 = timed(backend, "r2", NOW + timedelta(hours=1), DEFAULT_POLICY)
        finally:
            backend.close()
    print(f"\n## The cap of {DEFAULT_POLICY.cap:,} active facts over a scope of {n:,}\n")
    print("| run | wall s | cpu s | pruned by decay | merged | pruned by the cap | active after | written |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r, w, c in (("first (enforces the cap)", first, w1, c1), ("next hour", second, w2, c2)):
        print(
            f"| {name} | {w:.2f} | {c:.2f} | {r.pruned:,} | {r.merged:,} | {r.capped:,} | {r.active:,} "
            f"| {r.written:,} |"
        )


def dedup_table(sizes: list[int]) -> None:
    print("\n## Near-duplicate search alone (random-hyperplane LSH, 20 bits x 48 bands, cosine > 0.95)\n")
    print("| N | LSH s | comparisons | n²/2 | share of n²/2 | pairs found | exact pairs | recall | exact s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        _, vectors = synthetic(n)
        x = vectors.astype(np.float64)
        t0 = time.perf_counter()
        pairs, stats = near_duplicate_pairs(x, 0.95)
        lsh = time.perf_counter() - t0
        exact_cells = "| - | - | - |"
        if n <= 10_000:
            t0 = time.perf_counter()
            truth = brute_force_pairs(x, 0.95)
            exact = time.perf_counter() - t0
            found = {(i, j) for i, j, _ in pairs}
            recall = len(found & truth) / max(1, len(truth))
            exact_cells = f"| {len(truth):,} | {recall:.3f} | {exact:.2f} |"
        print(
            f"| {n:,} | {lsh:.2f} | {stats.comparisons:,} | {stats.all_pairs:,} "
            f"| {stats.comparisons / stats.all_pairs:.2e} | {stats.pairs:,} {exact_cells}"
        )


def bounded_table(turns: int, facts: int, minilm: bool) -> None:
    from tests.support.fact_workload import distinct_facts, restate_facts
    from tests.support.hashing_embedder import HashingEmbedder

    with tempfile.TemporaryDirectory(prefix="sigil-bench-") as tmp:
        backend = build_embedded_backend(Settings(data_dir=Path(tmp)))
        if minilm:
            from shared.memory.embeddings.minilm import LocalMiniLM

            backend.embedder = LocalMiniLM()
        else:
            backend.embedder = HashingEmbedder()
        name = "all-MiniLM-L6-v2" if minilm else "hashed trigrams"
        try:
            t0 = time.perf_counter()
            result = restate_facts(
                backend, WS, facts=distinct_facts(facts), turns=turns, maintenance_every=500, start=NOW
            )
            took = time.perf_counter() - t0
        finally:
            backend.close()
    counts = list(result.active_per_fact.values())
    exactly_one = sum(c == 1 for c in counts)
    print(f"\n## Bounded memory: {turns:,} turns restating {facts} facts through memory_store ({name})\n")
    print(
        "| turns | distinct facts stated | triples stored (all statuses) | active "
        "| facts with exactly 1 active | max active per fact | merged (layer 1 / layer 2) "
        "| maintenance runs | s |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {result.turns:,} | {result.facts_stated} | {result.stored:,} | {result.active:,} "
        f"| {exactly_one} / {len(counts)} | {max(counts)} "
        f"| {sum(r.merged_exact for r in result.reports)} / {sum(r.merged_near for r in result.reports)} "
        f"| {len(result.reports)} | {took:.1f} |"
    )
    if exactly_one != len(counts):
        raise SystemExit("bounded memory: some fact has other than one active record")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000,50000", help="fact counts, comma-separated")
    parser.add_argument("--turns", type=int, default=5000, help="turns of the bounded-memory run (0: skip)")
    parser.add_argument("--facts", type=int, default=250, help="distinct facts in the bounded-memory run")
    parser.add_argument("--minilm", action="store_true", help="bounded memory with the local MiniLM model")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    scale_table(sizes)
    if max(sizes) > DEFAULT_POLICY.cap:
        cap_table(max(sizes))
    dedup_table(sizes)
    if args.turns:
        bounded_table(args.turns, args.facts, args.minilm)


if __name__ == "__main__":
    main()

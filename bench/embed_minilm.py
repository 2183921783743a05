"""Throughput of the local all-MiniLM-L6-v2 (numpy) embedder. A benchmark, not a test: it prints a table.

Texts are ~100 characters (about 20-25 tokens each), generated deterministically; each batch size
is timed over a few warm runs and the best run is reported (the machine is shared, so the best run
is the one least disturbed by others). CPU texts/s divides by the process's CPU time (all BLAS
threads added up), which is steadier than wall time on a busy machine. On a machine shared with
other work, OPENBLAS_NUM_THREADS=1 is usually faster: OpenBLAS's worker threads spin while they
wait for a core, which costs most at small batches.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shared.memory.embeddings.minilm import LocalMiniLM  # noqa: E402

WORDS = [
    "meeting",
    "dentist",
    "tomorrow",
    "project",
    "deadline",
    "budget",
    "review",
    "coffee",
    "friday",
    "team",
    "launch",
    "invoice",
    "travel",
    "hotel",
    "flight",
    "weather",
    "garden",
    "recipe",
    "birthday",
    "gift",
    "sister",
    "moved",
    "berlin",
    "guitar",
    "lesson",
    "marathon",
    "training",
    "doctor",
    "appointment",
    "quarterly",
    "report",
]


def make_texts(n: int, length: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)  # noqa: S311 - reproducible filler text, not secrets
    texts = []
    for _ in range(n):
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < length:
            words.append(rng.choice(WORDS))
        texts.append((" ".join(words))[:length].rstrip() + ".")
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--texts", type=int, default=512)
    parser.add_argument("--chars", type=int, default=100)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64, 128])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    texts = make_texts(args.texts, args.chars)
    t0 = time.perf_counter()
    LocalMiniLM().load()
    load_s = time.perf_counter() - t0
    print(f"load (hash check + weights): {load_s * 1000:.0f} ms; {args.texts} texts of ~{args.chars} chars")
    print(f"{'batch':>6} {'texts/s':>9} {'ms/text':>8} {'CPU texts/s':>12}")
    for batch in args.batch:
        model = LocalMiniLM(batch_size=batch)
        model.load()
        model.embed(texts[:batch])  # warm-up
        best = best_cpu = float("inf")
        for _ in range(args.runs):
            start, cpu_start = time.perf_counter(), time.process_time()
            model.embed(texts)
            best = min(best, time.perf_counter() - start)
            best_cpu = min(best_cpu, time.process_time() - cpu_start)
        print(
            f"{batch:>6} {args.texts / best:>9.0f} {best / args.texts * 1000:>8.2f} "
            f"{args.texts / best_cpu:>12.0f}"
        )


if __name__ == "__main__":
    main()

"""The output filter and the injection scan against their corpora. Run by `make bench`.

    .venv/bin/python bench/redaction.py [--locomo path/to/locomo-dev.json]

Tables:
1. Credentials (tests/support/safety_corpus.py: seeded, 20 providers in the shapes their docs
   show, each in every form it is pasted in): per provider, how many credentials, forms and texts,
   and misses (a credential, or any piece of the text around it, not as it should be).
   Then the maintained rule set (gitleaks' default rules, shared/safety/ruleset.py): one sample
   per rule drawn from its own regex (tests/support/rule_samples.py), and misses.
2. False positives on ordinary text: the redaction filter (texts changed; PII off, then on) and
   the injection scan (texts flagged), on the project's ordinary messages, the lookalikes
   (hashes, ids, base64, identifiers beside "secret" and "aws"), and every turn of the LoCoMo
   conversations when the file is there (../shared/bench/locomo, evaluation only, never shipped).
3. AWS secret keys under a label alone: how often a random key reads as written and is kept.
4. Throughput: the credential texts, ordinary conversation, a megabyte of prose, of random
   base64 and of hostile text (the rules' keywords and assignment operators everywhere), and
   the rule set's first use in a process (parse the file, compile what the text needs).

A benchmark, not a test: it prints tables. tests/unit/test_redaction_corpus.py asserts misses = 0.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/support is not installed; the bench runs from a plain clone

from shared.safety import ruleset  # noqa: E402
from shared.safety.injection import scan  # noqa: E402
from shared.safety.redact import redact  # noqa: E402
from tests.support import rule_samples  # noqa: E402
from tests.support.safety_corpus import (  # noqa: E402
    BENIGN,
    ORDINARY,
    PROVIDERS,
    cases,
    credentials,
    lookalikes,
    ordinary_sentences,
)

LOCOMO = ROOT.parent / "shared" / "bench" / "locomo" / "locomo-dev.json"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    print()


def credentials_table() -> int:
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # provider -> [texts, misses]
    for case in cases():
        result = redact(case.text, pii=False)
        missed = any(s in result.text for s in case.secrets) or not case.expected.fullmatch(result.text)
        per[case.provider][0] += 1
        per[case.provider][1] += missed
    counts: dict[str, int] = defaultdict(int)
    for provider, _, _ in credentials():
        counts[provider.name] += 1
    rows = [(p.name, p.kind, counts[p.name], len(p.forms), per[p.name][0], per[p.name][1]) for p in PROVIDERS]
    total_forms = len({f for p in PROVIDERS for f in p.forms})
    misses = sum(r[5] for r in rows)
    rows.append(("all", "", sum(counts.values()), total_forms, sum(r[4] for r in rows), misses))
    print("1. Credentials in the forms people paste them (redact, PII off)\n")
    table(["provider", "kind", "credentials", "forms", "texts", "misses"], rows)
    return misses + rule_set_table()


def rule_set_table() -> int:
    rules = ruleset.default()
    samples = rule_samples.samples(rules)
    missed = [s.rule for s in samples if s.secret in redact(s.text, pii=False).text]
    print(
        f"1b. The maintained rule set: gitleaks {rules.version} ({rules.commit[:12]}), one sample per rule\n"
    )
    table(
        ["rules", "with a sample", "samples redacted", "misses"],
        [(len(rules.rules), len(samples), len(samples) - len(missed), ", ".join(missed) or 0)],
    )
    return len(missed)


def locomo_turns(path: Path) -> list[str]:
    if not path.is_file():
        return []
    turns: list[str] = []
    for sample in json.loads(path.read_text()):
        conversation = sample["conversation"]
        for key, value in conversation.items():
            if key.startswith("session_") and isinstance(value, list):
                turns += [t["text"] for t in value if t.get("text")]
    return turns


def rate(changed: int, total: int) -> str:
    return f"{changed}/{total} ({100 * changed / total:.2f}%)" if total else "n/a"


def false_positive_table(locomo: list[str]) -> None:
    corpora: list[tuple[str, list[str]]] = [
        ("ordinary (tests)", ORDINARY),
        ("benign messages (tests)", BENIGN),
        ("lookalikes (generated)", lookalikes()),
        ("ordinary sentences: digests, ids, images (generated)", ordinary_sentences()),
    ]
    if locomo:
        corpora.append(("LoCoMo conversation turns", locomo))
    rows = []
    for name, texts in corpora:
        off = sum(redact(t, pii=False).text != t for t in texts)
        on = sum(redact(t, pii=True).text != t for t in texts)
        flagged = sum(scan(t).flagged for t in texts)
        n = len(texts)
        rows.append((name, n, rate(off, n), rate(on, n), rate(flagged, n)))
    print("2. False positives on ordinary text\n")
    table(["corpus", "texts", "redacted (secrets)", "redacted (+PII)", "injection flagged"], rows)
    if not locomo:
        print(f"   (LoCoMo not found at {LOCOMO}: pass --locomo PATH for the conversation corpus)\n")


def aws_label_only_table(trials: int) -> None:
    rng = random.Random(11)  # noqa: S311 -- a seeded, repeatable sample, not a secret
    kept = 0
    for _ in range(trials):
        secret = base64.b64encode(rng.randbytes(30)).decode()
        kept += secret in redact(f"aws_secret: {secret}", pii=False).text
    print("3. AWS secret access keys under a label alone (no key id near): random keys kept\n")
    table(["random keys", "kept (read as written)", "rate"], [(trials, kept, f"{kept / trials:.4%}")])


def throughput(name: str, texts: list[str], fn: Callable[[str], object]) -> tuple[str, int, str, str, str]:
    size = sum(len(t.encode()) for t in texts)
    started = time.perf_counter()
    for t in texts:
        fn(t)
    took = time.perf_counter() - started
    per_text = f"{took / len(texts) * 1e6:.0f}"
    return name, len(texts), f"{size / 1e6:.2f}", per_text, f"{size / 1e6 / took:.2f}"


def megabyte(pieces: Sequence[str], seed: int) -> str:
    rng = random.Random(seed)  # noqa: S311 -- a repeatable text, not a secret
    out: list[str] = []
    size = 0
    while size < 1_000_000:
        out.append(rng.choice(pieces))
        size += len(out[-1]) + 1
    return " ".join(out)[:1_000_000]


def first_use() -> None:
    """The rule set's first use in a process: parse the file, then compile and run every rule."""
    text = " ".join(s.text for s in rule_samples.samples())
    ruleset.default.cache_clear()
    started = time.perf_counter()
    rules = ruleset.default()
    parsed = time.perf_counter() - started
    list(rules.findings(text, text.lower()))
    took = time.perf_counter() - started - parsed
    print("5. The rule set's first use in a process (paid once; a rule compiles when its keywords appear)\n")
    table(
        ["parse the file", f"compile and run all {len(rules.rules)} rules"],
        [(f"{parsed * 1e3:.0f} ms", f"{took * 1e3:.0f} ms")],
    )


def throughput_table(locomo: list[str]) -> None:
    texts = [c.text for c in cases()]
    joined = " ".join(locomo or BENIGN)
    prose = (joined * (1_000_000 // len(joined) + 1))[:1_000_000]
    rng = random.Random(3)  # noqa: S311 -- a repeatable text, not a secret
    b64 = base64.b64encode(rng.randbytes(750_000)).decode()
    keywords = sorted({k for r in ruleset.default().rules for k in r.keywords})
    hostile = megabyte([f"{k}={k}" for k in keywords] + [*keywords, "key:", "token =", "'", '"', "=>"], 4)
    alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    findings = megabyte(["cache_key=" + "".join(rng.choices(alnum, k=16)) for _ in range(5000)], 5)
    rows = [
        throughput("redact: credential texts", texts, lambda t: redact(t, pii=False)),
        throughput("redact: ordinary text (PII on)", locomo or BENIGN * 50, lambda t: redact(t, pii=True)),
        throughput("redact: one megabyte of prose", [prose], lambda t: redact(t, pii=True)),
        throughput("redact: one megabyte of random base64", [b64], lambda t: redact(t, pii=True)),
        throughput("redact: one megabyte of rule keywords", [hostile], lambda t: redact(t, pii=True)),
        throughput("redact: one line, a finding every 27 chars", [findings], lambda t: redact(t, pii=True)),
        throughput("scan: ordinary text", locomo or BENIGN * 50, scan),
        throughput("scan: one megabyte of prose", [prose], scan),
    ]
    print("4. Throughput (one core)\n")
    table(["what", "texts", "MB", "us/text", "MB/s"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--locomo", type=Path, default=LOCOMO, help="LoCoMo JSON for the conversation corpus")
    parser.add_argument("--aws-trials", type=int, default=20_000)
    args = parser.parse_args()
    locomo = locomo_turns(args.locomo)
    misses = credentials_table()
    false_positive_table(locomo)
    aws_label_only_table(args.aws_trials)
    throughput_table(locomo)
    first_use()
    if misses:
        print(f"{misses} credential texts missed")


if __name__ == "__main__":
    main()

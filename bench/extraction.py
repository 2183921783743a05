"""Fact extraction scored against what a careful reader would extract. A benchmark: it prints tables.

Each conversation of bench/extraction_data/conversations.yaml (written for this benchmark: the
user's preferences, people, work, places, dates, a mind changed, negations, hypotheticals,
third parties, injection attempts, PII and a credential, small talk) is one extraction batch
through the product's own path, as compaction runs it (shared.consolidation.compaction._facts):
extraction_input over its messages, one call with EXTRACTION_SYSTEM to the consolidation model,
parse_extraction, and FactWriter (sanitisation, injection scan, redaction, keys, dedup) into a
real embedded backend in a temp dir. The active facts stored are then scored against the
conversation's gold facts.

Models:
- default, `replay`: a FunctionProvider answering each conversation with a recorded raw answer
  (bench/extraction_data/replay/<id>.txt), written in the manner of a cheap model's answer to the
  product's prompt, mistakes included (bench/extraction_data/replay/README.md says how). The
  score shows what the pipeline lets through of them.
- `--model provider/name`: any model the product can build (openai/..., anthropic/..., bedrock/...)
  as the consolidation model, through the same registry; an OpenAI-compatible server with
  OPENAI_BASE_URL or --base-url, keys from the environment as the gateway reads them.

Matching (one-to-one, greedy; each gold fact may list alternative phrasings, any one counts once):
- strict: subject, predicate and object equal after shared.memory.keys.normalize_key (case, runs
  of spaces, hyphens and underscores).
- lenient (reported apart; strict matches included): the subject's name (what follows its last
  "/") equal or sharing half its words (Dice), and at least half of the gold object's content
  words in the stored object (|G∩E| / |G| >= 0.5; lower case, stop words out, negations kept);
  the predicate is ignored. Pairs are taken best score first.
Precision = matched / stored, recall = matched / gold facts; totals are micro-averaged.
Forbidden facts (a hypothetical, a third party's fact filed under the user, an injected claim or
instruction, an overridden value, a flipped negation, unredacted PII or a credential): a check is
broken when any stored fact's text contains all of its strings and none of its exceptions; the
same check is run on the model's raw answer, to show what the pipeline removed.

    .venv/bin/python bench/extraction.py                          # the recorded answers
    OPENAI_API_KEY=... .venv/bin/python bench/extraction.py --model openai/gpt-4.1-mini
    .venv/bin/python bench/extraction.py --model openai/llama3.1 --base-url http://localhost:11434/v1
    .venv/bin/python bench/extraction.py --model ... --record answers/   # then --replay-dir answers/
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the bench runs from a plain clone

from shared.adapters.embedded import build_embedded_backend  # noqa: E402
from shared.backend import Backend  # noqa: E402
from shared.config import Settings  # noqa: E402
from shared.consolidation.compaction import ConsolidationModel, consolidation_model  # noqa: E402
from shared.consolidation.extraction import (  # noqa: E402
    ANONYMOUS_SUBJECT,
    EXTRACTION_SYSTEM,
    ExtractedFact,
    FactOutcome,
    FactWriter,
    extraction_input,
    extraction_sources,
    parse_extraction,
)
from shared.errors import SigilError  # noqa: E402
from shared.memory.keys import normalize_key  # noqa: E402
from shared.memory.search import STOP_WORDS  # noqa: E402
from shared.models import WORKSPACE_WIDE, MemoryRecord  # noqa: E402
from shared.providers.base import ChatRequest  # noqa: E402
from shared.providers.function import FunctionProvider  # noqa: E402

DATA_DIR = ROOT / "bench" / "extraction_data"
DEFAULT_DATA = DATA_DIR / "conversations.yaml"
REPLAY_DIR = DATA_DIR / "replay"
REPLAY = "replay"
SESSION = "xbench.s1"
RUN_ID = "xbench"
T0 = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)
LENIENT_MIN = 0.5

Category = Literal[
    "preferences",
    "people",
    "work",
    "places",
    "dates",
    "changed-mind",
    "negation",
    "hypothetical",
    "third-party",
    "injection",
    "pii",
    "small-talk",
]
ForbiddenKind = Literal[
    "hypothetical", "third-party", "injection", "pii", "secret", "changed-mind", "negation"
]


# ---------------------------------------------------------------- the dataset


@dataclass(frozen=True)
class Fact:
    """A triple as stored (or as gold): subject, predicate, object."""

    subject: str
    predicate: str
    object: str

    def text(self) -> str:
        """Lower case, separators as spaces: what forbidden checks look in."""
        raw = f"{self.subject} {self.predicate} {self.object}".casefold()
        return " ".join(re.sub(r"[-_/]+", " ", raw).split())


def parse_fact(text: str) -> Fact:
    """ "subject | predicate | object" as a Fact; ValueError unless it is in the stored form."""
    parts = [p.strip() for p in text.split(" | ")]
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"{text!r} is not 'subject | predicate | object'")
    subject, predicate, obj = parts
    for name, value in (("subject", subject), ("predicate", predicate)):
        if normalize_key(value) != value:
            raise ValueError(f"{text!r}: the {name} {value!r} is not normalised ({normalize_key(value)!r})")
    return Fact(subject, predicate, obj)


class Forbidden(BaseModel):
    """Something that must not be stored (module docstring: how a check is broken)."""

    model_config = ConfigDict(extra="forbid")

    kind: ForbiddenKind
    subject: str | None = None  # None: any subject
    contains: list[str] = Field(min_length=1)
    unless: list[str] = Field(default_factory=list)

    def broken_by(self, fact: Fact) -> bool:
        if self.subject is not None and normalize_key(fact.subject) != normalize_key(self.subject):
            return False
        text = fact.text()
        return all(s.casefold() in text for s in self.contains) and not any(
            s.casefold() in text for s in self.unless
        )


class Conversation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,60}$")
    category: Category
    description: str
    pii_redaction: bool = False
    messages: list[tuple[Literal["user", "assistant"], str]] = Field(min_length=2)
    gold: list[str | list[str]]
    forbidden: list[Forbidden] = Field(default_factory=list)

    @field_validator("gold")
    @classmethod
    def _gold_parses(cls, gold: list[str | list[str]]) -> list[str | list[str]]:
        for item in gold:
            alternatives = [item] if isinstance(item, str) else item
            if not alternatives:
                raise ValueError("a gold fact lists no triple")
            for text in alternatives:
                parse_fact(text)
        return gold

    def gold_facts(self) -> list[tuple[Fact, ...]]:
        """Each gold fact as its alternative phrasings."""
        return [tuple(parse_fact(t) for t in ([g] if isinstance(g, str) else g)) for g in self.gold]


class Dataset(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Literal[1]
    conversations: list[Conversation] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_ids(self) -> Dataset:
        ids = Counter(c.id for c in self.conversations)
        repeated = sorted(i for i, n in ids.items() if n > 1)
        if repeated:
            raise ValueError(f"conversation ids repeated: {', '.join(repeated)}")
        return self


def load_dataset(path: Path = DEFAULT_DATA) -> Dataset:
    return Dataset.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))


def replay_answer(conversation_id: str, replay_dir: Path = REPLAY_DIR) -> str:
    path = replay_dir / f"{conversation_id}.txt"
    if not path.is_file():
        raise SystemExit(f"bench/extraction.py: no recorded answer for {conversation_id!r} ({path})")
    return path.read_text(encoding="utf-8")


# ---------------------------------------------------------------- scoring

_STOP = (STOP_WORDS - {"no", "not", "nor", "never"}) | {"s", "user"}
_WORD = re.compile(r"[a-z0-9]+")


def content_words(text: str) -> set[str]:
    """Lower-case words without stop words; "n't" becomes "not" so a negation is a word."""
    return {w for w in _WORD.findall(text.casefold().replace("n't", " not")) if w not in _STOP}


def dice(a: set[str], b: set[str]) -> float:
    return 2 * len(a & b) / (len(a) + len(b)) if a or b else 1.0


def strict_match(gold: Fact, fact: Fact) -> bool:
    return (
        normalize_key(gold.subject) == normalize_key(fact.subject)
        and normalize_key(gold.predicate) == normalize_key(fact.predicate)
        and normalize_key(gold.object) == normalize_key(fact.object)
    )


def _name(subject: str) -> str:
    return normalize_key(subject).rsplit("/", 1)[-1]


def coverage(gold: set[str], found: set[str]) -> float:
    """The share of the gold words found."""
    return len(gold & found) / len(gold) if gold else float(not found)


def lenient_score(gold: Fact, fact: Fact) -> float:
    """How much of the gold object the stored one says, when the subjects name the same thing."""
    g, f = _name(gold.subject), _name(fact.subject)
    if g != f and dice(set(g.split("-")), set(f.split("-"))) < LENIENT_MIN:
        return 0.0
    return coverage(content_words(gold.object), content_words(fact.object))


@dataclass
class Score:
    gold: int = 0
    stored: int = 0
    strict: int = 0
    lenient: int = 0

    def __add__(self, other: Score) -> Score:
        return Score(
            self.gold + other.gold,
            self.stored + other.stored,
            self.strict + other.strict,
            self.lenient + other.lenient,
        )

    def precision(self, lenient: bool = False) -> float | None:
        return (self.lenient if lenient else self.strict) / self.stored if self.stored else None

    def recall(self, lenient: bool = False) -> float | None:
        return (self.lenient if lenient else self.strict) / self.gold if self.gold else None

    def f1(self, lenient: bool = False) -> float | None:
        p, r = self.precision(lenient), self.recall(lenient)
        if p is None or r is None:
            return None
        return 2 * p * r / (p + r) if p + r else 0.0


def score(gold: Sequence[Sequence[Fact]], stored: Sequence[Fact]) -> Score:
    """Strict and lenient one-to-one matches of `stored` against `gold` (module docstring)."""
    used_gold: set[int] = set()
    used_fact: set[int] = set()
    for gi, alternatives in enumerate(gold):
        for fi, fact in enumerate(stored):
            if fi not in used_fact and any(strict_match(a, fact) for a in alternatives):
                used_gold.add(gi)
                used_fact.add(fi)
                break
    strict = len(used_gold)
    candidates = sorted(
        (
            (max(lenient_score(a, fact) for a in alternatives), gi, fi)
            for gi, alternatives in enumerate(gold)
            if gi not in used_gold
            for fi, fact in enumerate(stored)
            if fi not in used_fact
        ),
        key=lambda c: (-c[0], c[1], c[2]),
    )
    lenient = strict
    for value, gi, fi in candidates:
        if value < LENIENT_MIN:
            break
        if gi in used_gold or fi in used_fact:
            continue
        used_gold.add(gi)
        used_fact.add(fi)
        lenient += 1
    return Score(gold=len(gold), stored=len(stored), strict=strict, lenient=lenient)


def broken(checks: Iterable[Forbidden], facts: Sequence[Fact]) -> list[Forbidden]:
    """The checks some fact breaks."""
    return [c for c in checks if any(c.broken_by(f) for f in facts)]


# ---------------------------------------------------------------- running the product's path


@dataclass
class Result:
    conversation: Conversation
    answer: str
    parsed: list[ExtractedFact]
    outcome: FactOutcome
    stored: list[Fact]
    score: Score
    in_answer: list[Forbidden]  # checks the model's raw answer broke
    got_through: list[Forbidden]  # checks the stored facts broke
    tokens_in: int = 0
    tokens_out: int = 0
    seconds: float = 0.0


def records(conversation: Conversation, workspace_id: str) -> list[MemoryRecord]:
    return [
        MemoryRecord(
            id=f"{conversation.id}.{seq}",
            workspace_id=workspace_id,
            session_id=SESSION,
            role=role,
            text=text,
            seq=seq,
            created_at=T0 + timedelta(minutes=seq),
        )
        for seq, (role, text) in enumerate(conversation.messages)
    ]


def extract(backend: Backend, model: ConsolidationModel, conversation: Conversation) -> Result:
    """One batch through compaction's extraction step, into its own workspace of `backend`."""
    workspace_id = f"xb-{conversation.id}"
    batch = records(conversation, workspace_id)
    started = time.perf_counter()
    answer, usage = model.complete(EXTRACTION_SYSTEM, extraction_input(batch))
    seconds = time.perf_counter() - started
    parsed = parse_extraction(answer)
    writer = FactWriter(
        memory=backend.memory,
        index=backend.index,
        embedder=backend.embedder,
        workspace_id=workspace_id,
        session_id=SESSION,
        user_id=None,  # facts about the speaker are filed under ANONYMOUS_SUBJECT, "user"
        scope=None,
        run_id=RUN_ID,
        sources=extraction_sources(batch),
        now=T0 + timedelta(hours=1),
        pii=conversation.pii_redaction,
    )
    outcome = writer.store(parsed)
    stored = [
        Fact(t.subject, t.predicate, t.object)
        for t in backend.memory.list_triples(workspace_id, scope=WORKSPACE_WIDE)
        if t.status == "active"
    ]
    answered = [Fact(f.subject or ANONYMOUS_SUBJECT, f.key, f.value) for f in parsed]
    return Result(
        conversation=conversation,
        answer=answer,
        parsed=parsed,
        outcome=outcome,
        stored=stored,
        score=score(conversation.gold_facts(), stored),
        in_answer=broken(conversation.forbidden, answered),
        got_through=broken(conversation.forbidden, stored),
        tokens_in=usage.input_tokens,
        tokens_out=usage.output_tokens,
        seconds=seconds,
    )


def replay_model(conversation: Conversation, replay_dir: Path = REPLAY_DIR) -> ConsolidationModel:
    """A function-backed model answering with the conversation's recorded answer."""
    answer = replay_answer(conversation.id, replay_dir)

    def respond(request: ChatRequest) -> str:
        if request.system != EXTRACTION_SYSTEM:
            raise AssertionError("the replay answers the extraction prompt only")
        return answer

    return ConsolidationModel(FunctionProvider(respond), REPLAY)


def bench_settings(data_dir: Path, embedding_model: str) -> Settings:
    # The environment's keys and base URLs, as the gateway reads them; the rest is the bench's.
    return Settings().model_copy(
        update={"backend": "embedded", "data_dir": data_dir, "embedding_model": embedding_model}
    )


def real_model(ref: str, base_url: str | None) -> ConsolidationModel:
    """The product's consolidation model for `ref` (SigilError, e.g. ModelNotConfigured, if unusable)."""
    update: dict[str, object] = {"consolidation_model": ref, "fallback_model": None}
    if base_url:
        update["openai_base_url"] = base_url
    return consolidation_model(Settings().model_copy(update=update))


def run(
    conversations: Sequence[Conversation],
    model_for: Callable[[Conversation], ConsolidationModel],
    *,
    embedding_model: str = "auto",
) -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="sigil-xbench-") as tmp:
        backend = build_embedded_backend(bench_settings(Path(tmp), embedding_model))
        try:
            return [extract(backend, model_for(c), c) for c in conversations]
        finally:
            backend.close()


# ---------------------------------------------------------------- tables


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _checks(found: Sequence[Forbidden]) -> str:
    return str(len(found))


def print_tables(results: Sequence[Result], label: str) -> None:
    total = sum((r.score for r in results), Score())
    checks = sum(len(r.conversation.forbidden) for r in results)
    counts = f"{len(results)} conversations, {total.gold} gold facts, {checks} forbidden checks"
    print(f"\n## Extraction: {label} ({counts})\n")
    print(
        "| conversation | category | gold | answer items | dropped | merged | stored "
        "| strict | P | R | lenient | P | R | forbidden: answer | stored |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        s = r.score
        print(
            f"| {r.conversation.id} | {r.conversation.category} | {s.gold} | {len(r.parsed)} "
            f"| {r.outcome.dropped} | {r.outcome.merged} | {s.stored} "
            f"| {s.strict} | {_ratio(s.precision())} | {_ratio(s.recall())} "
            f"| {s.lenient} | {_ratio(s.precision(True))} | {_ratio(s.recall(True))} "
            f"| {_checks(r.in_answer)} / {len(r.conversation.forbidden)} | {_checks(r.got_through)} |"
        )
    print(
        f"| **all** | | {total.gold} | {sum(len(r.parsed) for r in results)} "
        f"| {sum(r.outcome.dropped for r in results)} | {sum(r.outcome.merged for r in results)} "
        f"| {total.stored} | {total.strict} | {_ratio(total.precision())} | {_ratio(total.recall())} "
        f"| {total.lenient} | {_ratio(total.precision(True))} | {_ratio(total.recall(True))} "
        f"| {sum(len(r.in_answer) for r in results)} / {checks} "
        f"| {sum(len(r.got_through) for r in results)} |"
    )

    by_category: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by_category[r.conversation.category].append(r)
    print("\n### By category (micro-averaged)\n")
    print(
        "| category | conversations | gold | stored | strict P | strict R | strict F1 "
        "| lenient P | lenient R | lenient F1 | forbidden stored |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for category, group in by_category.items():
        s = sum((r.score for r in group), Score())
        print(
            f"| {category} | {len(group)} | {s.gold} | {s.stored} "
            f"| {_ratio(s.precision())} | {_ratio(s.recall())} | {_ratio(s.f1())} "
            f"| {_ratio(s.precision(True))} | {_ratio(s.recall(True))} | {_ratio(s.f1(True))} "
            f"| {sum(len(r.got_through) for r in group)} |"
        )
    print(
        f"| **all** | {len(results)} | {total.gold} | {total.stored} "
        f"| {_ratio(total.precision())} | {_ratio(total.recall())} | {_ratio(total.f1())} "
        f"| {_ratio(total.precision(True))} | {_ratio(total.recall(True))} | {_ratio(total.f1(True))} "
        f"| {sum(len(r.got_through) for r in results)} |"
    )

    kinds: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # checks, in the answer, stored
    for r in results:
        for c in r.conversation.forbidden:
            tally = kinds[c.kind]
            tally[0] += 1
            tally[1] += c in r.in_answer
            tally[2] += c in r.got_through
    print("\n### Forbidden facts (checks broken by the model's answer, and by what was stored)\n")
    print("| kind | checks | in the model's answer | stored (got through) |")
    print("|---|---:|---:|---:|")
    for kind, (n, answered, stored) in sorted(kinds.items()):
        print(f"| {kind} | {n} | {answered} | {stored} |")
    tokens_in = sum(r.tokens_in for r in results)
    tokens_out = sum(r.tokens_out for r in results)
    seconds = sum(r.seconds for r in results)
    print(f"\nModel calls: {len(results)}, tokens in / out: {tokens_in:,} / {tokens_out:,}, {seconds:.1f} s.")


def print_misses(results: Sequence[Result]) -> None:
    """What was stored and what the gold said, per conversation: for reading a run, not scoring it."""
    for r in results:
        print(f"\n#### {r.conversation.id}\n")
        for f in r.stored:
            print(f"- stored: {f.subject} | {f.predicate} | {f.object}")
        for alternatives in r.conversation.gold_facts():
            g = alternatives[0]
            print(f"- gold:   {g.subject} | {g.predicate} | {g.object}")
        for c in r.got_through:
            print(f"- forbidden stored: {c.kind} {c.contains}")


# ---------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> list[Result]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the conversations (YAML)")
    parser.add_argument(
        "--model",
        default=REPLAY,
        help="'replay' (the recorded answers, default) or provider/model, e.g. openai/gpt-4.1-mini",
    )
    parser.add_argument("--base-url", help="an OpenAI-compatible endpoint (else OPENAI_BASE_URL)")
    parser.add_argument("--conversations", help="ids to run, comma-separated (default: all)")
    parser.add_argument(
        "--embedding-model",
        default="auto",
        help="SIGIL_EMBEDDING_MODEL for the backend (near-duplicate dedup): auto (local MiniLM), none...",
    )
    parser.add_argument("--show", action="store_true", help="also list every stored and gold fact")
    parser.add_argument(
        "--replay-dir", type=Path, help="the recorded answers to replay (default: replay/ beside --data)"
    )
    parser.add_argument(
        "--record", type=Path, metavar="DIR", help="write each raw answer to DIR/<id>.txt, replayable later"
    )
    args = parser.parse_args(argv)

    dataset = load_dataset(args.data)
    conversations = dataset.conversations
    if args.conversations:
        wanted = [c for c in args.conversations.split(",") if c]
        known = {c.id: c for c in conversations}
        unknown = [c for c in wanted if c not in known]
        if unknown:
            raise SystemExit(f"bench/extraction.py: unknown conversation ids: {', '.join(unknown)}")
        conversations = [known[c] for c in wanted]

    model_for: Callable[[Conversation], ConsolidationModel]
    if args.model == REPLAY:
        replay_dir = args.replay_dir or args.data.parent / "replay"
        model_for = lambda c: replay_model(c, replay_dir)  # noqa: E731
        label = "replayed answers (function-backed model)"
    else:
        try:
            model = real_model(args.model, args.base_url)
        except SigilError as exc:
            raise SystemExit(f"bench/extraction.py: {exc}") from exc
        model_for = lambda _c: model  # noqa: E731
        label = model.ref
    try:
        results = run(conversations, model_for, embedding_model=args.embedding_model)
    except SigilError as exc:
        raise SystemExit(f"bench/extraction.py: {type(exc).__name__}: {exc}") from exc
    print_tables(results, label)
    if args.record:
        args.record.mkdir(parents=True, exist_ok=True)
        for r in results:
            (args.record / f"{r.conversation.id}.txt").write_text(r.answer, encoding="utf-8")
        print(f"\nAnswers recorded in {args.record} (replay them with --replay-dir).")
    if args.show:
        print_misses(results)
    return results


if __name__ == "__main__":
    main()

"""A maintained secret-scanning rule set, loaded as data: gitleaks' default rules.

`shared/safety/rules/gitleaks.toml` is gitleaks' `config/gitleaks.toml`, vendored unchanged under
a header that records where it came from (upstream commit, version, the sha256 of the body) and
gitleaks' MIT licence. `redact` runs it after Sigil's own rules (shared/safety/redact.py), so a
provider the hand-written shapes never named (a 1Password, Doppler or PlanetScale token) is
still caught, and a new provider arrives by updating the file, not by writing a pattern.

What each rule means is gitleaks' (detect/detect.go): a regex, keywords one of which must be in
the text (lower-cased) before the regex runs, an optional entropy floor on the secret (a
finding whose Shannon entropy is at or under it is dropped), and allowlists (regexes of the
secret, the match or the line, and stopwords of the secret) that drop a finding; the file's
global allowlist applies to every rule. The secret is the rule's `secretGroup`, else the first
non-empty group, else the whole match. Path and commit allowlists and path-only rules concern
files in a repository and do not apply to a chat reply.

The regexes are RE2 syntax (Go's regexp) and run on RE2 (google-re2), which matches in time
linear in the text: Python's `re` backtracks, and some of these rules (nested bounded
repetitions) would cost far more there on hostile input. Nothing is read or compiled at import:
the file is parsed on first use, and each rule is compiled the first time its keywords are in a
text, so a Lambda's cold start pays for neither, and a reply pays only for the rules it can hit.
"""

from __future__ import annotations

import functools
import math
import re
import tomllib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

RULES_FILE = Path(__file__).with_name("rules") / "gitleaks.toml"
_HEADER_FIELD = re.compile(r"^# (upstream(?:-[a-z0-9]+)?): (\S+)$", re.MULTILINE)
HEADER_END = "# " + "-" * 94 + "\n"


class _Match(Protocol):
    def span(self, group: int = 0) -> tuple[int, int]: ...
    def groups(self) -> tuple[str | bytes | None, ...]: ...


class _Regex(Protocol):
    def finditer(self, text: str | bytes) -> Iterator[_Match]: ...
    def search(self, text: str | bytes) -> _Match | None: ...


def _compile(pattern: str) -> _Regex:
    # Imported here, not at the top: the webhook's cold start must not load it for a reply
    # it will never redact.
    import re2

    compiled: _Regex = re2.compile(pattern)
    return compiled


@dataclass(frozen=True)
class Allowlist:
    """What drops a finding: one of `regexes` matching the target, or one of `stopwords` (lower
    case) in the secret. `target` is "secret", "match" or "line"."""

    target: str
    regexes: tuple[str, ...]
    stopwords: tuple[str, ...]

    @functools.cached_property
    def _compiled(self) -> tuple[_Regex, ...]:
        return tuple(_compile(r) for r in self.regexes)

    @functools.cached_property
    def _stopwords(self) -> _Regex | None:
        # One RE2 alternation: generic-api-key has 1,446 stopwords, and a substring search each
        # would cost that many passes over every finding.
        import re2

        return _compile("|".join(re2.escape(w) for w in self.stopwords)) if self.stopwords else None

    def allows(self, secret: str, match: str, line: str) -> bool:
        target = {"match": match, "line": line}.get(self.target, secret)
        if target and any(r.search(target) is not None for r in self._compiled):
            return True
        return self._stopwords is not None and self._stopwords.search(secret.lower()) is not None


@dataclass(frozen=True)
class Rule:
    id: str
    pattern: str
    keywords: tuple[str, ...]  # lower case
    entropy: float = 0.0
    secret_group: int = 0
    allowlists: tuple[Allowlist, ...] = ()

    @property
    def kind(self) -> str:
        """The marker's name: the rule's id in the alphabet of `[REDACTED:<kind>]`."""
        return self.id.lower().replace("-", "_").replace(".", "_")

    @functools.cached_property
    def regex(self) -> _Regex:
        return _compile(self.pattern)

    @functools.cached_property
    def reads_lines(self) -> bool:
        return any(a.target == "line" for a in self.allowlists)


@dataclass(frozen=True)
class RuleSet:
    source: str  # the upstream file's address, at its commit
    version: str  # `git describe` of that commit
    commit: str
    body_sha256: str  # of the file below the header, as copied
    rules: tuple[Rule, ...]
    allowlists: tuple[Allowlist, ...] = field(default=())

    @functools.cached_property
    def reads_lines(self) -> bool:
        return any(a.target == "line" for a in self.allowlists)

    @functools.cached_property
    def _keywords(self) -> tuple[tuple[str, ...], Any]:
        """Every rule's keywords, and an RE2 set of them that finds which are in a text in one pass."""
        import re2

        words = tuple(sorted({k for rule in self.rules for k in rule.keywords}))
        keyword_set = re2.Set.SearchSet()
        for word in words:
            keyword_set.Add(re2.escape(word))
        keyword_set.Compile()
        return words, keyword_set

    def keywords_in(self, lowered: str) -> set[str]:
        """The rules' keywords that occur in `lowered` (a text in lower case)."""
        words, keyword_set = self._keywords
        hits = keyword_set.Match(lowered)
        # None is "no keyword" or, on a hostile text, the set's automaton out of memory: the two
        # look alike, so check one by one (a substring search each; the rare case).
        return {words[i] for i in hits} if hits else {w for w in words if w in lowered}

    def findings(self, text: str, lowered: str) -> Iterator[tuple[int, int, str]]:
        """(start, end, kind) of each secret the rules find in `text`, in rule order; `lowered`
        is `text` lower-cased with the same indices (the keywords are looked up in it)."""
        present = self.keywords_in(lowered)
        # RE2 matches UTF-8: an ASCII text is encoded once here, rather than by every rule (where
        # RE2 would also map each offset back), and its byte offsets are its indices.
        subject: str | bytes = text.encode("ascii") if text.isascii() else text
        for rule in self.rules:
            if rule.keywords and present.isdisjoint(rule.keywords):
                continue
            for m in rule.regex.finditer(subject):
                span = _secret_span(text, m, rule.secret_group)
                if span is None:
                    continue
                start, end = span
                secret = text[start:end]
                if rule.entropy and entropy(secret) <= rule.entropy:
                    continue
                match = text[slice(*m.span())]
                line = _line(text, *m.span()) if rule.reads_lines or self.reads_lines else ""
                if any(a.allows(secret, match, line) for a in (*self.allowlists, *rule.allowlists)):
                    continue
                yield start, end, rule.kind


def _secret_span(text: str, m: _Match, group: int) -> tuple[int, int] | None:
    if group:
        start, end = m.span(group)
        return (start, end) if end > start else None
    for i, value in enumerate(m.groups(), start=1):
        if value:
            return m.span(i)
    start, end = m.span()
    # gitleaks trims line breaks off a match; a match of line breaks alone is nothing.
    while end > start and text[end - 1] == "\n":
        end -= 1
    return (start, end) if end > start else None


# How far the line an allowlist reads reaches either side of a match. gitleaks reads the whole
# line; a text of one long line would then cost a line per finding (quadratic), and the line
# allowlists look at what is beside the match (`--mount=type=secret,`, an `import … from`).
LINE_REACH = 400


def _line(text: str, start: int, end: int) -> str:
    low = max(0, start - LINE_REACH)
    high = min(len(text), end + LINE_REACH)
    first = text.rfind("\n", low, start)
    last = text.find("\n", end, high)
    return text[low if first < 0 else first + 1 : high if last < 0 else last]


def entropy(value: str) -> float:
    """Shannon entropy in bits per character, as gitleaks computes it (detect/utils.go)."""
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values()) if n else 0.0


def _allowlist(raw: dict[str, Any]) -> Allowlist | None:
    # An AND allowlist with paths or commits can never hold for a chat reply (it has neither),
    # and an OR allowlist's paths and commits are ignored the same way.
    if raw.get("condition", "OR").upper() == "AND" and (raw.get("paths") or raw.get("commits")):
        return None
    regexes = tuple(raw.get("regexes", ()))
    stopwords = tuple(w.lower() for w in raw.get("stopwords", ()))
    if not regexes and not stopwords:
        return None
    return Allowlist(raw.get("regexTarget", "secret"), regexes, stopwords)


def _allowlists(raws: list[dict[str, Any]]) -> tuple[Allowlist, ...]:
    return tuple(a for a in map(_allowlist, raws) if a is not None)


def parse(text: str) -> RuleSet:
    """A RuleSet from the vendored file's text: its header fields and its rules."""
    header, sep, body = text.partition(HEADER_END)
    if not sep:
        raise ValueError("the rules file has no header line (see shared/safety/rules/gitleaks.toml)")
    fields = dict(_HEADER_FIELD.findall(header))
    data = tomllib.loads(body)
    rules = tuple(
        Rule(
            id=raw["id"],
            pattern=raw["regex"],
            keywords=tuple(k.lower() for k in raw.get("keywords", ())),
            entropy=float(raw.get("entropy", 0.0)),
            secret_group=int(raw.get("secretGroup", 0)),
            allowlists=_allowlists(raw.get("allowlists", [])),
        )
        for raw in data["rules"]
        if "regex" in raw  # a rule of paths alone flags files, not text
    )
    glob = data.get("allowlist")
    return RuleSet(
        source=fields["upstream"],
        version=fields["upstream-version"],
        commit=fields["upstream-commit"],
        body_sha256=fields["upstream-sha256"],
        rules=rules,
        allowlists=_allowlists([glob] if glob else []),
    )


@functools.cache
def default() -> RuleSet:
    """The vendored gitleaks rules, parsed once per process."""
    return parse(RULES_FILE.read_text(encoding="utf-8"))

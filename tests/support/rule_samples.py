"""One credential per rule of the maintained rule set, drawn from the rule's own regex.

Each sample is generated at run time from the rule's regex with a seeded RNG (the same text on
every run, and no live-looking key committed for a secret scanner to flag): the regex is walked
and each part drawn. Optional context is left out (`[\\w.-]{0,50}?` before a keyword is
empty, `[ \\t]{0,20}` after it is empty), a credential's body gets its full length, and a draw is
kept only if the rule itself then finds a secret in it: its regex, its entropy floor and its
allowlists, exactly as `shared.safety.ruleset` applies them. So every sample is a credential
the rule set says it catches, shaped as the provider issues it.

tests/fixtures/redaction/rule_samples.json pins the corpus: for each rule, the draw that was
kept and the sha256 of the sample, so a change to the generator or to the vendored rules shows as
a diff there (`python -m tests.support.rule_samples` rewrites it).
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import re
import re._constants as sre_c  # type: ignore[import-not-found,unused-ignore]
import re._parser as sre_parse  # type: ignore[import-not-found,unused-ignore]
import string
import sys
from dataclasses import dataclass
from pathlib import Path

from shared.safety.ruleset import Rule, RuleSet, default

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "redaction" / "rule_samples.json"
SEED = 25
TRIES = 40
# Printable characters a negated class or "." may draw from: letters and digits, which are what
# a credential's body holds.
_PLAIN = string.ascii_letters + string.digits
_CATEGORIES = {
    sre_c.CATEGORY_DIGIT: string.digits,
    sre_c.CATEGORY_WORD: string.ascii_letters + string.digits + "_",
    sre_c.CATEGORY_SPACE: " ",
    sre_c.CATEGORY_NOT_SPACE: _PLAIN,
    sre_c.CATEGORY_NOT_DIGIT: string.ascii_letters,
    sre_c.CATEGORY_NOT_WORD: " .,;:/",
}
_POSIX = {
    "[:alnum:]": "a-zA-Z0-9",
    "[:alpha:]": "a-zA-Z",
    "[:digit:]": "0-9",
    "[:xdigit:]": "0-9a-fA-F",
    "[:upper:]": "A-Z",
    "[:lower:]": "a-z",
}


@dataclass(frozen=True)
class Sample:
    rule: str  # the rule's id
    kind: str  # the marker it gets from the rule set
    text: str  # a line as it would be pasted
    secret: str  # what the rule calls the secret: must not survive redaction
    draw: int  # which draw of the rule's RNG was kept


def _python_syntax(pattern: str) -> str:
    """The RE2 pattern in the syntax Python's parser reads, for drawing only (flags are dropped:
    case does not matter to a draw)."""
    for posix, ranges in _POSIX.items():
        pattern = pattern.replace(posix, ranges)
    pattern = re.sub(r"\(\?-?[imsU]+\)", "", pattern)
    pattern = re.sub(r"\(\?-?[imsU]+:", "(?:", pattern)
    return pattern.replace(r"\z", r"\Z")


def _class(items: list[tuple[object, object]]) -> str:
    chars: list[str] = []
    negate = False
    for op, arg in items:
        if op is sre_c.NEGATE:
            negate = True
        elif op is sre_c.LITERAL:
            chars.append(chr(arg))  # type: ignore[arg-type]
        elif op is sre_c.RANGE:
            low, high = arg  # type: ignore[misc]
            chars += [chr(c) for c in range(low, high + 1)]
        elif op is sre_c.CATEGORY:
            chars += _CATEGORIES.get(arg, "")
    if negate:
        return "".join(c for c in _PLAIN if c not in chars) or "".join(c for c in " .,;:/" if c not in chars)
    # Draw the body of a credential from its letters and digits where the class has them: a
    # class like [\w.=-] is a key's alphabet, and a key is mostly letters and digits.
    plain = [c for c in chars if c in _PLAIN]
    return "".join(plain if len(plain) >= 8 else chars)


def _draw(tree: object, rng: random.Random, out: list[str], first: bool) -> None:
    for op, arg in tree:  # type: ignore[attr-defined]
        if op is sre_c.LITERAL:
            out.append(chr(arg))
        elif op is sre_c.NOT_LITERAL:
            out.append(rng.choice([c for c in _PLAIN if c != chr(arg)]))
        elif op is sre_c.ANY:
            out.append(rng.choice(_PLAIN))
        elif op is sre_c.IN:
            out.append(rng.choice(_class(arg)))
        elif op is sre_c.BRANCH:
            # The first alternative is the usual one ("=" of the assignment operators, a
            # quote or a space after a value); a retry draws from them all.
            _draw(arg[1][0] if first else rng.choice(arg[1]), rng, out, first)
        elif op is sre_c.SUBPATTERN:
            _draw(arg[-1], rng, out, first)
        elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, sre_c.POSSESSIVE_REPEAT):
            low, high, sub = arg
            high = min(high, low + 40)
            # Optional context is left out; a body takes its shortest length or a little more.
            count = 0 if low == 0 else rng.randint(low, min(high, low + 4))
            for _ in range(count):
                _draw(sub, rng, out, first)
        # AT (anchors, \b) draws nothing.


def _find(rules: RuleSet, rule: Rule, text: str) -> tuple[str, str] | None:
    """(secret, kind) if the rule set finds a secret of this rule in `text`."""
    lone = RuleSet(rules.source, rules.version, rules.commit, rules.body_sha256, (rule,), rules.allowlists)
    for start, end, kind in lone.findings(text, text.lower()):
        return text[start:end], kind
    return None


# Rules whose matches span lines in a way a left-to-right draw does not reach: written by hand,
# with the value drawn ({b64}: base64 of 24 random bytes).
HAND = {
    "kubernetes-secret-yaml": (
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db-credentials\ntype: Opaque\ndata:\n"
        "  password: {b64}\n"
    ),
}


def _hand(rng: random.Random, template: str) -> str:
    return template.replace("{b64}", base64.b64encode(rng.randbytes(24)).decode())


def sample(rules: RuleSet, rule: Rule) -> Sample | None:
    """The first draw from the rule's regex that the rule catches, on its own line of a message."""
    tree = sre_parse.parse(_python_syntax(rule.pattern))
    rng = random.Random(f"{SEED}:{rule.id}")
    for draw in range(TRIES):
        out: list[str] = []
        if rule.id in HAND:
            out.append(_hand(rng, HAND[rule.id]))
        else:
            _draw(tree, rng, out, first=draw == 0)
        line = "".join(out).strip("\n")
        # The rule runs only where one of its keywords is: name the provider if the line does not.
        named = not rule.keywords or any(k in line.lower() for k in rule.keywords)
        where = "my config" if named else f"my {rule.keywords[0]} config"
        text = f"Here is the line from {where}:\n{line}\nWhy does the request still fail?"
        found = _find(rules, rule, text)
        if found is not None and found[0].strip():
            return Sample(rule.id, found[1], text, found[0], draw)
    return None


def samples(rules: RuleSet | None = None) -> list[Sample]:
    rules = rules or default()
    return [s for s in (sample(rules, r) for r in rules.rules) if s is not None]


def manifest(found: list[Sample], rules: RuleSet) -> dict[str, object]:
    return {
        "rules": rules.source,
        "seed": SEED,
        "samples": {
            s.rule: {"draw": s.draw, "sha256": hashlib.sha256(s.text.encode()).hexdigest()} for s in found
        },
    }


if __name__ == "__main__":
    rules = default()
    found = samples(rules)
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps(manifest(found, rules), indent=1, sort_keys=True) + "\n")
    missing = sorted({r.id for r in rules.rules} - {s.rule for s in found})
    print(f"{len(found)} samples of {len(rules.rules)} rules; no sample for: {missing}", file=sys.stderr)

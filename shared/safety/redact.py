"""Output filter: secrets always, PII when the workspace asks (WorkspaceConfig.pii_redaction).

`redact` replaces each finding with `[REDACTED:<kind>]` and counts them by kind. It runs on the
model's reply before the channel sees it and before the session (and so the index) stores it.
`redact_partial` is the same filter for a reply still streaming: it also holds back the tail that
could still turn into a secret as more text arrives.

Choices, each for a reason:
- Two layers. Sigil's own rules below (the gateway's model providers and channels, and the
  context rules: AWS keys beside their id or label, Authorization headers, `password:`
  assignments, the gateway's own browser tokens, signatures and web secret) run first and name
  their kinds; then the maintained rule set (gitleaks' default rules, shared/safety/ruleset.py)
  catches the providers nobody here wrote a shape for. A new provider arrives by updating the
  vendored file, not by writing a pattern.
- Secrets are matched by shape (a provider's prefix and length) or by context (the key name in
  `password: ...`, an Authorization header). A shape with no prefix (40 random characters) is too
  common to redact without its context: an AWS secret access key is redacted where an access key
  id is near it, or a label ("secret", "aws", "credential", "access key") is near it and the
  characters look drawn at random rather than written (see _aws_secret).
- One mechanism: each pattern has an optional `check` of the value it found and an optional
  `near` check of the text around it; a finding either passes them or is left alone.
- PII is conservative: a missed phone number is a policy miss, but eating dates, versions and
  order numbers would corrupt every technical answer. Card numbers need a card's grouping, a
  card network's first digit and a valid Luhn check digit; phone numbers need a leading `+`, a
  national grouping, or a word like "phone" before them.
- Invisible characters that can hide a secret from the patterns (zero-width space, word joiner,
  bidi controls, tag characters) are removed first: they have no business in a chat reply, and
  a key with a zero-width space after "sk-" must not pass as text. They count as "invisible".
- Redaction is a fixpoint: replacing one finding can expose another (the characters that kept a
  token from matching were part of the first), so passes repeat until nothing changes. That
  makes it idempotent: redacting a redacted text changes nothing and counts nothing. It ends
  because no pattern matches a marker alone, so every replacement removes original characters.
- Linear time on hostile input: repetitions are bounded or cannot overlap, each match can only
  start where a run of its alphabet starts (a lookbehind), patterns open with a literal where
  they can (so the engine skips between occurrences), and each pattern is skipped outright when
  none of its keywords is in the text. The rule set runs on RE2, linear by construction.
  bench/redaction.py measures a megabyte of prose, of random base64 and of the rules' keywords.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import itertools
import json
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from shared.lazy import LazyPattern
from shared.safety import ruleset

MARKER = "[REDACTED:{}]"
_MARKER_PREFIX = "[REDACTED:"
# Kinds are lower case, digits and "_" (a gitleaks rule's id, "1password-secret-key", is one).
_MARKER = re.compile(r"\[REDACTED:[a-z0-9_]+\]")
# How much of a streaming reply's tail is held back: longer than any pattern that spans
# whitespace and only matches once complete (a grouped card number, a phone number after
# "phone:"), so no part of one is shown before it can be recognised.
HOLD_BACK = 96

# ---------------------------------------------------------------- secrets


@dataclass(frozen=True)
class _Pattern:
    kind: str
    regex: LazyPattern  # compiled when a text first holds one of `needs`
    # Literals one of which every match contains (lower case if `caseless`): the pattern is
    # skipped when none is in the text, so clean text costs a few substring searches, not a
    # regex pass per pattern.
    needs: tuple[str, ...]
    caseless: bool = False
    # The group to replace (0: the whole match); the rest (a key name, "Bearer ") is kept.
    group: int = 0
    check: Callable[[str], bool] | None = None  # of the value found
    near: Callable[[str, int, int], bool] | None = None  # of the text around it: (text, start, end)


def _token(prefix: str, body: str) -> str:
    # A token starts where a run of the token alphabet starts. The lookbehind sits after the
    # literal prefix (checking the prefix and the character before it), so the regex engine can
    # jump between occurrences of the prefix instead of trying every position.
    return f"{re.escape(prefix)}(?<![A-Za-z0-9_-]{re.escape(prefix)}){body}(?![A-Za-z0-9_-])"


def _random_looking(token: str) -> bool:
    """A generated key mixes upper and lower case and digits, or is a long run of hex (DeepSeek's
    `sk-<32 hex>`); words glued by dashes ("sk-learn-tutorial-...") are neither."""
    body = token.split("-", 2)[-1] if token.count("-") >= 2 else token
    if all(any(test(c) for c in body) for test in (str.isupper, str.islower, str.isdigit)):
        return True
    tail = token.rsplit("-", 1)[-1]
    return len(tail) >= 32 and _HEX.fullmatch(tail) is not None and not tail.isdigit() and not tail.isalpha()


def _mixed_case(token: str) -> bool:
    return any(c.isupper() for c in token) and any(c.islower() for c in token)


_HEX = re.compile(r"[0-9a-fA-F]+")


def _discord_token(token: str) -> bool:
    # The first part is the bot's user id (a snowflake, 17 to 20 digits) in base64.
    head = token.split(".", 1)[0]
    try:
        decoded = base64.urlsafe_b64decode(head + "=" * (-len(head) % 4))
    except (binascii.Error, ValueError):
        return False
    return 17 <= len(decoded) <= 20 and decoded.isdigit()


# ---- AWS secret access keys: 40 characters of base64, with no prefix of their own.
_AWS_KEY_ID = re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])|\[REDACTED:aws_access_key\]")
_AWS_LABEL = re.compile(r"aws|secret|credential|access[\s_-]?key")
# Words of an identifier: Title-case, lower case, upper case, and the hex suffix CDK adds to ids.
_AWS_WORDS = re.compile(r"[A-Z][a-z]{2,}|[a-z]{4,}|[A-Z]{4,}(?![a-z])|[0-9A-F]{6,}$")
# How far from a secret its key id or its label may be: a credentials file, a CSV row, a JSON
# object or a sentence keeps them this close.
_ID_REACH, _LABEL_BEFORE, _LABEL_AFTER = 300, 80, 40


def _aws_secret_shape(value: str) -> bool:
    # 30 random bytes in base64: both cases, and a digit, "/" or "+" (all three are missing from a
    # random key about once in 4,000). Hex digests and all-lower or all-upper ids fail here.
    return _mixed_case(value) and any(c.isdigit() or c in "/+" for c in value)


def _written(value: str) -> bool:
    """Whether 40 characters read as written rather than drawn at random: mostly words
    (CamelCase identifiers, CDK logical ids) or few changes between character classes. A random
    key is taken for written about once in 1,700 draws (bench/redaction.py measures it)."""
    words = sum(len(m.group()) for m in _AWS_WORDS.finditer(value))
    classes = ["u" if c.isupper() else "l" if c.islower() else "d" for c in value]
    changes = sum(a != b for a, b in itertools.pairwise(classes))
    return words > 0.8 * len(value) or changes < 14


def _aws_secret(text: str, start: int, end: int) -> bool:
    """An access key id near it is enough; a label near it is, unless the value reads as written."""
    if _AWS_KEY_ID.search(text, max(0, start - _ID_REACH), end + _ID_REACH):
        return True
    around = _ascii_lower(text[max(0, start - _LABEL_BEFORE) : start] + " " + text[end : end + _LABEL_AFTER])
    return _AWS_LABEL.search(around) is not None and not _written(text[start:end])


# "web secret", "web signing secret", `sigil web-secret`, SIGIL_WEB_SECRET, and its name in a
# secret store ("web/<workspace>", as in secrets.json).
_WEB_LABEL = re.compile(r"web[\s_-]?(?:signing[\s_-]?)?secret|signing[\s_-]?secret|\bweb/[a-z0-9]")


def _web_secret(text: str, start: int, end: int) -> bool:
    around = _ascii_lower(text[max(0, start - _LABEL_BEFORE) : start] + " " + text[end : end + _LABEL_AFTER])
    return _WEB_LABEL.search(around) is not None and not _written(text[start:end])


def _not_placeholder(value: str) -> bool:
    """Whether an assignment's value discloses anything. Not if it is only markers (another
    kind got there first; escaped line breaks count as blank, so a JSON value that held a private
    key is not redacted twice) or a reference to a secret kept elsewhere ($DB_PASSWORD, ${...},
    <password>, ****)."""
    bare = re.sub(r"\\[nrt]", "", _MARKER.sub("", value))
    bare = bare.strip().strip("\"'").rstrip(".,;:!?)").strip()
    return bool(bare) and not _PLACEHOLDER.fullmatch(bare)


_PLACEHOLDER = re.compile(r"\$\{?[A-Za-z_][\w.]*\}?|<[^<>]*>|\*+|x+|\.\.\.", re.IGNORECASE)


# Caseless patterns are matched in the text with ASCII lowered (see `redact`), so their literals
# are lower case; a word's boundary is a lookbehind after it, as in _token ("proxy-authorization"
# passes: "-" is not a word character).
_AUTH_HEADER = r"authorization(?<![a-z0-9_]authorization)[\"']?\s{0,4}[:=]\s{0,4}[\"']?"

_SECRETS: tuple[_Pattern, ...] = (
    # Private keys come first, by their markers; see _private_keys.
    _Pattern(
        "anthropic_key",
        LazyPattern(_token("sk-ant-", r"(?:[a-z]{2,8}\d{2}-)?[A-Za-z0-9_-]{20,}")),
        ("sk-ant-",),
    ),
    _Pattern("openrouter_key", LazyPattern(_token("sk-or-", r"v\d{1,2}-[0-9a-f]{64}")), ("sk-or-",)),
    _Pattern(
        # OpenAI's keys and the OpenAI-compatible providers' (DeepSeek: sk-<32 hex>).
        "openai_key",
        LazyPattern(_token("sk-", r"(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9][A-Za-z0-9_-]{19,}")),
        ("sk-",),
        check=_random_looking,
    ),
    *(
        _Pattern("stripe_key", LazyPattern(_token(prefix, r"[A-Za-z0-9]{20,247}")), (prefix,))
        for prefix in ("sk_live_", "rk_live_", "sk_test_", "rk_test_", "whsec_")
    ),
    _Pattern(
        "huggingface_token", LazyPattern(_token("hf_", r"[A-Za-z0-9]{30,40}")), ("hf_",), check=_mixed_case
    ),
    _Pattern("npm_token", LazyPattern(_token("npm_", r"[A-Za-z0-9]{36}")), ("npm_",), check=_mixed_case),
    _Pattern("groq_key", LazyPattern(_token("gsk_", r"[A-Za-z0-9]{48,64}")), ("gsk_",), check=_mixed_case),
    *(
        # Legacy: the prefix and 20 characters; since GitLab 17: a longer body, a version and a CRC.
        _Pattern(
            "gitlab_token",
            LazyPattern(_token(prefix, r"[A-Za-z0-9_-]{20,255}(?:\.[A-Za-z0-9]{1,4}\.[A-Za-z0-9]{5,12})?")),
            (prefix,),
        )
        for prefix in ("glpat-", "gldt-", "glrt-", "glptt-", "glcbt-", "gloas-", "glsoat-", "glft-", "glimt-")
    ),
    # Meta's Graph API tokens (WhatsApp Cloud API, the gateway's own): "EAA" and base62.
    _Pattern(
        "meta_access_token",
        LazyPattern(_token("EAA", r"[A-Za-z0-9]{40,1024}")),
        ("EAA",),
        check=_random_looking,
    ),
    _Pattern(
        # <the bot's id in base64>.<timestamp>.<HMAC>; the check decodes the id.
        "discord_bot_token",
        LazyPattern(
            r"[MNO](?<![A-Za-z0-9_.-][MNO])[A-Za-z0-9_-]{22,27}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}"
            r"(?![A-Za-z0-9_-])"
        ),
        (".",),
        check=_discord_token,
    ),
    *(
        _Pattern("github_token", LazyPattern(_token(prefix, r"[A-Za-z0-9]{30,255}")), (prefix,))
        for prefix in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")
    ),
    _Pattern("github_token", LazyPattern(_token("github_pat_", r"[A-Za-z0-9_]{22,255}")), ("github_pat_",)),
    _Pattern("slack_token", LazyPattern(_token("xox", r"[abeoprs]-[A-Za-z0-9-]{10,}")), ("xox",)),
    _Pattern("slack_token", LazyPattern(_token("xapp-", r"\d-[A-Za-z0-9-]{10,}")), ("xapp-",)),
    _Pattern(
        "slack_webhook",
        LazyPattern(r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]{10,}"),
        ("hooks.slack.com",),
    ),
    _Pattern("google_api_key", LazyPattern(_token("AIza", r"[0-9A-Za-z_-]{35}")), ("AIza",)),
    *(
        _Pattern("aws_access_key", LazyPattern(_token(prefix, r"[A-Z0-9]{16}")), (prefix,))
        for prefix in ("AKIA", "ASIA", "ABIA", "ACCA")
    ),
    _Pattern(
        "telegram_bot_token",
        # Also right after "bot", as in the Bot API's URLs (https://api.telegram.org/bot<token>/),
        # and after a colon ("token:<token>"), but not inside a longer run of numbers and colons.
        # The lookbehinds follow the first digit (as in _token), so the engine skips to digits.
        LazyPattern(
            r"\d(?<!\d\d)(?:(?<![\w:]\d)|(?<=bot\d)|(?<=[^\W\d]:\d))\d{4,11}:[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])"
        ),
        (":",),
    ),
    _Pattern(
        "jwt",
        LazyPattern(_token("eyJ", r"[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*")),
        ("eyJ",),
    ),
    # The gateway's own credentials (shared/channels/web.py, web_tokens.py). A browser token:
    # "v1." + base64url(claims JSON, so "eyJ") + "." + a 43-character HMAC, valid up to 24 h.
    _Pattern(
        "browser_token",
        LazyPattern(_token("v1.", r"eyJ[A-Za-z0-9_-]{8,4096}\.[A-Za-z0-9_-]{43}")),
        ("v1.eyJ",),
    ),
    # An X-Sigil-Signature value, "v1=" + 64 hex (Stripe's webhook signatures have the same shape):
    # the HMAC of a request, which replays it within its 5-minute window.
    _Pattern("web_signature", LazyPattern(_token("v1=", r"[0-9a-fA-F]{64}")), ("v1=",)),
    _Pattern(
        # The web signing secret has no prefix: 43 characters of base64url (`sigil dev`'s
        # secrets.json) or 48 letters and digits (Secrets Manager's, infra/constructs/secrets.py).
        # Redacted where it is named near it, as an AWS secret key is (see _web_secret).
        "web_secret",
        LazyPattern(r"[a-z0-9_-](?<![a-z0-9_-][a-z0-9_-])[a-z0-9_-]{42}(?:[a-z0-9_-]{5})?(?![a-z0-9_-])"),
        ("web", "signing"),
        caseless=True,
        check=lambda value: _mixed_case(value) and any(c.isdigit() or c in "-_" for c in value),
        near=_web_secret,
    ),
    _Pattern(
        "bearer_token",
        LazyPattern(rf"{_AUTH_HEADER}(?:bearer|token)\s{{1,4}}([A-Za-z0-9._~+/=-]{{8,}})"),
        ("authorization",),
        caseless=True,
        group=1,
    ),
    _Pattern(
        "basic_auth",
        LazyPattern(rf"{_AUTH_HEADER}basic\s{{1,4}}([A-Za-z0-9+/=]{{8,}})"),
        ("authorization",),
        caseless=True,
        group=1,
    ),
    _Pattern(
        "bearer_token",
        LazyPattern(r"bearer(?<![a-z0-9_]bearer)\s{1,4}([A-Za-z0-9._~+/-]{20,}=*)"),
        ("bearer",),
        caseless=True,
        group=1,
    ),
    _Pattern(
        # Matched in the lowered text (so the keywords are found in any case); the checks read
        # the original. A run of exactly 40: part of a longer base64 run is something else.
        "aws_secret_key",
        LazyPattern(r"[a-z0-9/+](?<![a-z0-9/+][a-z0-9/+])[a-z0-9/+]{39}(?![a-z0-9/+=])"),
        ("akia", "asia", "aws", "secret", "credential", *(f"access{gap}key" for gap in ("", " ", "_", "-"))),
        caseless=True,
        check=_aws_secret_shape,
        near=_aws_secret,
    ),
    _Pattern(
        "url_password",
        LazyPattern(r"://(?<=[a-z0-9+.-]://)[^\s:/@\[\]]{1,128}:([^\s/@]{1,256})@"),
        ("://",),
        caseless=True,
        group=1,
        check=_not_placeholder,
    ),
)

# `password=...` and its relatives. `=` anywhere; `:` only where a key sits (a quoted JSON key, or
# the start of a line in YAML, .env or a header block), because prose is full of colons
# ("How do I reset my password: by email?"). The key's own prefix (DB_, client.) is kept as it
# is, so it need not be matched. A quoted value may be cut short by the end of the text, so a
# reply still streaming hides it from its opening quote.
_KEY_KINDS = (
    ("password", r"(?:password|passwd|passphrase|pwd)", ("pass", "pwd")),
    (
        "secret",
        r"(?:secret_?key|secret_?access_?key|client_?secret|app_?secret|api_?secret|"
        r"(?:api|access|auth|refresh|session|bot)_?token|api_?key|apikey|private_?key|"
        # Azure: the storage account key and Service Bus / Event Hubs key in connection strings.
        r"account_?key|shared_?access_?key)",
        ("secret", "token", "key"),
    ),
)
# A value: quoted, a <placeholder> (which may hold spaces), or a bare run.
_VALUE = r"(\"[^\"\n]*\"?|'[^'\n]*'?|<[^<>\n]{1,64}>|[^\s\"',;]+)"
_ASSIGNMENTS: tuple[_Pattern, ...] = tuple(
    _Pattern(
        kind,
        LazyPattern(shape.format(key=rf"{key}(?![a-z0-9_])") + _VALUE),
        needs,
        caseless=True,
        group=1,
        check=_not_placeholder,
    )
    for kind, key, needs in _KEY_KINDS
    for shape in (
        # key=value, key = "value", KEY="value", and PHP's and Ruby's 'key' => 'value'
        r"{key}[\"']?\s{{0,4}}=>?\s{{0,4}}",
        # --key value
        r"--?[a-z0-9_.-]{{0,40}}?{key}\s{{1,4}}",
        # key: value at the start of a line (YAML, .env-ish, headers), or "key": value (JSON)
        r"(?m:^[ \t]*(?:-[ \t]+)?[\"']?|[\"'])[a-z0-9_.-]{{0,40}}?{key}[\"']?[ \t]{{0,4}}:[ \t]{{0,4}}",
    )
)

_PEM_BEGIN = LazyPattern(r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = LazyPattern(r"-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")

# Invisible characters that can split a secret; ZWJ/ZWNJ (emoji, Persian) and LRM/RLM stay.
_INVISIBLE = LazyPattern("[\u200b\u2060\ufeff\u180e\u00ad\u202a-\u202e\u2066-\u2069\U000e0000-\U000e007f]+")
_FLAG_SEQUENCE = LazyPattern("\U0001f3f4[\U000e0020-\U000e007e]{1,12}\U000e007f")

# ---------------------------------------------------------------- PII

# The local part is matched forward from where its run starts (the lookbehind), so a long run
# with no "@" is tried once, not from each of its positions.
_EMAIL = LazyPattern(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9_%+-][A-Za-z0-9._%+-]{0,63}@"
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.){1,8}[A-Za-z]{2,24}(?![A-Za-z0-9-]|\.[A-Za-z0-9])"
)
# Numbers start where a run of digits (and the characters that join numbers) starts; the
# lookbehind follows the first digit, for the same reason as in _token.
_NUM = r"\d(?<![\w.,/:+@-]\d)"
_NUM_END = r"(?![\w/:]|[.,-]\d)"
# Cards: 4-4-4-4-3 (19 digits), 4-4-4-4, Amex/Diners 4-6-5 / 4-6-4, or contiguous; one separator
# kind throughout. Separate patterns rather than one with an optional tail: a rejected candidate
# is not retried shorter, so "<card> 123" must still find the card when the 19 digits fail Luhn.
_CARDS = tuple(
    LazyPattern(_NUM + body + _NUM_END)
    for body in (
        r"\d{3}([ -])\d{4}\1\d{4}\1\d{4}\1\d{3}",
        r"\d{3}([ -])\d{4}\1\d{4}\1\d{4}",
        r"\d{3}([ -])\d{6}\1\d{4,5}",
        r"\d{12,18}",
    )
)
_PHONE_INTL = LazyPattern(r"\+(?<![\w+@/.-]\+)\d(?:[ .()-]{0,2}\d){7,14}" + _NUM_END)
# North American: (415) 555-0100, 415-555-0100, 415.555.0100, optionally after 1-; never bare
# digits or spaces alone, which are how ordinary numbers are written.
_NANP = r"(?:\(\d{3}\)[ ]?\d{3}[-. ]\d{4}|\d{3}([-.])\d{3}\1\d{4})"
_PHONES_NANP = (
    LazyPattern(r"1(?<![\w+@/.-]1)[ .-]?" + _NANP + _NUM_END),
    LazyPattern(r"\((?<![\w+@/.-]\()\d{3}\)[ ]?\d{3}[-. ]\d{4}" + _NUM_END),
    LazyPattern(_NUM + r"\d{2}([-.])\d{3}\1\d{4}" + _NUM_END),
)
_PHONE_ZERO = LazyPattern(
    r"0(?<![\w+@/.-]0)(?:\d{1,4}([ -])\d{2,4}\1?\d{3,4}|[1-9](?:([ .])\d{2})(?:\2\d{2}){3})" + _NUM_END
)
_PHONE_CONTEXT = LazyPattern(
    r"\b(?:phone|tel|telephone|mobile|cell|call\s+me\s+(?:at|on)|whatsapp|sms|text\s+me\s+at|fax)\b"
    r"[\s:.#-]{0,6}(?:is\s+|at\s+|on\s+)?(\+?\d(?:[ .()-]{0,2}\d){6,14})" + _NUM_END
)
_PHONE_WORDS = ("phone", "tel", "mobile", "cell", "call", "whatsapp", "sms", "text", "fax")
_DATE_LIKE = LazyPattern(r"\d{4}[-./]\d{1,2}[-./]\d{1,2}|\d{1,2}[-./]\d{1,2}[-./]\d{2,4}")


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card(candidate: str) -> bool:
    digits = re.sub(r"\D", "", candidate)
    # The networks' first digits: 2 (Mastercard 2-series), 3 (Amex, Diners, JCB), 4 (Visa),
    # 5 (Mastercard), 6 (Discover, UnionPay). Ids and timestamps mostly start elsewhere.
    return 13 <= len(digits) <= 19 and digits[0] in "23456" and _luhn(digits)


def _phone_digits(low: int, high: int) -> Callable[[str], bool]:
    def check(candidate: str) -> bool:
        return low <= len(re.sub(r"\D", "", candidate)) <= high and not _DATE_LIKE.search(candidate)

    return check


_DIGITS = tuple("0123456789")
_PII: tuple[_Pattern, ...] = (
    *(_Pattern("card_number", card, _DIGITS, check=_card) for card in _CARDS),
    _Pattern("email", _EMAIL, ("@",)),
    _Pattern("phone", _PHONE_CONTEXT, _PHONE_WORDS, caseless=True, group=1, check=_phone_digits(7, 15)),
    _Pattern("phone", _PHONE_INTL, ("+",), check=_phone_digits(8, 15)),
    *(_Pattern("phone", nanp, _DIGITS, check=_phone_digits(10, 11)) for nanp in _PHONES_NANP),
    _Pattern("phone", _PHONE_ZERO, ("0",), check=_phone_digits(10, 11)),
)


# ---------------------------------------------------------------- API


@dataclass(frozen=True)
class Redaction:
    text: str
    counts: Mapping[str, int] = field(default_factory=dict)  # kind -> findings replaced

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def redact(text: str, *, pii: bool) -> Redaction:
    """`text` with secrets (always) and PII (if `pii`) replaced by `[REDACTED:<kind>]`."""
    counts: Counter[str] = Counter()
    text = _strip_invisible(text, counts)
    # Until a pass changes nothing. It ends: no pattern matches markers alone, so each
    # replacement removes characters of the original text, and a pass that changes nothing stops.
    while True:
        before = text
        edits = _Edits()
        keys = _private_keys(text, counts)
        edits.add(text, keys)
        text = _apply_patterns(_SECRETS + _ASSIGNMENTS, _replace(text, keys), counts, edits)
        text = _apply_rule_set(before, text, edits, counts)
        if pii:
            text = _apply_patterns(_PII, text, counts, None)
        if text == before:
            return Redaction(text, {kind: n for kind, n in counts.items() if n})


# A replacement: text[start:end] becomes the string.
_Edit = tuple[int, int, str]


def _replace(text: str, edits: list[_Edit]) -> str:
    """`text` with each of `edits` (sorted, disjoint) made."""
    if not edits:
        return text
    pieces: list[str] = []
    last = 0
    for start, end, replacement in edits:
        pieces += (text[last:start], replacement)
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


class _Edits:
    """The replacements a pass has made, in the coordinates of the text the pass began with.

    Sigil's patterns replace as they go, each in the text the ones before it left; the rule set
    must see the text as it was (a marker where Sigil's GitLab shape took `glpat-…` hides the
    `glpat-` that gitleaks' routable-token rule needs, and would leave the token's tail shown).
    So each replacement is carried back to the pass's first text, and the rule set's findings
    there are joined with them (_apply_rule_set)."""

    def __init__(self) -> None:
        self.spans: list[_Edit] = []  # sorted, disjoint

    def add(self, text: str, made: list[_Edit]) -> None:
        """Record replacements made to `text`, the current text (sorted, disjoint, its coordinates)."""
        if not made:
            return
        starts: list[int] = []  # where each recorded span starts in the current text
        ends: list[int] = []  # and ends
        after: list[int] = []  # the shift of the current text after it
        shift = 0
        for start, end, replacement in self.spans:
            starts.append(start + shift)
            ends.append(start + shift + len(replacement))
            shift += len(replacement) - (end - start)
            after.append(shift)

        def back(pos: int, *, is_end: bool) -> tuple[int, str]:
            # A position inside a recorded span's replacement is the whole span, and what of the
            # replacement lies outside the new one is kept with it.
            i = (bisect.bisect_left(starts, pos) if is_end else bisect.bisect_right(starts, pos)) - 1
            if i >= 0 and (pos <= ends[i] if is_end else pos < ends[i]):
                if is_end:
                    return self.spans[i][1], text[pos : ends[i]]
                return self.spans[i][0], text[starts[i] : pos]
            return pos - (after[i] if i >= 0 else 0), ""

        new = []
        for a, b, r in made:
            start, before = back(a, is_end=False)
            end, after_ = back(b, is_end=True)
            new.append((start, end, before + r + after_))
        new_starts = [a for a, _, _ in new]

        def covered(span: _Edit) -> bool:
            i = bisect.bisect_right(new_starts, span[0]) - 1
            return i >= 0 and span[1] <= new[i][1]

        self.spans = sorted([*new, *(old for old in self.spans if not covered(old))])


def _apply_patterns(
    patterns: tuple[_Pattern, ...], text: str, counts: Counter[str], edits: _Edits | None
) -> str:
    lowered, lowered_of = "", ""
    for pattern in patterns:
        if pattern.caseless and lowered_of is not text:
            lowered, lowered_of = _ascii_lower(text), text
        haystack = lowered if pattern.caseless else text
        if any(n in haystack for n in pattern.needs):
            made = _apply(pattern, text, haystack)
            if made:
                if edits is not None:
                    edits.add(text, made)
                text = _replace(text, made)
                counts[pattern.kind] += len(made)
    return text


def _apply_rule_set(original: str, text: str, edits: _Edits, counts: Counter[str]) -> str:
    """The pass's text with what the maintained rule set (shared/safety/ruleset.py) finds in
    `original` (the text the pass began with) replaced too; `text` is `original` with Sigil's
    replacements (`edits`) made.

    A finding that overlaps a replacement of Sigil's is joined to it: the two become Sigil's
    marker, and whatever of the finding reached past it goes too. Findings that overlap each
    other are joined the same way, under the first one's kind. A finding that reaches into a
    marker of an earlier pass is left to that marker."""
    found = sorted(ruleset.default().findings(original, _ascii_lower(original)))
    if not found:
        return text
    old = [m.span() for m in _MARKER.finditer(original)] if _MARKER_PREFIX in original else []
    old_starts = [a for a, _ in old]

    def in_marker(start: int, end: int) -> bool:
        i = bisect.bisect_left(old_starts, end) - 1
        return i >= 0 and start < old[i][1]

    # (start, end, Sigil's replacement or None, the rule set's kind or "")
    spans = sorted(
        [(a, b, r, "") for a, b, r in edits.spans]
        + [(a, b, None, kind) for a, b, kind in found if not in_marker(a, b)],
        key=lambda span: span[0],
    )
    joined: list[_Edit] = []
    i = 0
    while i < len(spans):
        start, end, _, kind = spans[i]
        group = [spans[i]]
        i += 1
        while i < len(spans) and spans[i][0] < end:
            end = max(end, spans[i][1])
            group.append(spans[i])
            i += 1
        sigil = [r for _, _, r, _ in group if r is not None]
        if not sigil:
            counts[kind] += 1
        joined.append((start, end, "".join(sigil) or MARKER.format(kind)))
    return _replace(original, joined)


def _ascii_lower(text: str) -> str:
    # ASCII only, so every index means the same character in both texts (str.lower can lengthen
    # a text: "\u0130" lowers to two characters); the patterns' literals are ASCII anyway.
    return text.lower() if text.isascii() else text.translate(_ASCII_LOWER)


_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def redact_partial(text_so_far: str, *, pii: bool) -> str:
    """What of a reply still streaming can be shown now: redacted, less its open tail.

    The tail held back is the last HOLD_BACK characters, and back to a space or line break
    before them, so a token or a grouped number is never cut: `redact` of the final text judges
    them whole. A begin marker of a private key with no end yet hides everything after it.
    """
    shown = redact(text_so_far, pii=pii).text
    before = len(shown) - HOLD_BACK
    if before <= 0:
        return ""
    cut = max(shown.rfind(c, 0, before) for c in " \n\t")
    return shown[:cut] if cut > 0 else ""


class StreamRedactor:
    """`redact_partial` for a stream's `on_text` callback, recomputed only once the text has grown
    by `step` characters or an eighth, whichever is more. Per delta, a long reply would be
    redacted thousands of times over; this way a reply of n characters is redacted O(log n)
    times, and what is shown lags the stream by at most an eighth plus HOLD_BACK.

    A text shorter than the last one is a new model call (the tool loop streams each call's text
    from the start), so the filter starts over with it.
    """

    def __init__(self, *, pii: bool, step: int = 64) -> None:
        self._pii = pii
        self._step = step
        self._seen = 0  # length of the text last redacted
        self._last = 0  # length of the text last given
        self._shown = ""

    def __call__(self, text_so_far: str) -> str:
        if len(text_so_far) < self._last:
            self._seen = 0
            self._shown = ""
        self._last = len(text_so_far)
        if len(text_so_far) - self._seen >= max(self._step, self._seen // 8):
            self._seen = len(text_so_far)
            self._shown = redact_partial(text_so_far, pii=self._pii)
        return self._shown


def redact_json(text: str, *, pii: bool) -> str:
    """`redact` for a JSON document (a tool call's arguments, to store): each string value is
    redacted on its own, and a value under a credential's key ("password", "api_key",
    "authorization") is replaced whole, since the key that gives it away is not in the string.
    The result is still JSON of the same shape, where redacting the text would let a private key
    cut short take the closing quote and braces with it. Text that is not JSON is redacted as
    text; input with nothing to redact comes back as it was, formatting included."""
    try:
        value = json.loads(text)
    except ValueError:
        return redact(text, pii=pii).text
    redacted = _redact_json_value(value, None, pii)
    return text if redacted == value else json.dumps(redacted, ensure_ascii=False)


def _redact_json_value(value: object, key: str | None, pii: bool) -> object:
    if isinstance(value, str):
        kind = _credential_kind(key) if value and not value.startswith(_MARKER_PREFIX) else None
        return MARKER.format(kind) if kind else redact(value, pii=pii).text
    if isinstance(value, list):
        return [_redact_json_value(v, None, pii) for v in value]
    if isinstance(value, dict):
        return {k: _redact_json_value(v, k, pii) for k, v in value.items()}
    return value


def _credential_kind(key: str | None) -> str | None:
    if key is None:
        return None
    lowered = key.lower()
    if lowered in ("authorization", "proxy-authorization"):
        return "secret"
    return next((kind for kind, key_name in _CREDENTIAL_KEYS if key_name.fullmatch(lowered)), None)


_CREDENTIAL_KEYS = tuple(
    (kind, LazyPattern(rf"[a-z0-9_.-]{{0,40}}?{pattern}")) for kind, pattern, _ in _KEY_KINDS
)


def _apply(pattern: _Pattern, text: str, haystack: str) -> list[_Edit]:
    """The replacements of the pattern's findings in `haystack` (the text, or it lowered)."""
    made: list[_Edit] = []
    for m in pattern.regex.finditer(haystack):
        start, end = m.span(pattern.group)
        value = text[start:end]
        if value.startswith(_MARKER_PREFIX) or (pattern.check is not None and not pattern.check(value)):
            continue
        if pattern.near is not None and not pattern.near(text, start, end):
            continue
        marker = MARKER.format(pattern.kind)
        if value[:1] in ("'", '"'):
            # Keep a quoted value's quotes (the closing one only if the value had it), so the
            # JSON or YAML around it still reads as it did.
            closed = len(value) > 1 and value.endswith(value[0])
            marker = value[0] + marker + (value[0] if closed else "")
        made.append((start, end, marker))
    return made


def _private_keys(text: str, counts: Counter[str]) -> list[_Edit]:
    # Found by markers rather than one lazy `BEGIN[\s\S]*?END` pattern, which rescans to the end
    # of the text for every unterminated BEGIN (quadratic on a hostile text).
    made: list[_Edit] = []
    last = 0
    for begin in _PEM_BEGIN.finditer(text):
        if begin.start() < last:
            continue
        end = _PEM_END.search(text, begin.end())
        last = end.end() if end is not None else len(text)
        made.append((begin.start(), last, MARKER.format("private_key")))
        counts["private_key"] += 1
        if end is None:
            break
    return made


def _strip_invisible(text: str, counts: Counter[str]) -> str:
    if text.isascii():
        return text
    flags = [m.span() for m in _FLAG_SEQUENCE.finditer(text)]

    def strip(m: re.Match[str]) -> str:
        if any(a <= m.start() and m.end() <= b for a, b in flags):
            return m.group(0)
        counts["invisible"] += 1
        return ""

    return _INVISIBLE.sub(strip, text)

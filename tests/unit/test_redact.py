"""shared.safety.redact: secrets always, PII per workspace policy, idempotent, safe mid-stream.

Every secret here is assembled at run time from a prefix and generated characters, so no
literal that looks like a live credential sits in the repository for a secret scanner to flag.
"""

from __future__ import annotations

import json
import random
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.channels import web, web_tokens
from shared.providers.base import ChatRequest, TextDelta
from shared.providers.function import FunctionProvider
from shared.safety.redact import HOLD_BACK, StreamRedactor, redact, redact_json, redact_partial
from tests.support.safety_corpus import ORDINARY
from tests.support.scaling import growth

ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
B64URL = ALNUM + "_-"


def chars(alphabet: str, n: int, seed: int) -> str:
    """n characters of `alphabet`, the same for the same seed, with every class present (a
    generated key mixes upper and lower case and digits)."""
    rng = random.Random(seed)
    body = [rng.choice(alphabet) for _ in range(n)]
    for i, cls in enumerate((string.ascii_uppercase, string.ascii_lowercase, string.digits)):
        pool = [c for c in cls if c in alphabet]
        if pool and n > 3:
            body[i * 2] = rng.choice(pool)
    return "".join(body)


def luhn_complete(partial: str) -> str:
    """`partial` with the check digit that makes it pass Luhn."""
    for d in "0123456789":
        digits = partial + d
        total = 0
        for i, ch in enumerate(reversed(digits)):
            n = int(ch)
            if i % 2:
                n = n * 2 - 9 if n > 4 else n * 2
            total += n
        if total % 10 == 0:
            return digits
    raise AssertionError("unreachable: one of ten digits completes any number")


# ---------------------------------------------------------------- each secret kind

# (kind, text with the secret, the secret itself: what must not survive)
OPENAI = "sk-" + chars(ALNUM, 48, 1)
OPENAI_PROJECT = "sk-" + "proj-" + chars(B64URL, 120, 2)
ANTHROPIC = "sk-" + "ant-" + "api03-" + chars(B64URL, 93, 3)
AWS_ID = "AK" + "IA" + chars(UPPER_DIGITS, 16, 4)
AWS_TEMP_ID = "AS" + "IA" + chars(UPPER_DIGITS, 16, 5)
AWS_SECRET = chars(ALNUM + "/+", 40, 6)
GITHUB = "gh" + "p_" + chars(ALNUM, 36, 7)
GITHUB_PAT = "github_" + "pat_" + chars(ALNUM, 22, 8) + "_" + chars(ALNUM, 59, 9)
SLACK_BOT = (
    "xo"
    + "xb-"
    + "-".join((chars(string.digits, 12, 10), chars(string.digits, 13, 11), chars(ALNUM, 24, 12)))
)
SLACK_USER = "xo" + "xp-" + chars(string.digits, 12, 13) + "-" + chars(ALNUM, 30, 14)
TELEGRAM = chars(string.digits, 10, 15) + ":" + "AA" + chars(B64URL, 33, 16)
GOOGLE = "AI" + "za" + chars(B64URL, 35, 17)
JWT = "ey" + "J" + chars(B64URL, 30, 18) + ".ey" + "J" + chars(B64URL, 60, 19) + "." + chars(B64URL, 43, 20)
BEARER = chars(B64URL + ".~", 40, 21)
BASIC = chars(ALNUM, 24, 22) + "=="
URL_PASSWORD = chars(ALNUM, 16, 23)
PASSWORD = "Tr0ub4dor" + chars(ALNUM, 6, 24)

# The gateway's own credentials (finding 8): a web signing secret as `sigil dev` and Secrets
# Manager make them, a browser token minted under it, and a request's X-Sigil-Signature.
WEB_SECRET = chars(B64URL, 43, 25)
WEB_SECRET_AWS = chars(ALNUM, 48, 26)
BROWSER_TOKEN = web_tokens.mint(WEB_SECRET, web_tokens.claims_for("default", "alice", ["s1"], now=1.8e9))
WEB_SIGNATURE = web.sign(WEB_SECRET, 1_800_000_000, b'{"text": "hi"}')

SECRETS = [
    ("openai_key", f"My key is {OPENAI}, keep it safe.", OPENAI),
    ("openai_key", f"OPENAI_API_KEY={OPENAI_PROJECT}", OPENAI_PROJECT),
    ("anthropic_key", f"export ANTHROPIC_API_KEY='{ANTHROPIC}'", ANTHROPIC),
    ("aws_access_key", f"The access key id is {AWS_ID}.", AWS_ID),
    ("aws_access_key", f"temporary credentials: {AWS_TEMP_ID}", AWS_TEMP_ID),
    ("aws_secret_key", f"[default]\naws_secret_access_key = {AWS_SECRET}\n", AWS_SECRET),
    ("aws_secret_key", f'{{"SecretAccessKey": "{AWS_SECRET}"}}', AWS_SECRET),
    ("github_token", f"git clone https://{GITHUB}@github.com/org/repo", GITHUB),
    ("github_token", f"token: {GITHUB_PAT}", GITHUB_PAT),
    ("slack_token", f"SLACK_BOT_TOKEN is {SLACK_BOT}", SLACK_BOT),
    ("slack_token", f"user token {SLACK_USER}", SLACK_USER),
    ("telegram_bot_token", f"https://api.telegram.org/bot{TELEGRAM}/getMe", TELEGRAM),
    ("telegram_bot_token", f"bot token: {TELEGRAM}", TELEGRAM),
    ("google_api_key", f"maps?key={GOOGLE}&q=Paris", GOOGLE),
    ("jwt", f"session cookie: {JWT}", JWT),
    ("bearer_token", f"curl -H 'Authorization: Bearer {BEARER}' https://api.example.com", BEARER),
    ("bearer_token", f'headers = {{"authorization": "bearer {BEARER}"}}', BEARER),
    ("basic_auth", f"Authorization: Basic {BASIC}", BASIC),
    ("url_password", f"DATABASE_URL=postgres://app:{URL_PASSWORD}@db.internal:5432/app", URL_PASSWORD),
    ("password", f"password={PASSWORD}", PASSWORD),
    ("password", f'{{"user": "bob", "password": "{PASSWORD}"}}', PASSWORD),
    ("password", f"db:\n  host: localhost\n  password: {PASSWORD}\n", PASSWORD),
    ("password", f"mysql -u root --password {PASSWORD} app", PASSWORD),
    ("password", f"DB_PASSWORD = '{PASSWORD}'", PASSWORD),
    ("secret", f"client_secret={PASSWORD}", PASSWORD),
    ("password", f"$db = ['host' => 'db1', 'password' => '{PASSWORD}'];", PASSWORD),
    ("browser_token", f"My page got this token: {BROWSER_TOKEN} is it valid?", BROWSER_TOKEN),
    ("browser_token", f"wss://example.org/ws?token={BROWSER_TOKEN}&session=s1", BROWSER_TOKEN),
    ("web_signature", f"X-Sigil-Signature: {WEB_SIGNATURE}", WEB_SIGNATURE.removeprefix("v1=")),
    ("web_signature", f"the request was signed {WEB_SIGNATURE}, why 401?", WEB_SIGNATURE.removeprefix("v1=")),
    ("web_secret", f"$ sigil web-secret\n{WEB_SECRET}\n", WEB_SECRET),
    ("web_secret", f'{{"web/default": "{WEB_SECRET}"}}', WEB_SECRET),
    ("web_secret", f"the web signing secret is {WEB_SECRET_AWS}", WEB_SECRET_AWS),
    ("web_secret", f"{WEB_SECRET} is our web secret", WEB_SECRET),
]


@pytest.mark.parametrize(("kind", "text", "secret"), SECRETS)
def test_each_secret_kind_is_redacted_always(kind: str, text: str, secret: str) -> None:
    for pii in (False, True):
        result = redact(text, pii=pii)
        assert secret not in result.text
        assert f"[REDACTED:{kind}]" in result.text
        assert result.counts.get(kind) == 1


def test_the_context_around_a_secret_is_kept() -> None:
    result = redact(f"curl -H 'Authorization: Bearer {BEARER}' https://api.example.com", pii=False)
    assert result.text == "curl -H 'Authorization: Bearer [REDACTED:bearer_token]' https://api.example.com"
    result = redact(f'{{"user": "bob", "password": "{PASSWORD}"}}', pii=False)
    assert result.text == '{"user": "bob", "password": "[REDACTED:password]"}'


def pem(kind: str = "RSA PRIVATE KEY", lines: int = 6, newline: str = "\n") -> str:
    body = newline.join(chars(ALNUM + "+/", 64, 100 + i) for i in range(lines))
    return f"-----BEGIN {kind}-----{newline}{body}{newline}-----END {kind}-----"


@pytest.mark.parametrize("kind", ["RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY"])
def test_a_pem_private_key_block_is_redacted_whole(kind: str) -> None:
    block = pem(kind)
    result = redact(f"Here is the key:\n{block}\nUse it carefully.", pii=False)
    assert result.text == "Here is the key:\n[REDACTED:private_key]\nUse it carefully."
    assert result.counts == {"private_key": 1}


def test_a_pem_block_with_escaped_newlines_in_json_is_redacted() -> None:
    block = pem("PRIVATE KEY", newline="\\n")
    result = redact(f'{{"private_key": "{block}\\n", "client_email": "x"}}', pii=False)
    assert "BEGIN" not in result.text
    assert "[REDACTED:private_key]" in result.text


def test_an_unterminated_private_key_hides_everything_after_its_begin_marker() -> None:
    # A reply cut short, or still streaming: where the key ends is unknown, so all of it goes.
    block = pem("PRIVATE KEY")
    cut = block[: len(block) // 2]
    assert redact(f"key:\n{cut}", pii=False).text == "key:\n[REDACTED:private_key]"


def test_a_public_key_or_certificate_is_left_alone() -> None:
    cert = pem("CERTIFICATE").replace("PRIVATE", "")
    public = pem("PUBLIC KEY")
    text = f"{cert}\n{public}"
    assert redact(text, pii=True).text == text


# ---------------------------------------------------------------- PII

VISA = luhn_complete("4" + chars(string.digits, 14, 30))
MASTERCARD = luhn_complete("5" + "1" + chars(string.digits, 13, 31))
AMEX = luhn_complete("37" + chars(string.digits, 12, 32))


def spaced(card: str, groups: tuple[int, ...], sep: str) -> str:
    out, at = [], 0
    for g in groups:
        out.append(card[at : at + g])
        at += g
    return sep.join(out)


def not_luhn(card: str) -> str:
    return card[:-1] + str((int(card[-1]) + 1) % 10)


@pytest.mark.parametrize(
    "card",
    [
        VISA,
        spaced(VISA, (4, 4, 4, 4), " "),
        spaced(VISA, (4, 4, 4, 4), "-"),
        MASTERCARD,
        spaced(AMEX, (4, 6, 5), " "),
        AMEX,
    ],
)
def test_a_luhn_valid_card_number_is_redacted_when_pii_is_on(card: str) -> None:
    text = f"Charge card {card} today."
    assert redact(text, pii=False).text == text
    result = redact(text, pii=True)
    assert result.text == "Charge card [REDACTED:card_number] today."
    assert result.counts == {"card_number": 1}


@pytest.mark.parametrize(
    "number",
    [
        not_luhn(VISA),
        spaced(not_luhn(VISA), (4, 4, 4, 4), " "),
        luhn_complete("1" + chars(string.digits, 14, 33)),  # no card network starts with 1
        luhn_complete("9" + chars(string.digits, 14, 34)),
        spaced(VISA, (4, 4, 4, 4), " ")[:-2] + "-" + VISA[-2:],  # mixed separators
        VISA + "7",  # part of a longer number
    ],
)
def test_numbers_that_are_not_card_numbers_are_left_alone(number: str) -> None:
    text = f"Reference {number} attached."
    assert redact(text, pii=True).text == text


def test_a_card_followed_by_a_short_number_is_still_found() -> None:
    text = f"card {spaced(VISA, (4, 4, 4, 4), ' ')} 123"
    assert redact(text, pii=True).text == "card [REDACTED:card_number] 123"


EMAIL = "jane.doe+billing@mail.example.co.uk"


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (f"Write to {EMAIL} today.", "email"),
        ("Call +1 (415) 555-0100 tomorrow.", "phone"),
        ("Call +14155550100 tomorrow.", "phone"),
        ("Call +44 20 7946 0958 tomorrow.", "phone"),
        ("Call 415-555-0100 tomorrow.", "phone"),
        ("Call (415) 555-0100 tomorrow.", "phone"),
        ("Call 1-800-555-0199 tomorrow.", "phone"),
        ("Call 020 7946 0958 tomorrow.", "phone"),
        ("Call 07700 900123 tomorrow.", "phone"),
        ("Call 01 23 45 67 89 tomorrow.", "phone"),
        ("Call 03-1234-5678 tomorrow.", "phone"),
        ("phone: 555 0100, thanks.", "phone"),
        ("my mobile is 9123 4567, thanks.", "phone"),
    ],
)
def test_pii_is_redacted_only_when_the_workspace_asks(text: str, kind: str) -> None:
    assert redact(text, pii=False).text == text
    result = redact(text, pii=True)
    assert result.counts == {kind: 1}
    assert f"[REDACTED:{kind}]" in result.text
    first, last = text.split(maxsplit=1)[0], text.rsplit(maxsplit=1)[-1]
    assert result.text.startswith(first)
    assert result.text.endswith(last)


# ---------------------------------------------------------------- false positives

# The ordinary text is shared with the corpus test and the benchmark (tests/support/safety_corpus.py).


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_survives_redaction_untouched(text: str) -> None:
    result = redact(text, pii=True)
    assert result.text == text, result.counts
    assert result.counts == {}


# ---------------------------------------------------------------- invisible characters


def test_a_zero_width_space_cannot_hide_a_secret() -> None:
    text = "sk-\u200b" + OPENAI[3:]
    result = redact(text, pii=False)
    assert result.text == "[REDACTED:openai_key]"
    assert result.counts == {"invisible": 1, "openai_key": 1}


def test_joiners_that_writing_needs_are_kept() -> None:
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    persian = "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"
    scotland = "\U0001f3f4" + "".join(chr(0xE0000 + ord(c)) for c in "gbsct") + "\U000e007f"
    text = f"{family} {persian} {scotland}"
    assert redact(text, pii=True).text == text


# ---------------------------------------------------------------- idempotence


@pytest.mark.parametrize(("kind", "text", "secret"), SECRETS)
def test_redacting_twice_changes_nothing_more(kind: str, text: str, secret: str) -> None:
    once = redact(text, pii=True)
    twice = redact(once.text, pii=True)
    assert twice.text == once.text
    assert twice.counts == {}


# ---------------------------------------------------------------- a reply still streaming


def test_a_partial_reply_holds_back_its_open_tail() -> None:
    text = "word " * 40
    shown = redact_partial(text, pii=False)
    assert text.startswith(shown)
    assert len(text) - len(shown) >= HOLD_BACK
    assert redact_partial("short reply", pii=False) == ""


STREAMED_SECRETS = [
    OPENAI_PROJECT,
    AWS_SECRET,
    pem("PRIVATE KEY"),
    spaced(VISA, (4, 4, 4, 4), " "),
    PASSWORD,
    BEARER,
    BROWSER_TOKEN,
]
STREAMED_TEXTS = [
    f"Sure, here is the key you asked for: {OPENAI_PROJECT} and that is all of it. " * 2,
    f"Your config:\naws_secret_access_key = {AWS_SECRET}\nregion = eu-west-1\n" + "More words. " * 10,
    f"Here you go:\n{pem('PRIVATE KEY')}\nKeep it safe. " + "Bye now. " * 10,
    f"The card on file is {spaced(VISA, (4, 4, 4, 4), ' ')} and expires soon. " + "Okay. " * 10,
    f'Set it like this: password = "{PASSWORD} with spaces and more words" then restart. ' + "Done. " * 10,
    f"Send Authorization: Bearer {BEARER} with every request. " + "Thanks. " * 10,
    f"Open the page with ?token={BROWSER_TOKEN} appended. " + "It lasts an hour. " * 6,
]


@pytest.mark.parametrize(("text", "secret"), list(zip(STREAMED_TEXTS, STREAMED_SECRETS, strict=True)))
def test_no_prefix_of_a_streaming_reply_shows_any_part_of_a_secret(text: str, secret: str) -> None:
    # Every prefix the stream could deliver, shown as it would be
    for end in range(len(text) + 1):
        shown = redact_partial(text[:end], pii=True)
        for i in range(0, max(1, len(secret) - 8)):
            window = secret[i : i + 8]
            if window.strip() and "-----" not in window:
                assert window not in shown, (end, shown)


def test_a_secret_streamed_by_the_model_never_reaches_the_channel_or_the_store() -> None:
    # Given a model that streams a reply with a key split across its deltas
    reply = f"Here is your key: {OPENAI_PROJECT}\nUse it in the Authorization header. " + "More help. " * 30
    deltas = [reply[i : i + 7] for i in range(0, len(reply), 7)]
    provider = FunctionProvider(lambda r: [TextDelta(text=d) for d in deltas])
    request = ChatRequest(model="test", system="be brief", messages=[])
    # When the stream goes to a channel through the stream filter and the final text is redacted
    filtered = StreamRedactor(pii=False)
    shown_to_channel: list[str] = []
    so_far = ""
    for event in provider.stream(request):
        if isinstance(event, TextDelta):
            so_far += event.text
            shown_to_channel.append(filtered(so_far))
    final = redact(so_far, pii=False)
    stored = final.text
    # Then no update the channel saw, nor the final message, nor what is stored holds the key
    assert so_far == reply
    assert all(OPENAI_PROJECT[3:20] not in shown for shown in shown_to_channel)
    assert OPENAI_PROJECT not in final.text
    assert OPENAI_PROJECT[3:20] not in stored
    assert "[REDACTED:openai_key]" in stored
    assert final.counts == {"openai_key": 1}
    # and the channel still saw the reply grow
    assert shown_to_channel[-1]
    assert reply.startswith(shown_to_channel[-1].split("[REDACTED")[0])


def test_the_stream_filter_recomputes_rarely_on_a_long_reply() -> None:
    calls = 0
    filtered = StreamRedactor(pii=True)
    text = ""
    previous = ""
    for i in range(5000):
        text += f"w{i} "
        shown = filtered(text)
        if shown != previous:
            calls += 1
            previous = shown
    assert calls < 100


def test_the_stream_filter_starts_over_when_a_new_model_call_streams() -> None:
    # The tool loop streams each model call's text from its start.
    filtered = StreamRedactor(pii=False)
    first = "Let me look that up for you, one moment please while I check the weather. " * 3
    assert filtered(first)
    second = "It is sunny in Paris today, "
    assert filtered(second) == ""  # not the first call's text any more
    longer = second + "with a high of 24 degrees and a light breeze from the west all afternoon. " * 3
    shown = filtered(longer)
    assert shown
    assert longer.startswith(shown)


# ---------------------------------------------------------------- tool-call arguments


def test_json_arguments_are_redacted_value_by_value_and_stay_json() -> None:
    arguments = (
        f'{{"to": "{EMAIL}", "db_password": "{PASSWORD}", "note": "key {OPENAI}", '
        f'"headers": {{"Authorization": "Bearer {BEARER}"}}, "retries": 3, "key_pem": "{pem()}"}}'
    )
    redacted = redact_json(arguments.replace("\n", "\\n"), pii=True)
    assert json.loads(redacted) == {
        "to": "[REDACTED:email]",
        "db_password": "[REDACTED:password]",
        "note": "key [REDACTED:openai_key]",
        "headers": {"Authorization": "[REDACTED:secret]"},
        "retries": 3,
        "key_pem": "[REDACTED:private_key]",
    }


def test_json_with_nothing_to_redact_comes_back_as_it_was() -> None:
    arguments = '{ "city":"Paris",  "units": "metric" }'
    assert redact_json(arguments, pii=True) is arguments


def test_arguments_that_are_not_json_are_redacted_as_text() -> None:
    assert redact_json(f"password={PASSWORD}", pii=False) == "password=[REDACTED:password]"


# ---------------------------------------------------------------- properties

FRAGMENTS = st.sampled_from(
    [
        "password=",
        '"password": "',
        "password: ",
        "-----BEGIN PRIVATE KEY-----",
        "-----END PRIVATE KEY-----",
        "sk-",
        "AKIA",
        "Authorization: Bearer ",
        "aws_secret_access_key = ",
        "https://user:",
        "@",
        "@example.com",
        "+1 ",
        "4111 1111 1111 1111",
        "[REDACTED:email]",
        "[REDACTED:",
        "\u200b",
        "\U000e0041",
        "\n",
        " ",
        '"',
        "'",
        "0",
        "-",
    ]
)
ANY_TEXT = st.lists(st.one_of(st.text(max_size=12), FRAGMENTS, st.text(ALNUM, max_size=48)), max_size=25).map(
    "".join
)


@settings(max_examples=500, deadline=None)
@given(ANY_TEXT, st.booleans())
def test_redact_never_raises_and_is_idempotent(text: str, pii: bool) -> None:
    once = redact(text, pii=pii)
    twice = redact(once.text, pii=pii)
    assert twice.text == once.text
    assert twice.counts == {}
    assert all(n > 0 for n in once.counts.values())


@st.composite
def secret_in_text(draw: st.DrawFn) -> tuple[str, str, bool]:
    """(text, the secret in it, whether it needs pii=True)."""
    alnum = st.text(ALNUM, min_size=1)
    kind = draw(
        st.sampled_from(
            ["openai", "anthropic", "aws_id", "aws_secret", "github", "slack", "telegram", "google", "jwt",
             "bearer", "password", "pem", "card", "email"]
        )
    )  # fmt: skip

    def body(alphabet: str, n: int) -> str:
        # Every class present, as in a generated key
        drawn = draw(st.text(alphabet, min_size=n, max_size=n))
        return "aB3" + drawn[3:] if n > 3 else drawn

    secret: str
    needs_pii = False
    if kind == "openai":
        secret = "sk-" + draw(st.sampled_from(["", "proj-"])) + body(ALNUM, 48)
    elif kind == "anthropic":
        secret = "sk-" + "ant-api03-" + body(B64URL, 90)
    elif kind == "aws_id":
        prefix = draw(st.sampled_from(["AK" + "IA", "AS" + "IA"]))
        secret = prefix + draw(st.text(UPPER_DIGITS, min_size=16, max_size=16))
    elif kind == "aws_secret":
        value = body(ALNUM + "/+", 40)
        return f"aws_secret_access_key = {value}", value, False
    elif kind == "github":
        secret = "gh" + "p_" + body(ALNUM, 36)
    elif kind == "slack":
        secret = "xo" + "xb-" + draw(st.text(string.digits, min_size=12, max_size=12)) + "-" + body(ALNUM, 24)
    elif kind == "telegram":
        secret = "1" + draw(st.text(string.digits, min_size=8, max_size=9)) + ":" + body(B64URL, 35)
    elif kind == "google":
        secret = "AI" + "za" + body(B64URL, 35)
    elif kind == "jwt":
        secret = "ey" + "J" + body(B64URL, 20) + ".ey" + "J" + body(B64URL, 30) + "." + body(B64URL, 43)
    elif kind == "bearer":
        value = body(ALNUM, 32)
        return f"Authorization: Bearer {value}", value, False
    elif kind == "password":
        value = "p" + draw(st.text(ALNUM + "!#%&()*+.:<>?[]^_{|}~", min_size=7, max_size=20))
        return f"password={value}", value, False
    elif kind == "pem":
        lines = draw(st.lists(st.text(ALNUM + "+/", min_size=64, max_size=64), min_size=1, max_size=4))
        value = "\n".join(lines)
        return f"-----BEGIN PRIVATE KEY-----\n{value}\n-----END PRIVATE KEY-----", value, False
    elif kind == "card":
        digits = luhn_complete(
            draw(st.sampled_from("3456")) + draw(st.text(string.digits, min_size=14, max_size=14))
        )
        grouped = draw(st.booleans())
        secret = spaced(digits, (4, 4, 4, 4), draw(st.sampled_from([" ", "-"]))) if grouped else digits
        needs_pii = True
    else:
        secret = draw(alnum).lower() + "@" + draw(alnum).lower() + ".example.com"
        needs_pii = True
    return secret, secret, needs_pii


@settings(max_examples=500, deadline=None)
@given(secret_in_text(), st.text(max_size=40), st.text(max_size=40))
def test_a_generated_secret_never_survives(case: tuple[str, str, bool], before: str, after: str) -> None:
    snippet, secret, needs_pii = case
    # Lines of their own: what surrounds a secret must not be able to glue onto it and make a
    # longer token (that is a different string, which rightly need not match).
    text = f"{before}\n{snippet}\n{after}"
    result = redact(text, pii=True)
    assert secret not in result.text
    if not needs_pii:
        assert secret not in redact(text, pii=False).text


def test_a_megabyte_redacts_in_linear_time() -> None:
    rng = random.Random(7)
    words: tuple[str, ...] = (
        "the",
        "order",
        "2024-01-15",
        "v1.2.3",
        "12:30",
        "$9.99",
        "user",
        "key",
        "password=",
    )
    words += ("call", "@", "+1", "4111")
    text = " ".join(rng.choice(words) for _ in range(200_000))[:1_000_000]
    # Per character, a megabyte costs about what 100 KB does (a quadratic pattern: ten times).
    assert growth(lambda t: redact(t, pii=True), lambda size: text[:size], 100_000, 1_000_000) < 4.0


def test_a_passs_replacements_carried_back_to_its_first_text_rebuild_what_they_made() -> None:
    # The maintained rule set reads the text a pass began with, and its findings are joined with
    # Sigil's replacements carried back there (redact._Edits): carried back, they must rebuild
    # exactly the text Sigil's patterns made, adjacent and nested replacements included.
    from collections import Counter

    from shared.safety import redact as r

    rng = random.Random(3)
    pieces = ['password="', '"api_key": "', "sk-proj-" + chars(B64URL, 30, 40), '"', "'", " ", "\n"]
    pieces += [pem("PRIVATE KEY")[:80], AWS_ID, AWS_SECRET, "[REDACTED:secret]", "token=", "x" * 5]
    for _ in range(2000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(1, 14)))
        counts: Counter[str] = Counter()
        edits = r._Edits()
        keys = r._private_keys(text, counts)
        edits.add(text, keys)
        made = r._apply_patterns(r._SECRETS + r._ASSIGNMENTS, r._replace(text, keys), counts, edits)
        assert r._replace(text, edits.spans) == made, text

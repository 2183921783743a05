"""shared.safety.ruleset: gitleaks' default rules, vendored as data and applied as gitleaks does."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

from shared.safety import ruleset
from shared.safety.redact import redact


def test_the_vendored_file_is_gitleaks_own_with_its_source_recorded() -> None:
    text = ruleset.RULES_FILE.read_text(encoding="utf-8")
    header, _, body = text.partition(ruleset.HEADER_END)
    rules = ruleset.default()

    # Unchanged below the header: the recorded sha256 is of what is there
    assert hashlib.sha256(body.encode()).hexdigest() == rules.body_sha256
    assert rules.commit in rules.source
    assert rules.source.startswith("https://github.com/gitleaks/gitleaks/blob/")
    assert rules.version.startswith("v8.")
    # MIT: the copyright and permission notice travel with the rules
    assert "Copyright (c) 2019 Zachary Rice" in header
    assert "Permission is hereby granted, free of charge" in header
    assert len(rules.rules) >= 200
    assert all(r.keywords for r in rules.rules)


def test_importing_the_filter_reads_and_compiles_nothing() -> None:
    # The webhook imports the filter on its cold start: neither the file nor RE2 is loaded then
    script = (
        "import json, sys\n"
        "from shared.safety import redact, ruleset\n"
        "print(json.dumps(['re2' in sys.modules, ruleset.default.cache_info().currsize]))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True)
    assert json.loads(out.stdout) == [False, 0]


def test_a_rule_is_compiled_only_when_one_of_its_keywords_is_in_a_text() -> None:
    rules = ruleset.parse(ruleset.RULES_FILE.read_text(encoding="utf-8"))  # a fresh set, none compiled
    text = "my adafruit feed is up"
    assert list(rules.findings(text, text.lower())) == []

    compiled = {r.id for r in rules.rules if "regex" in r.__dict__}
    assert compiled == {r.id for r in rules.rules if any(k in text for k in r.keywords)}
    assert "adafruit-api-key" in compiled
    assert len(compiled) < 10


def test_the_entropy_floor_drops_a_low_entropy_value() -> None:
    assert ruleset.entropy("aaaa") == 0.0
    assert ruleset.entropy("ab") == 1.0
    # Adobe's client id rule (entropy 2): 32 hex characters, one repeated, is not a key
    rule = next(r for r in ruleset.default().rules if r.id == "adobe-client-id")
    assert rule.entropy == 2.0
    low = "adobe_client_id = " + "a" * 32 + "\n"
    assert redact(low, pii=False).text == low
    high = "adobe_client_id = " + "0123456789abcdef" * 2 + "\n"
    assert "[REDACTED:" in redact(high, pii=False).text


def test_the_global_allowlist_and_a_rules_stopwords_keep_a_value() -> None:
    # gitleaks' global allowlist: a reference to an environment variable is not a secret
    text = "algolia_key: $ALGOLIA_KEY_VALUE_FROM_ENV\n"
    assert redact(text, pii=False).text == text
    # generic-api-key's stopwords: a value holding a common word of code ("example") is kept
    generic = next(r for r in ruleset.default().rules if r.id == "generic-api-key")
    assert any("example" in a.stopwords for a in generic.allowlists)


def test_a_provider_the_hand_written_shapes_never_named_is_redacted_by_its_rule() -> None:
    # Doppler, PlanetScale, 1Password: fixed prefixes the first list did not have
    body = "Xq7" + "k2Lm9Pz4Rt8Vw1Ny6Bc3Hd5Jf0Gs2Qa7Ue4Io9Kx"  # 43: Doppler's length
    for token, kind in (
        ("dp.pt." + body, "doppler_api_token"),
        ("pscale_tkn_" + body, "planetscale_api_token"),
    ):
        result = redact(f"the token is {token} for prod", pii=False)
        assert result.text == f"the token is [REDACTED:{kind}] for prod"
        assert result.counts == {kind: 1}


def test_a_finding_inside_a_marker_is_left_to_the_marker() -> None:
    once = redact('{"password": "Tr0ub4dor-x9", "api_key": "k2Lm9Pz4Rt8Vw1Ny6Bc3"}', pii=False)
    assert redact(once.text, pii=False).counts == {}
    assert json.loads(once.text) == {"password": "[REDACTED:password]", "api_key": "[REDACTED:secret]"}


def test_the_keyword_set_finds_what_a_substring_search_finds() -> None:
    rules = ruleset.default()
    words = {k for r in rules.rules for k in r.keywords}
    for text in ("nothing to see", "my adafruit and heroku keys", "xoxb- ghp_ sk_live_ AKIA", ""):
        lowered = text.lower()
        assert rules.keywords_in(lowered) == {w for w in words if w in lowered}


def test_a_token_a_sigil_shape_takes_only_part_of_is_redacted_whole() -> None:
    # GitLab's routable token: Sigil's shape stops at the ".", gitleaks' rule sees the rest; the
    # two are joined under Sigil's marker and no tail is left shown.
    token = "glpat-" + "ltOPcCVBjIljc6fbHodkVhRs3NJ9o" + ".2xorgbqag"
    result = redact(f"CI_TOKEN={token}\n", pii=False)
    assert result.text == "CI_TOKEN=[REDACTED:gitlab_token]\n"
    assert result.counts == {"gitlab_token": 1}


def test_two_rules_finding_overlapping_parts_of_a_token_hide_all_of_it() -> None:
    # Flutterwave: the encryption key's rule matches the first part of a secret key
    secret = "FLWSECK_TEST-" + "f568bf717b61154fgeg080eag613609f-X"
    result = redact(f"key:\n{secret}\nok", pii=False)
    assert result.text == "key:\n[REDACTED:flutterwave_encryption_key]\nok"
    assert result.total == 1


def test_no_prefix_of_a_streaming_reply_shows_a_rule_samples_secret() -> None:
    from shared.safety.redact import _MARKER, redact_partial
    from tests.support.rule_samples import samples

    for sample in samples()[::3]:
        text = sample.text + " " + "More words follow here. " * 5
        windows = {sample.secret[i : i + 8] for i in range(max(1, len(sample.secret) - 7))}
        for end in range(0, len(text) + 1, 3):
            shown = _MARKER.sub(" ", redact_partial(text[:end], pii=False))
            assert not [w for w in windows if w.strip() and w in shown], (sample.rule, end)


def test_a_text_of_every_rules_keywords_redacts_in_linear_time() -> None:
    # Every rule runs on such a text (its keywords and assignment operators everywhere); RE2
    # keeps each linear, so ten times the text costs about ten times the time.
    import random

    from tests.support.scaling import growth

    rng = random.Random(9)
    words = sorted({k for r in ruleset.default().rules for k in r.keywords})
    pieces = [f"{w}={w}" for w in words] + [*words, "key:", "token =", "'", '"', "=>", "\n"]
    text = " ".join(rng.choice(pieces) for _ in range(40_000))
    assert growth(lambda t: redact(t, pii=False), lambda size: text[:size], 20_000, 200_000) < 4.0


def test_a_line_of_thousands_of_findings_redacts_in_linear_time() -> None:
    # One line, a generic-api-key finding every 27 characters: each finding's allowlists read a
    # bounded piece of the line and one RE2 pass of the 1,446 stopwords, not the line and 1,446
    # substring searches.
    import random
    import string

    from tests.support.scaling import growth

    rng = random.Random(4)
    alnum = string.ascii_letters + string.digits
    text = " ".join("cache_key=" + "".join(rng.choices(alnum, k=16)) for _ in range(8_000))
    assert growth(lambda t: redact(t, pii=False), lambda size: text[:size], 20_000, 200_000) < 4.0

"""The output filter against the credential corpus (tests/support/safety_corpus.py): every
credential in every form it is pasted in is redacted, and nothing around it is touched; ordinary
text and lookalikes (hashes, ids, base64, identifiers beside "secret" or "aws") are left alone.
bench/redaction.py prints the same figures as a table, with throughput.
"""

from __future__ import annotations

import base64
import json
import random
import re
from collections import defaultdict

import pytest

from shared.safety import ruleset
from shared.safety.redact import redact
from tests.support import rule_samples
from tests.support.safety_corpus import (
    BENIGN,
    FORMS,
    ORDINARY,
    PER_PROVIDER,
    PROVIDERS,
    Case,
    Provider,
    cases,
    credentials,
    lookalikes,
    ordinary_sentences,
)

CASES = cases()
BY_PROVIDER: dict[str, list[Case]] = defaultdict(list)
for _case in CASES:
    BY_PROVIDER[_case.provider].append(_case)


def test_the_corpus_holds_at_least_200_credentials_in_many_forms() -> None:
    assert len(credentials()) >= 200
    assert len({c.form for c in CASES}) >= 30
    assert {c.form for c in CASES} == set(FORMS)  # every form is used
    assert len(CASES) == sum(len(p.forms) for p in PROVIDERS) * PER_PROVIDER


@pytest.mark.parametrize("provider", sorted(BY_PROVIDER))
def test_every_credential_is_redacted_in_every_form_and_the_text_around_it_survives(provider: str) -> None:
    misses = []
    for case in BY_PROVIDER[provider]:
        result = redact(case.text, pii=False)
        # Nothing of the credential is left, and the text is the form with a marker in its place
        if any(secret in result.text for secret in case.secrets) or not case.expected.fullmatch(result.text):
            misses.append((case.form, case.text, result.text))
    assert misses == []


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_a_credential_in_prose_is_found_by_its_own_shape(provider: Provider) -> None:
    # Prose, with no key name or header to give it away: the shape (or, for AWS, the words and
    # key id beside it) must do it, and the marker names the provider's kind.
    form = "prose_plain" if "prose_plain" in provider.forms else provider.forms[0]
    case = next(c for c in BY_PROVIDER[provider.name] if c.form == form)
    result = redact(case.text, pii=False)
    assert f"[REDACTED:{provider.kind}]" in result.text, result.text


def test_an_aws_secret_is_found_beside_its_key_id_or_under_a_label_and_not_alone() -> None:
    secret = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"  # the IAM user guide's example
    key_id = "AKIA" + "IOSFODNN7EXAMPLE"
    assert (
        redact(f"{key_id} {secret}", pii=False).text == "[REDACTED:aws_access_key] [REDACTED:aws_secret_key]"
    )
    assert redact(f"the secret is {secret}.", pii=False).text == "the secret is [REDACTED:aws_secret_key]."
    assert redact(f"{secret} is my AWS key", pii=False).text == "[REDACTED:aws_secret_key] is my AWS key"
    # With no key id and no label, 40 characters of base64 are as likely a digest or a nonce:
    # left alone (docs/safety.md, "Known limits")
    assert redact(f"use {secret} for it", pii=False).text == f"use {secret} for it"


def test_an_identifier_beside_a_label_is_not_taken_for_a_secret() -> None:
    for ident in (
        "AwsSecretsManagerRotationLambdaFunction1",
        "MyStackLambdaFunctionServiceRole0C4CDE0B",
        "getUserAccountSettingsForWorkspaceId2024",
    ):
        text = f"aws cloudformation describe-stack-resource --logical-resource-id {ident}"
        assert redact(text, pii=False).text == text


def test_random_keys_are_rarely_mistaken_for_written_text() -> None:
    # Under a label alone, a key is redacted unless it reads as written: measure how often a
    # random key does (the design allows about one in 3,000).
    rng = random.Random(5)
    trials = 3000
    kept = 0
    for _ in range(trials):
        secret = base64.b64encode(rng.randbytes(30)).decode()
        kept += secret in redact(f"aws_secret: {secret}", pii=False).text
    assert kept <= 5


def test_ordinary_text_and_lookalikes_are_left_alone() -> None:
    # The false-positive rate on ordinary text: 0 of these change.
    changed = [t for t in ORDINARY if redact(t, pii=True).text != t]
    changed += [t for t in BENIGN if redact(t, pii=False).text != t]
    changed += [t for t in lookalikes() if redact(t, pii=False).text != t]
    assert changed == []


# ---------------------------------------------------------------- the maintained rule set

RULE_SAMPLES = rule_samples.samples()


def test_every_rule_of_the_maintained_set_has_a_sample_drawn_from_its_own_regex() -> None:
    rules = ruleset.default()
    assert len(rules.rules) >= 200
    assert sorted(s.rule for s in RULE_SAMPLES) == sorted(r.id for r in rules.rules)
    # The corpus is pinned: the same draws, the same texts (python -m tests.support.rule_samples)
    pinned = json.loads(rule_samples.FIXTURE.read_text())
    assert pinned == json.loads(json.dumps(rule_samples.manifest(RULE_SAMPLES, rules)))


def test_every_sample_of_the_maintained_set_is_redacted() -> None:
    # Nothing of it is left: no eight characters of the secret, outside the markers' names
    missed = []
    for sample in RULE_SAMPLES:
        result = redact(sample.text, pii=False)
        left = re.sub(r"\[REDACTED:[a-z0-9_]+\]", " ", result.text)
        pieces = [sample.secret[i : i + 8] for i in range(max(1, len(sample.secret) - 7))]
        if "[REDACTED:" not in result.text or any(p.strip() and p in left for p in pieces):
            missed.append((sample.rule, sample.text, result.text))
    assert missed == []


def test_the_corpus_holds_several_hundred_credentials() -> None:
    # The maintained set's samples and Sigil's own providers (context rules among them)
    assert len(RULE_SAMPLES) + len(credentials()) >= 400
    assert {p.kind for p in PROVIDERS} >= {"browser_token", "web_signature", "web_secret", "aws_secret_key"}


SENTENCES = ordinary_sentences()


def test_three_hundred_ordinary_sentences_are_left_alone() -> None:
    # Hashes, commits, image digests, UUIDs, base64 images, versions and URLs, some beside the
    # words a secret's context has: none changes, PII on or off.
    assert len(SENTENCES) >= 300
    for needle in ("@sha256:", "/commit/", "data:image/png;base64,", "https://", "git checkout", "md5sum"):
        assert any(needle in t for t in SENTENCES), needle
    changed = [t for t in SENTENCES if redact(t, pii=True).text != t or redact(t, pii=False).text != t]
    assert changed == []

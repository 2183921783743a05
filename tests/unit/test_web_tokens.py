"""Browser tokens (shared.channels.web_tokens): the committed format, tampering, expiry, scope."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shared.channels import web_tokens as t
from shared.errors import BadRequest

FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures" / "web" / "browser_token_v1.json").read_text())
SECRET = "s3cret-for-tests"
NOW = 1_700_000_000


def _hkdf_sha256(ikm: bytes, info: bytes) -> bytes:
    # RFC 5869 by hand (no salt: a zero key), so the fixture is checked against a second reading.
    prk = hmac.new(b"\0" * 32, ikm, hashlib.sha256).digest()
    return hmac.new(prk, info + b"\x01", hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token(**overrides: object) -> str:
    claims = {"workspace": "default", "user": "alice", "sessions": ["s1"], "iat": NOW, "exp": NOW + 3600}
    claims.update(overrides)
    return t.mint(SECRET, t.BrowserClaims.model_validate(claims))


def test_fixed_vector_mints_and_verifies_byte_for_byte() -> None:
    claims = t.BrowserClaims.model_validate(FIXTURE["claims"])
    assert t.mint(FIXTURE["secret"], claims) == FIXTURE["token"]
    assert t.verify(FIXTURE["secret"], FIXTURE["token"], now=FIXTURE["now"]) == claims


def test_fixed_vector_matches_an_independent_hkdf_and_hmac() -> None:
    version, body, mac = FIXTURE["token"].split(".")
    key = _hkdf_sha256(FIXTURE["secret"].encode(), b"sigil-browser-token-v1")
    assert key == t.derive_key(FIXTURE["secret"])
    assert _b64(hmac.new(key, f"{version}.{body}".encode(), hashlib.sha256).digest()) == mac
    assert json.loads(base64.urlsafe_b64decode(body + "==")) == FIXTURE["claims"]


def test_the_secret_itself_never_signs_the_token() -> None:
    version, body, mac = token().split(".")
    assert _b64(hmac.new(SECRET.encode(), f"{version}.{body}".encode(), hashlib.sha256).digest()) != mac
    assert SECRET not in token()


def test_tampered_claims_are_a_bad_signature() -> None:
    version, body, mac = token().split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=="))
    claims["user"] = "mallory"
    forged = f"{version}.{_b64(json.dumps(claims).encode())}.{mac}"
    with pytest.raises(t.TokenBadSignature) as err:
        t.verify(SECRET, forged, now=NOW)
    assert err.value.code == "token_invalid" and err.value.http_status == 401


def test_tampered_signature_and_rotated_secret_are_refused() -> None:
    good = token()
    flipped = good[:-2] + ("AA" if not good.endswith("AA") else "BB")
    with pytest.raises(t.TokenBadSignature):
        t.verify(SECRET, flipped, now=NOW)
    with pytest.raises(t.TokenBadSignature):
        t.verify("rotated-secret", good, now=NOW)
    with pytest.raises(t.TokenBadSignature):
        t.verify(None, good, now=NOW)


@pytest.mark.parametrize(
    "bad",
    ["", "v1", "v1.a.b.c", "v2.e30.AAAA", "v1.!!!.AAAA", f"v1.{_b64(b'not json')}.AAAA", "v1." + "A" * 5000],
)
def test_malformed_tokens_are_refused(bad: str) -> None:
    with pytest.raises(t.TokenMalformed) as err:
        t.verify(SECRET, bad, now=NOW)
    assert err.value.code == "token_invalid"


def test_expiry_is_checked_after_the_signature() -> None:
    good = token()
    assert t.verify(SECRET, good, now=NOW + 3599).user == "alice"
    with pytest.raises(t.TokenExpired) as err:
        t.verify(SECRET, good, now=NOW + 3600)
    assert err.value.code == "token_expired"
    # A forged token is never reported as merely expired.
    with pytest.raises(t.TokenBadSignature):
        t.verify("other", good, now=NOW + 9999)


def test_wrong_workspace_is_refused() -> None:
    with pytest.raises(t.TokenWrongWorkspace):
        t.verify(SECRET, token(), now=NOW, workspace="other")
    assert t.unverified_workspace(token()) == "default"


def test_lifetimes_over_24_hours_or_issued_in_the_future_are_refused() -> None:
    with pytest.raises(ValueError, match="at most"):
        token(exp=NOW + 24 * 3600 + 1)
    with pytest.raises(BadRequest, match="24 hours"):
        t.parse_ttl("25h")
    assert t.parse_ttl("1h") == 3600 and t.parse_ttl("90") == 90 and t.parse_ttl("30m") == 1800
    with pytest.raises(t.TokenMalformed, match="future"):
        t.verify(SECRET, token(iat=NOW + 600, exp=NOW + 1200), now=NOW)


def test_sessions_are_names_or_prefixes() -> None:
    claims = t.claims_for("default", "alice", ["alice.*", "shared"], now=NOW)
    assert claims.allows("alice.1") and claims.allows("shared")
    assert not claims.allows("alice.") and not claims.allows("alicex") and not claims.allows("bob.1")
    assert t.claims_for("default", "alice", "s1", now=NOW).sessions == ["s1"]
    # "*" never crosses a ".": user ids may hold dots, and `john.*` is john's, not john.smith's.
    john = t.claims_for("default", "john", ["john.*"], now=NOW)
    assert john.allows("john.main") and john.allows("john.smith")
    assert not john.allows("john.smith.main") and not john.allows("john.main.")
    team = t.claims_for("default", "alice", ["team-*"], now=NOW)
    assert team.allows("team-red") and not team.allows("team-red.alice.1")
    with pytest.raises(BadRequest, match="sessions"):
        t.claims_for("default", "alice", ["no spaces"], now=NOW)


def test_cli_mints_a_token_the_workspace_secret_verifies(tmp_path: Path) -> None:
    from shared.adapters.embedded import FileSecretStore, open_data_dir
    from shared.cli import app

    store = FileSecretStore(open_data_dir(tmp_path) / "secrets.json")
    store.set("web/default", SECRET)
    result = CliRunner().invoke(
        app, ["web", "token", "--user", "alice", "--ttl", "10m", "--data-dir", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    import time

    claims = t.verify(SECRET, result.output.strip(), now=time.time(), workspace="default")
    assert claims.user == "alice" and claims.sessions == ["alice.*"] and claims.exp - claims.iat == 600
    opened = CliRunner().invoke(app, ["web", "open", "-u", "bob", "-s", "s9", "--data-dir", str(tmp_path)])
    assert opened.exit_code == 0 and "/#token=v1." in opened.output

"""The web channel's signature and body rules, at the unit level (e2e covers the HTTP side)."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from shared.channels import web
from shared.errors import BadRequest, Unauthorized

SECRET = "s3cret-for-tests"
NOW = 1_700_000_000


def headers_for(body: bytes, *, ts: int = NOW, secret: str = SECRET) -> dict[str, str]:
    return {k.lower(): v for k, v in web.signed_headers(secret, body, now=ts).items()}


def test_signature_is_hmac_sha256_over_timestamp_dot_body() -> None:
    # Given a body and a timestamp, when signed, then it matches an independent HMAC computation
    body = b'{"a":1}'
    expected = hmac.new(SECRET.encode(), b"1700000000." + body, hashlib.sha256).hexdigest()
    assert web.sign(SECRET, NOW, body) == f"v1={expected}"


def test_valid_signature_inside_window_passes() -> None:
    body = b"{}"
    web.verify(SECRET, headers_for(body, ts=NOW - 299), body, now=NOW)
    web.verify(SECRET, headers_for(body, ts=NOW + 299), body, now=NOW)


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda h, b: ({}, b), "missing"),
        (lambda h, b: ({**h, "x-sigil-signature": "v1=" + "0" * 64}, b), "mismatch"),
        (lambda h, b: (h, b + b" "), "mismatch"),
        (lambda h, b: ({**h, "x-sigil-timestamp": "yesterday"}, b), "not a unix timestamp"),
        (lambda h, b: (headers_for(b, ts=NOW - 301), b), "window"),
        (lambda h, b: (headers_for(b, ts=NOW + 301), b), "window"),
        (lambda h, b: (headers_for(b, secret="other"), b), "mismatch"),
    ],
)
def test_bad_signatures_are_refused_with_a_reason(mutate, reason) -> None:  # type: ignore[no-untyped-def]
    body = b'{"text":"hi"}'
    headers, sent = mutate(headers_for(body), body)
    with pytest.raises(Unauthorized, match=reason) as err:
        web.verify(SECRET, headers, sent, now=NOW)
    assert "hi" not in err.value.message  # the body is never echoed


def test_unknown_workspace_looks_like_a_bad_signature() -> None:
    body = b"{}"
    with pytest.raises(Unauthorized, match="signature mismatch"):
        web.verify(None, headers_for(body), body, now=NOW)


def test_parse_normalises_into_an_inbound_message() -> None:
    body = json.dumps({"event_id": "e1", "session": "s1", "user": "u1", "text": "hello"}).encode()
    msg = web.parse("ws1", body)
    assert (msg.workspace_id, msg.session_id, msg.sender.id, msg.text) == ("ws1", "web.s1", "u1", "hello")
    assert msg.lane_key == "ws1.web.s1"
    assert msg.channel == "web"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json", "not valid JSON"),
        (b'{"event_id":"e1","session":"s1","user":"u1"}', "text"),
        (b'{"event_id":"e1","session":"s1","user":"u1","text":""}', "text"),
        (b'{"event_id":"../x","session":"s1","user":"u1","text":"t"}', "event_id"),
        (b'{"event_id":"e1","session":"s1","user":"u1","text":"t","extra":1}', "extra"),
        (b"[]", "invalid message"),
    ],
)
def test_parse_rejects_malformed_bodies_with_a_reason(body: bytes, reason: str) -> None:
    with pytest.raises(BadRequest, match=reason):
        web.parse("ws1", body)

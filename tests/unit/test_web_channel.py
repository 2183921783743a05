"""The web channel's signature and body rules, at the unit level (e2e covers the HTTP side)."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from shared.channels import inbound, web
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


def test_parse_cleans_text_and_name_as_the_platforms_are() -> None:
    # Given a body whose text and user name hold characters SQS refuses in a message body
    body = json.dumps(
        {
            "event_id": "e1",
            "session": "s1",
            "user": "u1",
            "text": "a\ufffe\uffff\x00b",
            "user_name": "n\x00\uffff",
        }
    ).encode()
    # When parsed, then each is U+FFFD, as shared.channels.inbound.clean makes a platform's text
    msg = web.parse("ws1", body)
    assert (msg.text, msg.sender.name) == ("a\ufffd\ufffd\ufffdb", "n\ufffd\ufffd")


def test_clean_keeps_exactly_the_characters_sqs_allows() -> None:
    # Every code point at once: SQS allows #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF
    def allowed(cp: int) -> bool:
        return cp in (0x9, 0xA, 0xD) or 0x20 <= cp <= 0xD7FF or 0xE000 <= cp <= 0xFFFD or cp >= 0x10000

    everything = "".join(map(chr, range(0x110000)))
    expected = "".join(chr(cp) if allowed(cp) else "\ufffd" for cp in range(0x110000))
    assert inbound.clean(everything) == expected


@pytest.mark.parametrize(
    "ts",
    ["9" * 400, "1" * 13, "-1700000000", "+1700000000", " 1700000000", "1_700_000_000", "１７００"],  # noqa: RUF001
)
def test_a_timestamp_that_is_not_plain_unix_seconds_is_refused(ts: str) -> None:
    # Given signing headers whose timestamp is too long, signed, spaced or not ASCII digits
    headers = {**headers_for(b"{}"), "x-sigil-timestamp": ts}
    # When verified, then it is a 401 saying so (never an OverflowError from float arithmetic)
    with pytest.raises(Unauthorized, match="X-Sigil-Timestamp is not a unix timestamp"):
        web.verify(SECRET, headers, b"{}", now=NOW)


@pytest.mark.parametrize("sig", ["v1=nothex", "v2=" + "0" * 64, "v1=" + "0" * 63, "v1=" + "A" * 64, "0" * 64])
def test_a_malformed_signature_is_refused_from_the_headers_alone(sig: str) -> None:
    # Given fresh headers whose signature is not v1=<64 lower-case hex digits>
    headers = {**headers_for(b"{}"), "x-sigil-signature": sig}
    # When their parts are read (before any secret is), then they are refused
    with pytest.raises(Unauthorized, match="X-Sigil-Signature is not v1=<64 hex digits>"):
        web.signed_parts(headers, now=NOW)

"""Browser tokens: short-lived, signed credentials a web page can hold instead of the web secret.

A browser must never hold the workspace's web signing secret (whoever has it can post as anyone).
A browser token names one workspace, one Sigil user and the sessions it may use, and expires:

    signed  = "v1." + base64url(claims_json)
    token   = signed + "." + base64url(HMAC_SHA256(key, signed))
    key     = HKDF-SHA256(ikm=web_secret, salt=none, info="sigil-browser-token-v1", length=32)
    claims  = {"workspace": str, "user": str, "sessions": [str, ...], "iat": int, "exp": int}

base64url is RFC 4648 §5 without padding. `sessions` holds session names (the `session` of the
web channel, e.g. "s1") or patterns ending in "*", which stands for one or more characters other
than "." ("alice.*": "alice.main", never "alice.smith.main"); a single string is read as a
one-item list. `iat` and `exp` are unix
seconds; a token lives at most 24 hours. The claims are signed, not encrypted: the page may read
them (it does, to know its sessions), so they must hold nothing secret.

The key is derived from the secret, so the secret itself never signs anything a browser holds,
and rotating the secret revokes every token minted under it. An operator's own backend mints
tokens with `mint` (or reimplements the three lines above); `sigil web token` mints one locally.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from typing import Annotated

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from pydantic import Field, ValidationError, field_validator, model_validator

from shared.errors import BadRequest, Unauthorized
from shared.models import ID_PATTERN, Identifier, Model, WorkspaceId

VERSION = "v1"
HKDF_INFO = b"sigil-browser-token-v1"
DEFAULT_TTL_S = 3600
MAX_TTL_S = 24 * 3600
# A token issued a little in the future (the minting host's clock ahead of ours) is still good.
CLOCK_SKEW_S = 60
MAX_TOKEN_CHARS = 4096
MAX_SESSIONS = 50

# A session name, or a prefix of one followed by "*" ("*" never occurs in a session name).
_SESSION_PATTERN = re.compile(ID_PATTERN.removesuffix("$") + r"\*?$")
SessionPattern = Annotated[str, Field(pattern=_SESSION_PATTERN.pattern)]


class TokenError(Unauthorized):
    """A browser token that can't be used; `code` is what the page shows."""

    code = "token_invalid"


class TokenMalformed(TokenError):
    """Not a v1 token: wrong shape, bad base64, claims that are not the documented JSON."""


class TokenBadSignature(TokenError):
    """The signature is not the workspace's: tampered, or minted under another (or an old) secret."""


class TokenWrongWorkspace(TokenError):
    """A token for another workspace than the one it is presented to."""


class TokenExpired(TokenError):
    """Past its `exp`: mint a new one."""

    code = "token_expired"


class BrowserClaims(Model):
    """What a browser token says: who the browser is, where, for how long."""

    workspace: WorkspaceId
    user: Identifier
    sessions: list[SessionPattern] = Field(min_length=1, max_length=MAX_SESSIONS)
    iat: int = Field(ge=0, le=2**40)
    exp: int = Field(ge=0, le=2**40)

    @field_validator("sessions", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _lifetime(self) -> BrowserClaims:
        if not 0 < self.exp - self.iat <= MAX_TTL_S:
            raise ValueError(f"exp must be after iat, by at most {MAX_TTL_S} seconds")
        return self

    def allows(self, session: str) -> bool:
        """Whether the token may read and post to web session `session`."""
        return any(pattern_allows(pattern, session) for pattern in self.sessions)


def pattern_allows(pattern: str, session: str) -> bool:
    """Whether one of a token's session patterns covers web session `session`.

    A name covers itself only. In "prefix*" the "*" stands for one or more characters other than
    ".": user ids may hold dots, so were it any characters, user `john`'s own sessions `john.*`
    would also cover user `john.smith`'s `john.smith.main`. With it, a session's owner is the
    name up to its last dot, and `U.*` covers user U's conversations and no other user's.
    """
    if not pattern.endswith("*"):
        return session == pattern
    prefix = pattern[:-1]
    rest = session[len(prefix) :]
    return session.startswith(prefix) and rest != "" and "." not in rest


def derive_key(secret: str) -> bytes:
    """The token signing key of a workspace whose web secret is `secret`."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=HKDF_INFO)
    return hkdf.derive(secret.encode())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    if not re.fullmatch(r"[A-Za-z0-9_-]*", text):
        raise TokenMalformed("the token is not base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise TokenMalformed("the token is not base64url") from None


def _mac(key: bytes, signed: str) -> bytes:
    return hmac.new(key, signed.encode("ascii"), hashlib.sha256).digest()


def claims_for(
    workspace: str, user: str, sessions: list[str] | str, *, now: float, ttl_s: int = DEFAULT_TTL_S
) -> BrowserClaims:
    """Claims from `now` for `ttl_s` seconds; BadRequest says what is wrong (a bad name, a ttl over 24 h)."""
    iat = int(now)
    try:
        return BrowserClaims.model_validate(
            {"workspace": workspace, "user": user, "sessions": sessions, "iat": iat, "exp": iat + ttl_s}
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "claims"
        raise BadRequest(f"invalid token claims: {where}: {first['msg']}") from None


def mint(secret: str, claims: BrowserClaims) -> str:
    """A browser token carrying `claims`, signed with the key derived from `secret`."""
    body = json.dumps(claims.model_dump(mode="json"), separators=(",", ":"), sort_keys=True)
    signed = f"{VERSION}.{_b64(body.encode())}"
    return f"{signed}.{_b64(_mac(derive_key(secret), signed))}"


def unverified_workspace(token: str) -> str:
    """The workspace a token claims, to know whose secret checks it. Trust nothing else unverified."""
    return _split(token)[1].workspace


def _split(token: str) -> tuple[str, BrowserClaims, bytes]:
    if len(token) > MAX_TOKEN_CHARS:
        raise TokenMalformed("the token is too long")
    parts = token.strip().split(".")
    if len(parts) != 3 or parts[0] != VERSION:
        raise TokenMalformed(f"not a {VERSION} browser token")
    raw = _unb64(parts[1])
    try:
        claims = BrowserClaims.model_validate_json(raw)
    except ValidationError:
        raise TokenMalformed("the token's claims are not valid") from None
    return f"{parts[0]}.{parts[1]}", claims, _unb64(parts[2])


def verify(secret: str | None, token: str, *, now: float, workspace: str | None = None) -> BrowserClaims:
    """The token's claims, if `secret`'s key signed it, it is for `workspace` and it has not expired.

    Raises a TokenError: TokenMalformed, TokenWrongWorkspace, TokenBadSignature (also when
    `secret` is None: an unknown workspace looks like a wrong signature) or TokenExpired. The
    signature is checked before the expiry, so "expired" is only ever said of a genuine token.
    """
    signed, claims, mac = _split(token)
    if workspace is not None and claims.workspace != workspace:
        raise TokenWrongWorkspace("the token is for another workspace")
    if secret is None or not hmac.compare_digest(_mac(derive_key(secret), signed), mac):
        raise TokenBadSignature("the token's signature is not valid")
    if now >= claims.exp:
        raise TokenExpired("the token has expired")
    if claims.iat > now + CLOCK_SKEW_S:
        raise TokenMalformed("the token is issued in the future")
    return claims


def parse_ttl(text: str) -> int:
    """Seconds from "90", "90s", "30m", "1h" or "1d"; BadRequest unless 1 s to 24 h."""
    match = re.fullmatch(r"\s*(\d{1,6})\s*([smhd]?)\s*", text)
    if match is None:
        raise BadRequest(f"not a duration: {text!r} (e.g. 30m, 1h)")
    seconds = int(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
    if not 0 < seconds <= MAX_TTL_S:
        raise BadRequest("a browser token lives from 1 second to 24 hours")
    return seconds

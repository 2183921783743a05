"""`sigil events`: the sample events in events/ (events/README.md), signed for now.

The webhook samples are signed as each platform signs, with the sample secrets below (what a
test, `sigil dev --aws` or `sam local invoke` must store for them to verify). The web, outbox,
Slack and Discord signatures carry a timestamp, so a sample signed at its pinned time is refused
five minutes later; `sigil events sign` signs a copy at the current time.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Final

import typer

from shared.cli._app import app

# The sample events' secrets, by the name they are stored under (shared.config's catalogue; the
# web one is web.secret_name("default")). Not real anywhere: they only verify the samples.
SAMPLE_SECRETS: Final = {
    "web/default": "sample-web-secret-not-real",
    "slack/signing-secret": "sample-slack-secret-not-real",
    "telegram/webhook-secret": "sample-telegram-secret-not-real",
    "whatsapp/app-secret": "sample-whatsapp-secret-not-real",
    "whatsapp/verify-token": "sample-whatsapp-verify-token-not-real",
}
# Discord signs with its private key; the webhook holds the public one (discord/public-key). The
# sample key pair is derived from this seed, so the samples can be signed again by anyone.
DISCORD_SAMPLE_SEED: Final = hashlib.sha256(b"sample-discord-key-not-real").digest()
SIGNED_AT: Final = 1767225600  # 2026-01-01T00:00:00Z: the committed samples' signing time

WEB_POST: Final = "POST /webhooks/web/{workspace}"
OUTBOX_GET: Final = "GET /sessions/{workspace}/{session}/outbox"

events_app = typer.Typer(help="The sample events in events/: sign them for now.", no_args_is_help=True)
app.add_typer(events_app, name="events")


def discord_sample_public_key() -> str:
    """The hex public key to store as discord/public-key for the Discord sample to verify."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    key = Ed25519PrivateKey.from_private_bytes(DISCORD_SAMPLE_SEED)
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()


def sample_secrets() -> dict[str, str]:
    """Every secret the samples need, by name, the Discord public key included."""
    return {**SAMPLE_SECRETS, "discord/public-key": discord_sample_public_key()}


def sign_event(event: dict[str, Any], *, now: float, secret: str | None = None) -> dict[str, Any]:
    """A copy of an HTTP API (payload v2) sample with its signature made again at `now` (and its
    request time with it). `secret` replaces the sample secret of its channel (for Discord, a hex
    Ed25519 private key); an event its route does not sign is returned as it is.

    Raises ValueError for an event that is not one of the webhook's routes."""
    route = event.get("routeKey")
    if not isinstance(route, str) or "requestContext" not in event:
        raise ValueError("not an API Gateway HTTP API (payload v2) event: no routeKey or requestContext")
    signed = copy.deepcopy(event)
    ts = int(now)
    context = signed["requestContext"]
    context["timeEpoch"] = ts * 1000
    context["time"] = _request_time(ts)
    raw = signed.get("body") or ""
    body = base64.b64decode(raw) if signed.get("isBase64Encoded") else raw.encode()
    headers: dict[str, str] = signed.setdefault("headers", {})
    if route == WEB_POST:
        headers.update(_web(secret or SAMPLE_SECRETS["web/default"], body, ts))
    elif route == OUTBOX_GET:
        query = signed.get("rawQueryString") or ""
        target = signed["rawPath"] + (f"?{query}" if query else "")
        headers.update(_web(secret or SAMPLE_SECRETS["web/default"], target.encode(), ts))
    elif route == "POST /webhooks/slack":
        key = (secret or SAMPLE_SECRETS["slack/signing-secret"]).encode()
        mac = hmac.new(key, f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
        headers.update({"x-slack-request-timestamp": str(ts), "x-slack-signature": f"v0={mac}"})
    elif route == "POST /webhooks/discord":
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        private = bytes.fromhex(secret) if secret else DISCORD_SAMPLE_SEED
        signature = Ed25519PrivateKey.from_private_bytes(private).sign(str(ts).encode() + body).hex()
        headers.update({"x-signature-ed25519": signature, "x-signature-timestamp": str(ts)})
    elif route == "POST /webhooks/whatsapp":
        key = (secret or SAMPLE_SECRETS["whatsapp/app-secret"]).encode()
        headers["x-hub-signature-256"] = "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()
    elif route == "POST /webhooks/telegram":
        headers["x-telegram-bot-api-secret-token"] = secret or SAMPLE_SECRETS["telegram/webhook-secret"]
    elif route != "GET /webhooks/whatsapp":  # the handshake carries the verify token, no signature
        raise ValueError(f"not one of the webhook's routes: {route}")
    return signed


_MONTHS: Final = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _request_time(ts: int) -> str:
    t = time.gmtime(ts)
    # Spelled out rather than %b: API Gateway writes English month names whatever the locale.
    clock = f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"
    return f"{t.tm_mday:02d}/{_MONTHS[t.tm_mon - 1]}/{t.tm_year}:{clock} +0000"


def _web(secret: str, payload: bytes, ts: int) -> dict[str, str]:
    from shared.channels import web

    return {k.lower(): v for k, v in web.signed_headers(secret, payload, now=ts).items()}


@events_app.command("sign")
def sign(
    path: Annotated[Path, typer.Argument(help="a webhook sample, e.g. events/webhook_web.json")],
    secret: Annotated[
        str | None,
        typer.Option(
            "--secret",
            help="sign with this secret instead of the sample's (e.g. your workspace's web secret)",
        ),
    ] = None,
    at: Annotated[
        int | None, typer.Option("--at", help="unix time to sign at (default: now)", show_default=False)
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="write here instead of to stdout")
    ] = None,
) -> None:
    """Print a copy of a webhook sample signed now, which the webhook accepts for five minutes:
    `sigil events sign events/webhook_web.json -o /tmp/web.json` then
    `sam local invoke ... -e /tmp/web.json`."""
    try:
        event = json.loads(path.read_text())
        signed = sign_event(event, now=time.time() if at is None else at, secret=secret)
    except (OSError, ValueError) as exc:
        # json's JSONDecodeError is a ValueError too: every unusable file is one line, exit 2.
        typer.echo(f"error: {path}: {exc}", err=True)
        raise typer.Exit(2) from None
    text = json.dumps(signed, indent=2, ensure_ascii=False) + "\n"
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text)

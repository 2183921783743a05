"""One local HTTP server speaking the outbound APIs of Telegram, Slack, Discord and WhatsApp.

Each platform lives under its own path prefix, so one server serves all four and `base_urls`
points the senders at it:

    with FakePlatforms() as fake:
        senders = build_senders(secrets, outbox, base_urls=fake.base_urls)
        fake.rate_limit("telegram", retry_after=3)          # the next Telegram request gets a 429
        ...
        assert fake.calls("telegram", "sendMessage")[0].json["parse_mode"] == "HTML"

Every request is recorded (method, path, query, headers, JSON body, status). Answers are the
platforms' success shapes with fresh message ids, and their error shapes for a wrong token or
an unknown message. Scripted answers (`rate_limit`, `fail`) replace the next requests' answers
and leave no trace in the chats, as a refused request does; 429s come in each platform's form:
Telegram `parameters.retry_after`, Slack a Retry-After header, Discord `retry_after` in the JSON
and a header, WhatsApp a Graph API error with code 130429 and no wait.

Texts are kept per message (`fake.messages`), so a test can assert what a chat shows in the
end, not only which requests were made.

It also serves the platforms' files (docs/media.md), as each platform's file API answers:
`fake.add_file(platform, file_id, data, token=...)` registers one for one bot's token, and
Telegram's getFile and /file/bot<token>/<path>, Slack's files.slack.com downloads (the bot token
as a Bearer header; without it Slack's sign-in page), Discord's CDN and WhatsApp's media URL and
download answer it; any other token gets the platform's "not your file" answer. `declared_size`
makes the file API declare another size, and `hide_length` streams the bytes without a
Content-Length (a file that lies about its size). `python -m tests.support.fake_platforms` serves it
for manual runs.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import re
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

from tests.support.served import FakeHTTPServer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

Json = dict[str, Any]
Answer = tuple[int, Json | bytes, dict[str, str]]
PLATFORMS = ("telegram", "slack", "discord", "whatsapp")
# Where the file downloads live (base_urls' "slack_files" and "discord_cdn", and the URL the
# WhatsApp media lookup answers).
FILE_HOSTS = ("slack-files", "discord-cdn", "whatsapp-media")
WHATSAPP_VERSION = "v23.0"
DISCORD_APPLICATION = "1100000000000000001"
_NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup are "
    "exactly the same as a current content and reply markup of the message"
)


@dataclass(frozen=True)
class Recorded:
    platform: str
    op: str  # sendMessage, editMessageText, chat.postMessage, chat.update, followup, edit, messages
    method: str
    path: str  # without the platform prefix
    query: dict[str, str]
    headers: dict[str, str]  # lower-cased names
    json: Json
    status: int


@dataclass
class FakeMessage:
    platform: str
    chat: str
    message_id: str
    texts: list[str]  # every text it showed, oldest first: texts[-1] is what it shows now
    thread: str | None = None


@dataclass(frozen=True)
class FakeFile:
    platform: str
    file_id: str
    data: bytes
    token: str | None  # the bot token that may fetch it; None: anyone with the URL (Discord's CDN)
    name: str = "file.bin"
    declared_size: int | None = None  # what the file API says; None: the real size
    hide_length: bool = False  # streamed without Content-Length, to the end of the connection
    path: str = ""  # Telegram's file_path

    @property
    def size(self) -> int:
        return len(self.data) if self.declared_size is None else self.declared_size


@dataclass
class _Scripted:
    status: int
    body: Json
    headers: dict[str, str] = field(default_factory=dict)


class FakePlatforms:
    def __init__(
        self,
        *,
        tokens: dict[str, str] | None = None,
        extra_tokens: dict[str, list[str]] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ):
        # The credentials the fake accepts; any other gets the platform's authentication error.
        # `extra_tokens`: more bots of one platform (named channel routes), each its own token.
        self.extra_tokens = extra_tokens or {}
        self.tokens = {
            "telegram": "123456:TEST-telegram-token",
            "slack": "xoxb-test-slack-token",
            "whatsapp": "EAATESTwhatsapptoken",
            **(tokens or {}),
        }
        self.requests: list[Recorded] = []
        self.messages: dict[tuple[str, str], FakeMessage] = {}  # (platform, message id) → message
        self._scripts: dict[str, deque[_Scripted]] = {p: deque() for p in PLATFORMS}
        self.files: dict[tuple[str, str], FakeFile] = {}  # (platform, file id) → file
        self._lock = threading.RLock()
        self._ids = itertools.count(1001)
        self._server = _Server((host, port), _Handler)
        self._server.fake = self
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle

    @property
    def root(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def base_urls(self) -> dict[str, str]:
        return {
            "telegram": f"{self.root}/telegram",
            "slack": f"{self.root}/slack/api",
            "discord": f"{self.root}/discord/api/v10",
            "whatsapp": f"{self.root}/whatsapp/{WHATSAPP_VERSION}",
            "slack_files": f"{self.root}/slack-files",
            "discord_cdn": f"{self.root}/discord-cdn",
        }

    def __enter__(self) -> Self:
        # A short poll interval: shutdown() waits for the loop to notice, once per test.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # ------------------------------------------------------------ scripting

    def rate_limit(self, platform: str, *, retry_after: float = 1.0, times: int = 1) -> Self:
        """Answer the platform's next `times` requests with its rate-limit error."""
        return self._script(platform, _rate_limited(platform, retry_after), times)

    def fail(self, platform: str, status: int, body: Json, *, times: int = 1) -> Self:
        """Answer the platform's next `times` requests with this status and JSON body."""
        return self._script(platform, _Scripted(status, body), times)

    def _script(self, platform: str, scripted: _Scripted, times: int) -> Self:
        with self._lock:
            self._scripts[platform].extend([scripted] * times)
        return self

    def add_file(
        self,
        platform: str,
        file_id: str,
        data: bytes,
        *,
        token: str | None = None,
        name: str = "file.bin",
        declared_size: int | None = None,
        hide_length: bool = False,
    ) -> str:
        """Serve a file as `platform` keeps it, for the bot of `token` (default: the fake's own).
        Returns what the platform's event carries to reach it: the file id (Telegram, WhatsApp)
        or the public URL (Slack's url_private_download, Discord's CDN URL), which the fetcher
        rewrites to this server through base_urls."""
        owner = None if platform == "discord" else token or self.tokens[platform]
        with self._lock:
            path = f"photos/file_{len(self.files)}.{name.rsplit('.', 1)[-1]}"
            self.files[(platform, file_id)] = FakeFile(
                platform, file_id, data, owner, name, declared_size, hide_length, path
            )
        if platform == "slack":
            return f"https://files.slack.com/files-pri/T111-{file_id}/download/{name}"
        if platform == "discord":
            return (
                f"https://cdn.discordapp.com/attachments/787053080478613502/{file_id}/{name}"
                "?ex=65e4f0a1&is=65d27ba1&hm=3b1a53e9d2c5b7f4a6e8d0c2b4a6f8e0d2c4b6a8f0e2d4c6b8a0f2e4d6c8b0a2&"
            )
        return file_id

    def downloads(self, platform: str) -> list[Recorded]:
        """The requests for file bytes (not the lookups): what a fetch actually downloaded."""
        return [r for r in self.calls(platform) if r.op == "download"]

    # ------------------------------------------------------------ reading

    def calls(self, platform: str, op: str | None = None) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.platform == platform and (op is None or r.op == op)]

    def shown_ids(self, platform: str) -> list[str]:
        """The platform's message ids, in posting order (Discord's original as `<token>/@original`)."""
        with self._lock:
            return [m.message_id for m in self.messages.values() if m.platform == platform]

    def shown(self, platform: str) -> list[str]:
        """What each of the platform's messages shows now, in posting order."""
        with self._lock:
            return [m.texts[-1] for m in self.messages.values() if m.platform == platform]

    # ------------------------------------------------------------ handling

    def handle(self, method: str, raw_path: str, headers: dict[str, str], body: bytes) -> Answer:
        url = urlsplit(raw_path)
        platform, _, rest = url.path.lstrip("/").partition("/")
        path = "/" + rest
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        try:
            payload = json.loads(body) if body else {}
        except ValueError:
            payload = {"_unparsed": body.decode(errors="replace")}
        if method == "GET":
            return self._file(platform, path, query, headers)
        if platform not in PLATFORMS:
            return 404, {"error": "unknown platform"}, {}
        op = _op(platform, method, path)
        with self._lock:
            scripted = self._scripts[platform].popleft() if self._scripts[platform] else None
            if scripted is not None:
                status, answer, extra = scripted.status, scripted.body, scripted.headers
            else:
                route = getattr(self, f"_{platform}")
                status, answer, extra = route(op, path, headers, payload)
            self.requests.append(Recorded(platform, op, method, path, query, headers, payload, status))
        return status, answer, extra

    # ------------------------------------------------------------ files

    def _file(self, prefix: str, path: str, query: dict[str, str], headers: dict[str, str]) -> Answer:
        platform = {"slack-files": "slack", "discord-cdn": "discord", "whatsapp-media": "whatsapp"}.get(
            prefix, prefix
        )
        if platform not in PLATFORMS:
            return 404, {"error": "unknown platform"}, {}
        with self._lock:
            scripted = self._scripts[platform].popleft() if self._scripts[platform] else None
            if scripted is not None:
                op, answer = "download", (scripted.status, scripted.body, scripted.headers)
            else:
                op, answer = self._serve_file(prefix, path, query, headers)
            self.requests.append(Recorded(platform, op, "GET", path, query, headers, {}, answer[0]))
        return answer

    def _bearer(self, headers: dict[str, str]) -> str | None:
        value = headers.get("authorization", "")
        return value.removeprefix("Bearer ") if value.startswith("Bearer ") else None

    def _bytes(self, file: FakeFile) -> Answer:
        extra = {"Content-Type": "application/octet-stream"}
        if file.hide_length:
            extra["X-Fake-Hide-Length"] = "1"
        return 200, file.data, extra

    def _serve_file(
        self, prefix: str, path: str, query: dict[str, str], headers: dict[str, str]
    ) -> tuple[str, Answer]:
        if prefix == "telegram":
            parts = path.split("/")
            if len(parts) >= 3 and parts[1] == "file":
                token, file_path = parts[2].removeprefix("bot"), "/".join(parts[3:])
                found = [f for f in self.files.values() if f.platform == "telegram" and f.path == file_path]
                if not found or found[0].token != token:
                    return "download", (404, _telegram_error(404, "Not Found"), {})
                return "download", self._bytes(found[0])
            token = parts[1].removeprefix("bot") if len(parts) > 1 else ""
            if token not in self._accepted("telegram"):
                return "getFile", (401, _telegram_error(401, "Unauthorized"), {})
            file = self.files.get(("telegram", query.get("file_id", "")))
            if file is None or file.token != token:
                wrong = "Bad Request: wrong file_id or the file is temporarily unavailable"
                return "getFile", (400, _telegram_error(400, wrong), {})
            # Telegram's own answer (tests/fixtures/telegram/getfile_response.json), for this file.
            answer = json.loads((FIXTURES / "telegram" / "getfile_response.json").read_text())
            answer["result"] |= {
                "file_id": file.file_id,
                "file_unique_id": f"AQAD{file.file_id[-8:]}",
                "file_size": file.size,
                "file_path": file.path,
            }
            return "getFile", (200, answer, {})
        if prefix == "slack-files":
            file_id = path.split("/")[2].split("-", 1)[-1] if path.count("/") >= 2 else ""
            file = self.files.get(("slack", file_id))
            if file is None or self._bearer(headers) != file.token:
                # What files.slack.com answers a request without the right token: its sign-in page.
                page = b"<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in</body></html>"
                return "download", (200, page, {"Content-Type": "text/html; charset=utf-8"})
            return "download", self._bytes(file)
        if prefix == "discord-cdn":
            parts = path.split("/")
            file = self.files.get(("discord", parts[3])) if len(parts) > 3 else None
            if file is None or not {"ex", "is", "hm"} <= set(query):
                return "download", (
                    404,
                    b"This content is no longer available.",
                    {"Content-Type": "text/plain"},
                )
            return "download", self._bytes(file)
        if prefix == "whatsapp-media":
            file = self.files.get(("whatsapp", query.get("mid", "")))
            if file is None or self._bearer(headers) != file.token:
                return "download", (404, _graph_error("Media not found", 100), {})
            return "download", self._bytes(file)
        # prefix == "whatsapp": GET /<version>/<media id>
        media = path.rsplit("/", 1)[-1]
        file = self.files.get(("whatsapp", media))
        if self._bearer(headers) not in self._accepted("whatsapp"):
            return "media", (
                401,
                _graph_error("Invalid OAuth access token - Cannot parse access token", 190),
                {},
            )
        if file is None or self._bearer(headers) != file.token:
            missing = (
                f"Unsupported get request. Object with ID '{media}' does not exist, cannot be loaded due "
                "to missing permissions, or does not support this operation."
            )
            return "media", (400, _graph_error(missing, 100), {})
        # Meta's own answer (tests/fixtures/whatsapp/media_url_response.json), pointing here.
        answer = json.loads((FIXTURES / "whatsapp" / "media_url_response.json").read_text())
        answer |= {
            "url": f"{self.root}/whatsapp-media/?mid={media}&ext=1749416700&hash=ATta0bVHwYr3c1Dq",
            "file_size": str(file.size),
            "id": media,
        }
        return "media", (200, answer, {})

    def _accepted(self, platform: str) -> set[str]:
        return {self.tokens[platform], *self.extra_tokens.get(platform, [])}

    def _post(self, platform: str, chat: str, text: str, *, mid: str, thread: str | None = None) -> None:
        self.messages[(platform, mid)] = FakeMessage(platform, chat, mid, [text], thread)

    def _telegram(self, op: str, path: str, headers: dict[str, str], body: Json) -> Answer:
        token = path.split("/")[1].removeprefix("bot")
        if token not in self._accepted("telegram"):
            return 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}, {}
        chat, text = body.get("chat_id"), str(body.get("text"))
        if op == "sendMessage":
            mid = str(next(self._ids))
            thread = body.get("message_thread_id")
            self._post("telegram", str(chat), text, mid=mid, thread=None if thread is None else str(thread))
        elif op == "editMessageText":
            mid = str(body.get("message_id"))
            current = self.messages.get(("telegram", mid))
            if current is None:
                return 400, _telegram_error(400, "Bad Request: message to edit not found"), {}
            if current.texts[-1] == text:
                return 400, _telegram_error(400, _NOT_MODIFIED), {}
            current.texts.append(text)
        else:
            return 404, _telegram_error(404, "Not Found"), {}
        result = {"message_id": int(mid), "date": 1700000000, "chat": {"id": chat, "type": "private"}}
        return 200, {"ok": True, "result": result | {"text": text}}, {}

    def _slack(self, op: str, path: str, headers: dict[str, str], body: Json) -> Answer:
        if headers.get("authorization") not in {f"Bearer {t}" for t in self._accepted("slack")}:
            return 200, {"ok": False, "error": "invalid_auth"}, {}
        channel, text = str(body.get("channel")), str(body.get("text"))
        if op == "chat.postMessage":
            ts = f"1700000000.{next(self._ids):06d}"
            thread = body.get("thread_ts")
            self._post("slack", channel, text, mid=ts, thread=thread)
            message = {"type": "message", "text": text, "ts": ts, "bot_id": "B0TEST"}
            if thread:
                message["thread_ts"] = thread
            return 200, {"ok": True, "channel": channel, "ts": ts, "message": message}, {}
        if op == "chat.update":
            ts = str(body.get("ts"))
            current = self.messages.get(("slack", ts))
            if current is None:
                return 200, {"ok": False, "error": "message_not_found"}, {}
            current.texts.append(text)
            return (
                200,
                {"ok": True, "channel": channel, "ts": ts, "text": text, "message": {"text": text}},
                {},
            )
        return 200, {"ok": False, "error": "unknown_method"}, {}

    def _discord(self, op: str, path: str, headers: dict[str, str], body: Json) -> Answer:
        match = re.fullmatch(r"/api/v10/webhooks/(\d+)/([^/]+)(?:/messages/([^/]+))?", path)
        if not match or match.group(1) != DISCORD_APPLICATION or match.group(2).startswith("expired"):
            return 404, {"message": "Unknown Webhook", "code": 10015}, {}
        token, target = match.group(2), match.group(3)
        content = str(body.get("content", ""))
        if op == "followup":
            mid = str(1_200_000_000_000_000_000 + next(self._ids))
            self._post("discord", token, content, mid=mid)
        else:
            # The original response exists from the deferred answer on; the first edit fills it.
            mid = f"{token}/@original" if target == "@original" else str(target)
            current = self.messages.get(("discord", mid))
            if current is None and target == "@original":
                self._post("discord", token, content, mid=mid)
            elif current is None:
                return 404, {"message": "Unknown Message", "code": 10008}, {}
            else:
                current.texts.append(content)
        shown_id = "1200000000000000000" if mid.endswith("@original") else mid
        answer = {"id": shown_id, "type": 0, "content": content, "channel_id": "1300000000000000001"}
        return 200, answer | {"webhook_id": DISCORD_APPLICATION, "flags": 0}, {}

    def _whatsapp(self, op: str, path: str, headers: dict[str, str], body: Json) -> Answer:
        if not re.fullmatch(rf"/{re.escape(WHATSAPP_VERSION)}/\d+/messages", path):
            return 404, _graph_error("Unknown path components", 2500), {}
        if headers.get("authorization") not in {f"Bearer {t}" for t in self._accepted("whatsapp")}:
            return 401, _graph_error("Invalid OAuth access token - Cannot parse access token", 190), {}
        to, text = str(body.get("to")), body.get("text")
        mid = f"wamid.HBgLMTU1NTAwMDEyMzQVAgARGBI{next(self._ids)}"
        self._post("whatsapp", to, str(text.get("body")) if isinstance(text, dict) else "", mid=mid)
        answer = {"messaging_product": "whatsapp", "contacts": [{"input": to, "wa_id": to}]}
        return 200, answer | {"messages": [{"id": mid}]}, {}


def _op(platform: str, method: str, path: str) -> str:
    if platform == "telegram":
        return path.rsplit("/", 1)[-1]
    if platform == "slack":
        return path.rsplit("/", 1)[-1]
    if platform == "discord":
        return "followup" if method == "POST" else "edit"
    return "messages"


def _telegram_error(code: int, description: str) -> Json:
    return {"ok": False, "error_code": code, "description": description}


def _graph_error(message: str, code: int) -> Json:
    return {"error": {"message": message, "type": "OAuthException", "code": code, "fbtrace_id": "AbCdEf12"}}


def _rate_limited(platform: str, retry_after: float) -> _Scripted:
    if platform == "telegram":
        seconds = int(retry_after)
        return _Scripted(
            429,
            _telegram_error(429, f"Too Many Requests: retry after {seconds}")
            | {"parameters": {"retry_after": seconds}},
        )
    if platform == "slack":
        return _Scripted(429, {"ok": False, "error": "ratelimited"}, {"Retry-After": str(int(retry_after))})
    if platform == "discord":
        body = {"message": "You are being rate limited.", "retry_after": retry_after, "global": False}
        return _Scripted(429, body, {"Retry-After": str(int(retry_after) + 1), "X-RateLimit-Scope": "user"})
    # WhatsApp's throttling is a Graph API error without any wait time.
    return _Scripted(400, _graph_error("(#130429) Rate limit hit", 130429))


class FakeClock:
    """A monotonic clock whose sleep advances it: throttles and 429 waits run without waiting."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def advance(self, seconds: float) -> None:
        self.now += seconds


class DictSecrets:
    """A SecretStore over a dict, counting reads (the real stores cache; this one records)."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = dict(values)
        self.reads: list[str] = []

    def get(self, name: str) -> str | None:
        self.reads.append(name)
        return self.values.get(name)

    @classmethod
    def for_fake(cls, fake: FakePlatforms) -> DictSecrets:
        return cls(
            {
                "telegram/bot-token": fake.tokens["telegram"],
                "slack/bot-token": fake.tokens["slack"],
                "whatsapp/access-token": fake.tokens["whatsapp"],
            }
        )


class _Server(FakeHTTPServer):
    fake: FakePlatforms


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, answer, extra = self.server.fake.handle(self.command, self.path, headers, body)
        data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        hide_length = extra.pop("X-Fake-Hide-Length", None) is not None
        self.send_response(status)
        if "Content-Type" not in extra:
            self.send_header("Content-Type", "application/json")
        if not hide_length:
            self.send_header("Content-Length", str(len(data)))
        for name, value in extra.items():
            self.send_header(name, value)
        self.end_headers()
        # A client may stop reading part way (a download cut off at its limit).
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(data)
        if hide_length:
            self.close_connection = True  # the end of the body is the end of the connection

    do_GET = _serve
    do_POST = _serve
    do_PATCH = _serve

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: the tests assert on the recorded requests instead


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the fake platform APIs on a local port.")
    # Not 8787 (sigil dev), 8788/8789 (the fake model servers) or 8790 (sigil console).
    parser.add_argument("--port", type=int, default=8791)
    args = parser.parse_args()
    with FakePlatforms(port=args.port) as fake:
        for platform, url in fake.base_urls.items():
            print(f"{platform}: {url}")
        print(f"for the gateway: SIGIL_PLATFORM_BASE_URLS='{json.dumps(fake.base_urls)}'")
        threading.Event().wait()


if __name__ == "__main__":
    main()

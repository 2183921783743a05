"""A local server speaking OpenAI's `/v1/audio/transcriptions` (multipart in, JSON out), for the
real `openai` SDK: what a voice note becomes (shared.providers.transcription).

Its answer is the JSON the API returns for `response_format=json`: `{"text": ...}` with the
`usage` object of the model asked for: `{"type": "duration", "seconds": ...}` for whisper-1, token
counts for the gpt-4o transcription models (OpenAI's API reference, "Create transcription").
Every request is recorded: its form fields and the file's name, type and bytes.

    with FakeTranscription({"voice.ogg": "buy oat milk"}) as fake:
        transcriber = OpenAITranscriber("whisper-1", "sk-test", fake.base_url)
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.support.served import FakeHTTPServer, Served


@dataclass
class Upload:
    fields: dict[str, str]
    filename: str
    content_type: str
    data: bytes


class FakeTranscription(Served):
    def __init__(
        self, text: str = "", *, seconds: float = 7.5, fail: int = 0, host: str = "127.0.0.1"
    ) -> None:
        self.text = text  # the transcript of every file
        self.seconds = seconds  # the duration whisper-1's usage reports
        self.fail = fail  # answer this many requests with a 500 first
        self.uploads: list[Upload] = []
        self._lock = threading.Lock()
        self._server = _Server((host, 0), _Handler)
        self._server.fake = self

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    def answer(self, upload: Upload) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.uploads.append(upload)
            if self.fail > 0:
                self.fail -= 1
                return 500, {"error": {"message": "The server had an error", "type": "server_error"}}
        if upload.fields.get("model") == "whisper-1":
            usage: dict[str, Any] = {"type": "duration", "seconds": self.seconds}
        else:
            words = len(self.text.split())
            usage = {
                "type": "tokens",
                "input_tokens": 14,
                "input_token_details": {"text_tokens": 0, "audio_tokens": 14},
                "output_tokens": words,
                "total_tokens": 14 + words,
            }
        return 200, {"text": self.text, "usage": usage}


class _Server(FakeHTTPServer):
    fake: FakeTranscription


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # tests read the recorded uploads

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path.rstrip("/") != "/v1/audio/transcriptions":
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
            return
        status, payload = self.server.fake.answer(_multipart(self.headers.get("content-type", ""), body))
        self._json(status, payload)

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _multipart(content_type: str, body: bytes) -> Upload:
    message = BytesParser(policy=HTTP).parsebytes(f"content-type: {content_type}\r\n\r\n".encode() + body)
    fields: dict[str, str] = {}
    upload = Upload(fields, "", "", b"")
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True) or b""
        assert isinstance(payload, bytes)
        filename = part.get_filename()
        if filename is not None:
            upload.filename, upload.content_type, upload.data = filename, part.get_content_type(), payload
        elif isinstance(name, str):
            fields[name] = payload.decode()
    return upload

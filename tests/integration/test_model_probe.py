"""The look at the model's server that `sigil dev` takes at start (shared.providers.probe_model),
and a failed call's message naming its cause: the real openai and anthropic SDKs against local
servers that speak their wire (or against a port nobody listens on)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from pydantic import SecretStr

from shared.config import Settings
from shared.errors import ProviderError
from shared.providers import probe_model
from shared.providers.base import ChatRequest
from shared.providers.openai import OpenAIProvider
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_openai import FakeOpenAI

API_KEY = "sk-probe-SECRET-0123456789"


def openai_settings(base_url: str, **extra: Any) -> Settings:
    return Settings(
        model="openai/fake-model", openai_base_url=base_url, openai_api_key=SecretStr(API_KEY), **extra
    )


def closed_base_url(fake: type[FakeOpenAI] | type[FakeAnthropic]) -> str:
    """The address of a server that has stopped: nothing listens there any more."""
    with fake() as gone:
        return gone.base_url


@pytest.fixture
def refusing_server() -> Iterator[str]:
    """A server that refuses every key, in OpenAI's error shape (401, invalid_api_key)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(
                {
                    "error": {
                        "message": "Incorrect API key",
                        "type": "invalid_request_error",
                        "code": "invalid_api_key",
                    }
                }
            ).encode()
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_stopped_openai_server_is_named_with_the_cause() -> None:
    base = closed_base_url(FakeOpenAI)
    assert (
        probe_model(openai_settings(base)) == f"cannot reach the model server at {base}: Connection refused"
    )


def test_a_stopped_anthropic_server_is_named_with_the_cause() -> None:
    base = closed_base_url(FakeAnthropic)
    settings = Settings(
        model="anthropic/fake-model", anthropic_base_url=base, anthropic_api_key=SecretStr(API_KEY)
    )
    assert probe_model(settings) == f"cannot reach the model server at {base}: Connection refused"


def test_a_misspelt_host_is_named_with_the_cause() -> None:
    # .invalid never resolves (RFC 2606): what a typo in OPENAI_BASE_URL comes to
    problem = probe_model(openai_settings("http://model-server.invalid/v1"))
    assert problem is not None
    assert problem.startswith("cannot reach the model server at http://model-server.invalid/v1: ")


def test_a_server_that_answers_is_fine_even_without_a_models_list() -> None:
    # The fake serves only the chat completions route, as some compatible servers do
    with FakeOpenAI() as fake:
        assert probe_model(openai_settings(fake.base_url)) is None
        assert fake.requests == []  # no model call was made, nothing was spent


def test_a_refused_key_is_said_without_the_key(refusing_server: str) -> None:
    problem = probe_model(openai_settings(refusing_server))
    assert problem == f"the model server at {refusing_server} refused the API key (HTTP 401)"


def test_with_a_fallback_the_primarys_server_is_the_one_asked() -> None:
    base = closed_base_url(FakeOpenAI)
    settings = openai_settings(base, fallback_model="anthropic/fake", anthropic_base_url="http://127.0.0.1:9")
    assert probe_model(settings) == f"cannot reach the model server at {base}: Connection refused"


def test_no_model_or_bedrock_is_not_asked() -> None:
    assert probe_model(Settings()) is None
    assert probe_model(Settings(model="bedrock/anthropic.claude", bedrock_region="eu-west-1")) is None


def test_a_failed_call_says_its_cause_in_its_message() -> None:
    # What the turn's and the lane's log lines carry, instead of a traceback per attempt
    base = closed_base_url(FakeOpenAI)
    provider = OpenAIProvider(api_key=API_KEY, base_url=base, timeout_s=2, max_retries=0)
    request = ChatRequest(model="fake-model", system="", messages=[])
    with pytest.raises(ProviderError) as info:
        list(provider.stream(request))
    assert info.value.message == "the model provider failed (APIConnectionError: Connection refused)"
    assert info.value.retryable


def test_credentials_in_the_base_url_stay_out_of_the_line() -> None:
    base = closed_base_url(FakeOpenAI)
    with_userinfo = base.replace("http://", "http://proxy-user:proxy-pass@")
    problem = probe_model(openai_settings(with_userinfo))
    assert problem == f"cannot reach the model server at {base}: Connection refused"

"""Prompt caching through the real SDKs (openai, anthropic, boto3) against the fake providers,
which answer with each provider's cache usage fields (tests.support.prompt_cache): the static
prefix of the system prompt is byte-identical over the turns of a session whose time, facts and
loaded skill change, the providers read it from their caches, and the audit records and the
budget price those reads at the cached rate (docs/context.md, "Prompt caching")."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shared.agent.turn import TurnDeps, run_turn
from shared.backend import Backend
from shared.budgets import PriceTable
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.config import Settings
from shared.models import InboundMessage, LaneItem, Sender, Triple, UserMessage, WorkspaceConfig
from shared.providers import build_provider
from shared.providers.anthropic import AnthropicProvider
from shared.providers.base import ChatRequest, ProviderEvent, Usage, system_parts
from shared.providers.bedrock import bedrock_client, converse_params
from shared.providers.openai import OpenAIProvider
from shared.safety.injection import SYSTEM_PROMPT_NOTE
from shared.skills import Skill
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_bedrock import FakeBedrock
from tests.support.fake_openai import FakeOpenAI

WS = "ws1"
TURNS = 10
# A persona long enough to cross every provider's minimum cacheable prefix (1,024 tokens; the
# fakes count a token a word).
PERSONA = "You are Sigil, a careful assistant for the Lisbon office. " + " ".join(
    f"Rule {i}: answer plainly and cite what you used." for i in range(160)
)
KEYWORD_SKILL = Skill(
    name="k8s-help",
    description="Kubernetes know-how.",
    trigger="keyword",
    keywords=("kubernetes",),
    body="Always suggest `kubectl describe` first.",
)
PLAIN_SKILL = Skill(name="release-notes", description="Writing release notes.", body="Group by area.")
Json = dict[str, Any]


@dataclass
class Wire:
    """One provider's fake and how to read the static prefix out of the bodies it received."""

    model: str
    requests: list[Json]
    static: Callable[[Json], str]  # the cached prefix of a request body, as sent
    dynamic: Callable[[Json], str]  # what follows it


def _openai_system(body: Json) -> str:
    system: str = body["messages"][0]["content"]
    return system


def _split_note(text: str) -> tuple[str, str]:
    static, _, dynamic = text.partition(f"{SYSTEM_PROMPT_NOTE}\n\n")
    return static + SYSTEM_PROMPT_NOTE, dynamic


@pytest.fixture(params=["openai", "anthropic", "bedrock"])
def wire(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, settings: Settings
) -> Iterator[Wire]:
    """A fake provider and Settings whose build_provider reaches it through the real SDK."""
    kind = request.param
    if kind == "openai":
        with FakeOpenAI(lambda body: "noted") as fake:
            monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
            yield Wire(
                "openai/gpt-4.1-mini",
                fake.requests,
                # One system message: OpenAI caches its longest seen prefix automatically.
                lambda b: _split_note(_openai_system(b))[0],
                lambda b: _split_note(_openai_system(b))[1],
            )
    elif kind == "anthropic":
        with FakeAnthropic(lambda body: "noted") as fake:
            monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
            monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
            yield Wire(
                "anthropic/claude-sonnet-4-6",
                fake.requests,
                lambda b: json.dumps([b["tools"], b["system"][0]]),  # tools, then the marked block
                lambda b: str(b["system"][1]["text"]),
            )
    else:
        with FakeBedrock() as fake:
            monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", fake.base_url)
            monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
            monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-secret")
            monkeypatch.setenv("SIGIL_BEDROCK_REGION", "us-east-1")
            bedrock_client.cache_clear()  # a client built for another endpoint must not be reused
            yield Wire(
                "bedrock/anthropic.claude-sonnet-4-6-v1:0",
                fake.requests,
                lambda b: json.dumps([b["toolConfig"], b["system"][:2]]),  # text, then its cachePoint
                lambda b: str(b["system"][2]["text"]),
            )
            bedrock_client.cache_clear()


def message(i: int) -> LaneItem:
    # Every third message names the keyword skill: the turn's loaded skills change with it.
    text = f"message {i} about our kubernetes cluster" if i % 3 == 0 else f"message {i}"
    return LaneItem(
        inbound=InboundMessage(
            event_id=f"e{i}",
            channel="web",
            workspace_id=WS,
            session_id="web.s1",
            sender=Sender(id="u1", name="Ada"),
            chat_id="s1",
            text=text,
        )
    )


def test_the_static_prefix_is_cached_over_ten_turns(wire: Wire, backend: Backend, settings: Settings) -> None:
    # Given a session whose time, facts and loaded skills change from one turn to the next
    backend.workspaces.put(WorkspaceConfig(id=WS, system_prompt=PERSONA, model=wire.model))
    settings = Settings(data_dir=settings.data_dir)  # reads the fake's endpoint from the env
    start = datetime(2026, 3, 4, 9, 0, tzinfo=UTC)
    turn = {"n": 0}

    def clock() -> datetime:
        return start + timedelta(minutes=7 * turn["n"])

    def facts(workspace_id: str, user_id: str, scope: object) -> list[Triple]:
        n = turn["n"]
        return [
            Triple(id=f"f{n}", workspace_id=WS, subject=user_id, predicate="asked", object=f"question {n}")
        ]

    prices = PriceTable()
    deps = TurnDeps(
        backend=backend,
        settings=settings,
        senders=SenderRegistry({"web": OutboxSender(backend.outbox)}),
        provider_factory=lambda ref: build_provider(settings, ref),
        clock=clock,
        prices=prices,
        facts=facts,
        skills=lambda ws: [PLAIN_SKILL, KEYWORD_SKILL],
    )
    # When ten messages are answered
    records = []
    for i in range(TURNS):
        turn["n"] = i
        records.append(run_turn(deps, message(i)))
    # Then every request opened with the same bytes, and only what follows them changed
    assert len(wire.requests) == TURNS
    prefixes = {hashlib.sha256(wire.static(b).encode()).hexdigest() for b in wire.requests}
    assert len(prefixes) == 1
    contexts = [wire.dynamic(b) for b in wire.requests]
    assert len(set(contexts)) == TURNS  # the time and the facts differ on every turn
    # The context pipeline's default (inject) wrote the conversation's Orientation Document on the
    # first turn, with the first turn's fact, and every turn sent those same bytes after the static
    # part (OpenAI: one system message, its automatic prefix cache reads them too)
    found = [re.search(r"## Orientation.*?release-notes", json.dumps(b)) for b in wire.requests]
    texts = {m.group(0) if m else "" for m in found}
    assert len(texts) == 1 and "question 0" in texts.pop()
    assert all(f"question {i}" in c and "Now: " in c for i, c in enumerate(contexts))
    assert sum("### Skill: k8s-help" in c for c in contexts) == 4  # turns 0, 3, 6, 9
    # And the first turn wrote the prefix to the cache (OpenAI bills no write), and every later
    # turn read it: the audit records carry the cached tokens
    assert all(r.outcome == "ok" for r in records)
    first, later = records[0], records[1:]
    assert first.tokens_cached == 0
    if not wire.model.startswith("openai/"):
        assert first.tokens_cache_write >= 1024
    assert all(r.tokens_cached >= 1024 and r.tokens_cache_write == 0 for r in later)
    assert all(r.tokens_cached < r.tokens_in for r in later)
    # And the cost on each record prices the cached tokens at the model's cache-read rate
    price = prices.price(wire.model)
    assert price.cache_read_per_mtok is not None and price.cache_read_per_mtok < price.input_per_mtok
    for r in later:
        full = prices.cost_nanos(wire.model, r.tokens_in, r.tokens_out)
        cached = prices.cost_nanos(wire.model, r.tokens_in, r.tokens_out, cache_read=r.tokens_cached)
        assert r.cost_usd == pytest.approx(cached / 1e9) and cached < full
    # And the stored audit log has them
    stored = {r.turn_id: r for r in backend.audit.list_records(WS)}
    assert [stored[r.turn_id].tokens_cached for r in records] == [r.tokens_cached for r in records]


# ---------------------------------------------------------------- each provider's wire, one call

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CACHED = ChatRequest(
    model="m",
    system="Static instructions.\n\nNow: Wednesday.",
    cache_prefix=len("Static instructions."),
    cache_key="sigil-abc",
    messages=[UserMessage(content="hi")],
)


def usage_of(events: list[ProviderEvent]) -> list[Usage]:
    return [e for e in events if isinstance(e, Usage)]


def test_openai_gets_one_system_message_and_the_cache_key_and_reports_cached_tokens() -> None:
    with FakeOpenAI() as fake:
        fake.replay(FIXTURES / "openai" / "chat_stream_text_with_cached_usage.sse")
        provider = OpenAIProvider(api_key="sk-test", base_url=fake.base_url, timeout_s=10, max_retries=0)
        events = list(provider.stream(CACHED))
        body = fake.requests[0]
    # The prefix is kept whole at the start of the one system message; the key routes it
    assert body["messages"][0] == {"role": "system", "content": CACHED.system}
    assert body["prompt_cache_key"] == "sigil-abc"
    assert usage_of(events) == [Usage(input_tokens=2006, output_tokens=30, cache_read_tokens=1920)]


def test_anthropic_gets_a_breakpoint_after_the_static_prefix_and_reports_reads_and_writes() -> None:
    with FakeAnthropic() as fake:
        fake.replay(FIXTURES / "anthropic" / "messages_stream_cache_usage_response.sse")
        provider = AnthropicProvider(
            api_key="sk-ant-test", base_url=fake.base_url, timeout_s=10, max_retries=0
        )
        events = list(provider.stream(CACHED))
        body = fake.requests[0]
    assert body["system"] == [
        {"type": "text", "text": "Static instructions.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Now: Wednesday."},
    ]
    # input_tokens counts what follows the breakpoint; the prompt is the sum
    assert usage_of(events) == [
        Usage(input_tokens=11 + 248 + 1800, output_tokens=6, cache_read_tokens=1800, cache_write_tokens=248)
    ]


@pytest.mark.parametrize(
    ("model", "cache_point"),
    [
        ("anthropic.claude-sonnet-4-6-v1:0", True),
        ("us.anthropic.claude-haiku-4-5-20251001-v1:0", True),
        ("amazon.nova-pro-v1:0", True),
        ("meta.llama3-70b-instruct-v1:0", False),  # refuses a cachePoint: none is sent
        ("mistral.mistral-large-2402-v1:0", False),
    ],
)
def test_bedrock_gets_a_cache_point_where_the_model_takes_one(model: str, cache_point: bool) -> None:
    params = converse_params(CACHED.model_copy(update={"model": model}))
    point = [{"cachePoint": {"type": "default"}}] if cache_point else []
    assert params["system"] == [{"text": "Static instructions."}, *point, {"text": "Now: Wednesday."}]


def test_a_request_that_caches_nothing_is_sent_as_before() -> None:
    plain = CACHED.model_copy(update={"cache_prefix": 0})
    assert converse_params(plain.model_copy(update={"model": "anthropic.claude-sonnet-4-6-v1:0"}))[
        "system"
    ] == [{"text": plain.system}]
    assert system_parts(plain) == ("", plain.system)

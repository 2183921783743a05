"""Issue 13's end-to-end check: a stranger's memory_search finds nothing of another person's
conversation, through the real webhook and agent Lambda handlers.

On moto, with osmem-server as OpenSearch, the real openai SDK against tests/support/fake_openai.py
as the model and tests/support/fake_platforms.py as Telegram's Bot API (the way
test_channels_end_to_end runs them). The workspace has the defaults: every Telegram user lands
in it, unknown senders are admitted, and the memory policy is "personal".

Telegram user 111 tells the bot in their DM "my bank PIN is 4921 and I live at 12 Elm Street",
then talks on until that message has rolled out of the window into Tier 1 and the index. Then:

- 111 asks, and the model calls memory_search("bank PIN address"): the tool result holds the
  message (the control: it is indexed, and a search for those words finds it);
- stranger 999 asks the same from their own DM, and the model calls memory_search("bank PIN
  address"): the tool result holds nothing of 111's conversation.

That a model-supplied argument cannot widen a search is tests/integration/test_memory_tools.py's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from moto import mock_aws
from osmem_server import OsmemServer

from functions.webhook import handler as webhook
from shared import cloud
from shared.adapters.aws import clients
from shared.channels.inbound import session_id
from shared.observability import metrics
from tests.integration.test_channels_end_to_end import (
    BOT_TOKENS,
    TOKEN_SECRETS,
    WEBHOOK_CONTEXT,
    run_agent,
    throttles_on,
)
from tests.integration.test_webhook_channels import SECRETS, SIGNED_AT, api_event, compact, telegram_headers
from tests.support.fake_openai import FakeOpenAI, FakeReply, Json
from tests.support.fake_platforms import FakeClock, FakePlatforms
from tests.support.moto_aws import REGION, AwsResources, provision

OWNER, STRANGER = 111, 999
SECRET = "my bank PIN is 4921 and I live at 12 Elm Street"
ASK = "What do you remember about bank PINs and addresses?"
QUERY = "bank PIN address"
# Enough turns after the secret that it rolls out of the 20-message window (two messages a turn).
CHATTER = 12


def model(body: Json) -> str | FakeReply:
    """The model: answers a question about memory by calling memory_search, then says it is done;
    anything else gets a short reply."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return "That is what I found."
    if ASK in str(last.get("content")):
        return FakeReply(tool_calls=[("memory_search", {"query": QUERY, "k": 20})])
    return "Noted."


def update(n: int, user: int, text: str) -> dict[str, Any]:
    """A Telegram update: `user`'s message `text` in their private chat with the bot."""
    sender = {"id": user, "is_bot": False, "first_name": f"User{user}"}
    body = compact(
        {
            "update_id": 30_000 + n,
            "message": {
                "message_id": 500 + n,
                "date": SIGNED_AT,
                "chat": {"id": user, "type": "private", "first_name": f"User{user}"},
                "from": sender,
                "text": text,
            },
        }
    )
    return api_event("telegram", body, telegram_headers(body))


@pytest.fixture
def stand_ins() -> Iterator[tuple[FakeOpenAI, AwsResources]]:
    with ExitStack() as stack:
        patch = stack.enter_context(pytest.MonkeyPatch.context())
        patch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
        stack.callback(metrics.clear_metrics)
        osmem = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
        stack.callback(osmem.close)
        stack.enter_context(mock_aws())
        fake = stack.enter_context(FakeOpenAI(model))
        platforms = stack.enter_context(FakePlatforms(tokens=BOT_TOKENS))
        stack.callback(cloud.reset)
        clients.reset()
        aws = provision("privacy")
        store = clients.secretsmanager(REGION)
        for name, value in {**SECRETS, **TOKEN_SECRETS}.items():
            store.create_secret(Name=f"sigil/{name}", SecretString=value)
        settings = aws.settings(
            secrets_prefix="sigil/",
            model="openai/fake-model",
            OPENAI_BASE_URL=fake.base_url,
            OPENAI_API_KEY="sk-test",
            provider_max_retries=0,
            platform_base_urls=platforms.base_urls,
            opensearch_endpoint=osmem.url,
        )
        # The webhook checks the platforms' timestamps against its clock, pinned where they are.
        cloud.reset(config=settings, clock=lambda: float(SIGNED_AT))
        throttles_on(FakeClock(), patch)
        yield fake, aws


def say(aws: AwsResources, n: int, user: int, text: str) -> None:
    """One message from `user` through the webhook, and the agent's turn for it."""
    assert webhook.lambda_handler(update(n, user, text), WEBHOOK_CONTEXT)["statusCode"] == 200
    assert len(run_agent(aws)) == 1


def search_result(fake: FakeOpenAI) -> str:
    """What the last turn's memory_search returned to the model (the tool message it read)."""
    last = fake.requests[-1]["messages"][-1]
    assert last["role"] == "tool", "the model was not handed a tool result"
    result: str = last["content"]
    # Fenced as untrusted (it carries what people wrote), the tool's own answer inside.
    assert "memory_search:" in result, result
    return result


def test_a_strangers_memory_search_finds_nothing_of_another_persons_conversation(
    stand_ins: tuple[FakeOpenAI, AwsResources],
) -> None:
    fake, aws = stand_ins
    owner_session = session_id("telegram", str(OWNER), None)

    # Given 111's secret, said in their DM and rolled out of the window into Tier 1 and the index
    say(aws, 0, OWNER, SECRET)
    for i in range(1, CHATTER):
        say(aws, i, OWNER, f"small talk number {i} about the weather")
    backend = cloud.turn_deps().backend
    rolled = backend.memory.get_messages("default", owner_session, limit=100)
    assert any(r.text == SECRET for r in rolled), "the secret has not rolled out to Tier 1 yet"
    assert all(r.scope is not None and r.scope.users == (f"telegram:{OWNER}",) for r in rolled)

    # When 111 asks their own memory, the search finds it (the control: indexed, and findable)
    say(aws, 100, OWNER, ASK)
    own = search_result(fake)
    assert "4921" in own and "12 Elm Street" in own
    assert "search: bm25" in own or "search: hybrid" in own  # answered by the index, not a fallback

    # And when stranger 999 asks the same in their own DM
    say(aws, 200, STRANGER, ASK)
    found = search_result(fake)

    # Then the tool result holds nothing of 111's conversation
    assert "search: bm25" in found or "search: hybrid" in found, found
    for leaked in ("4921", "Elm Street", "bank PIN is", "small talk", owner_session):
        assert leaked not in found, f"{leaked!r} from 111's conversation reached the stranger:\n{found}"
    # Nothing but the stranger's own conversation at most (its messages are still in its window)
    sessions = {line.split("session ")[1].split(" ")[0] for line in found.splitlines() if "session " in line}
    assert sessions <= {session_id("telegram", str(STRANGER), None)}, found
    # The model asked exactly what the script says: the query, nothing that could widen it
    call = fake.requests[-1]["messages"][-2]["tool_calls"][0]["function"]
    assert json.loads(call["arguments"]) == {"query": QUERY, "k": 20}

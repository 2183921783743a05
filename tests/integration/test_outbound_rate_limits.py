"""429 handling (each platform's retry-after, bounded retries and wait) and typed errors without tokens."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import httpx
import pytest

from shared.channels.ledger import MemorySendLedger
from shared.channels.out import (
    ChannelError,
    ChannelNotConfigured,
    ChannelRateLimited,
    PlatformSender,
    RetryPolicy,
    build_senders,
)
from shared.channels.senders import SenderRegistry
from shared.models import OutboundMessage
from tests.support.fake_platforms import DISCORD_APPLICATION, DictSecrets, FakeClock, FakePlatforms

INTERACTION_TOKEN = "aW50ZXJhY3Rpb24tdG9rZW4tc2VjcmV0"
CONTEXTS = {
    "telegram": {},
    "slack": {},
    "discord": {"application_id": DISCORD_APPLICATION, "interaction_token": INTERACTION_TOKEN},
    "whatsapp": {"phone_number_id": "106540352242922"},
}


def outbound(channel: str, text: str = "hello", *, turn: str = "t_1") -> OutboundMessage:
    return OutboundMessage(
        workspace_id="ws1", session_id="s1", channel=channel, chat_id="42", turn_id=turn, seq=1, text=text
    )


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client() as client:
        yield client


@pytest.fixture
def fake() -> Iterator[FakePlatforms]:
    with FakePlatforms() as server:
        yield server


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ledger() -> MemorySendLedger:
    return MemorySendLedger()


@pytest.fixture
def secrets(fake: FakePlatforms) -> DictSecrets:
    return DictSecrets.for_fake(fake)


@pytest.fixture
def senders(
    fake: FakePlatforms, clock: FakeClock, ledger: MemorySendLedger, secrets: DictSecrets, http: httpx.Client
) -> SenderRegistry:
    return build_senders(
        secrets,
        outbox=None,  # type: ignore[arg-type]  # the web sender is not used here
        base_urls=fake.base_urls,
        ledger=ledger,
        http=http,
        clock=clock,
        sleep=clock.sleep,
    )


def platform(senders: SenderRegistry, channel: str) -> PlatformSender:
    sender = senders.get(channel)
    assert isinstance(sender, PlatformSender)
    return sender


@pytest.mark.parametrize(
    ("channel", "retry_after", "expected_wait"),
    [
        ("telegram", 3, 3.0),  # parameters.retry_after
        ("slack", 2, 2.0),  # Retry-After header
        ("discord", 1.5, 1.5),  # retry_after in the JSON (more precise than its header's 2)
        ("whatsapp", 7, 1.0),  # a Graph API throttling error names no wait: the policy's default
    ],
)
def test_a_429_is_waited_out_then_the_send_succeeds(
    senders: SenderRegistry,
    fake: FakePlatforms,
    clock: FakeClock,
    channel: str,
    retry_after: float,
    expected_wait: float,
) -> None:
    # Given the platform rate-limits the next request
    fake.rate_limit(channel, retry_after=retry_after)

    # When a reply is sent
    platform(senders, channel).send(outbound(channel), context=CONTEXTS[channel])

    # Then the sender waited as told, sent again, and the chat shows the reply once
    assert clock.sleeps == [expected_wait]
    assert [c.status for c in fake.calls(channel)] == [429 if channel != "whatsapp" else 400, 200]
    assert fake.shown(channel) == ["hello"]


def test_retries_are_bounded_and_then_raise_a_typed_error(
    senders: SenderRegistry, fake: FakePlatforms, clock: FakeClock, ledger: MemorySendLedger
) -> None:
    fake.rate_limit("telegram", retry_after=2, times=10)

    with pytest.raises(ChannelRateLimited) as caught:
        platform(senders, "telegram").send(outbound("telegram"))

    policy = RetryPolicy()
    assert len(fake.calls("telegram")) == policy.max_attempts
    assert clock.sleeps == [2.0] * (policy.max_attempts - 1)
    assert caught.value.retryable and caught.value.retry_after == 2.0
    assert caught.value.code == "channel_rate_limited"
    assert ledger.get("ws1", "t_1", 0) is None  # nothing was posted, so nothing is recorded


def test_a_wait_beyond_the_budget_is_not_slept(
    senders: SenderRegistry, fake: FakePlatforms, clock: FakeClock
) -> None:
    fake.rate_limit("slack", retry_after=600)

    with pytest.raises(ChannelRateLimited) as caught:
        platform(senders, "slack").send(outbound("slack"))

    assert clock.sleeps == []
    assert caught.value.retry_after == 600.0
    assert len(fake.calls("slack")) == 1


def test_a_wrong_token_is_a_non_retryable_error_without_the_token(
    senders: SenderRegistry, secrets: DictSecrets, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secrets.values["telegram/bot-token"] = "999999:WRONG-secret-token"

    with pytest.raises(ChannelError) as caught:
        platform(senders, "telegram").send(outbound("telegram"))

    error = caught.value
    assert (error.code, error.status, error.retryable) == ("channel_rejected", 401, False)
    assert "Unauthorized" in error.message
    assert "WRONG-secret-token" not in str(error)
    assert "WRONG-secret-token" not in caplog.text
    # httpx logged the request; its URL had the token in the path, and the log line does not.
    assert "/bot***/sendMessage" in caplog.text


def test_slack_errors_in_an_ok_false_body(
    senders: SenderRegistry, fake: FakePlatforms, secrets: DictSecrets
) -> None:
    secrets.values["slack/bot-token"] = "xoxb-revoked"
    with pytest.raises(ChannelError) as rejected:
        platform(senders, "slack").send(outbound("slack"))
    assert (rejected.value.code, rejected.value.retryable) == ("channel_rejected", False)
    assert "invalid_auth" in rejected.value.message
    assert "xoxb-revoked" not in str(rejected.value)

    secrets.values["slack/bot-token"] = fake.tokens["slack"]
    fake.fail("slack", 200, {"ok": False, "error": "internal_error"})
    with pytest.raises(ChannelError) as transient:
        platform(senders, "slack").send(outbound("slack", turn="t_2"))
    assert (transient.value.code, transient.value.retryable) == ("channel_unavailable", True)


def test_a_server_error_is_retryable(senders: SenderRegistry, fake: FakePlatforms) -> None:
    fake.fail("whatsapp", 503, {"error": {"message": "Service temporarily unavailable", "code": 2}})
    with pytest.raises(ChannelError) as caught:
        platform(senders, "whatsapp").send(outbound("whatsapp"), context=CONTEXTS["whatsapp"])
    assert (caught.value.code, caught.value.status, caught.value.retryable) == (
        "channel_unavailable",
        503,
        True,
    )
    assert len(fake.calls("whatsapp")) == 1  # a 5xx may have posted: never resent here


def test_an_expired_discord_interaction_says_so_without_the_token(
    senders: SenderRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    context = {"application_id": DISCORD_APPLICATION, "interaction_token": "expired-" + INTERACTION_TOKEN}

    with pytest.raises(ChannelError) as caught:
        platform(senders, "discord").send(outbound("discord"), context=context)

    assert "expired" in caught.value.message and "10015" in caught.value.message
    assert not caught.value.retryable
    assert INTERACTION_TOKEN not in str(caught.value)
    assert INTERACTION_TOKEN not in caplog.text


def test_an_unreachable_platform_is_retryable_and_leaks_nothing(
    secrets: DictSecrets, clock: FakeClock, http: httpx.Client
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    senders = build_senders(
        secrets,
        outbox=None,  # type: ignore[arg-type]
        base_urls={"telegram": f"http://127.0.0.1:{closed_port}"},
        http=http,
        clock=clock,
        sleep=clock.sleep,
    )
    with pytest.raises(ChannelError) as caught:
        platform(senders, "telegram").send(outbound("telegram"))
    assert (caught.value.code, caught.value.retryable) == ("channel_unavailable", True)
    assert secrets.values["telegram/bot-token"] not in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_missing_configuration_is_its_own_error(senders: SenderRegistry, secrets: DictSecrets) -> None:
    del secrets.values["slack/bot-token"]
    with pytest.raises(ChannelNotConfigured, match="slack/bot-token"):
        platform(senders, "slack").send(outbound("slack"))
    with pytest.raises(ChannelNotConfigured, match="interaction_token"):
        platform(senders, "discord").send(outbound("discord"))
    with pytest.raises(ChannelNotConfigured, match="phone_number_id"):
        platform(senders, "whatsapp").send(outbound("whatsapp"))


def test_telegram_html_it_cannot_parse_is_resent_as_plain_text(
    senders: SenderRegistry, fake: FakePlatforms
) -> None:
    fake.fail(
        "telegram", 400, {"ok": False, "error_code": 400, "description": "Bad Request: can't parse entities"}
    )

    platform(senders, "telegram").send(outbound("telegram", "**a** & b"))

    refused, plain = fake.calls("telegram", "sendMessage")
    assert refused.json["parse_mode"] == "HTML" and refused.json["text"] == "<b>a</b> &amp; b"
    assert "parse_mode" not in plain.json and plain.json["text"] == "a & b"
    assert fake.shown("telegram") == ["a & b"]

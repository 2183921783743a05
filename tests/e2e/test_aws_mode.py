"""The web-channel scenarios against `sigil dev --aws`: the real Lambda handlers over moto.

The embedded gateway's own tests (tests/e2e/test_web_gateway.py) run here unchanged through this
module's `gateway` fixture, which starts the same process with `--aws`. Where AWS answers
differently, the scenario is restated with the reason beside it:

- a repeated event id is "queued" every time: SQS FIFO accepts a duplicate with a 200 and drops
  it, so the webhook cannot tell (shared/adapters/aws/sqs.py);
- the restart scenario is not run: moto and osmem-server keep their state in memory, so
  `--aws` starts from empty tables and queues (docs/local-aws-mode.md);
- the server-sent-events stream is not run: the HTTP API has no streaming route.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from shared.agent.turn import APOLOGY
from shared.schedules import REMINDER_PREFIX
from tests.e2e import test_web_gateway as embedded
from tests.e2e.conftest import REPLY_TIMEOUT_S, DevGateway, gateway_env, turn_requests, wait_until
from tests.e2e.processes import in_groups
from tests.e2e.test_first_hour import sigil
from tests.support.consolidation import is_consolidation
from tests.support.fake_openai import FakeOpenAI, FakeReply, _Failure, _Response, echo_last_user

AWS = ["--aws"]
# Failed records come back after a second (the mode's default is 2 s); the agent gives up on a
# record at its third delivery, so a poisoned turn reaches the dead-letter queue in ~3 s.
FAST_RETRIES = {
    "SIGIL_AWS_MODE_VISIBILITY_TIMEOUT_S": "1",
    "SIGIL_LANE_MAX_ATTEMPTS": "3",
    "SIGIL_PROVIDER_MAX_RETRIES": "0",  # a scripted HTTP 500 fails the turn instead of being retried
}


def aws_env(fake: FakeOpenAI | None, **extra: str) -> dict[str, str]:
    return gateway_env(fake) | extra


@pytest.fixture
def gateway(tmp_path: Path, fake_openai: FakeOpenAI) -> Iterator[DevGateway]:
    """Overrides conftest's `gateway` for this module: the same process, in AWS mode."""
    gw = DevGateway(tmp_path / "state", aws_env(fake_openai), extra_args=AWS).start()
    try:
        yield gw
    finally:
        gw.stop()


def moto_sqs(gw: DevGateway) -> Any:
    return moto_client(gw, "sqs")


def moto_client(gw: DevGateway, service: str) -> Any:
    """A client on the gateway's moto server, found from the start-up help it printed."""
    found = re.search(r"moto on (http://\S+) \(region (\S+)\)", gw.log_text())
    assert found, "the start-up help names moto's endpoint"
    return boto3.client(
        service,
        endpoint_url=found.group(1),
        region_name=found.group(2),
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def visible_and_in_flight(sqs: Any, queue: str) -> int:
    url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
    attrs = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])


# ---------------------------------------------------------------- the embedded scenarios, unchanged

test_a_signed_post_yields_the_models_reply = embedded.test_a_signed_post_yields_the_models_reply
test_a_bad_signature_is_401_and_nothing_is_queued = embedded.test_a_bad_signature_is_401_and_nothing_is_queued
test_a_stale_timestamp_is_401 = embedded.test_a_stale_timestamp_is_401
test_a_malformed_body_is_400_with_a_reason = embedded.test_a_malformed_body_is_400_with_a_reason


# ---------------------------------------------------------------- restated or new for this mode


def test_the_start_up_help_names_the_mode_and_the_stand_ins(gateway: DevGateway) -> None:
    text = gateway.log_text()
    assert "mode:     AWS handlers over moto" in text
    assert f"send:     POST {gateway.url}/webhooks/web/default" in text
    assert "osmem-server" in text and "turns-dlq.fifo" in text
    assert httpx.get(gateway.url + "/health").json() == {
        "status": "ok",
        "model_configured": True,
        "mode": "aws",
    }


def test_a_refused_post_queues_nothing_on_sqs(gateway: DevGateway) -> None:
    body = json.dumps({"event_id": "evt-x", "session": "s1", "user": "u1", "text": "hi"}).encode()
    assert gateway.post("", body=body, headers={}).status_code == 401
    assert gateway.post("", body=b"{not json").status_code == 400
    # A body that is not UTF-8 reaches the function base64-encoded, and is refused as not JSON.
    assert gateway.post("", body=b"\xff\xfe\x00").json() == {
        "error": "bad_request",
        "message": "body is not valid JSON",
    }
    assert visible_and_in_flight(moto_sqs(gateway), "turns.fifo") == 0


def test_the_same_event_id_three_times_is_one_turn_one_reply(
    gateway: DevGateway, fake_openai: FakeOpenAI
) -> None:
    """As the embedded scenario, but every answer is "queued": SQS drops a duplicate silently.

    The first repeats fall in SQS FIFO's 5-minute deduplication window. moto forgets a dedup id
    once its message is deleted, which SQS does not; a repeat after that is queued again, and the
    agent skips it because the event id is already in the session (both paths end in one reply).
    So the proof is the queue's: every post had been sent to SQS when it was answered, and the
    event source deletes a record only once the agent has handled it, so once turns.fifo holds
    nothing (visible or in flight) every repeat SQS kept has been handled, and no turn can follow.
    """
    statuses = [gateway.post("only once", event_id="evt-dup").json()["status"] for _ in range(3)]
    assert statuses == ["queued", "queued", "queued"]
    assert len(gateway.wait_replies(1)) == 1
    sqs = moto_sqs(gateway)
    assert wait_until(lambda: visible_and_in_flight(sqs, "turns.fifo") == 0, timeout=REPLY_TIMEOUT_S)
    assert len(gateway.outbox()) == 1
    assert len(turn_requests(fake_openai)) == 1


def test_with_no_model_configured_start_and_reply_say_so(tmp_path: Path) -> None:
    gw = DevGateway(tmp_path / "state", aws_env(None), extra_args=AWS).start()
    try:
        assert "model:    NOT CONFIGURED" in gw.log_text()
        gw.post("anyone there?", event_id="evt-nomodel")
        [reply] = gw.wait_replies(1)
        assert "No model is configured" in str(reply["text"])
        assert httpx.get(gw.url + "/health").json()["model_configured"] is False
    finally:
        gw.stop()


def test_consolidate_runs_on_the_schedule_and_on_compaction_due(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    env = aws_env(fake_openai, SIGIL_AWS_MODE_SCHEDULE_INTERVAL_S="1")
    gw = DevGateway(tmp_path / "state", env, extra_args=AWS).start()
    try:
        # Given a CompactionDue on the bus, as the agent publishes it (shared.adapters.aws.events)
        found = re.search(r"moto on (http://\S+) \(region (\S+)\)", gw.log_text())
        assert found
        events = boto3.client(
            "events",
            endpoint_url=found.group(1),
            region_name=found.group(2),
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        detail = {"type": "CompactionDue", "workspace_id": "default", "session_id": "web.s1"}
        answer = events.put_events(
            Entries=[
                {
                    "Source": "sigil",
                    "DetailType": "CompactionDue",
                    "Detail": json.dumps(detail | {"detail": {"first_seq": 0, "last_seq": 49}}),
                    "EventBusName": "sigil-local-events",
                }
            ]
        )
        assert answer["FailedEntryCount"] == 0
        # Then the rule's queue delivers it to consolidate, and the hourly timer ticks too
        lines: list[str] = []

        def both_triggered() -> bool:
            nonlocal lines
            lines = [line for line in gw.log_text().splitlines() if "consolidation requested" in line]
            return any("trigger=CompactionDue" in line for line in lines) and any(
                "trigger=schedule" in line for line in lines
            )

        wait_until(both_triggered, timeout=REPLY_TIMEOUT_S)
        compaction = [line for line in lines if "trigger=CompactionDue" in line]
        assert len(compaction) == 1 and "session_id=web.s1" in compaction[0]
        assert any("trigger=schedule" in line for line in lines)
        assert all("function_name=sigil-local-consolidate" in line for line in lines)
    finally:
        gw.stop()


def test_a_turn_is_extracted_by_consolidate_after_the_extraction_queue_s_delay(
    gateway: DevGateway, fake_openai: FakeOpenAI
) -> None:
    # Given a turn through the webhook and the agent
    gateway.post("I prefer green tea in the morning.", event_id="evt-tea")
    assert len(gateway.wait_replies(1)) == 1

    # Then its TurnCommitted waits in the extraction queue for the debounce, and the consolidate
    # function's event source runs the extraction once SQS releases it (the fake model's echo is
    # no JSON, so no fact: the run is what this shows; the facts are tests/integration's)
    def extracted() -> bool:
        return any(
            "turn extraction" in line
            and "status=done" in line
            and "function_name=sigil-local-consolidate" in line
            for line in gateway.log_text().splitlines()
        )

    wait_until(extracted, timeout=REPLY_TIMEOUT_S + 10)
    prompts = [r["messages"][0]["content"] for r in fake_openai.requests]
    assert len(prompts) == 2 and prompts[1].startswith("You extract durable memories")


# ---------------------------------------------------------------- the mode's processes end with it


def test_sigterm_stops_the_mode_and_every_process_it_started(tmp_path: Path) -> None:
    gw = DevGateway(tmp_path / "state", aws_env(None), extra_args=AWS).start()
    try:
        assert gw.proc is not None
        leader = gw.proc.pid
        # Given the gateway with osmem-server and the three functions' containers running
        started = gw.processes()
        assert any("osmem-server" in p.args for p in started)
        assert sum("multiprocessing.spawn" in p.args for p in started) >= 3
        # When it is sent SIGTERM, as a service manager stops it
        gw.proc.terminate()
        gw.proc.wait(timeout=REPLY_TIMEOUT_S)
        # Then it has stopped them itself: nothing of its process group is left
        assert wait_until(lambda: not in_groups({leader}), timeout=REPLY_TIMEOUT_S), in_groups({leader})
        assert "osmem-server: exiting" in gw.log_text()
    finally:
        gw.stop()


# Starts its argument as a child, then waits to be killed.
PARENT = "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); time.sleep(3600)"


def test_when_its_parent_dies_the_mode_stops_and_leaves_nothing(tmp_path: Path) -> None:
    gw = DevGateway(
        tmp_path / "state", aws_env(None), extra_args=AWS, launcher=[sys.executable, "-c", PARENT]
    ).start()
    try:
        assert gw.proc is not None
        group = gw.proc.pid
        assert any(p.ppid == group and " dev " in p.args for p in gw.processes())
        # When its parent is killed outright, with no chance to stop it
        gw.proc.kill()
        gw.proc.wait()
        # Then the orphaned mode notices, stops its children and exits: nothing is left
        assert wait_until(lambda: not in_groups({group}), timeout=REPLY_TIMEOUT_S), in_groups({group})
        assert "Finished server process" in gw.log_text()
    finally:
        gw.stop()


# ---------------------------------------------------------------- lanes: 20 sessions x 10, with failures

SESSIONS, MESSAGES = 20, 10
POISONED = {3, 8, 13, 18}  # message 4 of these sessions fails on every delivery
FLAKY = {1, 6, 11, 16}  # message 2 of these sessions fails on its first delivery only
POISON_AT, FLAKY_AT = 4, 2
# 200 turns and twelve retried deliveries through one poller: a minute when the machine is quiet.
LANES_TIMEOUT_S = 300.0


def text_for(s: int, m: int) -> str:
    text = f"s{s:02d}-m{m:02d}"
    if s in POISONED and m == POISON_AT:
        return text + " poison"
    if s in FLAKY and m == FLAKY_AT:
        return text + " flaky"
    return text


class ScriptedModel(FakeOpenAI):
    """The fake model, answering HTTP 500 to every "poison" message and to a "flaky" one's first try."""

    def __init__(self) -> None:
        super().__init__()
        self.tries: dict[str, int] = {}
        self._tries_lock = threading.Lock()

    def _next(self, body: dict[str, Any], headers: dict[str, str]) -> _Response:
        response = super()._next(body, headers)  # records the request
        if is_consolidation(body):
            return response  # per-turn extraction quotes the turns' words but is not a turn
        text = echo_last_user(body)
        with self._tries_lock:
            self.tries[text] = self.tries.get(text, 0) + 1
            first = self.tries[text] == 1
        if "poison" in text or ("flaky" in text and first):
            return _Failure(500, "The server had an error while processing your request.", None, {})
        return response


@pytest.fixture
def scripted() -> Iterator[ScriptedModel]:
    with ScriptedModel() as model:
        yield model


def test_each_session_keeps_its_order_through_failures_and_poison_ends_in_the_dlq(
    tmp_path: Path, scripted: ScriptedModel
) -> None:
    """20 sessions x 10 messages at once; a transient failure is retried in order, poison dead-letters.

    A poisoned session's client waits for the answer to the poisoned message before it sends the
    rest. Messages queued behind a record in the same batch share its fate on every delivery
    (skip_group_on_error in functions/agent/handler.py), so they would reach maxReceiveCount with
    it and be dead-lettered alongside it, as they would on AWS; which of them share its batches is
    a matter of timing. Waiting keeps this scenario deterministic: it checks that the session
    carries on, in order, after the dead letter.
    """
    gw = DevGateway(tmp_path / "state", aws_env(scripted, **FAST_RETRIES), extra_args=AWS).start()
    try:

        def send(s: int, m: int) -> str:
            resp = gw.post(text_for(s, m), session=f"sess{s:02d}", event_id=f"e-{s:02d}-{m:02d}")
            status: str = resp.json()["status"]
            return status

        def send_session(s: int) -> list[str]:
            # One client per session sends its messages in order; the 20 clients run at once.
            if s not in POISONED:
                return [send(s, m) for m in range(MESSAGES)]
            statuses = [send(s, m) for m in range(POISON_AT + 1)]
            replies = gw.wait_replies(POISON_AT + 1, session=f"sess{s:02d}", timeout=LANES_TIMEOUT_S)
            assert replies[-1]["text"] == APOLOGY, f"session {s} got no apology for its poisoned message"
            return statuses + [send(s, m) for m in range(POISON_AT + 1, MESSAGES)]

        with ThreadPoolExecutor(max_workers=SESSIONS) as pool:
            results = list(pool.map(send_session, range(SESSIONS)))
        assert all(status == "queued" for statuses in results for status in statuses)

        # Then every message has exactly one answer, in the order sent: the model's reply, or
        # the apology for a poisoned one; nothing is lost
        for s in range(SESSIONS):
            replies = gw.wait_replies(MESSAGES, session=f"sess{s:02d}", timeout=LANES_TIMEOUT_S)
            assert [r["in_reply_to"] for r in replies] == [f"e-{s:02d}-{m:02d}" for m in range(MESSAGES)]
            expected = [
                APOLOGY if s in POISONED and m == POISON_AT else text_for(s, m) for m in range(MESSAGES)
            ]
            assert [r["text"] for r in replies] == expected

        # and each session's messages reached the model in order (retries repeat, never overtake)
        firsts: dict[str, list[str]] = {}
        for body in turn_requests(scripted):
            text = echo_last_user(body)
            seen = firsts.setdefault(text[:3], [])
            if text not in seen:
                seen.append(text)
        assert all(seen == sorted(seen) for seen in firsts.values())
        assert sum(len(seen) for seen in firsts.values()) == SESSIONS * MESSAGES
        # a flaky message was tried twice, a poisoned one on each of its three deliveries
        assert {t: n for t, n in scripted.tries.items() if "flaky" in t} == {
            text_for(s, FLAKY_AT): 2 for s in FLAKY
        }
        assert {t: n for t, n in scripted.tries.items() if "poison" in t} == {
            text_for(s, POISON_AT): 3 for s in POISONED
        }

        # and the poisoned messages, and only they, are in the dead-letter queue
        sqs = moto_sqs(gw)
        dlq = sqs.get_queue_url(QueueName="turns-dlq.fifo")["QueueUrl"]
        dead: list[str] = []
        while True:
            batch = sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10, VisibilityTimeout=60).get(
                "Messages", []
            )
            if not batch:
                break
            dead += [json.loads(m["Body"])["inbound"]["event_id"] for m in batch]
        assert sorted(dead) == sorted(f"e-{s:02d}-{POISON_AT:02d}" for s in POISONED)
        assert visible_and_in_flight(sqs, "turns.fifo") == 0
    finally:
        gw.stop()


def test_sigil_yaml_is_applied_to_motos_stores_at_start(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    from shared.adapters.aws.dynamodb import DynamoRouteStore, DynamoWorkspaceStore

    config = tmp_path / "sigil.yaml"
    config.write_text(
        "workspaces:\n"
        "  family: {name: Family, model: openai/fake-family, active_window: 12}\n"
        "channels:\n"
        "  - {platform: telegram, name: family, workspace: family}\n"
    )
    gw = DevGateway(
        tmp_path / "state", aws_env(fake_openai, SIGIL_CONFIG=str(config)), extra_args=AWS
    ).start()
    try:
        found = re.search(r"moto on (http://\S+) \(region (\S+)\)", gw.log_text())
        assert found, "the start-up help names moto's endpoint"
        dynamodb = boto3.client(
            "dynamodb",
            endpoint_url=found.group(1),
            region_name=found.group(2),
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        tables = dynamodb.list_tables()["TableNames"]
        [memory] = [t for t in tables if t.endswith("-memory")]
        [sessions] = [t for t in tables if t.endswith("-sessions")]
        family = DynamoWorkspaceStore(memory, client=dynamodb).get("family")
        assert family is not None
        assert (family.name, family.model, family.active_window) == ("Family", "openai/fake-family", 12)
        [route] = DynamoRouteStore(sessions, client=dynamodb).list_routes()
        assert (route.key, route.workspace) == ("telegram/family", "family")
    finally:
        gw.stop()


# ---------------------------------------------------------------- things done later (Scheduler)


def remind_in_a_few_seconds(body: dict[str, Any]) -> str | FakeReply:
    """Sets a reminder four seconds ahead (UTC) when asked; hands back what the tool said."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return f"Tool said: {last['content']}"
    if "remind me soon" in str(last.get("content")):
        soon = datetime.now(UTC) + timedelta(seconds=4)
        args = {"text": "stretch", "at": soon.strftime("%Y-%m-%dT%H:%M:%S"), "timezone": "UTC"}
        return FakeReply(tool_calls=[("schedule", args)])
    return echo_last_user(body)


def test_a_reminder_set_in_a_turn_fires_from_motos_scheduler_once(tmp_path: Path) -> None:
    with FakeOpenAI(remind_in_a_few_seconds) as fake:
        gw = DevGateway(tmp_path / "state", aws_env(fake), extra_args=AWS).start()
        try:
            # Given a turn in which the model sets a reminder a few seconds ahead
            assert gw.post("remind me soon").json()["status"] == "queued"
            (answer,) = gw.wait_replies(1)
            assert "Tool said" in str(answer["text"]) and "error" not in str(answer["text"]).lower()
            scheduler = moto_client(gw, "scheduler")
            # Then the agent made it in moto's EventBridge Scheduler, aimed at the turns queue
            (made,) = scheduler.list_schedules(GroupName="sigil-local-schedules")["Schedules"]
            made = scheduler.get_schedule(GroupName="sigil-local-schedules", Name=made["Name"])
            assert made["ScheduleExpression"].startswith("at(") and made["ActionAfterCompletion"] == "DELETE"
            assert made["Target"]["Arn"].endswith(":turns.fifo")
            # and `sigil schedules` in a second terminal lists it from the mode's stores
            listed = sigil(gw, "schedules", "list", "-w", "default")
            assert listed.returncode == 0 and "stretch" in listed.stdout, listed.stderr

            # When it falls due: the reminder arrives in the conversation
            def reminded() -> list[dict[str, object]]:
                return [r for r in gw.outbox() if str(r["text"]).startswith(REMINDER_PREFIX)]

            assert wait_until(lambda: bool(reminded()), timeout=REPLY_TIMEOUT_S)
            # and the one-time schedule deleted itself; once the turns queue is empty no
            # second delivery can follow: the reminder arrived once
            assert wait_until(
                lambda: scheduler.list_schedules(GroupName="sigil-local-schedules")["Schedules"] == [],
                timeout=REPLY_TIMEOUT_S,
            )
            sqs = moto_sqs(gw)
            assert wait_until(lambda: visible_and_in_flight(sqs, "turns.fifo") == 0, timeout=REPLY_TIMEOUT_S)
            assert [r["text"] for r in reminded()] == [f"{REMINDER_PREFIX}stretch"]
        finally:
            gw.stop()

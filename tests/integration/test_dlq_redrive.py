"""`sigil dlq` end to end: a poisoned session's turns are dead-lettered, listed with their reason,
redriven once the fault is fixed, and answered once each, in order (docs/dead-letters.md).

The model is the real openai SDK against tests/support/fault_model.py, switched down (HTTP 500 on
every request) and later back up. On moto, the agent Lambda's handler consumes the turns queue as
the SQS event source mapping does, and the queue's redrive policy moves a record to the FIFO
dead-letter queue after its receives; on the embedded backend, the local gateway's lane runner
does both. The CLI is the real `sigil` app, run in-process.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws
from starlette.testclient import TestClient
from typer.testing import CliRunner

from functions.agent import handler as agent
from shared import cloud
from shared.adapters.aws import clients
from shared.adapters.aws.sqs import SqsLanes
from shared.agent.turn import APOLOGY
from shared.channels import web
from shared.cli import app
from shared.config import Settings
from shared.local.gateway import LocalGateway
from shared.models import AssistantMessage, InboundMessage, LaneItem, Sender, UserMessage
from tests.support.fault_model import FaultModel
from tests.support.lambda_context import context_for
from tests.support.moto_aws import REGION, AwsResources, moto_like_aws, provision

ROOT = Path(__file__).resolve().parents[2]
WS = "default"
ATTEMPTS = 2  # the turns queue's maxReceiveCount, and SIGIL_LANE_MAX_ATTEMPTS with it
TEXTS = ["first, about the invoice", "second, about the refund", "third, thanks"]
AGENT_CONTEXT: Any = context_for("sigil-agent")
# One record of the sample batch: the fields and attribute names Lambda's SQS event carries.
RECORD_TEMPLATE: dict[str, Any] = json.loads((ROOT / "events" / "agent_sqs_fifo_batch.json").read_text())[
    "Records"
][0]


@pytest.fixture
def model() -> Iterator[FaultModel]:
    with FaultModel() as server:
        yield server


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SIGIL_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "SIGIL_BACKEND", "SIGIL_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)


def sigil(*args: str, env: Mapping[str, str] | None = None) -> str:
    result = CliRunner().invoke(app, list(args), env=dict(env or {}))
    assert result.exit_code == 0, result.output
    return result.output


def wait_until(condition: Callable[[], bool], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def assert_answered_once_in_order(messages: list[Any]) -> None:
    """The session holds each user message once, then one reply to each, in order."""
    users = [m.content for m in messages if isinstance(m, UserMessage)]
    replies = [m.content for m in messages if isinstance(m, AssistantMessage)]
    assert users == TEXTS
    assert replies == TEXTS  # the fake echoes the message each turn answers


# ---------------------------------------------------------------- moto: the agent Lambda on SQS FIFO


class Stack:
    """The turns queue and its dead-letter queue as infra/constructs/lanes.py makes them, the
    tables, and the agent handler consuming the queue as the event source mapping does."""

    def __init__(self, resources: AwsResources) -> None:
        self.resources = resources
        self.sqs = clients.sqs(REGION)
        fifo = {"FifoQueue": "true", "ContentBasedDeduplication": "false"}
        self.dlq_url = self.sqs.create_queue(QueueName="stage-turns-dlq.fifo", Attributes=fifo)["QueueUrl"]
        dlq_arn = self.arn(self.dlq_url)
        self.queue_url = self.sqs.create_queue(
            QueueName="stage-turns.fifo",
            Attributes={
                **fifo,
                "DeduplicationScope": "messageGroup",
                "FifoThroughputLimit": "perMessageGroupId",
                "VisibilityTimeout": "30",
                "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": ATTEMPTS}),
            },
        )["QueueUrl"]
        self.queue_arn = self.arn(self.queue_url)

    def arn(self, url: str) -> str:
        arn: str = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        return arn

    def agent_settings(self, model: FaultModel) -> Settings:
        # The agent's environment has no dead-letter queue url: it never reads that queue.
        return self.resources.settings(
            queue_url=self.queue_url,
            secrets_prefix="sigil/",
            model="openai/fake-model",
            OPENAI_BASE_URL=model.base_url,
            OPENAI_API_KEY="sk-test",
            provider_max_retries=0,
            lane_max_attempts=ATTEMPTS,
        )

    def operator_env(self) -> dict[str, str]:
        """What `sigil dlq` reads on the aws backend: the stack's outputs."""
        r = self.resources
        return {
            "SIGIL_BACKEND": "aws",
            "SIGIL_SESSIONS_TABLE": r.sessions_table,
            "SIGIL_MEMORY_TABLE": r.memory_table,
            "SIGIL_QUEUE_URL": self.queue_url,
            "SIGIL_DEAD_LETTER_QUEUE_URL": self.dlq_url,
            "SIGIL_EVENT_BUS_NAME": r.event_bus_name,
            "SIGIL_OPENSEARCH_ENDPOINT": "https://search.invalid",
            "SIGIL_SECRETS_PREFIX": "sigil/",
            "AWS_REGION": REGION,
        }

    def pending(self) -> int:
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return sum(int(v) for v in attributes.values())

    def run_agent(self) -> None:
        """Until the turns queue is empty: each receive is one batch for the handler; what it
        reports done is deleted, what failed is visible again at once (its visibility timeout
        cut short), and SQS moves a record to the dead-letter queue after its last receive."""
        for _ in range(100):
            messages = self.receive()
            if not messages:
                if self.pending() == 0:
                    return
                continue
            event = {"Records": [self.record(m) for m in messages]}
            try:
                response = agent.lambda_handler(event, AGENT_CONTEXT)
                failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
            except Exception:  # every record failed: the processor raises, and all come back
                failed = {m["MessageId"] for m in messages}
            for m in messages:
                if m["MessageId"] in failed:
                    self.sqs.change_message_visibility(
                        QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
                    )
                else:
                    self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"])
        raise AssertionError("the turns queue never emptied")

    def receive(self) -> list[Any]:
        return list(
            self.sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=10,
                VisibilityTimeout=30,
                MessageSystemAttributeNames=["All"],
            ).get("Messages", [])
        )

    def timed_out_invocation(self) -> None:
        """One batch whose invocation ran its turns and then timed out before it answered: the
        event source mapping deletes nothing, so every record comes back once its visibility
        timeout ends (cut short here), its receive counted, whatever its turn committed."""
        messages = self.receive()
        assert messages, "nothing to receive"
        agent.lambda_handler({"Records": [self.record(m) for m in messages]}, AGENT_CONTEXT)
        for m in messages:
            self.sqs.change_message_visibility(
                QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
            )

    def record(self, message: Mapping[str, Any]) -> dict[str, Any]:
        record = copy.deepcopy(RECORD_TEMPLATE)
        record.update(
            messageId=message["MessageId"],
            receiptHandle=message["ReceiptHandle"],
            body=message["Body"],
            md5OfBody=message["MD5OfBody"],
            eventSourceARN=self.queue_arn,
            awsRegion=REGION,
        )
        record["attributes"] = {name: message["Attributes"][name] for name in RECORD_TEMPLATE["attributes"]}
        return record


def web_item(session: str, event_id: str, text: str) -> LaneItem:
    """What the webhook queues for a web message (shared.ingress)."""
    return LaneItem(
        inbound=InboundMessage(
            event_id=event_id,
            channel="web",
            workspace_id=WS,
            session_id=session,
            sender=Sender(id="alice"),
            chat_id=session,
            text=text,
        )
    )


@pytest.fixture
def stack(model: FaultModel) -> Iterator[Stack]:
    with mock_aws(), moto_like_aws():
        clients.reset()
        found = Stack(provision("dlq"))
        cloud.reset(config=found.agent_settings(model))
        try:
            yield found
        finally:
            cloud.reset()


def test_on_moto_a_poisoned_sessions_turns_are_dead_lettered_listed_redriven_and_answered_once_in_order(
    stack: Stack, model: FaultModel
) -> None:
    session = "web.poisoned"
    outbox = cloud.turn_deps().backend.outbox
    sessions = cloud.turn_deps().backend.sessions

    def shown() -> list[str]:
        return [e.message.text for e in outbox.read(WS, session)]

    # Given a session whose every turn fails (the model is down) until the queue gives up on them
    model.down = True
    lanes = SqsLanes(stack.queue_url, region=REGION)
    for i, text in enumerate(TEXTS):
        lanes.submit(web_item(session, f"evt-{i}", text))
    stack.run_agent()
    assert model.injected["down"] >= ATTEMPTS
    assert shown() == [APOLOGY] * 3  # each user was told, once, on the last delivery

    # When the operator lists the dead letters
    listed = sigil("dlq", "list", "-w", WS, env=stack.operator_env())
    # Then each of the session's turns is there, in order, with the attempts and why it failed
    assert listed.count(f"{WS}/{session}") == 3
    assert [line.split("event ")[1].split()[0] for line in listed.splitlines() if "event " in line] == [
        "evt-0",
        "evt-1",
        "evt-2",
    ]
    assert f"{ATTEMPTS} attempt(s)" in listed
    reasons = [line for line in listed.splitlines() if line.strip().startswith("reason:")]
    # The first turn's model call failed; the ones behind it were held by the failure before them.
    assert "last error: ProviderError" in reasons[0] and "HTTP 500" in reasons[0]
    assert all("A previous record from this message group" in r for r in reasons[1:])
    assert "first, about the invoice" in listed
    # And `show` gives one of them whole: its session, event, attempts and the full reason
    [first_id] = [line.split()[0] for line in listed.splitlines() if "event evt-0" in line]
    shown_entry = sigil("dlq", "show", first_id, env=stack.operator_env())
    assert f"session:    {session}" in shown_entry and "event:      evt-0" in shown_entry
    assert f"attempts:   {ATTEMPTS}" in shown_entry
    assert "ProviderError" in shown_entry and "first, about the invoice" in shown_entry

    # When the fault is fixed and the session is redriven
    model.down = False
    calls_before = len(model.requests)
    redrive = sigil("dlq", "redrive", "--session", session, "-w", WS, "--yes", env=stack.operator_env())
    assert "3 redriven, 0 skipped, 0 failed, 0 not found" in redrive
    stack.run_agent()

    # Then the agent answers each message once, in the order they were sent
    assert shown() == [APOLOGY] * 3 + TEXTS
    assert len(model.requests) - calls_before == 3
    stored = sessions.get(WS, session)
    assert stored is not None
    assert_answered_once_in_order(stored.active_messages)
    # And the dead letters are empty: a second redrive finds nothing, and nothing more is answered
    again = sigil("dlq", "redrive", "--session", session, "-w", WS, "--yes", env=stack.operator_env())
    assert "0 redriven, 0 skipped, 0 failed, 0 not found" in again
    assert "no dead letters" in sigil("dlq", "list", env=stack.operator_env())
    stack.run_agent()
    assert shown() == [APOLOGY] * 3 + TEXTS


def test_on_moto_a_redrive_skips_a_turn_that_committed_before_it_was_dead_lettered(
    stack: Stack, model: FaultModel
) -> None:
    session = "web.timed-out"
    outbox = cloud.turn_deps().backend.outbox
    sessions = cloud.turn_deps().backend.sessions
    lanes = SqsLanes(stack.queue_url, region=REGION)

    def shown() -> list[str]:
        return [e.message.text for e in outbox.read(WS, session)]

    # Given a turn answered and committed by an invocation that then timed out, and received
    # again by one that timed out too (its turn a redelivery, skipped): SQS counts both receives
    lanes.submit(web_item(session, "evt-0", TEXTS[0]))
    stack.timed_out_invocation()
    assert shown() == [TEXTS[0]]
    stack.timed_out_invocation()
    assert shown() == [TEXTS[0]] and model.tries[TEXTS[0]] == 1
    # And the session's next two messages, queued behind it, fail until they are given up
    model.down = True
    lanes.submit(web_item(session, "evt-1", TEXTS[1]))
    lanes.submit(web_item(session, "evt-2", TEXTS[2]))
    stack.run_agent()
    # Then all three are dead letters, in order: the answered one moved on its next receive,
    # and given up on by nothing, so no apology for it
    assert shown() == [TEXTS[0], APOLOGY, APOLOGY]
    listed = sigil("dlq", "list", "-w", WS, env=stack.operator_env())
    rows = [line.split() for line in listed.splitlines() if "event " in line]
    assert [row[row.index("event") + 1] for row in rows] == ["evt-0", "evt-1", "evt-2"]
    ids = [row[0] for row in rows]

    # When the fault is fixed and the session redriven
    model.down = False
    redrive = sigil("dlq", "redrive", "--session", session, "-w", WS, "--yes", env=stack.operator_env())
    # Then the committed turn is skipped, and says so; the two given up are put back in order
    assert f"skipped   {ids[0]}  its turn already committed" in redrive
    assert f"redriven  {ids[1]}  as event evt-1.r1" in redrive
    assert f"redriven  {ids[2]}  as event evt-2.r1" in redrive
    assert redrive.index(ids[1]) < redrive.index(ids[2])
    assert "2 redriven, 1 skipped, 0 failed, 0 not found" in redrive
    stack.run_agent()

    # And each message is answered once, in order: the skipped one not asked of the model again
    assert shown() == [TEXTS[0], APOLOGY, APOLOGY, TEXTS[1], TEXTS[2]]
    assert {text: model.tries[text] for text in TEXTS} == dict.fromkeys(TEXTS, 1)
    stored = sessions.get(WS, session)
    assert stored is not None
    assert_answered_once_in_order(stored.active_messages)
    assert "no dead letters" in sigil("dlq", "list", env=stack.operator_env())


# ---------------------------------------------------------------- embedded: the local gateway


def local_gateway(data_dir: Path, model: FaultModel) -> LocalGateway:
    settings = Settings(
        data_dir=data_dir,
        model="openai/fake-model",
        OPENAI_BASE_URL=model.base_url,
        OPENAI_API_KEY="sk-test",
        provider_max_retries=0,
        lane_max_attempts=ATTEMPTS,
        lane_workers=2,
    )
    gw = LocalGateway(settings)
    gw.ensure_workspace(WS)
    return gw


@pytest.fixture
def gateway(tmp_path: Path, model: FaultModel) -> Iterator[LocalGateway]:
    gw = local_gateway(tmp_path / "state", model)
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


def test_on_the_embedded_backend_the_same_flow_holds(gateway: LocalGateway, model: FaultModel) -> None:
    data_dir = str(gateway.settings.data_dir)
    client = TestClient(gateway.app())
    secret = gateway.backend.secrets.get(web.secret_name(WS))
    assert secret is not None
    session = web.session_id_for("poisoned")

    def shown() -> list[str]:
        return [e.message.text for e in gateway.backend.outbox.read(WS, session)]

    # Given a session whose every turn fails until the lane gives up on each
    model.down = True
    for i, text in enumerate(TEXTS):
        body = json.dumps(
            {"event_id": f"evt-{i}", "session": "poisoned", "user": "alice", "text": text}
        ).encode()
        response = client.post(f"/webhooks/web/{WS}", content=body, headers=web.signed_headers(secret, body))
        assert response.status_code == 202, response.text
    assert wait_until(lambda: shown() == [APOLOGY] * 3)
    assert gateway.runner.wait_idle(30)

    # When the operator lists them: each with its attempts and the error that ended it
    listed = sigil("dlq", "list", "--data-dir", data_dir)
    assert listed.count(f"{WS}/{session}") == 3
    assert f"{ATTEMPTS} attempt(s)" in listed
    reasons = [line for line in listed.splitlines() if line.strip().startswith("reason:")]
    assert len(reasons) == 3 and all("500" in r or "InternalServerError" in r for r in reasons)
    [first_id] = [line.split()[0] for line in listed.splitlines() if "event evt-0" in line]
    assert "first, about the invoice" in sigil("dlq", "show", first_id, "--data-dir", data_dir)

    # When the fault is fixed and the session redriven, by the name its client gave it (the
    # web channel stores it as web.poisoned)
    model.down = False
    redrive = sigil("dlq", "redrive", "--session", "poisoned", "-w", WS, "--yes", "--data-dir", data_dir)
    assert "3 redriven, 0 skipped, 0 failed, 0 not found" in redrive

    # Then each message is answered once, in order
    assert wait_until(lambda: shown() == [APOLOGY] * 3 + TEXTS)
    assert gateway.runner.wait_idle(30)
    stored = gateway.backend.sessions.get(WS, session)
    assert stored is not None
    assert_answered_once_in_order(stored.active_messages)
    again = sigil("dlq", "redrive", "--session", session, "-w", WS, "--yes", "--data-dir", data_dir)
    assert "0 redriven, 0 skipped, 0 failed, 0 not found" in again
    assert "no dead letters" in sigil("dlq", "list", "--data-dir", data_dir)
    assert shown() == [APOLOGY] * 3 + TEXTS


def test_a_redrive_before_the_fix_is_given_up_again_without_keeping_the_message_twice(
    gateway: LocalGateway, model: FaultModel
) -> None:
    data_dir = str(gateway.settings.data_dir)
    client = TestClient(gateway.app())
    secret = gateway.backend.secrets.get(web.secret_name(WS))
    assert secret is not None
    session = web.session_id_for("early")

    def shown() -> list[str]:
        return [e.message.text for e in gateway.backend.outbox.read(WS, session)]

    # Given one dead-lettered message, redriven while the model is still down
    model.down = True
    body = json.dumps({"event_id": "evt-0", "session": "early", "user": "alice", "text": TEXTS[0]}).encode()
    assert (
        client.post(f"/webhooks/web/{WS}", content=body, headers=web.signed_headers(secret, body)).status_code
        == 202
    )
    assert wait_until(lambda: shown() == [APOLOGY])
    assert "1 redriven" in sigil(
        "dlq", "redrive", "--session", session, "-w", WS, "--yes", "--data-dir", data_dir
    )
    # Then it is given up again (a second apology, as its own turn), and listed again as a redrive
    assert wait_until(lambda: shown() == [APOLOGY, APOLOGY])
    assert gateway.runner.wait_idle(30)
    [entry] = gateway.backend.dead_letters.list_entries(WS) if gateway.backend.dead_letters else []
    assert entry.item is not None and (entry.event_id, entry.item.redrive_of) == ("evt-0.r1", "evt-0")
    stored = gateway.backend.sessions.get(WS, session)
    assert stored is not None and [m.content for m in stored.active_messages] == [TEXTS[0]]

    # When the fault is fixed and it is redriven once more, it is answered once
    model.down = False
    assert "1 redriven" in sigil("dlq", "redrive", entry.id, "--yes", "--data-dir", data_dir)
    assert wait_until(lambda: shown() == [APOLOGY, APOLOGY, TEXTS[0]])
    assert gateway.runner.wait_idle(30)
    stored = gateway.backend.sessions.get(WS, session)
    assert stored is not None and [m.content for m in stored.active_messages] == [TEXTS[0], TEXTS[0]]
    assert [m.kind for m in stored.active_messages] == ["user", "assistant"]


class Killed(BaseException):
    """The gateway's process dying: no `except Exception` of the lane runner stops it."""


def dying_after_each_turn(gw: LocalGateway) -> list[str]:
    """Make `gw` die after each turn it runs, once the turn has returned and before its lane
    records the item done (the item stays in flight, as a crash leaves it); returns the event ids
    of the turns that ran."""
    ran: list[str] = []
    turn = gw.runner.handler

    def handler(item: LaneItem) -> None:
        turn(item)
        ran.append(item.inbound.event_id)
        raise Killed

    gw.runner.handler = handler
    return ran


def test_on_the_embedded_backend_a_redrive_skips_a_turn_that_committed_before_it_was_dead_lettered(
    tmp_path: Path, model: FaultModel
) -> None:
    data_dir = tmp_path / "state"
    session = web.session_id_for("crashed")

    def post(gw: LocalGateway, i: int) -> None:
        secret = gw.backend.secrets.get(web.secret_name(WS))
        assert secret is not None
        body = json.dumps({"event_id": f"evt-{i}", "session": "crashed", "user": "alice", "text": TEXTS[i]})
        response = TestClient(gw.app()).post(
            f"/webhooks/web/{WS}", content=body.encode(), headers=web.signed_headers(secret, body.encode())
        )
        assert response.status_code == 202, response.text

    def shown(gw: LocalGateway) -> list[str]:
        return [e.message.text for e in gw.backend.outbox.read(WS, session)]

    # Given a gateway that dies right after a turn answered and committed, before its lane
    # recorded the item done; and one started after it that takes the item back (a redelivery,
    # skipped by the turn) and dies there too
    first = local_gateway(data_dir, model)
    ran = dying_after_each_turn(first)
    first.start()
    try:
        post(first, 0)
        assert wait_until(lambda: ran == ["evt-0"])
        assert shown(first) == [TEXTS[0]]
    finally:
        first.stop()
    second = local_gateway(data_dir, model)
    ran = dying_after_each_turn(second)
    second.start()
    try:
        assert wait_until(lambda: ran == ["evt-0"])
        # And the session's next two messages are queued behind it while the model is down
        model.down = True
        post(second, 1)
        post(second, 2)
    finally:
        second.stop()
    assert model.tries[TEXTS[0]] == 1

    third = local_gateway(data_dir, model)
    third.start()
    try:
        # Then the next gateway buries the first (its attempts used up), with no apology for a
        # turn that committed, and gives up on the other two
        assert wait_until(lambda: shown(third) == [TEXTS[0], APOLOGY, APOLOGY])
        assert third.runner.wait_idle(30)
        listed = sigil("dlq", "list", "--data-dir", str(data_dir))
        rows = [line.split() for line in listed.splitlines() if "event " in line]
        assert [row[row.index("event") + 1] for row in rows] == ["evt-0", "evt-1", "evt-2"]
        assert f"interrupted after {ATTEMPTS} attempt(s)" in listed
        ids = [row[0] for row in rows]

        # When the fault is fixed and the session redriven
        model.down = False
        redrive = sigil(
            "dlq", "redrive", "--session", session, "-w", WS, "--yes", "--data-dir", str(data_dir)
        )
        # Then the committed turn is skipped, and says so; the two given up are put back in order
        assert f"skipped   {ids[0]}  its turn already committed" in redrive
        assert f"redriven  {ids[1]}  as event evt-1.r1" in redrive
        assert f"redriven  {ids[2]}  as event evt-2.r1" in redrive
        assert redrive.index(ids[1]) < redrive.index(ids[2])
        assert "2 redriven, 1 skipped, 0 failed, 0 not found" in redrive

        # And each message is answered once, in order: the skipped one not asked of the model again
        assert wait_until(lambda: shown(third) == [TEXTS[0], APOLOGY, APOLOGY, TEXTS[1], TEXTS[2]])
        assert third.runner.wait_idle(30)
        assert {text: model.tries[text] for text in TEXTS} == dict.fromkeys(TEXTS, 1)
        stored = third.backend.sessions.get(WS, session)
        assert stored is not None
        assert_answered_once_in_order(stored.active_messages)
        assert "no dead letters" in sigil("dlq", "list", "--data-dir", str(data_dir))
        assert shown(third) == [TEXTS[0], APOLOGY, APOLOGY, TEXTS[1], TEXTS[2]]
    finally:
        third.stop()


# ---------------------------------------------------------------- the CLI's refusals


def test_the_cli_refuses_an_ambiguous_redrive_an_unknown_id_and_an_aws_backend_without_the_queue(
    tmp_path: Path,
) -> None:
    runner = CliRunner()
    data_dir = str(tmp_path / "state")
    both = runner.invoke(app, ["dlq", "redrive", "7", "--session", "s", "--yes", "--data-dir", data_dir])
    assert both.exit_code == 2 and "either --session or dead-letter ids" in both.output
    neither = runner.invoke(app, ["dlq", "redrive", "--yes", "--data-dir", data_dir])
    assert neither.exit_code == 2
    unknown = runner.invoke(app, ["dlq", "show", "7", "--data-dir", data_dir])
    assert unknown.exit_code == 1 and "no dead letter '7'" in unknown.output
    missing = runner.invoke(app, ["dlq", "redrive", "7", "--yes", "--data-dir", data_dir])
    assert missing.exit_code == 1 and "not found 7" in missing.output
    # The aws backend is built (its clients too, never called): under moto, and forgotten after,
    # so no later test finds a cached client made here.
    with mock_aws():
        try:
            no_stack = runner.invoke(app, ["dlq", "list"], env={"SIGIL_BACKEND": "aws"})
            assert no_stack.exit_code == 2 and "SIGIL_QUEUE_URL" in no_stack.output
            stack_env = {
                "SIGIL_BACKEND": "aws",
                "SIGIL_SESSIONS_TABLE": "t-sessions",
                "SIGIL_MEMORY_TABLE": "t-memory",
                "SIGIL_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/t-turns.fifo",
                "SIGIL_EVENT_BUS_NAME": "t-bus",
                "SIGIL_OPENSEARCH_ENDPOINT": "https://search.invalid",
                "AWS_REGION": REGION,
            }
            no_dlq = runner.invoke(app, ["dlq", "list"], env=stack_env)
            assert no_dlq.exit_code == 2 and "--dlq-url or SIGIL_DEAD_LETTER_QUEUE_URL" in no_dlq.output
        finally:
            clients.reset()

"""One message traced by its correlation id through `sigil dev --aws`: the three real handlers in
their own processes over moto, their log lines as the mode prints them (docs/observability.md).

The workspace's window is two messages and its summary batch two, so the second turn rolls a
batch out and publishes a CompactionDue; the rule's queue hands it to the consolidate function.
The id is API Gateway's request id, which the mode's HTTP front mints per request.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from shared.adapters.aws.dynamodb.workspaces import DynamoWorkspaceStore
from shared.consolidation.compaction import ROLLING_SYSTEM, SUMMARY_SYSTEM
from shared.consolidation.extraction import EXTRACTION_SYSTEM
from shared.local.aws_mode.resources import NAME_PREFIX
from shared.models import WorkspaceConfig
from tests.e2e.conftest import REPLY_TIMEOUT_S, DevGateway, gateway_env, wait_until
from tests.support.consolidation import FakeConsolidator
from tests.support.fake_openai import FakeOpenAI, echo_last_user

FUNCTION = re.compile(r"function_name=(\S+)")
CORRELATION = re.compile(r"correlation_id=(\S+)")


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    consolidator = FakeConsolidator()

    def answer(body: dict[str, Any]) -> str:
        # One stand-in for both models: the consolidation prompts by their system text, the turns echoed.
        if body["messages"][0]["content"] in (SUMMARY_SYSTEM, ROLLING_SYSTEM, EXTRACTION_SYSTEM):
            return consolidator.openai(body)
        return echo_last_user(body)

    with FakeOpenAI(answer) as server:
        yield server


def workspaces(gw: DevGateway) -> DynamoWorkspaceStore:
    """The workspace configs in the mode's moto, found from the start-up help it printed."""
    found = re.search(r"moto on (http://\S+) \(region (\S+)\)", gw.log_text())
    assert found, "the start-up help names moto's endpoint"
    client = boto3.client(
        "dynamodb",
        endpoint_url=found.group(1),
        region_name=found.group(2),
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    return DynamoWorkspaceStore(f"{NAME_PREFIX}-memory", client=client)


def lines_of(text: str, function_suffix: str) -> list[str]:
    return [
        line
        for line in text.splitlines()
        if (m := FUNCTION.search(line)) is not None and m.group(1).endswith(function_suffix)
    ]


def turn_lines(text: str, event_id: str) -> list[str]:
    return [line for line in lines_of(text, "agent") if " turn " in line and f"event_id={event_id}" in line]


def test_one_message_carries_one_correlation_id_through_webhook_agent_and_consolidation(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    gw = DevGateway(tmp_path / "state", gateway_env(fake), extra_args=["--aws"]).start()
    try:
        # Given the default workspace with a two-message window and summary batch, and no per-turn
        # extraction: its runs (a debounce after each turn, in the same consolidate function) carry
        # their own turn's id, and on a loaded machine the first turn's would land among the lines
        # this test reads as the CompactionDue run's
        store = workspaces(gw)
        store.put(WorkspaceConfig(id="default", active_window=2, summary_batch=2, turn_extraction=False))
        # When a first message is answered, then a second, each its own request
        assert gw.post("first", event_id="evt-first").status_code == 202
        assert len(gw.wait_replies(1)) == 1
        assert gw.post("second", event_id="evt-second").status_code == 202
        assert len(gw.wait_replies(2)) == 2

        # Then the consolidate function runs the CompactionDue the second turn published
        def compacted() -> bool:
            return any(
                "consolidation requested" in line and "trigger=CompactionDue" in line
                for line in lines_of(gw.log_text(), "consolidate")
            )

        assert wait_until(compacted, timeout=REPLY_TIMEOUT_S), gw.log_text()[-4000:]
        text = gw.log_text()
        # And the id of the second turn's line is the one its request's webhook lines carry ...
        [turn] = turn_lines(text, "evt-second")
        found = CORRELATION.search(turn)
        assert found, turn
        traced = found.group(1)
        assert any(f"correlation_id={traced}" in line for line in lines_of(text, "webhook")), text
        # ... and the one every line of the consolidation run carries
        consolidation = lines_of(text, "consolidate")
        run = [line for line in consolidation if "correlation_id=" in line]
        assert run and all(f"correlation_id={traced}" in line for line in run), consolidation
        # While the first turn ran under another request's id
        [first] = turn_lines(text, "evt-first")
        assert f"correlation_id={traced}" not in first and "correlation_id=" in first
    finally:
        gw.stop()

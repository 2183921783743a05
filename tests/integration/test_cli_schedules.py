"""`sigil schedules list|cancel` on the embedded data dir and, with --stack, on a stack on moto
(its outputs naming the schedule group, the role and the turns queue, as infra/stack.py's do)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import boto3
import pytest
from typer.testing import CliRunner

from shared.adapters import build_backend
from shared.adapters.aws import clients
from shared.backend import Backend
from shared.cli import app
from shared.config import Settings
from shared.models import Recurrence, new_workspace
from shared.schedules import create
from tests.integration.test_schedules import WS, inbound
from tests.support import moto_aws
from tests.support.moto_stack import REGION, create_stack, outputs

runner = CliRunner()


def make_two(backend: Backend) -> list[str]:
    """alice's daily reminder and bob's weekly task; their ids."""
    if backend.workspaces.get(WS) is None:
        backend.workspaces.put(new_workspace(WS))
    made = []
    for user, every in (("alice", Recurrence(every="day")), ("bob", Recurrence(every="week", days=["fri"]))):
        schedule, _ = create(
            backend.schedules,
            new_workspace(WS),
            inbound("e1", "x").inbound,
            user_id=user,
            kind="message",
            text=f"{user}'s reminder",
            at=None,
            recurrence=every,
            tz_name="Europe/Paris",
            now=datetime.now(UTC),
        )
        made.append(schedule.id)
    return made


def list_and_cancel(args: list[str], alice: str, bob: str) -> None:
    listed = runner.invoke(app, ["schedules", "list", "-w", WS, *args])
    assert listed.exit_code == 0, listed.output
    assert alice in listed.output and bob in listed.output
    assert "every day at 09:00 (Europe/Paris)" in listed.output
    mine = runner.invoke(app, ["schedules", "list", "-w", WS, "--user", "bob", *args])
    assert bob in mine.output and alice not in mine.output
    cancelled = runner.invoke(app, ["schedules", "cancel", alice, "-w", WS, *args])
    assert cancelled.exit_code == 0 and f"cancelled {alice}" in cancelled.output
    again = runner.invoke(app, ["schedules", "cancel", alice, "-w", WS, *args])
    assert again.exit_code == 1 and f"no schedule {alice}" in again.output
    after = runner.invoke(app, ["schedules", "list", "-w", WS, *args])
    assert alice not in after.output and bob in after.output


def test_list_and_cancel_on_the_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "state"
    backend = build_backend(Settings(data_dir=data_dir))
    try:
        alice, bob = make_two(backend)
    finally:
        backend.close()
    list_and_cancel(["--data-dir", str(data_dir)], alice, bob)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[list[str]]:
    with moto_aws.persistent_mock(), moto_aws.moto_like_aws():
        stem = moto_aws.name_for(tmp_path)
        resources = moto_aws.provision(stem)
        group = f"{stem}-schedules"
        clients.scheduler(REGION).create_schedule_group(Name=group)
        queue_arn = boto3.client("sqs", region_name=REGION).get_queue_attributes(
            QueueUrl=resources.queue_url, AttributeNames=["QueueArn"]
        )["Attributes"]["QueueArn"]
        extra = {
            "ScheduleGroup": group,
            "ScheduleRoleArn": "arn:aws:iam::123456789012:role/scheduler",
            "TurnsQueueArn": queue_arn,
        }
        create_stack(f"sigil-{stem}", outputs(resources) | extra)
        yield ["--stack", f"sigil-{stem}", "--region", REGION]


def test_list_and_cancel_on_a_stack(stack: list[str], tmp_path: Path) -> None:
    from shared.cli._app import target_settings

    backend = build_backend(target_settings(tmp_path / "unused", stack[1], REGION))
    try:
        alice, bob = make_two(backend)
    finally:
        backend.close()
    list_and_cancel([*stack, "--data-dir", str(tmp_path / "unused")], alice, bob)

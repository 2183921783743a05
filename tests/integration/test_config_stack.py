"""`--stack NAME [--region R]`: the CLI finds a deployed stack from its CloudFormation outputs (a
real DescribeStacks, on moto) and administers it as it does the local data dir: pairing, memory
(its search index on osmem-server where a command needs it), secrets, dead letters, skills."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
import typer
from osmem_server import OsmemServer
from typer.testing import CliRunner

from shared.adapters.aws import clients
from shared.adapters.aws.dynamodb import DynamoIdentityStore, DynamoMemoryStore
from shared.cli import app
from shared.cli._app import target_settings
from shared.identity import resolve_sender
from shared.models import InboundMessage, LaneItem, Sender, Triple, WorkspaceConfig
from tests.support import moto_aws
from tests.support.moto_stack import REGION, MotoStack, create_stack, moto_stack, outputs

runner = CliRunner()
WS = "default"


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SIGIL_CONFIG", "SIGIL_DATA_DIR", "SIGIL_BACKEND", "SIGIL_CHANNEL_WORKSPACE", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[MotoStack]:
    with moto_stack(tmp_path) as deployed:
        yield deployed


def sigil(*args: str, stdin: str | None = None) -> tuple[int, str]:
    result = runner.invoke(app, list(args), input=stdin)
    return result.exit_code, result.output


def test_a_stack_resolves_to_the_settings_of_its_outputs(
    stack: MotoStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = target_settings(None, stack.name, REGION)
    res = stack.resources
    assert (settings.backend, settings.aws_region) == ("aws", REGION)
    assert (settings.sessions_table, settings.memory_table) == (res.sessions_table, res.memory_table)
    assert (settings.queue_url, settings.event_bus_name) == (res.queue_url, res.event_bus_name)
    assert (settings.opensearch_endpoint, settings.secrets_prefix) == ("search.invalid", res.secrets_prefix)
    # Without --region: the profile's (here AWS_DEFAULT_REGION), as the AWS CLI would.
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    assert target_settings(None, stack.name, None).sessions_table == res.sessions_table


def test_an_unknown_stack_a_foreign_stack_and_a_lone_region_are_clear_errors(stack: MotoStack) -> None:
    status, out = sigil("workspace", "list", "--stack", "nope", "--region", REGION)
    assert status == 1
    assert out.startswith(f"cannot read stack 'nope' in {REGION}: ")
    assert "does not exist" in out

    create_stack("not-sigil", {"Something": "else"})
    status, out = sigil("pairing", "list", "--stack", "not-sigil", "--region", REGION)
    assert (status, out) == (
        1,
        f"stack 'not-sigil' in {REGION} has no output EventBusName, MemoryTable, SearchEndpoint, "
        "SessionsTable, TurnsQueueUrl: is it a Sigil stack, deployed by this version (make deploy)?\n",
    )
    with pytest.raises(typer.BadParameter):
        target_settings(None, None, REGION)
    status, out = sigil("memory", "list", "--region", REGION)
    assert status == 2 and "--region goes with --stack" in out


def test_pairing_against_a_stack(stack: MotoStack) -> None:
    identities = DynamoIdentityStore(stack.resources.memory_table, region=REGION)
    resolve_sender(
        identities,
        WorkspaceConfig(id=WS, unknown_sender_policy="pairing"),
        InboundMessage(
            event_id="e1",
            channel="telegram",
            workspace_id=WS,
            session_id="telegram.42",
            sender=Sender(id="42", name="Ada"),
            chat_id="42",
            text="hello",
        ),
    )
    pending = identities.get(WS, "telegram", "42")
    assert pending is not None and pending.pairing_code is not None
    status, out = sigil("pairing", "list", *stack.args())
    assert status == 0
    assert out.startswith(f"{pending.pairing_code}  pending") and "telegram:42  as telegram:42  Ada" in out
    status, out = sigil("pairing", "approve", pending.pairing_code, "--user", "ada", *stack.args())
    assert (status, out) == (0, "approved telegram:42  as ada  Ada\n")
    approved = identities.get(WS, "telegram", "42")
    assert approved is not None and (approved.status, approved.user_id) == ("approved", "ada")


# A fact consolidation run "run-1" wrote, for the memory commands to list and roll back.
ADA_LIKES_TEA = Triple(
    id="k1",
    workspace_id=WS,
    subject="Ada",
    predicate="likes",
    object="tea",
    source="consolidation",
    run_id="run-1",
)


def test_memory_against_a_stack(stack: MotoStack) -> None:
    assert sigil("memory", "list", *stack.args()) == (0, f"no memories in workspace {WS!r}\n")
    DynamoMemoryStore(stack.resources.memory_table, region=REGION).put_triple(ADA_LIKES_TEA)
    status, out = sigil("memory", "list", *stack.args())
    assert status == 0
    assert out.startswith("fact k1  [active] relevance") and "Ada | likes | tea" in out
    status, out = sigil("memory", "rollback", "--run", "run-9", *stack.args())
    assert status == 1
    assert out.startswith(f"no consolidation run 'run-9' in workspace {WS!r}")
    # A run that exists, with the stack's search endpoint out of reach of this machine: said in one
    # line, no traceback
    result = runner.invoke(app, ["memory", "rollback", "--run", "run-1", *stack.args()])
    assert result.exit_code == 1 and result.exception is not None
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert "search.invalid" in result.stderr


def test_a_memory_rollback_against_a_stack_reaches_its_search_index(tmp_path: Path) -> None:
    # Given a stack whose SearchEndpoint output is an OpenSearch-compatible server over HTTP
    server = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
    try:
        with moto_aws.persistent_mock(), moto_aws.moto_like_aws():
            resources = moto_aws.provision(moto_aws.name_for(tmp_path))
            create_stack("sigil-search", {**outputs(resources), "SearchEndpoint": server.url})
            args = ["--stack", "sigil-search", "--region", REGION]
            DynamoMemoryStore(resources.memory_table, region=REGION).put_triple(ADA_LIKES_TEA)
            # When the run that wrote the fact is rolled back
            status, out = sigil("memory", "rollback", "--run", "run-1", *args)
            # Then the rollback reached the index at the stack's endpoint and the fact is gone from
            # the stack's table, as `sigil memory rollback` does in a data dir
            assert status == 0 and json.loads(out)["deleted_triples"] == 1, out
            assert sigil("memory", "list", "--status", "all", *args) == (
                0,
                f"no memories in workspace {WS!r}\n",
            )
    finally:
        server.close()


def test_secrets_against_a_stack(stack: MotoStack) -> None:
    token = "123456:" + "B" * 35
    status, out = sigil("secret", "set", "telegram/family/bot-token", *stack.args(), stdin=token)
    assert (status, out) == (0, "stored telegram/family/bot-token\n")
    stored = clients.secretsmanager(REGION).get_secret_value(
        SecretId=f"{stack.resources.secrets_prefix}telegram/family/bot-token"
    )
    assert stored["SecretString"] == token
    # A second set is a new version of the same secret.
    assert sigil("secret", "set", "telegram/family/bot-token", *stack.args(), stdin=token + "C")[0] == 0
    assert sigil("secret", "list", *stack.args()) == (0, "telegram/family/bot-token\n")
    status, out = sigil("secret", "get", "telegram/family/bot-token", *stack.args())
    assert (status, out) == (0, f"telegram/family/bot-token is set: ****BBBC ({len(token) + 1} characters)\n")
    assert token not in out
    status, out = sigil("secret", "delete", "telegram/family/bot-token", "--yes", *stack.args())
    assert status == 0 and out.startswith("deleted telegram/family/bot-token (scheduled")
    assert sigil("secret", "list", *stack.args()) == (0, "")
    assert sigil("secret", "get", "telegram/family/bot-token", *stack.args()) == (
        1,
        "telegram/family/bot-token is not set\n",
    )
    status, out = sigil("secret", "set", "telegram/Family/bot-token", *stack.args(), stdin="x")
    assert status == 2 and "unknown secret" in out


def test_dlq_against_a_stack_reads_its_dead_letters_queue_output(tmp_path: Path) -> None:
    with moto_stack(tmp_path) as deployed:
        sqs = boto3.client("sqs", region_name=REGION)
        dlq = sqs.create_queue(
            QueueName=f"{deployed.name}-dlq.fifo",
            Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "false"},
        )["QueueUrl"]
        item = LaneItem(
            inbound=InboundMessage(
                event_id="evt-dead",
                channel="web",
                workspace_id=WS,
                session_id="web.s1",
                sender=Sender(id="u1"),
                chat_id="s1",
                text="a message the lane gave up on",
            )
        )
        sqs.send_message(
            QueueUrl=dlq,
            MessageBody=item.model_dump_json(),
            MessageGroupId=item.inbound.lane_key,
            MessageDeduplicationId="evt-dead",
        )
        with_dlq = f"{deployed.name}-with-dlq"
        create_stack(with_dlq, {**outputs(deployed.resources), "DeadLettersQueueUrl": dlq})

        assert target_settings(None, with_dlq, REGION).dead_letter_queue_url == dlq
        status, out = sigil("dlq", "list", "--stack", with_dlq, "--region", REGION)
        assert status == 0, out
        assert f"{WS}/web.s1  event evt-dead" in out
        assert out.rstrip().endswith("1 dead letter(s)")


def test_skills_against_a_stack_use_its_skills_bucket_output(stack: MotoStack, tmp_path: Path) -> None:
    folder = tmp_path / "trip-notes"
    folder.mkdir()
    (folder / "SKILL.md").write_text(
        "---\nname: trip-notes\ndescription: Notes for trips.\n---\nPack light.\n"
    )

    status, out = sigil("skill", "install", str(folder), "-w", "family", *stack.args())
    assert status == 0, out
    status, out = sigil("skill", "list", "-w", "family", *stack.args())
    assert status == 0 and "trip-notes" in out
    # The bucket the stack's output names holds it, under the workspace's prefix.
    s3 = boto3.client("s3", region_name=REGION)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=stack.resources.skills_bucket)["Contents"]]
    assert "skills/family/trip-notes/SKILL.md" in keys


def test_what_aws_refuses_is_said_in_one_line_by_every_admin_command(tmp_path: Path) -> None:
    # Given a stack whose outputs name tables that are not there (deleted by hand, another account)
    (tmp_path / "sigil.yaml").write_text("workspaces:\n  family: {}\n")
    with moto_aws.persistent_mock(), moto_aws.moto_like_aws():
        resources = moto_aws.provision(moto_aws.name_for(tmp_path))
        gone = {"SessionsTable": "no-such-sessions", "MemoryTable": "no-such-memory"}
        create_stack("sigil-gone", {**outputs(resources), **gone})
        for command in (
            ["config", "diff"],
            ["config", "apply"],
            ["workspace", "list"],
            ["workspace", "show", "family"],
            ["pairing", "list"],
            ["identity", "list"],
            ["memory", "list"],
        ):
            result = runner.invoke(app, [*command, "--stack", "sigil-gone", "--region", REGION])
            # Then each says what AWS said, on one line, and exits 1: no traceback
            assert result.exit_code == 1, (command, result.output)
            [line] = result.stderr.strip().splitlines()
            assert line.startswith("AWS: An error occurred (ResourceNotFoundException)"), (command, line)


def test_an_erasure_against_a_stack_removes_the_users_files_from_its_media_bucket(tmp_path: Path) -> None:
    import hashlib

    from shared.adapters.aws.media import S3MediaStore
    from shared.media.ids import media_id
    from shared.models.media import MediaItem

    server = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
    try:
        with moto_aws.persistent_mock(), moto_aws.moto_like_aws():
            resources = moto_aws.provision(moto_aws.name_for(tmp_path))
            create_stack("sigil-media", {**outputs(resources), "SearchEndpoint": server.url})
            # Given files Ada and Bob attached, in the bucket the stack's MediaBucket output names
            store = S3MediaStore(resources.media_bucket, region=REGION)
            for user, file_id in (("ada", "f-ada"), ("bob", "f-bob")):
                data = f"%PDF-1.4 {user}".encode()
                store.put(
                    MediaItem(
                        id=media_id(WS, "telegram", file_id),
                        workspace_id=WS,
                        session_id=f"telegram.{user}",
                        user_id=user,
                        channel="telegram",
                        source_id=file_id,
                        kind="document",
                        mime_type="application/pdf",
                        size=len(data),
                        sha256=hashlib.sha256(data).hexdigest(),
                    ),
                    data,
                )
            # When Ada is erased with the admin command
            status, out = sigil(
                "memory", "erase", "--user", "ada", "--yes", "--stack", "sigil-media", "--region", REGION
            )
            # Then her file is gone from the bucket, bytes and record, and Bob's is kept
            assert status == 0 and json.loads(out)["media_deleted"] == 1, out
            s3 = boto3.client("s3", region_name=REGION)
            keys = [o["Key"] for o in s3.list_objects_v2(Bucket=resources.media_bucket).get("Contents", [])]
            bob = media_id(WS, "telegram", "f-bob")
            assert sorted(keys) == [f"media/{WS}/{bob}/bytes", f"media/{WS}/{bob}/record.json"]
    finally:
        server.close()

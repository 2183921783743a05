"""A workspace a command's target does not know is a usage error (exit 2) that lists the known
ones, on the embedded data dir and on a deployed stack (moto, found from its CloudFormation
outputs): a typo reads as an empty workspace no more (issue 15, item 6; docs/configuration.md).

Known: the default and channel workspaces, one sigil.yaml names, one with a stored configuration
or route, one holding a session (how a cloud workspace without stored configuration shows), one
holding what the command reads (its facts, identities, skills, dead letters, web secret).

The commands: memory, pairing, identity, skill, mcp, consolidate, workspace show, dlq list|redrive,
replay, web token|open (each on both targets), and send, replies, web-secret (the local data dir
only: they take no --stack)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import pytest
from typer.testing import CliRunner, Result

from shared.adapters import build_backend
from shared.adapters.embedded import EmbeddedLaneRunner, SqliteLanes
from shared.backend import Backend
from shared.channels import web
from shared.cli import app
from shared.cli._app import target_settings
from shared.config import Settings
from shared.models import (
    ChannelRoute,
    Identity,
    InboundMessage,
    LaneItem,
    Sender,
    Session,
    Triple,
    WorkspaceConfig,
    new_workspace,
)
from shared.tasks.roles import roles_for
from tests.support.moto_stack import REGION, moto_stack

runner = CliRunner()
KNOWN = "default, family, routed, team"


@dataclass
class Target:
    backend: Backend
    args: list[str]
    # What `sigil dlq` adds: on a stack, its dead-letter queue (the moto stack has no such output).
    dlq_args: list[str] = field(default_factory=list)

    def sigil(self, *args: str, input: str | None = None) -> Result:
        return runner.invoke(app, [*args, *self.args], input=input)

    def dlq(self, *args: str, input: str | None = None) -> Result:
        return self.sigil("dlq", *args, *self.dlq_args, input=input)


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "SIGIL_CONFIG",
        "SIGIL_DATA_DIR",
        "SIGIL_BACKEND",
        "SIGIL_DEFAULT_WORKSPACE",
        "SIGIL_CHANNEL_WORKSPACE",
        "SIGIL_SKILLS_BUCKET",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    # The file names one workspace nothing has stored yet.
    (tmp_path / "sigil.yaml").write_text("workspaces:\n  family: {}\n")


@pytest.fixture(params=["embedded", "stack"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    if request.param == "embedded":
        data_dir = tmp_path / "state"
        backend = build_backend(Settings(data_dir=data_dir))
        try:
            target = seeded(Target(backend, ["--data-dir", str(data_dir)]))
            dead_lettered_by_the_lanes(backend)
            yield target
        finally:
            backend.close()
        return
    with moto_stack(tmp_path) as stack:
        backend = build_backend(target_settings(None, stack.name, REGION))
        try:
            target = seeded(Target(backend, stack.args()))
            target.dlq_args = ["--dlq-url", dead_lettered_by_sqs(stack.name)]
            yield target
        finally:
            backend.close()


# dead: a workspace only a dead letter names (what `dlq` reads); keyed: one only a web secret names
# (what `web`, `send`, `replies` and `web-secret` read).
DEAD = LaneItem(
    inbound=InboundMessage(
        event_id="evt-dead",
        channel="web",
        workspace_id="dead",
        session_id="web.s1",
        sender=Sender(id="u1"),
        chat_id="s1",
        text="a message the lane gave up on",
    )
)


def dead_lettered_by_the_lanes(backend: Backend) -> None:
    """The embedded lanes bury DEAD: its one attempt fails."""
    lanes = backend.lanes
    assert isinstance(lanes, SqliteLanes)
    buried = threading.Event()

    def fails(item: LaneItem) -> None:
        raise RuntimeError("the model is down")

    with EmbeddedLaneRunner(lanes, fails, workers=1, max_attempts=1, on_dead_letter=lambda _: buried.set()):
        lanes.submit(DEAD)
        assert buried.wait(30)
    assert backend.dead_letters is not None and backend.dead_letters.list_entries("dead")


def dead_lettered_by_sqs(stack: str) -> str:
    """A FIFO dead-letter queue holding DEAD as SQS moves it there (its body and group)."""
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(
        QueueName=f"{stack}-dlq.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "false"}
    )["QueueUrl"]
    sqs.send_message(
        QueueUrl=url,
        MessageBody=DEAD.model_dump_json(),
        MessageGroupId=DEAD.inbound.lane_key,
        MessageDeduplicationId=DEAD.dedup_id,
    )
    return url


def seeded(target: Target) -> Target:
    """team: a stored configuration; routed: a stored route's; chat: a session only (a cloud
    workspace the agent served without stored configuration); facts, people, skills, keyed: only
    what `memory`, `pairing`/`identity`, `skill` and the web commands read."""
    b = target.backend
    b.workspaces.put(WorkspaceConfig(id="team"))
    b.routes.put(ChannelRoute(platform="telegram", name="bot", workspace="routed"))
    b.sessions.save(Session(id="web.s1", workspace_id="chat"), expected_version=0)
    b.memory.put_triple(
        Triple(id="f1", workspace_id="facts", subject="Ada", predicate="likes", object="tea", source="tool")
    )
    b.identities.create(
        Identity(workspace_id="people", channel="telegram", channel_user_id="42", user_id="telegram:42")
    )
    b.skills.put_skill(
        "skills", "notes", {"SKILL.md": b"---\nname: notes\ndescription: Notes.\n---\nBody.\n"}
    )
    # Both secret stores write (the port only reads): a secret set by hand, no configuration.
    b.secrets.set(web.secret_name("keyed"), "a-web-secret-not-real")
    return target


def refusal(result: Result) -> str:
    """A usage error's message, its box and wrapping undone; no traceback."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    text = " ".join(line.strip(" │╭╮╰╯─") for line in result.output.splitlines())
    return " ".join(text.split())


# Every command of the groups that take a workspace, as an admin would type each with a typo.
TYPO_COMMANDS = [
    ["memory", "list", "-w", "taem"],
    ["memory", "share", "f1", "-w", "taem"],
    ["memory", "unshare", "f1", "-w", "taem"],
    ["memory", "erase", "--user", "ada", "--yes", "-w", "taem"],
    ["memory", "rollback", "--run", "run-1", "-w", "taem"],
    ["pairing", "list", "-w", "taem"],
    ["pairing", "approve", "ABCDEFGH", "-w", "taem"],
    ["pairing", "block", "telegram:42", "-w", "taem"],
    ["identity", "list", "-w", "taem"],
    ["identity", "link", "slack:U1", "telegram:42", "-w", "taem"],
    ["identity", "unlink", "telegram:42", "-w", "taem"],
    ["skill", "list", "-w", "taem"],
    ["skill", "remove", "notes", "-w", "taem"],
    ["skill", "validate", "notes", "-w", "taem"],
    ["mcp", "list", "-w", "taem"],
    ["mcp", "test", "files", "-w", "taem"],
]


def test_every_command_refuses_an_unknown_workspace_listing_the_known_ones(target: Target) -> None:
    for command in TYPO_COMMANDS:
        message = refusal(target.sigil(*command))
        assert (
            f"Invalid value for '--workspace': no workspace 'taem'; the known ones are: {KNOWN}" in message
        ), (
            command,
            message,
        )
    # ... and a refused command changed nothing.
    assert [i.status for i in target.backend.identities.list_identities("people")] == ["pending"]
    assert target.backend.skills.list_skills("skills") == ["notes"]


def test_skill_copy_and_link_name_the_option_whose_workspace_is_unknown(target: Target) -> None:
    for verb in ("copy", "link"):
        message = refusal(target.sigil("skill", verb, "notes", "--from", "skils", "--to", "team"))
        assert f"Invalid value for '--from': no workspace 'skils'; the known ones are: {KNOWN}" in message
    assert target.backend.skills.list_skills("team") == []


def test_every_way_a_workspace_is_known_is_accepted(target: Target) -> None:
    # The listing ones: configured (file, store, route, default) for every group; by its data,
    # the group that reads that data.
    for ws in ("default", "family", "team", "routed", "chat"):
        for group in ("memory", "pairing", "identity", "skill"):
            result = target.sigil(group, "list", "-w", ws)
            assert result.exit_code == 0, (ws, group, result.output)
    assert target.sigil("memory", "list", "-w", "facts").stdout.startswith("fact f1")
    assert "telegram:42" in target.sigil("pairing", "list", "-w", "people").stdout
    assert "telegram:42" in target.sigil("identity", "list", "-w", "people").stdout
    assert target.sigil("skill", "list", "-w", "skills").stdout.startswith("notes  [auto]")
    # Another group's data does not make a workspace known to this one.
    assert refusal(target.sigil("skill", "list", "-w", "facts"))
    # A skill can be installed into a workspace nothing knows yet: that is how it gets one.
    copied = target.sigil("skill", "copy", "notes", "--from", "skills", "--to", "fresh")
    assert copied.exit_code == 0, copied.output
    assert target.sigil("skill", "list", "-w", "fresh").exit_code == 0


def test_the_channel_workspace_is_known_to_pairing(target: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    # Platform messages land in SIGIL_CHANNEL_WORKSPACE with no configuration at all.
    monkeypatch.setenv("SIGIL_CHANNEL_WORKSPACE", "inbox")
    result = target.sigil("pairing", "list")
    assert (result.exit_code, result.output) == (0, "no pending senders in workspace 'inbox'\n")


def test_consolidate_refuses_an_unknown_workspace_the_same_way(tmp_path: Path) -> None:
    data_dir = tmp_path / "state"
    result = runner.invoke(app, ["consolidate", "-w", "taem", "--data-dir", str(data_dir)])
    assert "Invalid value for '--workspace': no workspace 'taem'; the known ones are: default, family" in (
        refusal(result)
    )


def test_workspace_show_refuses_an_unknown_one_and_shows_a_known_one_without_stored_config(
    target: Target,
) -> None:
    message = refusal(target.sigil("workspace", "show", "taem"))
    assert f"Invalid value for 'WORKSPACE': no workspace 'taem'; the known ones are: {KNOWN}" in message
    # chat has sessions and no stored configuration: its turns run on the defaults, shown as such
    shown = target.sigil("workspace", "show", "chat", "-o", "json")
    assert shown.exit_code == 0, shown.output
    defaults = new_workspace("chat")
    expected = defaults.model_dump(mode="json")
    # Delegation as tasks see it: every built-in role, and no model for any class (none is set).
    expected["delegation"]["roles"] = {n: r.model_dump(mode="json") for n, r in roles_for(defaults).items()}
    expected["delegation"]["models"] = {"frontier": None, "fast": None, "cheap": None}
    assert json.loads(shown.stdout) == expected
    assert "workspace 'chat' has no stored configuration" in shown.stderr
    stored = target.sigil("workspace", "show", "team", "-o", "json")
    assert json.loads(stored.stdout)["id"] == "team" and stored.stderr == ""


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def unknown(result: Result) -> bool:
    return f"Invalid value for '--workspace': no workspace 'taem'; the known ones are: {KNOWN}" in (
        refusal(result)
    )


def test_dlq_refuses_an_unknown_workspace_and_knows_one_holding_dead_letters(target: Target) -> None:
    assert unknown(target.dlq("list", "-w", "taem"))
    assert unknown(target.dlq("redrive", "--session", "web.s1", "-w", "taem", "--yes"))
    # ... the refused redrive left the dead letter where it was
    listed = target.dlq("list", "-w", "dead")
    assert listed.exit_code == 0, listed.output
    assert "dead/web.s1  event evt-dead" in listed.stdout and listed.stdout.endswith("1 dead letter(s)\n")
    # a known workspace without dead letters has none; -w with dead-letter ids names no workspace
    assert target.dlq("list", "-w", "chat").stdout == "no dead letters\n"
    assert target.dlq("redrive", "no-such-id", "-w", "taem", "--yes").stdout.startswith("not found")
    # dead letters make a workspace known to `dlq` only
    assert refusal(target.sigil("memory", "list", "-w", "dead"))
    assert refusal(target.dlq("list", "-w", "facts"))


def test_replay_refuses_an_unknown_workspace(target: Target) -> None:
    assert unknown(target.sigil("replay", "-w", "taem"))
    # A known one gets past the check, to what replay itself says of it.
    result = target.sigil("replay", "-w", "team")
    assert result.exit_code == 2
    assert "nothing recorded to replay in workspace 'team'" in result.output


def test_web_token_and_open_refuse_an_unknown_workspace(target: Target) -> None:
    for command in (["token"], ["open", "--url", "http://127.0.0.1:8787"]):
        message = refusal(target.sigil("web", *command, "-u", "alice", "-w", "taem"))
        assert f"no workspace 'taem'; the known ones are: {KNOWN}" in message, (command, message)
        # The way to make one is named where `web-secret --create` can: the local data dir.
        assert ("create it with `sigil web-secret -w taem --create`" in message) == (
            "--stack" not in target.args
        )
    # A workspace holding a web secret is known to them; a known one without a secret says so.
    assert target.sigil("web", "token", "-u", "alice", "-w", "keyed").exit_code == 0
    result = target.sigil("web", "token", "-u", "alice", "-w", "team")
    assert result.exit_code == 2 and "no web signing secret for workspace 'team'" in result.output


def test_the_local_web_client_commands_refuse_an_unknown_workspace_before_asking_the_gateway(
    tmp_path: Path,
) -> None:
    # send and replies sign with the secret this data dir holds: the check reads the same data
    # dir, client-side, so a typo is named as one (no gateway needs to be running to say it).
    data_dir = tmp_path / "state"
    backend = build_backend(Settings(data_dir=data_dir))
    try:
        seeded(Target(backend, []))
    finally:
        backend.close()
    create = "create it with `sigil web-secret -w taem --create`"
    gateway = f"http://127.0.0.1:{closed_port()}"
    for command in (["send", "hi", "-w", "taem"], ["replies", "-w", "taem"], ["web-secret", "-w", "taem"]):
        message = refusal(runner.invoke(app, [*command, "--data-dir", str(data_dir)]))
        assert f"no workspace 'taem'; the known ones are: {KNOWN}; {create}" in message, (command, message)
    # keyed is known by its secret: send gets past the check to the missing gateway.
    sent = runner.invoke(app, ["send", "hi", "-w", "keyed", "--url", gateway, "--data-dir", str(data_dir)])
    assert (sent.exit_code, sent.output) == (1, f"no gateway at {gateway[7:]} (start it with make dev)\n")
    # web-secret --create makes a new workspace: any valid id is taken, then known.
    made = runner.invoke(app, ["web-secret", "-w", "fresh", "--create", "--data-dir", str(data_dir)])
    assert made.exit_code == 0, made.output
    asked = runner.invoke(app, ["replies", "-w", "fresh", "--url", gateway, "--data-dir", str(data_dir)])
    assert (asked.exit_code, asked.output) == (1, f"no gateway at {gateway[7:]} (start it with make dev)\n")

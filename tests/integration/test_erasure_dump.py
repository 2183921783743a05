"""After `sigil memory erase` of a person who spoke in a group, a dump of every store and index
holds none of their messages, names, ids or display names: on the embedded backend (every table
of every SQLite file of the data dir) and on the cloud backend (a scan of every DynamoDB table on
moto, and every document of every index on osmem-server, which serves the OpenSearch adapter).

The workspace is filled the way a deployment fills it: real turns (shared.agent.turn.run_turn,
a scripted model) from three people in direct conversations and one group, a window small enough
that their messages roll into Tier 1 and the index; her two identities linked with `sigil
identity link`; and a summary and facts of the group as consolidation writes them, scoped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import pytest
from osmem_server import OsmemServer
from typer.testing import CliRunner

from shared.adapters.embedded import build_embedded_backend
from shared.agent.turn import TurnDeps, run_turn
from shared.backend import Backend
from shared.channels.senders import OutboxSender, SenderRegistry
from shared.cli import app
from shared.config import Settings
from shared.memory.facts import fact_index_doc
from shared.memory.writer import RECENT_TAILS, MemoryWriter
from shared.models import (
    WORKSPACE_WIDE,
    InboundMessage,
    IndexDoc,
    LaneItem,
    MemoryScope,
    Sender,
    Summary,
    Triple,
    UserMessage,
    WorkspaceConfig,
)
from shared.providers.base import Provider
from shared.providers.function import FunctionProvider
from tests.contract.builders import at
from tests.support import moto_aws

WS = "default"
runner = CliRunner()

# Her: a Sigil user with a Telegram and a Slack identity, and a display name found nowhere else.
HER_TG, HER_SLACK, HER_USER = "7350011", "U0ZQ7350", "zephyrine"
HER_NAME = "Zephyrine Quandt"
HER_WORDS = [
    "my locker code is 4417 behind the xylophone shop",
    "I keep the spare key under the marigold planter",
    "please remember my niece Ottoline starts at Brambleworth",
    "the quokka sanctuary trip is booked for Thursday",
    "my blood type is AB negative, in case anyone asks",
]
# Everything that names her: after the erasure, none of it is anywhere (case-insensitive).
NAMING_HER = [
    HER_TG,
    HER_SLACK,
    HER_USER,
    "Zephyrine",
    "Quandt",
    "xylophone",
    "marigold",
    "Ottoline",
    "Brambleworth",
    "quokka",
    "AB negative",
]
BOB_WORDS = "bob likes the harbour ferry on sundays"
GROUP = "C0GROUP1"


def inbound(
    channel: str, sender: str, name: str, chat: str, text: str, n: int, *, group: bool
) -> InboundMessage:
    return InboundMessage(
        event_id=f"ev-{n}",
        channel=channel,  # type: ignore[arg-type]
        workspace_id=WS,
        session_id=f"{channel}.{chat}",
        sender=Sender(id=sender, name=name),
        chat_id=chat,
        chat_type="group" if group else "dm",
        text=text,
    )


@dataclass
class Deployment:
    backend: Backend
    settings: Settings
    data_dir: Path
    dump: Any  # () -> str: every store and index, as text
    index_lines: str  # how the dump's lines of the memory index's documents begin

    def sigil(self, *args: str) -> tuple[int, str]:
        result = runner.invoke(app, [*args, "--data-dir", str(self.data_dir)])
        return result.exit_code, result.output


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SIGIL_DATA_DIR", "SIGIL_CHANNEL_WORKSPACE", "SIGIL_DEFAULT_WORKSPACE", "SIGIL_BACKEND"):
        monkeypatch.delenv(name, raising=False)


def _dump_sqlite(data_dir: Path) -> str:
    """Every row of every table of every SQLite file in the data dir (virtual tables through
    their shadow tables, which hold what they store). Read with apsw, the SQLite the adapters
    use: a second SQLite library in one process would break the open connections' locks."""
    out: list[str] = []
    for path in sorted(data_dir.glob("*.db")):
        conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            for table in tables:
                try:
                    rows = list(conn.execute(f'SELECT * FROM "{table}"'))
                except apsw.SQLError:
                    # A virtual table of a module not loaded here (sqlite-vec): its shadow tables are dumped.
                    continue
                out += [f"{path.name}.{table}: {row!r}" for row in rows]
        finally:
            conn.close()
    return "\n".join(out)


@pytest.fixture(params=["embedded", "aws"])
def deployment(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Deployment]:
    data_dir = tmp_path / "state"
    if request.param == "embedded":
        settings = Settings(data_dir=data_dir, embedding_model="none")
        monkeypatch.setenv("SIGIL_EMBEDDING_MODEL", "none")
        backend = build_embedded_backend(settings)
        try:
            yield Deployment(
                backend, settings, data_dir, lambda: _dump_sqlite(data_dir), "index.db.index_docs:"
            )
        finally:
            backend.close()
        return
    server = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
    request.addfinalizer(server.close)
    with moto_aws.persistent_mock(), moto_aws.moto_like_aws():
        resources = moto_aws.provision(moto_aws.name_for(tmp_path))
        settings = resources.settings(embedding_model="none", opensearch_endpoint=server.url)
        env = {
            "SIGIL_BACKEND": "aws",
            "SIGIL_SESSIONS_TABLE": resources.sessions_table,
            "SIGIL_MEMORY_TABLE": resources.memory_table,
            "SIGIL_QUEUE_URL": resources.queue_url,
            "SIGIL_EVENT_BUS_NAME": resources.event_bus_name,
            "SIGIL_OPENSEARCH_ENDPOINT": server.url,
            "SIGIL_SECRETS_PREFIX": resources.secrets_prefix,
            "SIGIL_EMBEDDING_MODEL": "none",
            "AWS_REGION": moto_aws.REGION,
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        from opensearchpy import OpenSearch

        from shared.adapters.aws import build_aws_backend, clients

        search = OpenSearch(server.url)

        def dump() -> str:
            ddb = clients.dynamodb(moto_aws.REGION)
            out: list[str] = []
            names = [n for page in ddb.get_paginator("list_tables").paginate() for n in page["TableNames"]]
            for table in names:
                if table not in (resources.sessions_table, resources.memory_table):
                    continue  # another test's tables in the shared moto
                for page in ddb.get_paginator("scan").paginate(TableName=table):
                    out += [f"{table}: {json.dumps(item, default=str)}" for item in page["Items"]]
            search.indices.refresh(index="_all")
            for index in search.indices.get(index="*"):
                hits = search.search(index=index, body={"query": {"match_all": {}}, "size": 10_000})
                out += [f"opensearch {index}: {json.dumps(h['_source'])}" for h in hits["hits"]["hits"]]
            return "\n".join(out)

        backend = build_aws_backend(settings)
        try:
            yield Deployment(backend, settings, data_dir, dump, "opensearch ")
        finally:
            backend.close()


def _talk(d: Deployment) -> None:
    d.backend.workspaces.put(WorkspaceConfig(id=WS, active_window=4, unknown_sender_policy="allow"))
    model = FunctionProvider(lambda request: "Noted, thank you.")

    def provider(ref: str | None) -> tuple[Provider, str]:
        return model, "test-model"

    sender = OutboxSender(d.backend.outbox)
    deps = TurnDeps(
        backend=d.backend,
        settings=d.settings,
        senders=SenderRegistry({"telegram": sender, "slack": sender}),
        provider_factory=provider,
    )
    n = 0

    def say(channel: str, who: str, name: str, chat: str, text: str, *, group: bool = False) -> None:
        nonlocal n
        n += 1
        record = run_turn(deps, LaneItem(inbound=inbound(channel, who, name, chat, text, n, group=group)))
        assert record.outcome == "ok", record

    # Bob opens the group (so it is not hers), then all three talk in it.
    say("slack", "U0BOB", "Bob", GROUP, "morning all, planning the offsite", group=True)
    say("slack", HER_SLACK, HER_NAME, GROUP, HER_WORDS[0], group=True)
    say("slack", "U0CAROL", "Carol", GROUP, "carol here, the offsite needs a venue", group=True)
    say("slack", "U0BOB", "Bob", GROUP, "Zephyrine, can you drive to the offsite?", group=True)
    say("slack", HER_SLACK, HER_NAME, GROUP, HER_WORDS[1], group=True)
    say("slack", "U0CAROL", "Carol", GROUP, "ok see you all at the venue", group=True)
    # Her direct conversation on Telegram, Bob's on Telegram.
    for i, words in enumerate(HER_WORDS[2:]):
        say("telegram", HER_TG, HER_NAME, HER_TG, words)
        say("telegram", "5550001", "Bob", "5550001", f"{BOB_WORDS} {i}")
    say("slack", HER_SLACK, HER_NAME, GROUP, "one more from me about the quokka photos", group=True)
    say("slack", "U0CAROL", "Carol", GROUP, "the venue has parking for everyone", group=True)


def _consolidated(d: Deployment) -> None:
    """What consolidation writes of the group: a summary that names her, facts about and from her,
    and one of Bob's about her, scoped as the writers scope them, with their index documents."""
    group = f"slack.{GROUP}"
    ours = MemoryScope(
        conversation=group, users=tuple(sorted(("slack:U0BOB", "slack:U0CAROL", HER_USER))), group=True
    )
    summary = Summary(
        id="sum-group-1",
        workspace_id=WS,
        session_id=group,
        text=f"The group planned the offsite; {HER_NAME} shared her locker code and Bob asked her to drive.",
        first_seq=0,
        last_seq=7,
        start_at=at(0),
        end_at=at(7),
        scope=ours,
    )
    d.backend.memory.put_summary(summary)
    her_message = next(
        r.id
        for r in d.backend.memory.get_messages(WS, group, limit=100)
        if isinstance(r.message, UserMessage) and r.message.sender_id == HER_SLACK
    )
    facts = [
        Triple(
            id="f-about-her",
            workspace_id=WS,
            subject=HER_NAME,
            predicate="locker",
            object="4417",
            session_id=group,
            scope=ours,
        ),
        Triple(
            id="f-from-her",
            workspace_id=WS,
            subject="the spare key",
            predicate="is under",
            object="the marigold planter",
            session_id=group,
            message_ids=[her_message],
            scope=ours,
        ),
        Triple(
            id="f-bobs",
            workspace_id=WS,
            subject="Bob",
            predicate="carpools with",
            object="Zephyrine",
            session_id=group,
            user_id="slack:U0BOB",
            scope=ours,
        ),
        Triple(
            id="f-offsite",
            workspace_id=WS,
            subject="the offsite",
            predicate="needs",
            object="a venue",
            session_id=group,
            scope=ours,
        ),
    ]
    d.backend.memory.put_triples(WS, facts)
    docs = [fact_index_doc(t).model_copy(update={"scope": t.scope}) for t in facts]
    docs.append(
        IndexDoc(
            id=summary.id,
            workspace_id=WS,
            session_id=group,
            tier="summary",
            text=summary.text,
            created_at=summary.end_at,
            scope=summary.scope,
        )
    )
    MemoryWriter(d.backend.index, None).write_docs(WS, docs)


def test_a_dump_of_every_store_holds_nothing_of_her_after_the_erasure(deployment: Deployment) -> None:
    d = deployment
    _talk(d)
    # Her two identities become one Sigil user, after she wrote under the derived ones
    assert d.sigil("identity", "link", f"telegram:{HER_TG}", HER_USER)[0] == 0
    assert d.sigil("identity", "link", f"slack:{HER_SLACK}", f"telegram:{HER_TG}")[0] == 0
    _consolidated(d)

    before = d.dump().casefold()
    # The dump sees her everywhere she is: Tier 1 and the index hold her words, her names and ids
    for needle in NAMING_HER:
        assert needle.casefold() in before, needle
    assert d.backend.memory.count_messages(WS, f"slack.{GROUP}") > 0
    assert d.backend.memory.count_messages(WS, f"telegram.{HER_TG}") > 0
    assert before.count("offsite") > 3 and "harbour ferry" in before

    status, out = d.sigil("memory", "erase", "--user", HER_USER, "--yes")
    assert status == 0, out
    report = json.loads(out)
    assert report["sessions_deleted"] == 1 and report["windows_redacted"] == 1
    assert report["identities_deleted"] == 2 and report["messages_deleted"] > 0
    assert report["triples_deleted"] == 2 and report["triples_scrubbed"] == 2
    assert report["summaries_scrubbed"] == 1 and report["messages_scrubbed"] >= 1

    after = d.dump().casefold()
    left = {needle: after.count(needle.casefold()) for needle in NAMING_HER if needle.casefold() in after}
    assert left == {}, [line for line in after.splitlines() if any(n.casefold() in line for n in left)][:5]
    for words in HER_WORDS:
        assert words.casefold() not in after
    # ...and the cache of roll-out neighbours in this process holds nothing of hers either
    cached = " ".join(r.text for tail in RECENT_TAILS._tails.values() for r in tail).casefold()
    assert not any(needle.casefold() in cached for needle in NAMING_HER)

    # The others' conversations are all still there, in the stores and in the index
    indexed = [line for line in after.splitlines() if line.startswith(d.index_lines)]
    assert any("harbour ferry" in line for line in indexed)
    assert any("carol here, the offsite needs a venue" in line for line in indexed)
    assert "harbour ferry" in after and "the venue has parking for everyone" in after
    assert "carol here, the offsite needs a venue" in after
    assert "[erased], can you drive to the offsite?" in after
    facts = {t.id: t for t in d.backend.memory.list_triples(WS, scope=WORKSPACE_WIDE)}
    assert set(facts) == {"f-bobs", "f-offsite"}
    assert facts["f-bobs"].object == "[erased]" and facts["f-bobs"].scope is not None
    assert HER_USER not in facts["f-bobs"].scope.users and "slack:U0BOB" in facts["f-bobs"].scope.users

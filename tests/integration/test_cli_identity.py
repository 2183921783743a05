"""`sigil identity link | list | unlink` and `sigil memory share | unshare` through typer's
CliRunner, on both backends: the embedded data dir, and the AWS adapters on moto (the CLI builds
its backend from SIGIL_BACKEND=aws and the tables' names, as an admin's shell would)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from osmem_server import OsmemServer
from typer.testing import CliRunner

from shared.adapters.embedded import build_embedded_backend
from shared.backend import Backend
from shared.cli import app
from shared.config import Settings
from shared.identity import CachedIdentities, derived_user_id, resolve_sender
from shared.memory.facts import fact_index_doc
from shared.models import (
    WORKSPACE_WIDE,
    InboundMessage,
    IndexQuery,
    MemoryScope,
    RecallScope,
    Sender,
    Triple,
    WorkspaceConfig,
)
from shared.ports import IdentityStore
from tests.support import moto_aws

WS = "default"
runner = CliRunner()


@dataclass
class Admin:
    """The state an admin's `sigil` reaches, and a backend on the same state to check it with."""

    backend: Backend
    identities: IdentityStore  # uncached: what the CLI wrote, read back at once
    data_dir: Path

    def sigil(self, *args: str) -> tuple[int, str, str]:
        result = runner.invoke(app, [*args, "--data-dir", str(self.data_dir)])
        return result.exit_code, result.stdout, result.stderr


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SIGIL_DATA_DIR", "SIGIL_CHANNEL_WORKSPACE", "SIGIL_DEFAULT_WORKSPACE", "SIGIL_BACKEND"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(params=["embedded", "aws"])
def admin(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Admin]:
    data_dir = tmp_path / "state"
    if request.param == "embedded":
        backend = build_embedded_backend(Settings(data_dir=data_dir))
        try:
            yield Admin(backend, backend.identities, data_dir)
        finally:
            backend.close()
        return
    # The OpenSearch adapter over real HTTP, against osmem-server (BM25 and filters; no k-NN,
    # and no vectors are written here: no embedding model).
    server = OsmemServer.start(addr="127.0.0.1:0", japanese=False)
    request.addfinalizer(server.close)
    with moto_aws.persistent_mock(), moto_aws.moto_like_aws():
        resources = moto_aws.provision(moto_aws.name_for(tmp_path))
        settings = resources.settings(embedding_model="none", opensearch_endpoint=server.url)
        for field, env in (
            ("sessions_table", "SIGIL_SESSIONS_TABLE"),
            ("memory_table", "SIGIL_MEMORY_TABLE"),
            ("queue_url", "SIGIL_QUEUE_URL"),
            ("event_bus_name", "SIGIL_EVENT_BUS_NAME"),
            ("opensearch_endpoint", "SIGIL_OPENSEARCH_ENDPOINT"),
            ("secrets_prefix", "SIGIL_SECRETS_PREFIX"),
        ):
            monkeypatch.setenv(env, str(getattr(settings, field)))
        monkeypatch.setenv("SIGIL_BACKEND", "aws")
        monkeypatch.setenv("SIGIL_EMBEDDING_MODEL", "none")
        monkeypatch.setenv("AWS_REGION", moto_aws.REGION)
        from shared.adapters.aws import build_aws_backend

        backend = build_aws_backend(settings)
        cached = backend.identities
        assert isinstance(cached, CachedIdentities)
        try:
            yield Admin(backend, cached.store, data_dir)
        finally:
            backend.close()


def first_contact(admin: Admin, channel: str, sender: str, name: str) -> None:
    """A sender writes for the first time under the allow policy: stored approved, derived id."""
    inbound = InboundMessage(
        event_id=f"e-{sender}",
        channel=channel,  # type: ignore[arg-type]
        workspace_id=WS,
        session_id=f"{channel}.{sender}",
        sender=Sender(id=sender, name=name),
        chat_id=sender,
        text="hello",
    )
    resolve_sender(admin.identities, WorkspaceConfig(id=WS, unknown_sender_policy="allow"), inbound)


def test_link_list_and_unlink_one_person_on_two_channels(admin: Admin) -> None:
    first_contact(admin, "telegram", "7001", "Ada")
    first_contact(admin, "slack", "U0ADA", "Ada L.")

    status, out, _ = admin.sigil("identity", "link", "telegram:7001", "ada")
    assert (status, out.strip()) == (0, "linked telegram:7001  as ada  Ada  (approved)")
    # The second by naming the first identity: it joins whoever that is
    status, out, _ = admin.sigil("identity", "link", "slack:U0ADA", "telegram:7001")
    assert (status, out.strip()) == (0, "linked slack:U0ADA  as ada  Ada L.  (approved)")

    status, out, _ = admin.sigil("identity", "list")
    assert status == 0
    assert out.splitlines() == [
        "ada",
        "    slack:U0ADA  approved  Ada L.",
        "    telegram:7001  approved  Ada",
    ]
    assert {(i.channel, i.user_id) for i in admin.identities.list_identities(WS)} == {
        ("slack", "ada"),
        ("telegram", "ada"),
    }

    status, out, _ = admin.sigil("identity", "unlink", "slack:U0ADA")
    assert (status, out.strip()) == (0, "unlinked slack:U0ADA  as slack:U0ADA  Ada L.")
    restored = admin.identities.get(WS, "slack", "U0ADA")
    assert restored is not None and restored.user_id == derived_user_id("slack", "U0ADA")
    assert restored.status == "approved"
    status, out, _ = admin.sigil("identity", "list")
    assert out.splitlines() == [
        "ada",
        "    telegram:7001  approved  Ada",
        "slack:U0ADA",
        "    slack:U0ADA  approved  Ada L.",
    ]
    status, out, _ = admin.sigil("identity", "list", "--user", "ada")
    assert out.splitlines() == ["ada", "    telegram:7001  approved  Ada"]


def test_an_identity_not_seen_yet_is_stored_approved_and_a_status_is_kept(admin: Admin) -> None:
    status, out, _ = admin.sigil("identity", "link", "discord:99", "bea")
    assert (status, out.strip()) == (0, "linked discord:99  as bea  (approved)")
    stored = admin.identities.get(WS, "discord", "99")
    assert stored is not None and (stored.status, stored.user_id) == ("approved", "bea")
    assert stored.approved_at is not None

    # Blocked stays blocked: linking names a person, it never admits one
    assert admin.sigil("pairing", "block", "telegram:66")[0] == 0
    status, out, _ = admin.sigil("identity", "link", "telegram:66", "bea")
    assert (status, out.strip()) == (0, "linked telegram:66  as bea  (blocked)")


def test_bad_input_and_unknown_identities_are_clear_errors(admin: Admin) -> None:
    first_contact(admin, "telegram", "7001", "Ada")
    cases = [
        (("identity", "link", "7001", "ada"), "'7001' is not CHANNEL:USER"),
        (("identity", "link", "fax:1", "ada"), "'fax:1' is not CHANNEL:USER"),
        (("identity", "link", "telegram:", "ada"), "'telegram:' is not CHANNEL:USER"),
        (
            ("identity", "link", "slack:U1", "telegram:404"),
            "no identity 'telegram:404' in workspace 'default'",
        ),
        (("identity", "link", "slack:U1", " "), "the Sigil user to link to is empty"),
        (("identity", "link", "slack:U1", "x" * 301), "not a valid identity: user_id"),
        (("identity", "unlink", "slack:U404"), "no identity 'slack:U404' in workspace 'default'"),
        (("identity", "unlink", "nonsense"), "'nonsense' is not CHANNEL:USER"),
    ]
    for args, message in cases:
        status, out, err = admin.sigil(*args)
        assert (status, out) == (1, ""), args
        assert message in err, (args, err)
    # Nothing was written by any of them
    assert [(i.channel, i.channel_user_id, i.user_id) for i in admin.identities.list_identities(WS)] == [
        ("telegram", "7001", "telegram:7001")
    ]
    status, _, err = admin.sigil("identity", "list", "--workspace", "empty")
    assert status == 2 and "no workspace 'empty'; the known ones are: default" in " ".join(
        err.replace("│", " ").split()
    )
    status, _, err = admin.sigil("identity", "list", "--user", "nobody")
    assert status == 0 and "no identities in workspace 'default' for user 'nobody'" in err


def _fact(triple_id: str, obj: str, scope: MemoryScope | None) -> Triple:
    return Triple(
        id=triple_id,
        workspace_id=WS,
        subject="the office",
        predicate="wifi password is",
        object=obj,
        session_id="telegram.7001",
        user_id="ada",
        scope=scope,
    )


def test_share_and_unshare_a_fact_in_the_store_and_the_index(admin: Admin) -> None:
    private = MemoryScope(conversation="telegram.7001", users=("ada",))
    facts = [
        _fact("f_a", "aardvark", private),
        _fact("f_b", "bumblebee", private),
        _fact("f_c", "cormorant", None),
    ]
    admin.backend.memory.put_triples(WS, facts)
    admin.backend.index.upsert(WS, [fact_index_doc(t).model_copy(update={"scope": t.scope}) for t in facts])
    # Someone else's direct conversation under the personal policy: shared facts only
    bea = RecallScope(session_id="slack.U0BEA", users=("bea",), shared=True)

    def bea_sees() -> tuple[set[str], set[str]]:
        store = {t.id for t in admin.backend.memory.triples_by_subject(WS, "the office", scope=bea)}
        hits = admin.backend.index.search(WS, IndexQuery(text="wifi password", k=10, scope=bea)).text_hits
        return store, {h.doc.id for h in hits}

    assert bea_sees() == (set(), set())
    status, out, _ = admin.sigil("memory", "share", "f_b")
    assert (status, out.strip()) == (0, "shared fact f_b  the office | wifi password is | bumblebee")
    assert bea_sees() == ({"f_b"}, {"f_b"})
    stored = {t.id: t for t in admin.backend.memory.list_triples(WS, scope=WORKSPACE_WIDE)}
    assert stored["f_b"].scope == private.model_copy(update={"shared": True})
    assert stored["f_a"].scope == private  # its neighbours by id are untouched

    # A fact from before scopes gets the backfill's scope, then the flag
    assert admin.sigil("memory", "share", "f_c")[0] == 0
    assert bea_sees() == ({"f_b", "f_c"}, {"f_b", "f_c"})
    after = {t.id: t for t in admin.backend.memory.list_triples(WS, scope=WORKSPACE_WIDE)}
    assert after["f_c"].scope == MemoryScope(conversation="telegram.7001", users=("ada",), shared=True)

    status, out, _ = admin.sigil("memory", "unshare", "f_b")
    assert (status, out.strip()) == (0, "unshared fact f_b  the office | wifi password is | bumblebee")
    assert bea_sees() == ({"f_c"}, {"f_c"})

    status, out, err = admin.sigil("memory", "share", "f_zz")
    assert (status, out) == (1, "") and "no fact 'f_zz' in workspace 'default'" in err

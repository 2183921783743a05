"""WorkspaceStore, AuditLog and SecretStore contracts."""

from __future__ import annotations

from shared.clock import new_id
from shared.models import AuditRecord, WorkspaceConfig

from .builders import at
from .factories import ContractBackend


def test_workspace_config_round_trip_and_update(contract: ContractBackend, ws_a: str) -> None:
    store = contract.backend.workspaces
    assert store.get(ws_a) is None

    config = WorkspaceConfig(
        id=ws_a,
        name="Home lab",
        system_prompt="You are terse.\nNever guess.",
        model="openai/gpt-4.1-mini",
        active_window=30,
        tools_allow=["memory_search"],
        tools_deny=["shell"],
        pii_redaction=True,
        unknown_sender_policy="allow_list",
        allowed_senders=["telegram:42"],
    )
    store.put(config)
    assert store.get(ws_a) == config

    renamed = config.model_copy(update={"name": "Lab", "tools_allow": None})
    store.put(renamed)
    assert store.get(ws_a) == renamed


def test_list_workspaces(contract: ContractBackend, ws_a: str, ws_b: str) -> None:
    store = contract.backend.workspaces
    store.put(WorkspaceConfig(id=ws_a, name="a"))
    store.put(WorkspaceConfig(id=ws_b, name="b"))
    store.put(WorkspaceConfig(id=ws_a, name="a2"))

    listed = {c.id: c.name for c in store.list_workspaces()}
    assert listed[ws_a] == "a2"
    assert listed[ws_b] == "b"
    assert store.get(ws_b) == WorkspaceConfig(id=ws_b, name="b")


def _audit(workspace_id: str, minute: float, **kw: object) -> AuditRecord:
    return AuditRecord.model_validate(
        {
            "id": new_id("a_"),
            "workspace_id": workspace_id,
            "session_id": "s1",
            "user_id": "u1",
            "event_id": "e1",
            "turn_id": f"turn-{minute}",
            "model": "openai/gpt-4.1-mini",
            "tools_used": ["memory_search"],
            "tokens_in": 120,
            "tokens_out": 40,
            "duration_ms": 812.5,
            "cost_usd": 0.00042,
            "outcome": "ok",
            "created_at": at(minute),
            **kw,
        }
    )


def test_audit_lists_newest_first(contract: ContractBackend, ws_a: str) -> None:
    audit = contract.backend.audit
    records = [_audit(ws_a, m) for m in (5, 1, 9, 3)]
    for r in records:
        audit.append(r)

    listed = audit.list_records(ws_a)
    assert [r.turn_id for r in listed] == ["turn-9", "turn-5", "turn-3", "turn-1"]
    assert listed[0] == records[2]
    assert [r.turn_id for r in audit.list_records(ws_a, limit=2)] == ["turn-9", "turn-5"]


def test_audit_keeps_errors(contract: ContractBackend, ws_a: str) -> None:
    record = _audit(ws_a, 1, outcome="error", error="ProviderError: 502 from upstream")
    contract.backend.audit.append(record)
    assert contract.backend.audit.list_records(ws_a) == [record]


def test_a_workspace_never_reads_another_workspaces_audit(
    contract: ContractBackend, ws_a: str, ws_b: str
) -> None:
    audit = contract.backend.audit
    audit.append(_audit(ws_a, 1))
    assert audit.list_records(ws_b) == []
    audit.append(_audit(ws_b, 2))
    assert {r.workspace_id for r in audit.list_records(ws_a)} == {ws_a}
    assert {r.workspace_id for r in audit.list_records(ws_b)} == {ws_b}


def test_an_unknown_secret_is_none(contract: ContractBackend) -> None:
    assert contract.backend.secrets.get(new_id("missing")) is None


def test_anonymise_takes_a_person_out_of_the_audit_log(
    contract: ContractBackend, ws_a: str, ws_b: str
) -> None:
    audit = contract.backend.audit
    theirs = _audit(ws_a, 1, user_id="alice", session_id="dm-alice", error="alice said: boom")
    in_their_session = _audit(ws_a, 2, user_id=None, session_id="dm-alice")
    in_a_group = _audit(ws_a, 3, user_id="alice", session_id="group")
    someone_else = _audit(ws_a, 4, user_id="bob", session_id="group")
    other_workspace = _audit(ws_b, 5, user_id="alice", session_id="dm-alice")
    for record in (theirs, in_their_session, in_a_group, someone_else):
        audit.append(record)
    audit.append(other_workspace)

    assert audit.anonymise(ws_a, user_id="alice", session_ids=["dm-alice"]) == 3

    by_id = {r.id: r for r in audit.list_records(ws_a)}
    for record in (theirs, in_their_session, in_a_group):
        kept = by_id[record.id]
        assert (kept.user_id, kept.session_id, kept.event_id, kept.error) == (None, "erased", None, None)
        # What the workspace accounts with stays.
        assert (kept.tokens_in, kept.cost_usd, kept.outcome, kept.created_at) == (
            record.tokens_in,
            record.cost_usd,
            record.outcome,
            record.created_at,
        )
    assert by_id[someone_else.id] == someone_else
    assert audit.list_records(ws_b) == [other_workspace]
    assert audit.anonymise(ws_a, user_id="alice", session_ids=["dm-alice"]) == 0  # nothing of alice is left

"""The webhook's dynamodb:LeadingKeys pattern against the keys the DynamoDB adapters really build.

No synth and no AWS: IAM's StringLike is `*` (any run of characters, "#" included) and `?` (one
character), so the pattern is matched here the way IAM matches it, against keys made by the
adapters' own helpers, so that a change to either side is caught.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from infra.constructs.memory import outbox_partitions
from shared.adapters.aws.dynamodb.audit import audit_item
from shared.adapters.aws.dynamodb.budgets import counter_key
from shared.adapters.aws.dynamodb.identities import DynamoIdentityStore
from shared.adapters.aws.dynamodb.outbox import DynamoOutbox
from shared.adapters.aws.dynamodb.send_ledger import DynamoSendLedger
from shared.adapters.aws.dynamodb.sessions import DynamoSessionStore
from shared.channels.web import session_id_for
from shared.models import AuditRecord
from tests.infra.helpers import string_like

WORKSPACE = "default"


@pytest.mark.parametrize("session", ["s1", "a.b@c+d=e-f", "x" * 120])
def test_the_pattern_admits_the_web_outbox_of_its_workspace(session: str) -> None:
    # DynamoOutbox.read pages exactly this partition for GET /sessions/{ws}/{session}/outbox.
    key = DynamoOutbox._pk(WORKSPACE, session_id_for(session))

    assert string_like(outbox_partitions(WORKSPACE), key)


def _other_partitions() -> dict[str, str]:
    record = AuditRecord(
        workspace_id=WORKSPACE,
        session_id="web.s1",
        turn_id="t1",
        outcome="ok",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    return {
        "session": DynamoSessionStore._key(WORKSPACE, "web.s1")["pk"]["S"],
        "identity": DynamoIdentityStore._key(WORKSPACE, "web", "u1")["pk"]["S"],
        "audit": audit_item(WORKSPACE, record, timedelta(days=1))["pk"]["S"],
        "budget": counter_key(WORKSPACE, "day")["pk"]["S"],
        # A turn id is the platform's free text: one holding "#OUTBOX#" is still a ledger key.
        "ledger": DynamoSendLedger._key(WORKSPACE, "t#OUTBOX#web.x", 0, 0)["pk"]["S"],
        "another workspace's outbox": DynamoOutbox._pk("default2", session_id_for("s1")),
        "a platform session's outbox": DynamoOutbox._pk(WORKSPACE, "telegram.42"),
    }


@pytest.mark.parametrize("name", list(_other_partitions()))
def test_the_pattern_refuses_every_other_partition(name: str) -> None:
    key = _other_partitions()[name]

    assert not string_like(outbox_partitions(WORKSPACE), key), key

"""The correlation id's carriers (shared.correlation, the models that hold it): what was stored or
queued before the field existed still loads, and a binding ends with its block."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from shared import correlation
from shared.models import AuditRecord, DomainEvent, LaneItem

EVENTS = Path(__file__).resolve().parents[2] / "events"


def test_a_lane_item_queued_before_the_field_existed_still_parses() -> None:
    # The sample batch's bodies are lane items as the webhook queued them before correlation ids
    body = json.loads((EVENTS / "agent_sqs_fifo_batch.json").read_text())["Records"][2]["body"]
    assert "correlation_id" not in json.loads(body)
    item = LaneItem.model_validate_json(body)
    assert (item.inbound.event_id, item.correlation_id) == ("evt-0003", None)


def test_events_and_audit_records_without_the_field_still_load() -> None:
    event = DomainEvent.model_validate({"type": "CompactionDue", "workspace_id": "default"})
    record = AuditRecord.model_validate(
        {"workspace_id": "default", "session_id": "s", "turn_id": "t", "outcome": "ok"}
    )
    assert (event.correlation_id, record.correlation_id) == (None, None)


def test_an_anonymised_audit_record_no_longer_leads_to_the_turns_log_lines() -> None:
    record = AuditRecord(
        workspace_id="default", session_id="s", turn_id="t", outcome="ok", correlation_id="r1"
    )
    assert record.anonymised().correlation_id is None


def test_a_binding_ends_with_its_block_and_is_the_threads_own() -> None:
    seen: list[str | None] = []
    with correlation.correlated("outer"):
        with correlation.correlated("inner"):
            # Another thread (a parallel lane worker) sees none of this one's ids
            worker = threading.Thread(target=lambda: seen.append(correlation.current()))
            worker.start()
            worker.join()
            assert correlation.current() == "inner"
        assert correlation.current() == "outer"
    assert (correlation.current(), seen) == (None, [None])


def test_the_stamp_puts_the_bound_id_on_each_record_unless_it_names_its_own() -> None:
    stamp = correlation.Stamp()
    plain = logging.LogRecord("sigil.turn", logging.INFO, __file__, 1, "turn", None, None)
    own = logging.LogRecord("sigil.turn", logging.INFO, __file__, 1, "turn", None, None)
    own.correlation_id = "mine"
    outside = logging.LogRecord("sigil.turn", logging.INFO, __file__, 1, "turn", None, None)
    with correlation.correlated("r1"):
        assert stamp.filter(plain) and stamp.filter(own)
    assert stamp.filter(outside)
    assert (plain.correlation_id, own.correlation_id) == ("r1", "mine")
    assert not hasattr(outside, "correlation_id")

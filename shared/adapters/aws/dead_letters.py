"""The SQS FIFO dead-letter queue of the turns queue as the DeadLetters port.

SQS moves a record there after its last receive (maxReceiveCount) with its body (the LaneItem),
MessageGroupId, and system attributes (SentTimestamp, SequenceNumber, ApproximateReceiveCount),
but no reason: the reason is joined from the audit log by the item's turn id (the attempt's
"error" record names the provider's failure; the "given_up" record notes an apology that could
not be delivered either), when an AuditLog is given.

SQS can only be read by receiving: a listing receives every message it can reach with a short
visibility timeout and then makes them visible again. A FIFO queue hands out a message group's
next messages only once the earlier ones are deleted, so a listing shows at most the first ten of
a session's dead letters (one receive's worth); a redrive of the session reaches the rest as it
deletes the first. A redrive sends each item to the turns queue with its MessageGroupId and a
deduplication id of its own, and deletes it from the dead-letter queue only after the send
succeeded: a crash in between leaves it in both, and the repeated redrive sends the same
deduplication id (dropped by SQS within 5 minutes) for the same event (skipped by the turn after).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from itertools import groupby
from typing import TYPE_CHECKING, Any

import pydantic
from botocore.exceptions import BotoCoreError, ClientError

from shared import serde
from shared.adapters.aws import clients
from shared.adapters.aws.sqs import fifo_id, lane_queue
from shared.agent.redrive import held_back, turn_ids
from shared.models import AuditRecord, LaneItem
from shared.ports import (
    PREVIEW_CHARS,
    AuditLog,
    DeadLetterEntry,
    RedriveOutcome,
    RedriveReport,
    Requeue,
)

if TYPE_CHECKING:
    from mypy_boto3_sqs.client import SQSClient

# Long enough for a redrive's sends and deletes; short enough that an interrupted listing or
# redrive leaves the queue visible again soon.
VISIBILITY_S = 60
# The audit records searched for a dead letter's reason, per workspace, newest first.
AUDIT_DEPTH = 1000


class SqsDeadLetters:
    def __init__(
        self,
        dead_letter_queue_url: str,
        turns_queue_url: str,
        *,
        audit: AuditLog | None = None,
        client: SQSClient | None = None,
        region: str | None = None,
        lane_queue_urls: Sequence[str] = (),
    ) -> None:
        self.dead_letter_queue_url = dead_letter_queue_url
        self.turns_queue_url = turns_queue_url
        # A redriven turn goes back to its session's lane queue when the lanes are sharded.
        self.lanes = tuple(lane_queue_urls) or (turns_queue_url,)
        self.audit = audit
        self.client = client if client is not None else clients.sqs(region)
        self._max_receive_count: int | None = None

    # ------------------------------------------------------------------ the port

    def list_entries(self, workspace_id: str | None = None, *, limit: int = 100) -> list[DeadLetterEntry]:
        with self._received() as messages:
            entries = _entries(messages)
        if workspace_id is not None:
            entries = [e for e in entries if e.workspace_id == workspace_id]
        entries = _in_order(entries)[: max(0, limit)]
        return self._with_reasons(entries)

    def show(self, entry_id: str) -> DeadLetterEntry | None:
        with self._received() as messages:
            found = _entries([m for m in messages if m["MessageId"] == entry_id])
        return self._with_reasons(found)[0] if found else None

    def redrive(
        self, requeue: Requeue, *, ids: Sequence[str] = (), session: tuple[str, str] | None = None
    ) -> RedriveReport:
        report = RedriveReport()
        wanted = set(ids)
        failed_groups: set[str] = set()
        held: list[dict[str, Any]] = []  # received, not ours: made visible again at the end
        try:
            # Each round receives what the queue hands out now; deleting a session's redriven
            # messages lets the next round reach the ones behind them (FIFO order per group).
            while True:
                batch = self._receive_all()
                if not batch:
                    break
                ours = [m for m in batch if self._chosen(_entry(m), wanted, session)]
                held += [m for m in batch if m not in ours]
                if not ours:
                    break
                entries = _in_order(_entries(ours))
                handles = {m["MessageId"]: m["ReceiptHandle"] for m in ours}
                for group_id, group in groupby(entries, key=lambda e: e.group_id):
                    for entry in group:
                        if group_id in failed_groups:
                            report.outcomes.append(held_back(entry))
                            held.append({"ReceiptHandle": handles[entry.id]})
                            continue
                        outcome = self._redrive_one(entry, handles[entry.id], requeue)
                        report.outcomes.append(outcome)
                        wanted.discard(entry.id)
                        if outcome.outcome == "failed":
                            failed_groups.add(group_id)
                            held.append({"ReceiptHandle": handles[entry.id]})
                if ids and not wanted:
                    break
        finally:
            self._release(held)
        report.outcomes += [
            RedriveOutcome(id=i, group_id="", outcome="not_found") for i in ids if i in wanted
        ]
        return report

    # ------------------------------------------------------------------ receiving

    @staticmethod
    def _chosen(entry: DeadLetterEntry, ids: set[str], session: tuple[str, str] | None) -> bool:
        if session is not None:
            return (entry.workspace_id, entry.session_id) == session
        return entry.id in ids

    def _receive_all(self) -> list[dict[str, Any]]:
        """Every message the queue hands out now (until a receive comes back empty), invisible
        to others for VISIBILITY_S."""
        received: list[dict[str, Any]] = []
        while True:
            messages = self.client.receive_message(
                QueueUrl=self.dead_letter_queue_url,
                MaxNumberOfMessages=10,
                # Long polling, however short: a short poll samples only some of SQS's servers and
                # can come back empty while messages wait, which would end the listing early.
                WaitTimeSeconds=1,
                VisibilityTimeout=VISIBILITY_S,
                MessageSystemAttributeNames=["All"],
            ).get("Messages", [])
            if not messages:
                return received
            received += [dict(m) for m in messages]

    @contextmanager
    def _received(self) -> Iterator[list[dict[str, Any]]]:
        messages = self._receive_all()
        try:
            yield messages
        finally:
            self._release(messages)

    def _release(self, messages: Sequence[dict[str, Any]]) -> None:
        """Make received messages visible again at once (for the next listing or redrive)."""
        for start in range(0, len(messages), 10):
            chunk = messages[start : start + 10]
            self.client.change_message_visibility_batch(
                QueueUrl=self.dead_letter_queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
                    for i, m in enumerate(chunk)
                ],
            )

    # ------------------------------------------------------------------ redriving one

    def _redrive_one(self, entry: DeadLetterEntry, receipt: str, requeue: Requeue) -> RedriveOutcome:
        if entry.item is None:
            return RedriveOutcome(
                id=entry.id, group_id=entry.group_id, outcome="failed", detail="its body does not decode"
            )
        try:
            again = requeue(entry.item)
            if again is not None:
                group = fifo_id(again.group_id)
                self.client.send_message(
                    QueueUrl=self.lanes[lane_queue(group, len(self.lanes))],
                    MessageBody=serde.dumps(again),
                    MessageGroupId=group,
                    MessageDeduplicationId=fifo_id(again.dedup_id),
                )
        # A failed read of the session or a refused send: this item stays where it is, and the
        # rest of its session with it, so their order survives.
        except (BotoCoreError, ClientError) as exc:
            return RedriveOutcome(
                id=entry.id, group_id=entry.group_id, outcome="failed", detail=f"{type(exc).__name__}: {exc}"
            )
        # Only now: the item is queued again (or needs no queueing), so deleting it loses nothing.
        self.client.delete_message(QueueUrl=self.dead_letter_queue_url, ReceiptHandle=receipt)
        if again is None:
            return RedriveOutcome(
                id=entry.id, group_id=entry.group_id, outcome="skipped", detail="its turn already committed"
            )
        return RedriveOutcome(
            id=entry.id, group_id=entry.group_id, outcome="redriven", detail=again.inbound.event_id
        )

    # ------------------------------------------------------------------ reasons

    def _max_receives(self) -> int | None:
        if self._max_receive_count is None:
            attributes = self.client.get_queue_attributes(
                QueueUrl=self.turns_queue_url, AttributeNames=["RedrivePolicy"]
            ).get("Attributes", {})
            policy = json.loads(attributes.get("RedrivePolicy", "{}"))
            self._max_receive_count = int(policy.get("maxReceiveCount", 0))
        return self._max_receive_count or None

    def _with_reasons(self, entries: list[DeadLetterEntry]) -> list[DeadLetterEntry]:
        if (attempts := self._max_receives()) is not None:
            entries = [e.model_copy(update={"attempts": attempts}) for e in entries]
        if self.audit is None:
            return entries
        records: dict[str, list[AuditRecord]] = {}
        for workspace_id in {e.workspace_id for e in entries if e.workspace_id is not None}:
            for record in self.audit.list_records(workspace_id, limit=AUDIT_DEPTH):  # newest first
                records.setdefault(record.turn_id, []).append(record)
        return [_reasoned(e, records) for e in entries]


def _reasoned(entry: DeadLetterEntry, records: dict[str, list[AuditRecord]]) -> DeadLetterEntry:
    if entry.item is None:
        return entry.model_copy(update={"reason": "its body does not decode"})
    found = sorted(
        (r for turn in turn_ids(entry.item) for r in records.get(turn, [])),
        key=lambda r: r.created_at,
        reverse=True,
    )
    error = next((r for r in found if r.outcome == "error"), None)
    given_up = next((r for r in found if r.outcome == "given_up"), None)
    # The give-up notes the batch's last error for the record (and an apology that could not be
    # delivered); an attempt's "error" record names the model's failure.
    notes = [given_up.error if given_up is not None else None]
    if error is not None and not (given_up is not None and "last error" in (given_up.error or "")):
        notes.insert(0, f"model call failed: {error.error or 'no detail'}")
    reason = "; ".join(n for n in notes if n) or ("given up" if given_up is not None else None)
    return entry.model_copy(
        update={"reason": reason, "failed_at": given_up.created_at if given_up is not None else None}
    )


def _in_order(entries: list[DeadLetterEntry]) -> list[DeadLetterEntry]:
    """By lane, each lane's items in their original order (first queued, then SQS's sequence)."""
    never = datetime.max.replace(tzinfo=UTC)
    # Stable: entries made by `_entries` are in SQS's sequence already, which breaks the ties.
    return sorted(entries, key=lambda e: (e.group_id, e.enqueued_at or never))


def _entries(messages: Sequence[dict[str, Any]]) -> list[DeadLetterEntry]:
    by_sequence = sorted(messages, key=lambda m: int(m.get("Attributes", {}).get("SequenceNumber", "0")))
    return [_entry(m) for m in by_sequence]


def _entry(message: dict[str, Any]) -> DeadLetterEntry:
    attributes: dict[str, str] = message.get("Attributes", {})
    try:
        item: LaneItem | None = serde.loads(LaneItem, message["Body"])
    except pydantic.ValidationError:
        item = None
    inbound = item.inbound if item is not None else None
    return DeadLetterEntry(
        id=message["MessageId"],
        group_id=attributes.get("MessageGroupId", ""),
        workspace_id=inbound.workspace_id if inbound else None,
        session_id=inbound.session_id if inbound else None,
        channel=inbound.channel if inbound else None,
        event_id=inbound.event_id if inbound else None,
        preview=inbound.text[:PREVIEW_CHARS] if inbound else "",
        # Replaced by the turns queue's maxReceiveCount when it can be read (`_attempts`): SQS
        # moves a record after exactly that many receives, and every listing counts one more here.
        attempts=max(0, int(attributes.get("ApproximateReceiveCount", "1")) - 1),
        enqueued_at=item.enqueued_at
        if item is not None
        else datetime.fromtimestamp(int(attributes.get("SentTimestamp", "0")) / 1000, UTC),
        failed_at=None,
        reason=None,
        item=item,
    )

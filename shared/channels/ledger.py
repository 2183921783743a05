"""The send ledger: which platform message carries each piece of a turn's reply.

A turn is retried after a crash or a provider failure with the same turn id (derived from the
platform event), so before posting piece `chunk` of reply part `part` a sender asks the ledger.
If a platform message id is recorded there, the piece was posted by an earlier attempt: the
sender edits that message (or does nothing when the text is the same, which the digest tells)
instead of posting a second copy.

The web channel needs none of this: its outbox is keyed by (turn_id, part) itself.

The port (SendLedger, SentPiece) is in shared.ports. Adapters: `MemorySendLedger` here (one
process, for tests and tools), `SqliteSendLedger` (shared.adapters.embedded.send_ledger) and
`DynamoSendLedger` (shared.adapters.aws.dynamodb.send_ledger: the sessions table, items
`WS#{ws}#LEDGER#{turn}` / `PART#{part}#{chunk}`, conditional put, `ttl` seven days out). Entries
expire after LEDGER_TTL_S, seven days: a platform redelivers an event for minutes or hours, never
for a week, and every read ignores an expired entry, so no behaviour depends on when a sweeper
last ran.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from typing import Final

from shared.clock import epoch_seconds
from shared.ports import SentPiece

LEDGER_TTL_S: Final = 7 * 24 * 3600

Clock = Callable[[], float]


def digest(text: str) -> str:
    """What the ledger stores instead of the text: enough to tell "same text", nothing to leak."""
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class MemorySendLedger:
    """A ledger in one process's memory: for tests, and for tools that never retry a turn."""

    def __init__(self, *, ttl_s: int = LEDGER_TTL_S, now: Clock = epoch_seconds) -> None:
        self._ttl_s = ttl_s
        self._now = now
        self._lock = threading.Lock()
        self._items: dict[tuple[str, str, int, int], tuple[SentPiece, float]] = {}

    def get(self, workspace_id: str, turn_id: str, part: int, chunk: int = 0) -> SentPiece | None:
        with self._lock:
            found = self._items.get((workspace_id, turn_id, part, chunk))
        if found is None or found[1] <= self._now():
            return None
        return found[0]

    def record(
        self, workspace_id: str, turn_id: str, part: int, chunk: int, *, message_id: str, text_digest: str
    ) -> SentPiece:
        key = (workspace_id, turn_id, part, chunk)
        now = self._now()
        with self._lock:
            found = self._items.get(key)
            if found is not None and found[1] > now:
                return found[0]
            piece = SentPiece(message_id, text_digest)
            self._items[key] = (piece, now + self._ttl_s)
            return piece

    def update_digest(
        self, workspace_id: str, turn_id: str, part: int, chunk: int, *, text_digest: str
    ) -> None:
        key = (workspace_id, turn_id, part, chunk)
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items[key] = (SentPiece(found[0].message_id, text_digest), self._now() + self._ttl_s)

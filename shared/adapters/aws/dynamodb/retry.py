"""The retry policy of every DynamoDB adapter, and reading a ClientError's code.

botocore retries throttled and failed requests itself (shared.adapters.aws.clients, standard
mode), but two answers are not errors to it: a batch call that leaves items unprocessed, and a
transaction cancelled by a conflicting one. Those are sent again here, by `until_done`, with
stamina's exponential backoff and no jitter: at most RETRIES attempts, waits doubling from
`wait_initial` up to a second.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, Final

from botocore.exceptions import ClientError

RETRIES: Final = 8
_WAIT_MAX_S: Final = 1.0


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def cancellation_codes(exc: ClientError) -> list[str]:
    """Per-action reasons of a cancelled transaction, in the order the actions were sent."""
    reasons: list[Any] = list(exc.response.get("CancellationReasons", []))
    return [str(reason.get("Code", "None")) for reason in reasons]


class Next(enum.Enum):
    """What an attempt of `until_done` asks for."""

    DONE = "done"
    # Nothing landed (throttling, a conflicting transaction): wait before the next attempt.
    BACK_OFF = "back off"
    # Part of the work landed and was dropped from the request: send the rest at once.
    AGAIN = "again"


class _Unfinished(Exception):
    def __init__(self, wait: bool) -> None:
        super().__init__("DynamoDB left work undone")
        self.wait = wait


def _retry_on(exc: Exception) -> bool | float:
    # A float is the wait stamina takes instead of its own backoff; True keeps its backoff.
    if isinstance(exc, _Unfinished):
        return True if exc.wait else 0.0
    return False


def until_done(attempt: Callable[[], Next], *, wait_initial: float = 0.05) -> bool:
    """Call `attempt` until it answers DONE, RETRIES times at most; False if it never did.

    An exception `attempt` raises is not retried: it propagates at once.
    """
    # Imported here: stamina and tenacity take ~60 ms to load, and the webhook's outbox reads never
    # retry, so its cold start should not pay for them.
    import stamina

    try:
        for retrying in stamina.retry_context(
            on=_retry_on,
            attempts=RETRIES,
            timeout=None,
            wait_initial=wait_initial,
            wait_max=_WAIT_MAX_S,
            wait_jitter=0.0,
        ):
            with retrying:
                outcome = attempt()
                if outcome is not Next.DONE:
                    raise _Unfinished(wait=outcome is Next.BACK_OFF)
    except _Unfinished:
        return False
    return True

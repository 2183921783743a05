"""The turn's attachments (docs/media.md): fetched into the MediaStore after the sender is
admitted and before the model call, never in the webhook.

Only a turn that proceeds to the model fetches: a refused or pending sender, a duplicate, a chat
command, a turn without a model or over its budget downloads nothing and stores nothing. A
redrive answering its kept message fetches nothing new either (the original attempt did).

Fetching may take at most FETCH_SHARE of the time the turn has left, so a slow file server
leaves the model its time. What was refused, or could not be downloaded, is said twice: in the
user's message as the model reads it (so it does not answer as if it had seen the file) and at
the top of the reply the user reads (so they know whatever the model writes).
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Final

from shared.deadline import current, deadline, remaining
from shared.models.media import MediaItem

if TYPE_CHECKING:
    from shared.agent.preflight import Proceed, Turn
    from shared.agent.turn import TurnDeps
    from shared.channels.out import Reply

FETCH_SHARE: Final = 0.5


def stored_media(turn: Turn) -> list[MediaItem]:
    """The files of this turn's message, stored and sniffed, in the attachments' order (empty
    before the fetch, for a turn that does not proceed, or when none could be opened)."""
    return list(turn.media)


def fetch_media(deps: TurnDeps, turn: Turn, step: Proceed) -> Proceed:
    """Fetch the inbound's attachments; `step` with the notes of refused files in its message."""
    inbound = turn.inbound
    if step.kept or not inbound.attachments:
        return step
    left = remaining(current())
    share = None if left is None else time.monotonic() + max(0.0, left) * FETCH_SHARE
    with deadline(share):
        fetched = deps.media_fetcher.fetch(
            store=deps.backend.media,
            usage=deps.backend.media_usage,
            secrets=deps.backend.secrets,
            workspace=turn.workspace,
            inbound=inbound,
            user_id=turn.sender.user_id,
            base_urls=deps.settings.platform_base_urls,
            now=deps.clock(),
        )
    turn.media, turn.media_notes = fetched.items, fetched.notes
    if not fetched.notes:
        return step
    told = " ".join(fetched.notes)
    note = f"[Sigil could not give you every file of this message, and told the user: {told}]"
    content = f"{step.user.content}\n\n{note}" if step.user.content else note
    return dataclasses.replace(step, user=step.user.model_copy(update={"content": content}))


class NotedReply:
    """The reply the user reads, after the notes on the files that were not opened."""

    def __init__(self, reply: Reply, notes: list[str]) -> None:
        self._reply = reply
        self._prefix = "\n".join(notes) + "\n\n"

    def update(self, text_so_far: str) -> None:
        self._reply.update(self._prefix + text_so_far)

    def finish(self, final_text: str) -> None:
        self._reply.finish(self._prefix + final_text)


def noted(reply: Reply, turn: Turn) -> Reply:
    return NotedReply(reply, turn.media_notes) if turn.media_notes else reply

"""Burst coalescing: a session's consecutive lane items in one SQS batch become one turn.

`coalesce` is pure: it keeps the batch's order, and within each session (lane key) merges each
run of consecutive items from the same sender in the same chat and thread into one item. The
merged item's text is the texts joined by blank lines in order, its attachments are all of
theirs, its routing (reply_to, reply_context, received_at) is the last item's, and its event id
is the first item's id with a digest of every merged id (`merged_event_id`), so a redelivery of
the same burst is recognised as the same turn.

The merged item also lists the original ids (`merged_event_ids`), and the turn's commit remembers
each of them with the merged id: a later redelivery of ONE of the merged events on its own (a
platform retrying a webhook after the burst's turn committed, past SQS FIFO's 5-minute
deduplication) is recognised as handled. Items of different senders are never merged (identity
and admission are per sender), nor is a chat command or a schedule's occurrence with anything
(each is answered on its own), nor are items separated by an item of the same session that is
not merged (an unreadable record, another sender).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from shared.models import LaneItem

MAX_ID = 128  # ID_PATTERN's length bound
DIGEST = 16


def coalesce(items: Sequence[LaneItem]) -> list[tuple[LaneItem, list[int]]]:
    """(item to run, indexes of the source items), in order of each result's first index."""
    runs: list[list[int]] = []
    open_run: dict[str, list[int]] = {}  # lane key -> the run the next item of that lane may join
    for index, item in enumerate(items):
        key = item.group_id
        run = open_run.get(key)
        if run is not None and _joinable(items[run[-1]], item):
            run.append(index)
            continue
        run = [index]
        runs.append(run)
        open_run[key] = run
    merged: list[tuple[LaneItem, list[int]]] = []
    for run in runs:
        merged.append((merge([items[i] for i in run]), run))
    return merged


def merge(items: Sequence[LaneItem]) -> LaneItem:
    """One lane item for a burst (see the module docstring); a single item is returned as is."""
    if not items:
        raise ValueError("nothing to merge")
    if len(items) == 1:
        return items[0]
    first, last = items[0], items[-1]
    inbound = last.inbound.model_copy(
        update={
            "event_id": merged_event_id([i.inbound.event_id for i in items]),
            "merged_event_ids": [i.inbound.event_id for i in items],
            "text": "\n\n".join(i.inbound.text for i in items),
            "attachments": [a for i in items for a in i.inbound.attachments],
        }
    )
    return first.model_copy(update={"inbound": inbound})


def merged_event_id(event_ids: Sequence[str]) -> str:
    """The first id, cut to fit, "+" and a digest of all of them: within ID_PATTERN, deterministic."""
    digest = hashlib.sha256("\n".join(event_ids).encode()).hexdigest()[:DIGEST]
    return f"{event_ids[0][: MAX_ID - DIGEST - 1]}+{digest}"


def _joinable(previous: LaneItem, item: LaneItem) -> bool:
    if previous.redrive_of is not None or item.redrive_of is not None:
        return False  # a redrive answers each given-up message where it stands (shared.agent.redrive)
    if previous.task is not None or item.task is not None:
        return False  # a task's outcome or question is the gateway's message, told on its own
    if previous.fired is not None or item.fired is not None:
        return False  # a schedule's occurrence is its own turn (a reminder is sent as it was set)
    a, b = previous.inbound, item.inbound
    if a.command is not None or b.command is not None:
        # A chat command is answered on its own: merged, it would carry the burst's text away
        # with it, or be lost in the text.
        return False
    return (a.workspace_id, a.session_id, a.channel, a.chat_id, a.thread_id, a.sender.id) == (
        b.workspace_id,
        b.session_id,
        b.channel,
        b.chat_id,
        b.thread_id,
        b.sender.id,
    )

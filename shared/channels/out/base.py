"""A platform sender: one reply part becomes one or more platform messages, each posted once.

`PlatformSender` implements shared.ports.ChannelSender for any platform API below it. A reply
part is rendered for the platform's dialect and split at its size limit into pieces; piece
`chunk` of part `part` of turn `turn_id` is one platform message, and the send ledger remembers
its message id. Before posting a piece the sender asks the ledger: a retried turn finds its
pieces there and edits them (or leaves them alone when the text is the same) instead of
posting copies.

`ProgressiveReply` is the streaming form: the first `update` posts, later ones edit the same
message as the text grows (a piece that fills up is left complete and the text flows on into
a new message), throttled to what the platform allows in one chat; `finish` writes the final
text, waiting for the throttle where needed. On a platform without edits (WhatsApp) updates do
nothing and `finish` posts the pieces.

A crash between a platform post and its ledger record leaves the piece unrecorded, and the
retry posts it again: the platform call and the ledger write cannot be one transaction, and
of the two orders this one never loses a reply.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cachetools import LRUCache

from shared.channels.format import Dialect, split_for
from shared.channels.ledger import digest
from shared.channels.out.http import ChannelError
from shared.channels.senders import OutboxSender
from shared.models import ROUTE_NAME_PATTERN, OutboundMessage
from shared.ports import ChannelSender, SendLedger, SentPiece

log = logging.getLogger("sigil.channels")

Clock = Callable[[], float]
Sleep = Callable[[float], None]
# What a piece that a retried turn no longer needs is edited to: platforms refuse empty text.
RETIRED_TEXT = "…"
MAX_THROTTLED_CHATS = 1024
_ROUTE_NAME = re.compile(ROUTE_NAME_PATTERN)


@dataclass(frozen=True)
class Target:
    """Where a reply goes: the chat, the thread, and the platform routing from the inbound."""

    chat_id: str
    thread_id: str | None = None
    context: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Slot:
    """Which piece of the turn's reply a platform message carries."""

    part: int
    chunk: int

    @property
    def first(self) -> bool:
        """The turn's first message: the one that quotes the user's message, or replaces
        Discord's deferred "thinking" response."""
        return self.part == 0 and self.chunk == 0


class PlatformApi(Protocol):
    """The calls a platform client makes; PlatformSender does the rest."""

    @property
    def platform(self) -> str: ...

    @property
    def dialect(self) -> Dialect: ...

    @property
    def limit(self) -> int:
        """The platform's per-message limit, in rendered UTF-16 code units."""
        ...

    @property
    def editable(self) -> bool:
        """Whether a posted message's text can be replaced."""
        ...

    def rate_windows(self, target: Target) -> Sequence[tuple[int, float]]:
        """(calls, seconds) windows to stay within for one chat, e.g. [(1, 1.0)]."""
        ...

    def post(self, target: Target, text: str, slot: Slot) -> str:
        """Post rendered `text`; returns the platform's message id."""
        ...

    def edit(self, target: Target, message_id: str, text: str) -> None:
        """Replace the text of a message this sender posted."""
        ...


class Throttle:
    """At most `calls` per `seconds`, for every window, over one chat's sends and edits.

    Shared by every reply to the chat in this process (lane workers are threads), so a waiting
    caller holds the lock: calls to one chat queue up, calls to other chats do not wait.
    """

    def __init__(self, windows: Sequence[tuple[int, float]], *, clock: Clock, sleep: Sleep) -> None:
        self._windows = list(windows)
        self._clock = clock
        self._sleep = sleep
        self._times: deque[float] = deque()
        self._lock = threading.Lock()

    def delay(self) -> float:
        """Seconds until the next call is allowed (0 when it is now)."""
        now = self._clock()
        needed = 0.0
        for calls, seconds in self._windows:
            recent = [t for t in self._times if t > now - seconds]
            if len(recent) >= calls:
                needed = max(needed, recent[-calls] + seconds - now)
        return needed

    def acquire(self, *, wait: bool) -> bool:
        """Take a call slot: sleep for it when `wait`, else give up (False) if it is not free."""
        if not self._lock.acquire(blocking=wait):
            return False
        try:
            while (needed := self.delay()) > 1e-6:
                if not wait:
                    return False
                self._sleep(needed)
            self._times.append(self._clock())
            longest = max((seconds for _, seconds in self._windows), default=0.0)
            while self._times and self._times[0] <= self._clock() - longest:
                self._times.popleft()
            return True
        finally:
            self._lock.release()


class Reply(Protocol):
    """What a turn drives while the model streams: `update` often, `finish` once."""

    def update(self, text_so_far: str) -> None: ...

    def finish(self, final_text: str) -> None: ...


class ProgressiveReply:
    """One reply part, shown as it grows. Use `PlatformSender.progressive` to make one."""

    def __init__(
        self,
        api: PlatformApi,
        ledger: SendLedger,
        message: OutboundMessage,
        target: Target,
        throttle: Throttle,
    ) -> None:
        self._api = api
        self._ledger = ledger
        self._message = message
        self._target = target
        self._throttle = throttle
        # chunk → what the platform shows (None: nothing posted), read from the ledger once.
        self._shown: dict[int, SentPiece | None] = {}
        # Chunks edited during streaming whose new digest the ledger has not been told yet: one
        # ledger write at the end instead of one per edit.
        self._unrecorded: set[int] = set()
        # Whether an earlier attempt of this turn had posted the first piece (known after the
        # first ledger read). Pieces go out in order, so without it there is nothing to retire.
        self._earlier_attempt = False
        self._finished = False

    def update(self, text_so_far: str) -> None:
        """Show the text so far, if the platform edits and the throttle allows a call now.

        Best effort: a failed update is logged and the next update or `finish` catches up, so
        a slow or failing platform never stops the model's stream.
        """
        if self._finished or not self._api.editable:
            return
        try:
            self._sync(text_so_far, final=False)
        except ChannelError as exc:
            log.warning(
                "progressive update failed",
                extra={"platform": self._api.platform, "turn_id": self._message.turn_id, "code": exc.code},
            )

    def finish(self, final_text: str) -> None:
        """Show the final text, split into as many messages as it needs. Raises ChannelError."""
        if self._finished:
            return
        self._finished = True
        count = self._sync(final_text, final=True)
        if count == 0:
            # Nothing to show (the turn always sends text; this guards the platform's display).
            log.warning(
                "empty final reply", extra={"platform": self._api.platform, "turn_id": self._message.turn_id}
            )
        else:
            self._retire(count)
        for chunk in sorted(self._unrecorded):
            shown = self._shown.get(chunk)
            if shown is not None:
                self._ledger.update_digest(*self._key(chunk), text_digest=shown.digest)
        self._unrecorded.clear()

    # ------------------------------------------------------------ internals

    def _key(self, chunk: int) -> tuple[str, str, int, int]:
        m = self._message
        return m.workspace_id, m.turn_id, m.part, chunk

    def _lookup(self, chunk: int) -> SentPiece | None:
        if chunk not in self._shown:
            self._shown[chunk] = self._ledger.get(*self._key(chunk))
            if chunk == 0:
                self._earlier_attempt = self._shown[0] is not None
        return self._shown[chunk]

    def _sync(self, text: str, *, final: bool) -> int:
        """Make the platform show `text`; returns how many pieces it takes."""
        pieces = split_for(text, self._api.dialect, self._api.limit)
        for chunk, rendered in enumerate(pieces):
            if not self._show(chunk, rendered, final=final):
                break  # throttled mid-stream: the next update continues from here
        return len(pieces)

    def _show(self, chunk: int, rendered: str, *, final: bool) -> bool:
        shown = self._lookup(chunk)
        text_digest = digest(rendered)
        if shown is not None and (shown.digest == text_digest or not self._api.editable):
            return True  # already showing this text, or posted where edits are impossible
        if not self._throttle.acquire(wait=final):
            return False
        if shown is None:
            message_id = self._api.post(self._target, rendered, Slot(self._message.part, chunk))
            stored = self._ledger.record(*self._key(chunk), message_id=message_id, text_digest=text_digest)
            if stored.message_id != message_id:
                # A concurrent attempt of this turn recorded the piece first: both copies exist,
                # and the recorded one is the one later edits go to.
                log.warning(
                    "piece posted twice by concurrent attempts",
                    extra={"platform": self._api.platform, "turn_id": self._message.turn_id, "chunk": chunk},
                )
            self._shown[chunk] = stored
            # One line per platform message, under the turn's correlation id (docs/observability.md).
            log.info(
                "reply posted",
                extra={
                    "platform": self._api.platform,
                    "turn_id": self._message.turn_id,
                    "part": self._message.part,
                    "chunk": chunk,
                },
            )
            return True
        self._api.edit(self._target, shown.message_id, rendered)
        self._shown[chunk] = SentPiece(shown.message_id, text_digest)
        self._unrecorded.add(chunk)
        return True

    def _retire(self, count: int) -> None:
        """Pieces beyond `count` that an earlier attempt posted: shrink them to a marker.

        Only a retry can have such pieces, so a first attempt spends no ledger read on this.
        """
        if not self._api.editable or not self._earlier_attempt:
            return
        chunk = count
        while self._lookup(chunk) is not None:
            self._show(chunk, RETIRED_TEXT, final=True)
            chunk += 1


class PlatformSender:
    """ChannelSender for one platform, with the send ledger and progressive replies."""

    def __init__(
        self,
        api: PlatformApi,
        ledger: SendLedger,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
    ) -> None:
        self.api = api
        self.ledger = ledger
        self._clock = clock
        self._sleep = sleep
        # Platform limits are per chat, across replies: a warm process keeps each recent chat's
        # throttle (a bounded number; a chat quiet long enough to be dropped owes no wait).
        self._throttles: LRUCache[str, Throttle] = LRUCache(MAX_THROTTLED_CHATS)
        self._throttles_lock = threading.Lock()

    def send(self, message: OutboundMessage, *, context: Mapping[str, str] | None = None) -> None:
        """Deliver a whole reply part (ChannelSender)."""
        self.progressive(message, context=context).finish(message.text)

    def progressive(
        self, message: OutboundMessage, *, context: Mapping[str, str] | None = None
    ) -> ProgressiveReply:
        """A reply part to stream into: `update(text_so_far)` as it grows, then `finish(text)`.

        `context` is the inbound message's reply_context (Discord's interaction token,
        WhatsApp's phone number id, the message to reply to).
        """
        target = Target(message.chat_id, message.thread_id, reply_context(message, context))
        return ProgressiveReply(self.api, self.ledger, message, target, self._throttle(target))

    def _throttle(self, target: Target) -> Throttle:
        with self._throttles_lock:
            throttle = self._throttles.get(target.chat_id)
            if throttle is None:
                throttle = self._throttles[target.chat_id] = Throttle(
                    self.api.rate_windows(target), clock=self._clock, sleep=self._sleep
                )
            return throttle


def route_secret(target: Target, name: str) -> str:
    """The secret `name` ("telegram/bot-token") of the route the user wrote through: the same key
    under the route's name ("telegram/family/bot-token") when the inbound came through a named
    route (shared.channels.routes puts its name in reply_context), else `name` itself."""
    route = target.context.get("route")
    if not route:
        return name
    platform, _, key = name.partition("/")
    if not _ROUTE_NAME.fullmatch(route):
        # Never a secret name built from something that isn't a route's name.
        raise ChannelError(f"reply context names no valid route ({name} not read)", platform=platform)
    return f"{platform}/{route}/{key}"


def reply_context(message: OutboundMessage, explicit: Mapping[str, str] | None) -> dict[str, str]:
    """The routing context for `message`: the one given, else the one it carries from its inbound."""
    return dict(explicit) if explicit is not None else dict(message.reply_context)


class BufferedReply:
    """A Reply for senders that cannot show progress: sends once, at finish."""

    def __init__(self, sender: ChannelSender, message: OutboundMessage) -> None:
        self._sender = sender
        self._message = message

    def update(self, text_so_far: str) -> None:
        return None

    def finish(self, final_text: str) -> None:
        self._sender.send(self._message.model_copy(update={"text": final_text}))


def progressive_reply(
    sender: ChannelSender, message: OutboundMessage, *, context: Mapping[str, str] | None = None
) -> Reply:
    """The Reply a turn streams into, whatever the channel: progressive where it can be."""
    if isinstance(sender, PlatformSender | OutboxSender):
        return sender.progressive(message, context=context)
    return BufferedReply(sender, message)

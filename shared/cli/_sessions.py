"""One reading of `--session` for every command that takes it.

A session is stored under its channel's prefix (`sigil send --session demo` talks in `web.demo`,
a Telegram chat is `telegram.<chat>`), but people type the name they used. The commands that read
stored sessions (`replay`, `consolidate`, `dlq redrive`) accept the name without its prefix when
one stored session has it, and otherwise say which stored ids are close (difflib) or, when
several channels share the name, which ones to choose between. The web channel's own commands
(`send`, `replies`) take the web name and accept it with its `web.` prefix too.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from shared.errors import NotFound

if TYPE_CHECKING:
    from shared.ports import SessionStore

WEB_PREFIX = "web."
# The most sessions looked through for a name or a close match.
LISTED = 10_000


def web_session_name(name: str) -> str:
    """The web channel's name of a session typed as its stored id (`web.demo` -> `demo`)."""
    return name[len(WEB_PREFIX) :] if name.startswith(WEB_PREFIX) and len(name) > len(WEB_PREFIX) else name


def stored_session(sessions: SessionStore, workspace: str, name: str) -> str:
    """resolve_session over the workspace's stored sessions (listed only when `name` is not one)."""
    if sessions.get(workspace, name) is not None:
        return name
    return resolve_session(name, (s.id for s in sessions.list_sessions(workspace, limit=LISTED)), workspace)


def resolve_session(name: str, known: Iterable[str], workspace: str, *, missing_ok: bool = False) -> str:
    """The stored session id `name` means among `known` (a workspace's session ids). Raises
    NotFound, its message one line, when it is ambiguous (naming the candidates) or unknown
    (naming the close matches, if any); each command ends on it as on its other bad input.
    `missing_ok`: an unknown name with nothing close is returned as it is (`dlq redrive` of a
    session with no dead letters redrives none)."""
    ids = sorted(set(known))
    if name in ids:
        return name
    # The name without its channel's prefix, as the user typed it to `send` or saw it in a chat.
    named = [i for i in ids if i.partition(".")[2] == name]
    if len(named) == 1:
        return named[0]
    if named:
        choices = ", ".join(named)
        raise NotFound(
            f"session {name!r} is ambiguous in workspace {workspace!r}: {choices} (give the whole id)"
        )
    suggestion = _suggestion(name, ids)
    if missing_ok and not suggestion:
        return name
    raise NotFound(f"no session {name!r} in workspace {workspace!r}{suggestion}")


def _suggestion(name: str, ids: list[str]) -> str:
    # Matched against the whole ids and against the names after their prefixes: `demo2` is close
    # to `web.demo` through `demo`.
    by_key: dict[str, str] = {}
    for i in ids:
        by_key.setdefault(i, i)
        by_key.setdefault(i.partition(".")[2] or i, i)
    close = difflib.get_close_matches(name, list(by_key), n=5, cutoff=0.6)
    found = list(dict.fromkeys(by_key[c] for c in close))[:3]
    return f" (did you mean {' or '.join(found)}?)" if found else ""

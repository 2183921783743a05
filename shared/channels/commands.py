"""Chat commands on the way in: which messages are a command, as one ChatCommand.

Each platform marks a command its own way, and each channel module maps its mark here:

- Telegram: a `bot_command` entity at offset 0 (`/status` or `/status@SigilBot`);
- Slack: a slash command's form post (`command=/status&text=...`, or `command=/sigil&text=status`);
- Discord: an APPLICATION_COMMAND interaction (`data.name`, its options);
- WhatsApp and the web channel, which have no mechanism of their own: text that opens with
  `/name` followed by a space or the end (so "/status" inside a sentence, or a path such as
  "/usr/bin", is not a command).

What a command does is the agent's business (shared.agent.commands); the names live here, below
the agent, because Slack and Discord decide at the webhook whether a command is one of Sigil's.
"""

from __future__ import annotations

import re
from typing import Final

from shared.models import ChatCommand

# Sigil's commands (docs/commands.md), in the order the help line lists them.
KNOWN: Final = ("status", "new", "model", "skills", "schedules", "tasks", "heartbeat", "help")
# Telegram sends /start when a person opens a chat with the bot: it is a greeting, and the model
# answers it as one rather than the user being handed a list of commands.
GREETINGS: Final = frozenset({"start"})
# The one platform command that carries Sigil's commands as its first word (`/sigil status`).
UMBRELLA: Final = "sigil"

# Telegram's rule for a command name (BotFather: 1-32 of a-z, 0-9, _), case-insensitive here;
# an `@BotName` suffix addresses the command to one bot in a group.
_TEXT_COMMAND = re.compile(r"^/([A-Za-z0-9_]{1,32})(?:@[A-Za-z0-9_]{1,64})?(?=\s|$)\s*(.*)$", re.DOTALL)
_ARGS_MAX: Final = 4096


def from_text(text: str) -> ChatCommand | None:
    """The command `text` opens with (`/name[@bot] args`), or None for ordinary text."""
    match = _TEXT_COMMAND.match(text)
    if match is None:
        return None
    name = match.group(1).lower()
    if name in GREETINGS:
        return None
    return ChatCommand(name=name, args=match.group(2).strip()[:_ARGS_MAX])


def from_platform(name: str, args: str = "") -> ChatCommand | None:
    """A platform's own command (Slack's slash command, Discord's application command), when it
    is one of Sigil's: `/status`, or `/sigil status` (one umbrella command, for a Slack workspace
    whose built-ins or other apps hold the short names: Slack's own /status among them). Any other
    is a command the operator registered for talking to the bot (`/ask question`, `/sigil what
    is a lane?`), and stays ordinary text for the model, as before."""
    key = name.removeprefix("/").lower()
    if key == UMBRELLA:
        first, _, rest = args.strip().partition(" ")
        key, args = first.removeprefix("/").lower(), rest
    if key not in KNOWN:
        return None
    return ChatCommand(name=key, args=args.strip()[:_ARGS_MAX])

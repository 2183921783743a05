"""The start-up banner's `model:` line, with a look at the model's server (either `sigil dev`).

The look (shared.providers.probe_model) runs in a thread begun before the gateway starts, so it
overlaps the start and holds the banner up by its short timeout at most.
"""

from __future__ import annotations

import threading

from shared.config import Settings

PROBE_TIMEOUT_S = 3.0


class ModelCheck:
    """probe_model on a thread of its own; `problem()` waits for it, its timeout at most."""

    def __init__(self, settings: Settings, timeout_s: float = PROBE_TIMEOUT_S) -> None:
        self._settings = settings
        self._timeout_s = timeout_s
        self._problem: str | None = None
        # A daemon: a server that never answers must not keep the gateway's process alive.
        self._thread = threading.Thread(target=self._run, name="model-check", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from shared.providers import probe_model

        self._problem = probe_model(self._settings, timeout_s=self._timeout_s)

    def problem(self) -> str | None:
        # The SDK's own timeout ends the look; the margin is for its connect and the thread's start.
        self._thread.join(self._timeout_s + 2.0)
        return self._problem


def model_line(settings: Settings, not_configured: str | None, unreachable: str | None) -> str:
    """What the banner says of the model: its name, and what is wrong with it, on one line."""
    if not_configured is not None:
        return f"NOT CONFIGURED. {not_configured}"
    line = f"{settings.resolved_model()}"
    return line if unreachable is None else f"{line}   ! {unreachable}"

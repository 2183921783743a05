"""Replay (docs/replay.md): recorded conversations run again against a change (model, system
prompt, skills, tool permissions, memory policy) in a sandbox copy of the workspace, and a report
that puts recorded and replayed turns side by side. Dev kit: the operator's CLI and console run
it (it builds an embedded backend for the sandbox); Lambda code never imports it."""

from shared.replay.change import ReplayChange, change_problems
from shared.replay.engine import NothingRecorded, recorded_sessions, replay
from shared.replay.render import render_html, render_markdown
from shared.replay.report import ReplayReport

__all__ = [
    "NothingRecorded",
    "ReplayChange",
    "ReplayReport",
    "change_problems",
    "recorded_sessions",
    "render_html",
    "render_markdown",
    "replay",
]

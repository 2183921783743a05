"""Sigil's core library: everything with logic lives here; handlers and the CLI only adapt."""

__version__ = "0.1.0"

"""Untrusted text (user input, tool results) made fit for the model and the store, in one call."""

from __future__ import annotations

from dataclasses import dataclass

from shared.safety.injection import ScanResult, quote_untrusted, scan
from shared.safety.redact import Redaction, redact


@dataclass(frozen=True)
class Guarded:
    text: str  # what the model sees and the session stores
    scan: ScanResult
    redaction: Redaction
    quoted: bool


def guard_untrusted(text: str, *, source: str, pii: bool, quote_all: bool = False) -> Guarded:
    """Scan `text` as it arrived, redact it, and quote it as data from `source` if the scan
    flagged it or `quote_all` asks for it always (tool results, say).

    The scan sees the text before redaction, because redaction strips the hidden characters
    (tag characters, bidi controls) that are findings in their own right.
    """
    result = scan(text)
    redaction = redact(text, pii=pii)
    quoted = result.flagged or quote_all
    shown = quote_untrusted(redaction.text, source) if quoted else redaction.text
    return Guarded(shown, result, redaction, quoted)

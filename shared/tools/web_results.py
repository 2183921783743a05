"""What the web tools' two halves share (shared.tools.web's client and web_fetch,
shared.tools.web_search's providers): the error a model reads and one search result. Its own
module so that neither half imports the other at run time."""

from __future__ import annotations

from dataclasses import dataclass

from shared.errors import SigilError


class WebError(SigilError):
    """The page or the search could not be read (a network failure, an error status, no answer
    in time): the model reads the message and may try another URL or answer without it."""

    code = "web_unavailable"
    http_status = 502


@dataclass(frozen=True)
class SearchHit:
    title: str
    url: str
    snippet: str
    age: str | None = None

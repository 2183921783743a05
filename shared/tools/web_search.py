"""`web_search`'s providers: Brave's Search API and a SearXNG instance (docs/tools.md, "Web tools").

Each turns one query into SearchHits through the WebClient (bounded in bytes and time, inside the
turn's deadline). Brave's key is read from the secret store at each call (a key rotated in the
store is used at once) and goes in one request header: never in a log, a result or an error.
"""

from __future__ import annotations

import html
import json
import re
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlencode

from shared.errors import SigilError
from shared.models import WebSearchConfig
from shared.ports import SecretStore
from shared.tools.web_results import SearchHit, WebError

if TYPE_CHECKING:
    from shared.tools.web import WebClient

BRAVE_ENDPOINT = "https://api.search.brave.com/res/v1/web/search"
# A search API's answer for 20 results is a few tens of KB; this is room to spare.
MAX_RESPONSE_BYTES = 1_000_000
MAX_SNIPPET_CHARS = 400
T = TypeVar("T", dict[str, Any], list[Any])
TAG = re.compile(r"<[^>]{0,200}>")


class SearchNotConfigured(SigilError):
    """The workspace names a provider whose key is not in the secret store."""

    code = "not_configured"
    http_status = 503


def search(
    config: WebSearchConfig,
    secrets: SecretStore,
    http: WebClient,
    query: str,
    count: int,
    *,
    timeout_s: float,
) -> list[SearchHit]:
    """Up to `count` results for `query` from the configured provider."""
    if config.provider == "brave":
        return _brave(config, secrets, http, query, count, timeout_s=timeout_s)
    return _searxng(config, http, query, count, timeout_s=timeout_s)


def _brave(
    config: WebSearchConfig,
    secrets: SecretStore,
    http: WebClient,
    query: str,
    count: int,
    *,
    timeout_s: float,
) -> list[SearchHit]:
    key = secrets.get(config.api_key_secret)
    if not key:
        raise SearchNotConfigured(
            f"web_search uses Brave, whose API key is not set (secret {config.api_key_secret!r}); "
            "tell the user web search is not set up here."
        )
    url = f"{config.endpoint or BRAVE_ENDPOINT}?{urlencode({'q': query, 'count': count})}"
    status, _, body = http.get_json(
        url, {"X-Subscription-Token": key}, max_bytes=MAX_RESPONSE_BYTES, timeout_s=timeout_s
    )
    data = _json(body, "Brave")
    if status != 200:
        code = str(_field(data, "error", dict).get("code") or status)
        if status == 429:
            raise WebError(f"Brave's search rate limit was reached ({code}); try again later")
        if status in (401, 403, 422) and "TOKEN" in code.upper():
            raise SearchNotConfigured(
                f"Brave refused the configured API key ({code}); tell the user to check it"
            )
        raise WebError(f"Brave's search answered {status} ({code})")
    results = _field(_field(data, "web", dict), "results", list)
    return [
        SearchHit(
            title=_text(r.get("title")),
            url=str(r.get("url") or ""),
            snippet=_text(r.get("description")),
            age=_text(r.get("age") or r.get("page_age")) or None,
        )
        for r in results[:count]
        if isinstance(r, dict) and r.get("url")
    ]


def _searxng(
    config: WebSearchConfig, http: WebClient, query: str, count: int, timeout_s: float
) -> list[SearchHit]:
    assert config.endpoint is not None  # WebSearchConfig requires it for searxng
    url = f"{config.endpoint}?{urlencode({'q': query, 'format': 'json'})}"
    status, _, body = http.get_json(url, {}, max_bytes=MAX_RESPONSE_BYTES, timeout_s=timeout_s)
    if status == 403:
        # SearXNG answers 403 when its settings.yml does not list json under search.formats.
        raise SearchNotConfigured(
            "the SearXNG instance refused the JSON format: add json to its search.formats"
        )
    if status != 200:
        raise WebError(f"the SearXNG instance answered {status}")
    results = _field(_json(body, "SearXNG"), "results", list)
    return [
        SearchHit(
            title=_text(r.get("title")),
            url=str(r.get("url") or ""),
            snippet=_text(r.get("content")),
            age=_text(r.get("publishedDate")) or None,
        )
        for r in results[:count]
        if isinstance(r, dict) and r.get("url")
    ]


def _json(body: bytes, provider: str) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError:
        raise WebError(f"{provider}'s answer was not JSON") from None
    if not isinstance(data, dict):
        raise WebError(f"{provider}'s answer was not a JSON object")
    return data


def _field(data: Any, name: str, kind: type[T]) -> T:
    """data[name] when data is an object and it is of `kind`; else an empty one (a field an
    answer leaves out, or sends as null, means nothing found)."""
    value = data.get(name) if isinstance(data, dict) else None
    return value if isinstance(value, kind) else kind()


def _text(value: Any) -> str:
    """A snippet as plain text: Brave marks matches with <strong>, and escapes entities."""
    if not isinstance(value, str):
        return ""
    text = " ".join(html.unescape(TAG.sub("", value)).split())
    return text if len(text) <= MAX_SNIPPET_CHARS else text[: MAX_SNIPPET_CHARS - 1] + "…"

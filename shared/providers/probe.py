"""Is the model server there? A quick look at a provider's endpoint, and a failure's cause in words.

`sigil dev` asks once at start (shared.providers.probe_model), so a stopped or misspelt model
server is said in one line before the first message rather than found by it: 14 s of retries and
a dead letter later. The look is the SDK's own model listing (GET /models), one attempt with a
short timeout: a connection that fails, or a key the server refuses, is what it reports. Any other
answer counts as there, as OpenAI-compatible servers need not list their models.

`connection_cause` words what lies under an SDK's connection error (refused, no such host, timed
out) for these lines and for a failed call's message: the OS's words, never the server's (those
can quote the request or the key).
"""

from __future__ import annotations

import re
from typing import Any

_ERRNO = re.compile(r"^\[Errno -?\d+\]\s*")
_USERINFO = re.compile(r"//[^/@]*@")
_MAX_CAUSE = 200


def connection_cause(exc: BaseException) -> str | None:
    """The innermost cause of a connection error, e.g. "Connection refused"; None if it has none.

    The SDKs raise APIConnectionError("Connection error.") from the transport's error, which holds
    the socket's own words; the chain is followed down to the last exception that has any."""
    found: str | None = None
    seen: set[int] = set()
    current: BaseException | None = exc.__cause__ or exc.__context__
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = _ERRNO.sub("", str(current)).strip()
        if text:
            found = text
        current = current.__cause__ or current.__context__
    if found is None and "timeout" in type(exc).__name__.lower():
        return "timed out"
    return None if found is None else found[:_MAX_CAUSE]


def probe_endpoint(sdk: Any, client: Any, where: str, timeout_s: float, secret: str | None) -> str | None:
    """One line on what is wrong with the endpoint behind `client` (an OpenAI or Anthropic SDK
    client; `sdk` its module, whose error classes share their names), or None when it answered."""
    where = _USERINFO.sub("//", where)  # a proxy's credentials in the URL stay out of the line
    try:
        client.with_options(timeout=timeout_s, max_retries=0).models.list()
    except (sdk.AuthenticationError, sdk.PermissionDeniedError) as exc:
        return f"the model server at {where} refused the API key (HTTP {exc.status_code})"
    except sdk.APIStatusError:
        return None  # it answered: a compatible server without the models list is fine
    except sdk.APITimeoutError:
        return f"the model server at {where} did not answer within {timeout_s:g} s"
    except sdk.APIConnectionError as exc:
        cause = connection_cause(exc) or type(exc).__name__
        line = f"cannot reach the model server at {where}: {cause}"
        return line.replace(secret, "[redacted]") if secret else line
    return None

"""Who the console answers: its Host allow-list, the Origin checks and the launch secret.

Binding to loopback keeps other machines out, not other web pages in the operator's own browser:
a page on attacker.example can point its name at 127.0.0.1 (DNS rebinding) and then read the
console's pages, CSRF token included, as its own origin. So before any route runs, a request must
(docs/console.md, Security model):

1. name the console in its Host header: the address it is bound to, a loopback name or address,
   or a name the operator allowed (`--allow-host`); a rebound name is refused with 400;
2. when it carries an Origin, come from the console's own origin (`http://` + its Host), and
   when it changes something (any method but GET and HEAD), not be marked by Sec-Fetch-Site as
   sent from another site or another port of this one; else 403;
3. carry the launch secret, made when the console starts and printed in its URL
   (`/?token=...`): a GET with the right `token` gets it as an HttpOnly, SameSite=Strict cookie
   and a redirect to the same address without it, and every other request needs that cookie
   (403 otherwise). Both are compared in constant time.

The cookie's name holds the port, since a browser sends localhost's cookies to every port: two
consoles on one machine keep one secret each.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from shared.console.html import esc, page

TOKEN_PARAM = "token"  # noqa: S105 -- the query parameter's name, not the secret
COOKIE_PREFIX = "sigil-console-"
SAFE_METHODS = frozenset({"GET", "HEAD"})
# A state-changing request a browser sent from this very origin, or one the user started by
# typing or clicking outside any page; "same-site" is another port of localhost: refused.
SAME_ORIGIN_FETCH = frozenset({"same-origin", "none"})


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(value: str) -> str | None:
    """The host name of a Host header ("127.0.0.1:8790", "[::1]:8790", "localhost"), lower-cased
    and without brackets; None when it is not one."""
    if not value or any(c in value for c in "/?#@\\ "):
        return None
    try:
        split = urlsplit("//" + value)
        _ = split.port  # a port that is not a number raises here
    except ValueError:
        return None
    return split.hostname or None


def cookie_name(scope: Scope) -> str:
    server = scope.get("server")
    port = server[1] if server and server[1] is not None else 0
    return f"{COOKIE_PREFIX}{port}"


class ConsoleGuard:
    """ASGI middleware in front of the console's routes; see the module docstring."""

    def __init__(self, app: ASGIApp, *, secret: str, hosts: Iterable[str] = ()) -> None:
        if not secret:
            raise ValueError("the console needs a launch secret")
        self.app = app
        self._secret = secret.encode()
        self._hosts = frozenset(h.strip("[]").lower() for h in hosts if h)

    def allowed_host(self, name: str) -> bool:
        return name in self._hosts or is_loopback(name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # the console serves no websocket
            return
        refusal = self.check(scope)
        await (refusal or self.app)(scope, receive, send)

    def check(self, scope: Scope) -> Response | None:
        """None when the request may reach the routes; else the response that refuses it (or, for
        the printed URL, the one that sets the cookie)."""
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        name = host_name(host)
        if name is None or not self.allowed_host(name):
            return refusal(400, "refused: this console answers only to its own address (Host header)")
        origin = headers.get("origin")
        if origin is not None and origin != f"http://{host}":
            return refusal(403, "refused: the request comes from another site (Origin header)")
        method = scope["method"]
        fetched = headers.get("sec-fetch-site")
        if method not in SAFE_METHODS and fetched is not None and fetched not in SAME_ORIGIN_FETCH:
            return refusal(403, "refused: the request comes from another site (Sec-Fetch-Site header)")
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        offered = [v for k, v in query if k == TOKEN_PARAM]
        if offered and method in SAFE_METHODS:
            return self._login(scope, offered[0], [(k, v) for k, v in query if k != TOKEN_PARAM])
        if self._matches(_cookie(headers, cookie_name(scope))):
            return None
        return refusal(
            403,
            "refused: this console needs the secret it printed when it started; open the address "
            "it printed (the one with ?token=)",
        )

    def _matches(self, offered: str | None) -> bool:
        return offered is not None and hmac.compare_digest(offered.encode(), self._secret)

    def _login(self, scope: Scope, offered: str, rest: list[tuple[str, str]]) -> Response:
        """The printed URL: the cookie, and the same address without the secret in it (so it is
        in no page's address, history entry or Referer from here on)."""
        if not self._matches(offered):
            return refusal(403, "refused: that is not this console's secret (it changes at each start)")
        path = scope.get("path", "/") or "/"
        response = RedirectResponse(path + (f"?{urlencode(rest)}" if rest else ""), status_code=303)
        response.set_cookie(
            cookie_name(scope), self._secret.decode(), httponly=True, samesite="strict", path="/"
        )
        response.headers["Cache-Control"] = "no-store"
        return response


def _cookie(headers: Headers, name: str) -> str | None:
    for value in headers.getlist("cookie"):
        if (found := cookie_parser(value).get(name)) is not None:
            return found
    return None


def refusal(status: int, why: str, *, source: str = "") -> Response:
    """The page of a refused request: `why`, with `status`."""
    body = page("Refused", f'<p class="error">{esc(why)}</p>', active="", source=source)
    return HTMLResponse(body, status_code=status, headers={"Cache-Control": "no-store"})

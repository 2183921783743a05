"""The web tools: `web_fetch` (a page's readable text) and `web_search` (docs/tools.md, "Web tools").

Both are off unless the workspace's config turns them on (WorkspaceConfig.web), and both declare
untrusted output: what a page or a search engine says reaches the model quoted as data.

A fetch is a request from inside the deployment's network on a URL the model wrote, which a page
or a message may have put in its mouth: the classic server-side request forgery. So `web_fetch`

- takes http and https only, on any port;
- resolves the host itself (the Resolver port) and refuses it unless every address it resolves
  to is public: no private, loopback, link-local (169.254.169.254, the instance metadata), shared,
  reserved, multicast or unspecified address, IPv4-mapped, 6to4 and NAT64 forms included, and
  not EC2's IPv6 metadata address fd00:ec2::254;
- connects to the address it checked (the Host header and TLS's SNI still name the host), so a
  second DNS answer between the check and the connect (DNS rebinding) is never used;
- follows redirects itself, at most MAX_REDIRECTS, checking each new URL the same way;
- reads at most WebConfig.max_bytes of the body (the rest is never read), asks for no compression
  and bounds what a compressed body may inflate to, refuses what is not text;
- ends by the earlier of WebConfig.timeout_s and the turn's deadline (shared.deadline):
  every socket wait is cut to the time left.

`web_search` asks the provider the operator configured (shared.tools.web_search), whose endpoint
is the operator's choice and so not held to the address rules (a self-hosted SearXNG usually
lives on a private network). Its API key comes from the secret store at each call, and is never
logged, returned or put in an error.

The extractor (readability-lxml for the main content, html-text for its text) is imported inside
the tool: it costs 0.3-0.4 s, which a turn that fetches nothing never pays.
"""

from __future__ import annotations

import codecs
import http.client
import ipaddress
import re
import socket
import ssl
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from email.message import Message
from functools import cache
from typing import Any, Protocol
from urllib.parse import quote, urljoin, urlsplit

from pydantic import BaseModel, ConfigDict, Field

from shared.deadline import remaining, within
from shared.errors import BadRequest, Forbidden, SigilError
from shared.models import WebConfig, new_workspace
from shared.tools.core import Tool, ToolContext, tool
from shared.tools.web_results import SearchHit, WebError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_REDIRECTS = 5
# What one result shows of a page, in characters: the registry cuts results at 8 KB (UTF-8), and
# the header and the note about the rest need room. `offset` pages through the rest.
MAX_TEXT_CHARS = 6000
USER_AGENT = "Sigil-web_fetch/1.0 (an AI assistant reading a page for its user)"
CHUNK = 64 * 1024
# Media types read as text; anything else (PDF, images, archives) is refused before its body.
TEXT_TYPES = re.compile(r"^(text/[\w.+-]+|application/(xhtml\+xml|xml|json|[\w.-]+\+(xml|json)))$")
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
# Addresses is_global calls public but that still reach inside: EC2's IPv6 metadata endpoint (in
# fd00::/8, already not global, listed to say so) and the multicast ranges.
ALWAYS_REFUSED: tuple[IPNetwork, ...] = (
    ipaddress.ip_network("fd00:ec2::254/128"),
    ipaddress.ip_network("169.254.169.254/32"),
    ipaddress.ip_network("224.0.0.0/4"),
    ipaddress.ip_network("ff00::/8"),
)
NAT64 = ipaddress.ip_network("64:ff9b::/96")


class AddressRefused(Forbidden):
    """The URL's host is, or resolves to, an address web_fetch never connects to."""

    code = "address_refused"


class Resolver(Protocol):
    """Host name to IP addresses (the DNS edge). `timeout_s` bounds the lookup; None: none."""

    def __call__(self, host: str, port: int, timeout_s: float | None) -> list[str]: ...


# getaddrinfo takes no timeout: it runs on these threads so that the caller stops waiting when
# the deadline passes (the lookup itself ends on the resolver's own timeouts).
_lookups = ThreadPoolExecutor(max_workers=4, thread_name_prefix="sigil-dns")


def system_resolver(host: str, port: int, timeout_s: float | None) -> list[str]:
    """The machine's resolver (getaddrinfo), every address it returns."""
    future = _lookups.submit(socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM)
    try:
        infos = future.result(timeout=timeout_s)
    except FutureTimeout:
        raise WebError(f"looking up {host!r} took too long") from None
    except socket.gaierror:
        raise WebError(f"the host {host!r} was not found") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def refused_reason(address: IPAddress) -> str | None:
    """Why web_fetch never connects to `address`, or None when it may."""
    if isinstance(address, ipaddress.IPv6Address):
        # An IPv4 address carried in IPv6 is judged as that IPv4 address.
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return refused_reason(embedded)
    if any(address in net for net in ALWAYS_REFUSED):
        return "a metadata or multicast address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_private:
        return "a private address"
    if address.is_unspecified or address.is_reserved or not address.is_global:
        return "a reserved address"
    return None


@dataclass(frozen=True)
class Fetched:
    url: str  # after redirects
    status: int
    media_type: str
    charset: str | None
    body: bytes
    cut: bool  # the body went on past the cap and was not read further


@dataclass(frozen=True)
class WebClient:
    """HTTP GETs bounded in bytes and time, to checked and pinned addresses.

    `allow` lists networks admitted although the rules refuse them. Nothing in Sigil sets it: it
    exists for tests, whose servers listen on 127.0.0.1, and is passed by construction, never read
    from the environment. `resolver` is the DNS edge (tests give names their own answers).
    """

    resolver: Resolver = system_resolver
    allow: tuple[IPNetwork, ...] = ()
    max_redirects: int = MAX_REDIRECTS
    # None: the system's CA bundle, loaded at the first https request (40 ms: not at import).
    tls: ssl.SSLContext | None = None

    def fetch(self, url: str, *, max_bytes: int, timeout_s: float) -> Fetched:
        """GET `url` (following redirects, each checked), reading at most `max_bytes` of text."""
        at = within(timeout_s)
        for _ in range(self.max_redirects + 1):
            host, port, addresses = self._checked(url, at)
            response, conn = self._open(
                url, host, port, addresses=addresses, headers={"Accept": _ACCEPT}, at=at
            )
            try:
                if response.status in (301, 302, 303, 307, 308):
                    location = response.getheader("Location")
                    if not location:
                        raise WebError(f"{url} redirected ({response.status}) without saying where")
                    url = urljoin(url, location.strip())
                    continue
                return self._read_page(url, response, conn, max_bytes, at)
            finally:
                conn.close()
        raise WebError(f"more than {self.max_redirects} redirects; stopped at {url}")

    def get_json(
        self, url: str, headers: dict[str, str], *, max_bytes: int, timeout_s: float
    ) -> tuple[int, dict[str, str], bytes]:
        """GET an API the operator configured (a search engine): no address rules, no redirects.
        The status, the headers (lower-cased names) and at most `max_bytes` of the body."""
        at = within(timeout_s)
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BadRequest("the search endpoint must be an http or https URL")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        response, conn = self._open(
            url,
            parts.hostname,
            port,
            addresses=None,
            headers={"Accept": "application/json", **headers},
            at=at,
        )
        try:
            body, _ = _read(response, conn, max_bytes, at, encoding=response.getheader("Content-Encoding"))
            return response.status, {k.lower(): v for k, v in response.getheaders()}, body
        finally:
            conn.close()

    # ---------------------------------------------------------------- the checks

    def _checked(self, url: str, at: float | None) -> tuple[str, int, tuple[str, ...]]:
        """The URL's host, port and the addresses to connect to, once every one the host resolves
        to has passed."""
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            raise BadRequest(f"{url!r} is not a valid URL") from None
        if parts.scheme not in ("http", "https"):
            raise BadRequest(
                f"only http and https URLs can be fetched, not {parts.scheme or 'a bare path'!r}"
            )
        host = parts.hostname
        if not host:
            raise BadRequest(f"{url!r} names no host")
        if parts.username is not None or parts.password is not None:
            raise BadRequest("a URL with a user name or password in it is not fetched")
        port = port or (443 if parts.scheme == "https" else 80)
        try:
            # An internationalised name as DNS and the Host header carry it (xn--...).
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise BadRequest(f"{parts.hostname!r} is not a valid host name") from None
        try:
            literal: IPAddress | None = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None:
            addresses = [str(literal)]
        else:
            addresses = self.resolver(host.rstrip("."), port, _left(at))
            if not addresses:
                raise WebError(f"the host {host!r} was not found")
        for text in addresses:
            address = ipaddress.ip_address(text.split("%", 1)[0])
            reason = refused_reason(address)
            if reason is not None and not any(address in net for net in self.allow):
                named = "" if literal is not None else f" resolves to {address}, which is"
                raise AddressRefused(
                    f"{host}{named} {reason}: web_fetch reaches public addresses only. "
                    "Tell the user it cannot be fetched from here."
                )
        return host, port, tuple(a.split("%", 1)[0] for a in addresses)

    # ---------------------------------------------------------------- the request

    def _open(
        self,
        url: str,
        host: str,
        port: int,
        *,
        addresses: tuple[str, ...] | None,
        headers: dict[str, str],
        at: float | None,
    ) -> tuple[http.client.HTTPResponse, http.client.HTTPConnection]:
        parts = urlsplit(url)
        timeout = _left(at)
        conn: http.client.HTTPConnection
        if parts.scheme == "https":
            conn = _PinnedHTTPS(host, port, addresses, timeout=timeout, context=self.tls or _system_tls())
        else:
            conn = _PinnedHTTP(host, port, addresses, timeout=timeout)
        # A path or query as the model wrote it may hold spaces or non-ASCII letters: percent-
        # encoded here (what is already encoded stays as it is).
        path = quote(parts.path or "/", safe=_URL_SAFE)
        if parts.query:
            path += "?" + quote(parts.query, safe=_URL_SAFE)
        try:
            conn.request(
                "GET",
                path,
                headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity", **headers},
            )
            _cut(conn, at)
            return conn.getresponse(), conn
        except SigilError:
            conn.close()
            raise
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise _network_error(host, exc, at) from None

    def _read_page(
        self,
        url: str,
        response: http.client.HTTPResponse,
        conn: http.client.HTTPConnection,
        max_bytes: int,
        at: float | None,
    ) -> Fetched:
        if response.status >= 400:
            raise WebError(f"{url} answered {response.status} {response.reason}")
        message = Message()
        message["Content-Type"] = response.getheader("Content-Type") or "application/octet-stream"
        media_type = message.get_content_type()
        if not TEXT_TYPES.match(media_type):
            raise BadRequest(f"{url} is {media_type}; web_fetch reads web pages and other text only")
        body, cut = _read(response, conn, max_bytes, at, encoding=response.getheader("Content-Encoding"))
        return Fetched(
            url=url,
            status=response.status,
            media_type=media_type,
            charset=_charset(message.get_param("charset")),
            body=body,
            cut=cut,
        )


@cache
def _system_tls() -> ssl.SSLContext:
    return ssl.create_default_context()


def _charset(value: object) -> str | None:
    """The Content-Type's charset when Python knows it; None lets the extractor guess."""
    if not isinstance(value, str):
        return None
    try:
        return codecs.lookup(value).name
    except LookupError:
        return None


_URL_SAFE = "/%:@!$&'()*+,;=?~-._"
_ACCEPT = "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.8,*/*;q=0.1"


def _left(at: float | None) -> float | None:
    left = remaining(at)
    if left is not None and left <= 0:
        raise WebError("the page did not answer in time")
    return left


def _cut(conn: http.client.HTTPConnection, at: float | None) -> None:
    """Cut the socket's next wait to the time left."""
    if conn.sock is not None:
        conn.sock.settimeout(_left(at))


def _network_error(host: str, exc: BaseException, at: float | None) -> WebError:
    if isinstance(exc, TimeoutError) or (remaining(at) or 1) <= 0:
        return WebError(f"{host} did not answer in time")
    if isinstance(exc, ssl.SSLError):
        return WebError(f"{host}: the TLS connection failed ({type(exc).__name__})")
    return WebError(f"{host} could not be reached ({type(exc).__name__})")


def _read(
    response: http.client.HTTPResponse,
    conn: http.client.HTTPConnection,
    max_bytes: int,
    at: float | None,
    *,
    encoding: str | None,
) -> tuple[bytes, bool]:
    """At most `max_bytes` of the (decoded) body, and whether there was more. Every read's wait
    is cut to the time left; the rest of the body is never read (the connection is closed)."""
    coding = (encoding or "identity").strip().lower()
    if coding in ("gzip", "x-gzip", "deflate"):
        # Asked for none, but a server may compress anyway: inflate at most max_bytes + 1, so a
        # small body that inflates to gigabytes stops at the cap like any other.
        inflater: Any = zlib.decompressobj(wbits=47 if coding != "deflate" else 15)
    elif coding == "identity":
        inflater = None
    else:
        raise WebError(f"the page came {coding}-encoded, which web_fetch does not read")
    out = bytearray()
    try:
        while len(out) <= max_bytes:
            _cut(conn, at)
            chunk = response.read1(CHUNK) if hasattr(response, "read1") else response.read(CHUNK)
            if not chunk:
                break
            if inflater is not None:
                chunk = inflater.decompress(chunk, max_bytes + 1 - len(out))
            out += chunk
    except (OSError, http.client.HTTPException, zlib.error) as exc:
        raise _network_error(conn.host, exc, at) from None
    cut = len(out) > max_bytes
    return bytes(out[:max_bytes]), cut


def _connect(addresses: tuple[str, ...] | None, host: str, port: int, timeout: float | None) -> socket.socket:
    """A TCP connection to the first of `addresses` that answers (None: the host's own
    resolution, for the operator's endpoints). Never a lookup of its own for a checked URL, so
    what was checked is what is reached."""
    if addresses is None:
        return socket.create_connection((host, port), timeout)
    error: OSError | None = None
    for address in addresses:
        try:
            return socket.create_connection((address, port), timeout)
        except TimeoutError:
            raise
        except OSError as exc:  # e.g. an IPv6 address on a network without IPv6: try the next
            error = exc
    raise error or OSError(f"no address to connect to for {host}")


class _PinnedHTTP(http.client.HTTPConnection):
    """Connects to the checked `addresses` while naming `host` in the Host header."""

    def __init__(
        self, host: str, port: int, addresses: tuple[str, ...] | None, *, timeout: float | None
    ) -> None:
        super().__init__(host, port, timeout=timeout)
        self._addresses = addresses

    def connect(self) -> None:
        self.sock = _connect(self._addresses, self.host, self.port, self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _PinnedHTTPS(http.client.HTTPSConnection):
    """As _PinnedHTTP over TLS: the certificate is checked against `host` (SNI names it too)."""

    def __init__(
        self,
        host: str,
        port: int,
        addresses: tuple[str, ...] | None,
        *,
        timeout: float | None,
        context: ssl.SSLContext,
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._addresses = addresses
        self._tls = context

    def connect(self) -> None:
        sock = _connect(self._addresses, self.host, self.port, self.timeout)
        self.sock = self._tls.wrap_socket(sock, server_hostname=self.host)


# ---------------------------------------------------------------- readable text


@dataclass(frozen=True)
class Page:
    title: str | None
    text: str


def readable(fetched: Fetched) -> Page:
    """The page's main text: readability's article for HTML, the text itself otherwise."""
    if fetched.media_type not in HTML_TYPES:
        return Page(title=None, text=fetched.body.decode(fetched.charset or "utf-8", errors="replace"))
    # Imported here: lxml and the extractors cost 0.3-0.4 s, paid by the first fetch only.
    import html_text
    from readability import Document

    html = fetched.body.decode(fetched.charset, errors="replace") if fetched.charset else fetched.body
    try:
        document = Document(html, url=fetched.url)
        title = document.short_title() or None
        text = html_text.extract_text(document.summary(html_partial=True), guess_layout=True)
    except Exception:  # noqa: BLE001 -- readability gives up on odd pages: fall back to all the text
        title, text = None, ""
    if len(text.strip()) < 200:
        # Readability keeps the best-scoring block: on a short page or a list of links it can keep
        # almost nothing, while the page's whole text is still small and useful.
        whole = html_text.extract_text(html if isinstance(html, str) else html.decode("utf-8", "replace"))
        if len(whole.strip()) > len(text.strip()):
            text = whole
    return Page(title=title, text=_tidy(text))


def _tidy(text: str) -> str:
    text = re.sub(r"[ \t\u00a0]+\n", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


# ---------------------------------------------------------------- the tools


class WebFetchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(max_length=2048, description="The page's full URL, http:// or https://.")
    offset: int = Field(
        default=0,
        ge=0,
        description="Where to start in the page's text, in characters: to read on from where an "
        "earlier call's result said it stopped.",
    )


class WebSearchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=400, description="What to search the web for.")
    count: int | None = Field(
        default=None, ge=1, le=20, description="How many results (default: the workspace's setting)."
    )


def web_config(ctx: ToolContext) -> WebConfig:
    workspace = ctx.backend.workspaces.get(ctx.workspace_id) or new_workspace(ctx.workspace_id)
    return workspace.web


def web_tools(client: WebClient | None = None) -> tuple[Tool[Any], ...]:
    """`web_fetch` and `web_search` over `client` (the default: the system resolver, no
    exceptions to the address rules)."""
    http = client or WebClient()

    @tool(name="web_fetch", untrusted_output=True)
    def web_fetch(args: WebFetchArgs, ctx: ToolContext) -> str:
        """Read a web page: its main text (title and article, without menus, scripts or ads), or a
        text file as it is. Use it to read a URL the user gave or a search result. Long pages come
        in parts: call again with the offset the result names to read on."""
        config = web_config(ctx)
        if not config.fetch:
            raise Forbidden(
                "web_fetch is not enabled in this workspace (its config's web.fetch). "
                "Answer without it, or tell the user it is off here.",
                code="permission_denied",
            )
        fetched = http.fetch(args.url.strip(), max_bytes=config.max_bytes, timeout_s=config.timeout_s)
        return render_page(fetched, readable(fetched), args.offset)

    @tool(name="web_search", untrusted_output=True)
    def web_search(args: WebSearchArgs, ctx: ToolContext) -> str:
        """Search the web. Returns titles, URLs and snippets; read a result with web_fetch when the
        snippet is not enough."""
        config = web_config(ctx)
        if config.search is None:
            raise Forbidden(
                "web_search is not enabled in this workspace (its config's web.search). "
                "Answer without it, or tell the user it is off here.",
                code="permission_denied",
            )
        # Imported here: only a workspace that searches needs the providers.
        from shared.tools.web_search import search

        count = args.count or config.search.max_results
        hits = search(config.search, ctx.backend.secrets, http, args.query, count, timeout_s=config.timeout_s)
        return render_hits(config.search.provider, args.query, hits)

    return (web_fetch, web_search)


def render_page(fetched: Fetched, page: Page, offset: int) -> str:
    text = page.text
    size = f"{len(fetched.body):,} bytes" + (f", cut at {len(fetched.body):,}" if fetched.cut else "")
    lines = [f"web_fetch: {fetched.url} ({fetched.status}, {fetched.media_type}, {size})"]
    if page.title:
        lines.append(f"Title: {page.title}")
    if offset >= len(text) and text:
        lines.append(f"[the text has {len(text)} characters; offset {offset} is past its end]")
        return "\n".join(lines)
    part = text[offset : offset + MAX_TEXT_CHARS]
    if offset:
        lines.append(f"[characters {offset} to {offset + len(part)} of {len(text)}]")
    lines += ["", part or "(the page has no readable text)"]
    end = offset + len(part)
    if end < len(text):
        lines += ["", f"[{len(text) - end} more characters: call web_fetch with offset {end} to read on]"]
    return "\n".join(lines)


def render_hits(provider: str, query: str, hits: Sequence[SearchHit]) -> str:
    if not hits:
        return f"web_search ({provider}): no results for {query!r}"
    lines = [f"web_search ({provider}): {len(hits)} results for {query!r}"]
    for i, hit in enumerate(hits, 1):
        age = f" · {hit.age}" if hit.age else ""
        lines.append(f"{i}. {hit.title or '(untitled)'} — {hit.url}{age}")
        if hit.snippet:
            lines.append(f"   {hit.snippet}")
    return "\n".join(lines)


WEB_TOOLS: tuple[Tool[Any], ...] = web_tools()

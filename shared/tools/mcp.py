"""MCP servers' tools for a turn, on the official `mcp` SDK (docs/mcp.md).

A workspace names its servers in its config (WorkspaceConfig.mcp). At the start of a turn
`McpToolbox(workspace)` gives the tools the workspace exposes, from each server's tool list,
discovered once and cached in the process for `mcp.cache_ttl_s` per workspace and server (a
Lambda container keeps its cache between invocations; a new one discovers again). A server that
cannot be listed adds no tools to the turn, and is not asked again for a short while.

Each tool is named `mcp__<server>__<tool>` (tool_name): the prefix keeps it apart from Sigil's
own tools and from another server's, and a name the providers would refuse is made safe with a
digest of the original. The model sees only the tools the server's `tools` list exposes; a
call to any other name is refused by the registry (unknown_tool), and the workspace's
tools_allow / tools_deny apply to these names as to every tool.

What a server returns is third-party text: every result (an error's text too) reaches the model
quoted as untrusted data (Tool.untrusted_output), and a tool description the injection scan
flags is withheld (the model reads descriptions as instructions of a sort).

Every call (discovery too) ends by the earlier of the server's `timeout_s` and the turn's
deadline (shared.deadline); a server that hangs is cut and the model gets an error
result. The SDK is async: each call runs its own event loop on a short-lived thread, joined
with the same limit. The SDK is imported only by a turn of a workspace that has servers.

Credentials come from the secret store under the workspace's own prefix (mcp_secret_name): the
config names a secret, the workspace id comes from the turn. A stdio server (a local program)
is run only where the composition root passes a `stdio` connector: `sigil dev` does
(shared.local.mcp_stdio), the cloud does not and refuses it.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict

from shared.deadline import current, passed, remaining, within
from shared.errors import DeadlineExceeded, SigilError
from shared.models import WorkspaceConfig
from shared.models.mcp import BearerAuth, McpServer, mcp_secret_name
from shared.ports import SecretStore
from shared.safety.injection import scan
from shared.tools.core import NAME_PATTERN, Tool, ToolContext, _clean

if TYPE_CHECKING:
    from mcp import Client

log = logging.getLogger("sigil.mcp")

T = TypeVar("T")

PREFIX = "mcp__"
MAX_DESCRIPTION = 1024  # characters of a server's tool description the model gets
MAX_SCHEMA_BYTES = 16 * 1024  # a larger input schema is a cost on every request: the tool is left out
FAILURE_TTL_S = 30.0  # a server that could not be listed is not asked again before this
JOIN_GRACE_S = 2.0  # past the call's own limit, for its event loop to unwind the cancellation

# A connector for stdio servers: given the server, the SDK transport that runs its program.
StdioConnector = Callable[[McpServer], Any]


class McpTimedOut(SigilError):
    """A server that did not answer within its own `timeout_s`, while the turn still has time: the
    model is told and the turn goes on. Past the turn's deadline it is DeadlineExceeded instead,
    which ends the turn (shared.tools.registry)."""

    code = "deadline_exceeded"
    http_status = 504


class McpError(SigilError):
    """An MCP server could not be used: not reachable, refused us, a missing secret, a config
    the runtime does not run. The message is ours, safe to show the model and an operator."""

    code = "mcp_unavailable"
    http_status = 502


class McpToolError(SigilError):
    """The server ran the tool and reported an error (its text, which the turn quotes)."""

    code = "mcp_tool_error"
    http_status = 502


@dataclass(frozen=True)
class Discovered:
    """One tool of a server, as its tool list gave it."""

    name: str  # the server's own name for it
    description: str
    input_schema: dict[str, Any]


class McpArguments(BaseModel):
    """Whatever object the model wrote: the server validates its own arguments."""

    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True)
class McpTool(Tool[McpArguments]):
    """A server's tool as the registry holds it: its parameters are the server's input schema."""

    server: str = ""
    remote_name: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "parameters", self.input_schema)


def tool_name(server: str, tool: str) -> str:
    """`mcp__<server>__<tool>`, within the providers' rule (^[A-Za-z0-9_-]{1,64}$): a tool name
    that breaks it, or makes the whole too long, is cleaned and cut and gets 8 hex digits of its
    original's digest, so two names that clean alike still differ."""
    clean = re.sub(r"[^A-Za-z0-9_-]", "_", tool)
    name = f"{PREFIX}{server}__{clean}"
    if clean != tool or not NAME_PATTERN.match(name):
        digest = hashlib.sha256(tool.encode()).hexdigest()[:8]
        name = f"{name[:55]}_{digest}"
    return name


def exposed(server: McpServer, tool: str) -> bool:
    """Whether the workspace exposes the server's tool `tool` (its own name)."""
    return any(fnmatch.fnmatchcase(tool, pattern) for pattern in server.tools)


@dataclass
class _Entry:
    expires: float
    tools: list[Discovered] | None  # None: the listing failed
    error: str | None = None


class McpToolbox:
    """The tools of a workspace's MCP servers, for TurnDeps.workspace_tools, and the calls."""

    def __init__(
        self,
        secrets: SecretStore,
        *,
        stdio: StdioConnector | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._secrets = secrets
        self._stdio = stdio
        self._clock = clock
        self._cache: dict[tuple[str, str], _Entry] = {}
        self._lock = threading.Lock()

    def __call__(self, workspace: WorkspaceConfig) -> list[Tool[Any]]:
        """The tools `workspace` exposes, from each server's cached or fresh tool list."""
        tools: list[Tool[Any]] = []
        names: set[str] = set()
        for server in workspace.mcp.servers:
            try:
                listed = self.discover(workspace, server)
            except SigilError as exc:
                log.warning(
                    "mcp server unavailable",
                    extra={"workspace_id": workspace.id, "server": server.name, "code": exc.code},
                )
                continue
            for found in listed:
                if not exposed(server, found.name):
                    continue
                built = self._tool(workspace, server, found)
                if built is None or built.name in names:
                    continue
                names.add(built.name)
                tools.append(built)
        return tools

    def discover(
        self, workspace: WorkspaceConfig, server: McpServer, *, fresh: bool = False
    ) -> list[Discovered]:
        """The server's whole tool list (exposed or not), cached per workspace and server config.
        A failure raises McpError, and is remembered for FAILURE_TTL_S unless `fresh`."""
        key = (workspace.id, server.model_dump_json())
        now = self._clock()
        with self._lock:
            entry = self._cache.get(key)
        if entry is not None and entry.expires > now and not fresh:
            if entry.tools is None:
                raise McpError(entry.error or f"MCP server {server.name!r} is unavailable")
            return entry.tools
        try:
            tools = self._run(workspace.id, server, _list_tools)
        except SigilError as exc:
            with self._lock:
                self._cache[key] = _Entry(
                    now + min(FAILURE_TTL_S, workspace.mcp.cache_ttl_s), None, exc.message
                )
            raise
        with self._lock:
            self._cache[key] = _Entry(now + workspace.mcp.cache_ttl_s, tools)
        return tools

    def call(self, workspace_id: str, server: McpServer, tool: str, arguments: dict[str, Any]) -> str:
        """Run the server's tool `tool` and return its content as text."""
        if not exposed(server, tool):
            # The registry holds only exposed tools; this is the same rule where the call leaves.
            raise McpError(
                f"the tool {tool!r} of MCP server {server.name!r} is not exposed here", code="forbidden"
            )
        started = time.monotonic()
        outcome = "ok"
        try:
            return self._run(workspace_id, server, lambda client: _call_tool(client, tool, arguments))
        except SigilError as exc:
            outcome = exc.code
            raise
        finally:
            # Never the arguments or the result: they carry the conversation.
            log.info(
                "mcp call",
                extra={
                    "workspace_id": workspace_id,
                    "server": server.name,
                    "tool": tool,
                    "outcome": outcome,
                    "duration_ms": round((time.monotonic() - started) * 1000, 3),
                },
            )

    # ---------------------------------------------------------------- building tools

    def _tool(self, workspace: WorkspaceConfig, server: McpServer, found: Discovered) -> McpTool | None:
        schema = _schema(found.input_schema)
        if schema is None:
            log.warning(
                "mcp tool left out: its input schema", extra={"server": server.name, "tool": found.name}
            )
            return None
        workspace_id, remote = workspace.id, found.name

        def run(args: McpArguments, ctx: ToolContext) -> str:
            if ctx.workspace_id != workspace_id:
                raise ValueError(f"an MCP tool of {workspace_id!r} called in {ctx.workspace_id!r}")
            return self.call(workspace_id, server, remote, dict(args.model_extra or {}))

        return McpTool(
            name=tool_name(server.name, remote),
            description=_description(server.name, found),
            args=McpArguments,
            fn=run,
            untrusted_output=True,
            server=server.name,
            remote_name=remote,
            input_schema=schema,
        )

    # ---------------------------------------------------------------- running the SDK

    def _run(self, workspace_id: str, server: McpServer, work: Callable[[Client], Awaitable[T]]) -> T:
        """`work` on a connected client, ended by the server's timeout or the turn's deadline."""
        _import_sdk()  # a cold import takes seconds: not out of the server's time
        limit = remaining(within(server.timeout_s))
        if limit is None or limit <= 0:
            raise DeadlineExceeded(f"no time was left in this turn for MCP server {server.name!r}")
        box: dict[str, Any] = {}

        async def main() -> T:
            import anyio

            with anyio.fail_after(limit):
                async with self._connect(workspace_id, server) as client:
                    return await work(client)

        def target() -> None:
            import anyio

            try:
                box["value"] = anyio.run(main)
            except BaseException as exc:  # noqa: BLE001 -- carried to the caller's thread
                box["error"] = exc

        thread = threading.Thread(target=target, name=f"mcp-{server.name}", daemon=True)
        thread.start()
        thread.join(limit + JOIN_GRACE_S)
        if thread.is_alive():
            # The loop did not unwind (a transport stuck outside anyio): left to end on its own.
            raise _timed_out(server)
        if "error" in box:
            error = _translated(server, box["error"])
            raise (_timed_out(server) if isinstance(error, DeadlineExceeded) else error) from None
        value: T = box["value"]
        return value

    def _connect(self, workspace_id: str, server: McpServer) -> AbstractAsyncContextManager[Client]:
        from mcp import Client
        from mcp_types import Implementation

        info = Implementation(name="sigil", version="1")
        if server.command is not None:
            if self._stdio is None:
                raise McpError(
                    f"MCP server {server.name!r} is a local program (stdio): only `sigil dev` runs "
                    "those; give the server a `url` to use it here",
                    code="config_error",
                )
            return Client(self._stdio(server), client_info=info, cache=None)
        return self._http(workspace_id, server, info)

    @asynccontextmanager
    async def _http(self, workspace_id: str, server: McpServer, info: Any) -> Any:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        assert server.url is not None
        headers: dict[str, str] = {}
        auth: Any = None
        if server.auth is not None:
            secret = self._secret(workspace_id, server.auth.secret, server)
            if isinstance(server.auth, BearerAuth):
                headers["Authorization"] = f"Bearer {secret}"
            else:
                from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider

                auth = ClientCredentialsOAuthProvider(
                    server_url=server.url,
                    storage=_MemoryTokens(),
                    client_id=server.auth.client_id,
                    client_secret=secret,
                    scope=server.auth.scope,
                    issuer=server.auth.issuer,
                )
        # Redirects stay off (the SDK follows same-origin ones itself): a token must not follow
        # a redirect to another host.
        http = httpx2.AsyncClient(headers=headers, auth=auth, timeout=httpx2.Timeout(server.timeout_s))
        async with (
            http,
            Client(streamable_http_client(server.url, http_client=http), client_info=info, cache=None) as c,
        ):
            yield c

    def _secret(self, workspace_id: str, secret: str, server: McpServer) -> str:
        name = mcp_secret_name(workspace_id, secret)
        value = self._secrets.get(name)
        if not value:
            raise McpError(
                f"MCP server {server.name!r} needs the secret {name!r}, which is not set "
                f"(`sigil secret set {name}`)",
                code="config_error",
            )
        return value


def _import_sdk() -> None:
    import httpx2  # noqa: F401
    import mcp.client.streamable_http  # noqa: F401
    from mcp import Client  # noqa: F401


class _MemoryTokens:
    """The OAuth provider's token storage: this process's memory (a token lives minutes)."""

    def __init__(self) -> None:
        self._tokens: Any = None
        self._client: Any = None

    async def get_tokens(self) -> Any:
        return self._tokens

    async def set_tokens(self, tokens: Any) -> None:
        self._tokens = tokens

    async def get_client_info(self) -> Any:
        return self._client

    async def set_client_info(self, client_info: Any) -> None:
        self._client = client_info


async def _list_tools(client: Client) -> list[Discovered]:
    tools: list[Discovered] = []
    cursor: str | None = None
    for _ in range(20):  # pages: a server that paginates without end cannot hold the turn
        page = await client.list_tools(cursor=cursor)
        tools += [Discovered(t.name, t.description or "", dict(t.input_schema or {})) for t in page.tools]
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


async def _call_tool(client: Client, tool: str, arguments: dict[str, Any]) -> str:
    result = await client.call_tool(tool, arguments)
    parts: list[str] = []
    for block in result.content:
        if block.type == "text":
            parts.append(block.text)
        elif block.type == "resource" and hasattr(block.resource, "text"):
            parts.append(block.resource.text)
        else:
            parts.append(f"[{block.type} content left out: only text reaches the model]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts)
    if result.is_error:
        raise McpToolError(text or "the tool reported an error")
    return text


def _timed_out(server: McpServer) -> SigilError:
    """The server ran out of time: the turn's (it ends the turn) or only its own (a tool error)."""
    message = f"MCP server {server.name!r} did not answer by the deadline"
    return DeadlineExceeded(message) if passed(current(), slack_s=0.05) else McpTimedOut(message)


def _translated(server: McpServer, exc: BaseException) -> SigilError:
    """What the turn is told of a failed call: our own message, never the SDK's (it may quote
    the URL, its credentials or the server's words unquoted)."""
    leaves = _leaves(exc)
    for leaf in leaves:
        if isinstance(leaf, SigilError):
            return leaf
    if any(isinstance(leaf, TimeoutError) for leaf in leaves):
        return DeadlineExceeded(f"MCP server {server.name!r} did not answer by the deadline")
    kinds = ", ".join(sorted({type(leaf).__name__ for leaf in leaves}))
    log.warning("mcp server failed", extra={"server": server.name, "error_type": kinds})
    return McpError(f"MCP server {server.name!r} could not be used ({kinds})")


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _schema(schema: dict[str, Any]) -> dict[str, Any] | None:
    """The server's input schema as the providers take it ($refs inlined, titles dropped, an
    object), or None when it cannot be (recursive, or too large to send on every request)."""
    try:
        body = dict(schema)
        defs = body.pop("$defs", {}) if isinstance(body.get("$defs"), dict) else {}
        body.pop("$schema", None)
        cleaned = _clean(body, defs, ())
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    cleaned["type"] = "object"
    cleaned.setdefault("properties", {})
    if len(json.dumps(cleaned).encode()) > MAX_SCHEMA_BYTES:
        return None
    return cleaned


def _description(server: str, found: Discovered) -> str:
    """The server's description, marked with its origin, cut, and withheld when the injection
    scan flags it: a description is read by the model on every turn."""
    text = " ".join(found.description.split())[:MAX_DESCRIPTION]
    if not text:
        text = f"The tool {found.name!r}."
    elif scan(text).flagged:
        text = f"The tool {found.name!r} (its description was withheld: it reads like instructions)."
    return f"[MCP server {server}] {text}"

"""`sigil mcp`: a workspace's MCP servers (docs/mcp.md), on the local data dir or a deployed
stack (--stack), with the credentials of that backend's secret store.

    sigil mcp list [-w WS]          each server and its tools, as a turn would name them
    sigil mcp test SERVER [-w WS]   connect now (no cache), list the tools, call none

Both connect as a turn of the workspace would: its config from the backend, its secrets under
mcp/<workspace>/, the server's timeout. A stdio server is run locally only: against a stack it
is reported as the cloud refuses it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

from shared.cli._app import DataDir, Region, Stack, app, open_backend

if TYPE_CHECKING:
    from shared.backend import Backend
    from shared.models import WorkspaceConfig
    from shared.models.mcp import McpServer
    from shared.tools.mcp import McpToolbox

mcp_app = typer.Typer(
    help="A workspace's MCP servers: their tools, and a connection test.", no_args_is_help=True
)
app.add_typer(mcp_app, name="mcp")

McpWorkspace = Annotated[
    str | None, typer.Option("--workspace", "-w", help="workspace id (default: $SIGIL_DEFAULT_WORKSPACE)")
]


def _toolbox(backend: Backend, stack: str | None) -> McpToolbox:
    from shared.tools.mcp import McpToolbox

    if stack is not None:
        return McpToolbox(backend.secrets)  # as the cloud's turns: no stdio
    from shared.local.mcp_stdio import stdio_transport

    return McpToolbox(backend.secrets, stdio=stdio_transport)


def _config(backend: Backend, workspace: str) -> WorkspaceConfig:
    from shared.models import new_workspace

    return backend.workspaces.get(workspace) or new_workspace(workspace)


def _where(server: McpServer) -> str:
    if server.url is not None:
        auth = f"{server.auth.type} (secret {server.auth.secret})" if server.auth else "no auth"
        return f"{server.url}, {auth}"
    return f"stdio: {' '.join(server.command or [])}"


@mcp_app.command("list")
def mcp_list(
    workspace: McpWorkspace = None, data_dir: DataDir = None, stack: Stack = None, region: Region = None
) -> None:
    """Each MCP server of the workspace and its tools: exposed ones as the model sees them."""
    from shared.errors import SigilError
    from shared.tools.mcp import exposed, tool_name

    with open_backend(data_dir, workspace, stack, region) as (backend, ws):
        config, toolbox = _config(backend, ws), _toolbox(backend, stack)
        if not config.mcp.servers:
            typer.echo(f"workspace {ws} has no MCP servers")
            return
        for server in config.mcp.servers:
            typer.echo(f"{server.name}: {_where(server)}")
            try:
                tools = toolbox.discover(config, server, fresh=True)
            except SigilError as exc:
                typer.echo(f"  unavailable: {exc.message}")
                continue
            for found in tools:
                shown = tool_name(server.name, found.name) if exposed(server, found.name) else "(not exposed)"
                typer.echo(f"  {found.name:<24} {shown}")


@mcp_app.command("test")
def mcp_test(
    server: Annotated[str, typer.Argument(help="the server's name in the workspace's config")],
    workspace: McpWorkspace = None,
    data_dir: DataDir = None,
    stack: Stack = None,
    region: Region = None,
) -> None:
    """Connect to one server as a turn would, list its tools, and say how long it took."""
    from shared.errors import SigilError
    from shared.tools.mcp import exposed

    with open_backend(data_dir, workspace, stack, region) as (backend, ws):
        config = _config(backend, ws)
        found = next((s for s in config.mcp.servers if s.name == server), None)
        if found is None:
            names = ", ".join(s.name for s in config.mcp.servers) or "none"
            raise typer.BadParameter(f"workspace {ws} has no MCP server {server!r}; it has: {names}")
        started = time.monotonic()
        try:
            tools = _toolbox(backend, stack).discover(config, found, fresh=True)
        except SigilError as exc:
            typer.echo(f"{server}: failed: {exc.message}", err=True)
            raise typer.Exit(1) from None
        took = (time.monotonic() - started) * 1000
        shown = sum(exposed(found, t.name) for t in tools)
        typer.echo(f"{server}: ok in {took:.0f} ms, {len(tools)} tools, {shown} exposed")

"""Local MCP servers over stdio, for `sigil dev` only (docs/mcp.md).

A stdio server is a program on the developer's machine that Sigil starts for each call: the
local composition root hands this connector to shared.tools.mcp.McpToolbox. The cloud's does
not, so a turn there refuses a stdio server with a config error: nothing a Lambda runs starts a
process.
"""

from __future__ import annotations

from typing import Any

from shared.models.mcp import McpServer


def stdio_transport(server: McpServer) -> Any:
    """The SDK's stdio transport running the server's `command` (its first word the program)."""
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    assert server.command is not None
    program, *args = server.command
    return stdio_client(StdioServerParameters(command=program, args=args))

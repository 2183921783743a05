"""A workspace's MCP servers (docs/mcp.md): where each is, how Sigil authenticates to it, and
which of its tools the workspace's turns may call.

Credentials are never in the configuration: `auth.secret` names a secret of the workspace's own,
stored as `mcp/<workspace>/<secret>` (`mcp_secret_name`), so a workspace's file can only ever
reach its own credentials, whatever it names.
"""

# Annotations are not postponed here: pydantic makes this module's models at import, and would
# evaluate each field's annotation from its text (shared/models/__init__.py).

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# A server's name goes into every tool name (mcp__<server>__<tool>), so it is short and has no
# "_": the double underscore then always separates the server from the tool.
MCP_SERVER_NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,23}$"
MCP_SECRET_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"  # noqa: S105 -- a name's pattern
MCP_URL_PATTERN = r"^https?://"
MCP_SECRET_PREFIX = "mcp/"  # noqa: S105 -- where the names start, no value


def mcp_secret_name(workspace_id: str, secret: str) -> str:
    """Where a workspace's MCP credential is stored: under its own workspace's prefix."""
    return f"{MCP_SECRET_PREFIX}{workspace_id}/{secret}"


class _Strict(BaseModel):
    # Built when first used, not at import: only a workspace with MCP servers validates them.
    model_config = ConfigDict(extra="forbid", defer_build=True)


class BearerAuth(_Strict):
    """A static token, sent as `Authorization: Bearer <token>`."""

    type: Literal["bearer"]
    secret: str = Field(
        pattern=MCP_SECRET_NAME_PATTERN,
        description="The workspace's secret holding the token: `sigil secret set mcp/<workspace>/<secret>`.",
    )


class OAuthClientCredentials(_Strict):
    """OAuth 2.1 client credentials (machine to machine), through the MCP SDK's provider: the
    server's authorization server issues the token, which the SDK refreshes as it expires."""

    type: Literal["oauth_client_credentials"]
    client_id: str = Field(min_length=1, max_length=256)
    secret: str = Field(
        pattern=MCP_SECRET_NAME_PATTERN,
        description="The workspace's secret holding the client secret: `mcp/<workspace>/<secret>`.",
    )
    issuer: str = Field(pattern=MCP_URL_PATTERN, description="The authorization server's issuer URL.")
    scope: str | None = None


McpAuth = Annotated[BearerAuth | OAuthClientCredentials, Field(discriminator="type")]


class McpServer(_Strict):
    """One MCP server: remote over Streamable HTTP (`url`), or a local program over stdio
    (`command`), which only `sigil dev` runs: the cloud refuses it."""

    name: str = Field(pattern=MCP_SERVER_NAME_PATTERN)
    url: str | None = Field(
        default=None, pattern=MCP_URL_PATTERN, description="The Streamable HTTP endpoint."
    )
    command: list[str] | None = Field(
        default=None, min_length=1, description="A local server started over stdio; `sigil dev` only."
    )
    auth: McpAuth | None = None
    # Exact names or shell-style patterns ("search_*") of the server's own tool names. Nothing is
    # exposed by default: a server's tool list is its author's, and may grow.
    tools: list[str] = Field(default_factory=list)
    # Each call's limit (discovery's too), always cut to what is left of the turn's deadline.
    timeout_s: float = Field(default=30.0, gt=0, le=300)

    @model_validator(mode="after")
    def _one_transport(self) -> "McpServer":
        if (self.url is None) == (self.command is None):
            raise ValueError(f"MCP server {self.name!r}: give exactly one of `url` and `command`")
        if self.command is not None and self.auth is not None:
            raise ValueError(f"MCP server {self.name!r}: a stdio server takes no `auth`")
        return self

    @property
    def transport(self) -> Literal["http", "stdio"]:
        return "http" if self.url is not None else "stdio"


class McpConfig(_Strict):
    """A workspace's MCP servers; their tools are discovered and cached for `cache_ttl_s`."""

    servers: list[McpServer] = Field(default_factory=list)
    cache_ttl_s: float = Field(default=300.0, ge=0, le=86_400)

    @field_validator("servers")
    @classmethod
    def _unique(cls, servers: list[McpServer]) -> list[McpServer]:
        names = [s.name for s in servers]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"MCP server names must be unique: {', '.join(twice)}")
        return servers

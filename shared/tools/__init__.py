"""Tools: typed functions the model may call within a turn (docs/tools.md).

    @tool
    def current_time(args: CurrentTimeArgs, ctx: ToolContext) -> CurrentTime:
        '''The current date and time in a timezone (the model reads this).'''

`tool` builds a Tool from the function (name, docstring, the arguments model's JSON schema);
a ToolRegistry offers every tool to the model and executes calls under the workspace's
allow / deny lists, turning every failure into an error result the model can read.
"""

from shared.tools.builtin import BUILTIN_TOOLS, current_time, default_registry, session_info
from shared.tools.core import Tool, ToolContext, ToolFunction, ToolOutput, json_schema, tool
from shared.tools.registry import (
    MAX_RESULT_BYTES,
    ToolError,
    ToolRegistry,
    permitted,
    tool_error,
    truncate,
)

__all__ = [
    "BUILTIN_TOOLS",
    "MAX_RESULT_BYTES",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolFunction",
    "ToolOutput",
    "ToolRegistry",
    "current_time",
    "default_registry",
    "json_schema",
    "permitted",
    "session_info",
    "tool",
    "tool_error",
    "truncate",
]

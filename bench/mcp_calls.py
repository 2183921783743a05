"""What an MCP server costs a turn in time: the real client (shared.tools.mcp.McpToolbox) against
the SDK test server of tests/support/mcp_server.py on this machine (no network latency: add the
round trip to a remote server, times the requests each step makes).

    .venv/bin/python bench/mcp_calls.py [--n 10]

(a) discovery, uncached: a session opened, the tool list read, the session closed;
(b) discovery from the in-process cache (what every turn after the first pays, for cache_ttl_s);
(c) one tool call (each call opens its own session: a few round trips before the call itself).

A benchmark, not a test: it prints a table and fails only if something does not work at all.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shared.models import WorkspaceConfig
from shared.tools.mcp import McpToolbox
from tests.support.mcp_server import McpTestServer


class _Secrets:
    def get(self, name: str) -> str | None:
        return "bench-token" if name == "mcp/bench/tok" else None


def _ms(fn: Callable[[], object], n: int) -> tuple[float, float]:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), max(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10)
    n = parser.parse_args().n
    with tempfile.TemporaryDirectory() as d, McpTestServer(Path(d), {"bench": "bench-token"}) as server:
        workspace = WorkspaceConfig.model_validate(
            {
                "id": "bench",
                "mcp": {
                    "servers": [
                        {
                            "name": "files",
                            "url": server.url,
                            "tools": ["add"],
                            "auth": {"type": "bearer", "secret": "tok"},
                        }
                    ]
                },
            }
        )
        [config] = workspace.mcp.servers
        toolbox = McpToolbox(_Secrets())
        toolbox.discover(workspace, config, fresh=True)  # the SDK's import and the server's warm-up
        rows = [
            ("discovery, uncached", _ms(lambda: toolbox.discover(workspace, config, fresh=True), n)),
            ("discovery, cached", _ms(lambda: toolbox(workspace), n)),
            ("one tool call", _ms(lambda: toolbox.call("bench", config, "add", {"a": 1, "b": 2}), n)),
        ]
    print(f"| step (n={n}) | median ms | max ms |")
    print("| --- | ---: | ---: |")
    for name, (median, worst) in rows:
        print(f"| {name} | {median:.1f} | {worst:.1f} |")


if __name__ == "__main__":
    main()

"""Stream bytes: what a streamed web reply posts to a browser's WebSocket in the cloud.

The agent's SessionSockets (shared.channels.web_socket) gets a part's deltas as the turn makes
them (shared.channels.web.StreamedDeltas: 64 characters more each time, the redactor's release),
at a model's pace (--chars-per-s, 400: about 100 tokens a second), and posts `delta` frames to the
listening connection through the real ManagementApiPoster to the `sigil dev --aws` stand-in of
API Gateway's management API, with the connections on DynamoDB (moto). Printed per reply length:
the posts, the bytes posted, and the 32 KB units API Gateway bills them as (a post is billed per
32 KB or part of it), and what the page shows at the end (it must be a prefix of the reply; the
`reply` frame brings the whole text).

    .venv/bin/python bench/stream_bytes.py
    PYTHONPATH=/tmp/before .venv/bin/python bench/stream_bytes.py    # the code before a change

A benchmark, not a test: it prints a table.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/ is not installed; the bench runs from a plain clone

from moto import mock_aws  # noqa: E402

from shared.adapters.aws import clients  # noqa: E402
from shared.adapters.aws.dynamodb import DynamoConnections  # noqa: E402
from shared.adapters.aws.websocket import ManagementApiPoster  # noqa: E402
from shared.channels.web import WebDelta  # noqa: E402
from shared.channels.web_socket import SessionSockets  # noqa: E402
from shared.local.aws_mode.management_api import ManagementApi  # noqa: E402
from shared.ports import WebConnection  # noqa: E402
from tests.support.moto_aws import REGION, provision  # noqa: E402

WS, SESSION, CONNECTION = "default", "bench", "Bench00000001="
STEP = 64
BILLING_UNIT = 32 * 1024


def reply_of(chars: int) -> str:
    line = "A line of a long streamed answer, with **markdown** in it.\n"
    return (line * (chars // len(line) + 1))[:chars]


def stream(chars: int, chars_per_s: float) -> dict[str, Any]:
    with mock_aws(), ManagementApi(stage="bench") as management:
        clients.reset()
        resources = provision("streambytes")
        connections = DynamoConnections(resources.sessions_table, region=REGION)
        now = int(time.time())
        connection = WebConnection(
            connection_id=CONNECTION,
            workspace_id=WS,
            user="u",
            sessions=[SESSION],
            expires_at=now + 3600,
            ttl_at=now + 3600,
        )
        connections.open(connection)
        connections.subscribe(connection, SESSION)
        received: list[bytes] = []
        management.open(CONNECTION, received.append)
        poster = ManagementApiPoster(management.endpoint, region=REGION)
        clock = [0.0]
        options: dict[str, Any] = {}
        if "monotonic" in inspect.signature(SessionSockets).parameters:
            options["monotonic"] = lambda: clock[0]  # the model's pace, not the bench's
        sockets = SessionSockets(connections, poster, **options)
        reply = reply_of(chars)
        base = {"workspace_id": WS, "session_id": f"web.{SESSION}", "session": SESSION, "turn_id": "t-1"}
        for at in range(0, len(reply), STEP):
            sockets.publish(WebDelta(**base, offset=at, text=reply[at : at + STEP]))
            clock[0] += STEP / chars_per_s
        sockets.publish(WebDelta(**base, final=True))
    shown = ""
    for data in received:
        frame = json.loads(data)
        shown = shown[: frame["offset"]] + frame["text"]
    return {
        "chars": chars,
        "posts": len(received),
        "bytes": sum(len(d) for d in received),
        "units": sum(-(-len(d) // BILLING_UNIT) for d in received),
        "shown": len(shown),
        "prefix": reply.startswith(shown),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--chars", type=int, nargs="*", default=[2_000, 5_000, 10_000, 20_000])
    parser.add_argument("--chars-per-s", type=float, default=400.0)
    args = parser.parse_args(argv)
    print(f"one listening connection; deltas of {STEP} characters at {args.chars_per_s:.0f} characters/s")
    head = (
        ("reply", 8),
        ("deltas", 6),
        ("posts", 6),
        ("bytes posted", 13),
        ("x reply", 8),
        ("32 KB units", 11),
    )
    print(" ".join(f"{name:>{width}}" for name, width in head), f"{'shown':>7}")
    for chars in args.chars:
        r = stream(chars, args.chars_per_s)
        print(
            f"{r['chars']:>8} {-(-chars // STEP):>6} {r['posts']:>6} {r['bytes']:>13,} "
            f"{r['bytes'] / chars:>8.1f} {r['units']:>11} {r['shown']:>7}",
            "" if r["prefix"] else "NOT A PREFIX",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The CDK app: one stack composed of one construct per concern (see infra/stack.py)."""

from __future__ import annotations

import base64
import json
import sys
from typing import IO, Any

import jsii._kernel.providers.process as _jsii_process


def _relay_jsii_stderr(reader: IO[Any]) -> None:
    """jsii's own relay of its Node process's stderr, except that a line which is not one of its
    JSON console records (Node's end-of-life banner, say) is written as text: jsii 1.x prints the
    bytes object, so the banner read as a column of b'!!...\\n' literals."""
    for line in iter(reader.readline, b""):
        try:
            console = json.loads(line)
        except ValueError:
            sys.stderr.write(line.decode(errors="replace"))
            continue
        if not isinstance(console, dict):
            sys.stderr.write(line.decode(errors="replace"))
            continue
        if console.get("stderr") is not None:
            sys.stderr.buffer.write(base64.b64decode(console["stderr"]))
        if console.get("stdout") is not None:
            sys.stdout.buffer.write(base64.b64decode(console["stdout"]))


# Replaced before anything imports aws_cdk, whose import starts the jsii kernel and its relay thread
# (the thread looks the function up in jsii's module when it starts).
_jsii_process.stderr_sink = _relay_jsii_stderr

"""Precompile: run after each deploy (a CDK Trigger) and when an agent environment finds the
cache empty. Compiles the sandbox's CPython-for-WASI for this architecture (arm64, as the agent)
and puts it in the sandbox-cache bucket, the one role allowed to (shared.cloud.precompile_sandbox)."""

from __future__ import annotations

from typing import Any

from shared.coldstart import cold_imports

with cold_imports():  # without the collector's passes or pydantic's plugin search (shared.coldstart)
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from shared import cloud
    from shared.observability import logger


@logger.inject_lambda_context(log_event=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, object]:
    done = cloud.precompile_sandbox()
    logger.info("sandbox precompiled", extra=done)
    return done

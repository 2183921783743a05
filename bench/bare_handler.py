"""The baseline of bench/aws_calls.py's import timing: a bare powertools HTTP API handler.

What every Sigil function pays for before any of its own code: powertools' Logger, Tracer and
Metrics, and an APIGatewayHttpResolver with one route. The webhook's cold import is measured
against this module's.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
from aws_lambda_powertools.utilities.typing import LambdaContext

logger = Logger(service="bare")
tracer = Tracer(service="bare")
metrics = Metrics(namespace="Bare", service="bare")
app = APIGatewayHttpResolver()


@app.get("/hello")
def hello() -> dict[str, str]:
    return {"hello": "world"}


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)

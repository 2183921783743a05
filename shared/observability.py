"""The one observability module for the Lambda functions: powertools logger, tracer and metrics.

Created at import as powertools intends (they read POWERTOOLS_* settings themselves); they hold
no AWS clients, so importing them makes no network calls.
"""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer

SERVICE = "sigil"

logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
metrics = Metrics(namespace="Sigil", service=SERVICE)

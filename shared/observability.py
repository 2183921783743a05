"""The one observability module for the Lambda functions: powertools logger, tracer and metrics.

Created at import as powertools intends (they read POWERTOOLS_* settings themselves); they hold
no AWS clients, so importing them makes no network calls. What the metrics may be called is
shared.metric_catalogue's list; importing this module also makes its `record` count here.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Mapping

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricResolution, MetricUnit
from aws_lambda_powertools.metrics.base import MetricManager
from aws_lambda_powertools.metrics.functions import is_metrics_disabled

from shared import metric_catalogue
from shared.metric_catalogue import NAMESPACE, SERVICE, WORKSPACE_DIMENSION, Metric

__all__ = ["SERVICE", "logger", "metrics", "per_workspace", "tracer"]

logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)


class _Metrics(Metrics):
    """powertools' Metrics, one add at a time: the agent runs a batch's sessions in parallel
    threads (shared.agent.batch), and add_metric reads, appends to and writes back the metric set."""

    _lock = threading.Lock()

    def add_metric(
        self, name: str, unit: MetricUnit | str, value: float, resolution: MetricResolution | int = 60
    ) -> None:
        with self._lock:
            super().add_metric(name=name, unit=unit, value=value, resolution=resolution)


metrics = _Metrics(namespace=NAMESPACE, service=SERVICE)


def _add(metric: Metric, value: float) -> None:
    metrics.add_metric(name=metric.name, unit=metric.unit, value=value)


metric_catalogue.set_sink(_add)


def per_workspace(workspace_id: str, values: Mapping[Metric, float]) -> None:
    """Publish `values` with the workspace as a dimension, now, as one EMF line of their own: the
    invocation's metrics carry one dimension set, and a batch serves many workspaces."""
    manager = MetricManager(namespace=NAMESPACE, service=SERVICE)
    manager.add_dimension(name=WORKSPACE_DIMENSION, value=workspace_id)
    for metric, value in values.items():
        manager.add_metric(name=metric.name, unit=metric.unit, value=value)
    if not is_metrics_disabled():
        # One write per line: the batch's sessions publish from parallel threads.
        sys.stdout.write(json.dumps(manager.serialize_metric_set(), separators=(",", ":")) + "\n")

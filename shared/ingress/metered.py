"""The Lambda webhook's records of what it answered: CloudWatch metrics (EMF) and log lines.

Apart from shared.ingress.http because it loads the powertools logger and metrics, which the local
gateway (its own logging) never sets up. No line carries a request body or a signature header:
the body is the user's message, and logs outlive the memory retention rules.
"""

from __future__ import annotations

from shared.channels.inbound import Accepted, Handshake, IngressOutcome
from shared.channels.routes import ROUTE_KEY
from shared.errors import SigilError
from shared.metric_catalogue import (
    EVENTS_IGNORED,
    HANDSHAKES,
    MESSAGES_DUPLICATE,
    MESSAGES_QUEUED,
    REQUESTS_REFUSED,
)
from shared.models import LaneItem
from shared.observability import logger, metrics
from shared.ports import SubmitResult


class Metered:
    """The webhook front's observer in the Lambda (shared.ingress.http.Observer)."""

    def web_accepted(self, result: SubmitResult, item: LaneItem) -> None:
        counted = MESSAGES_QUEUED if result.status == "queued" else MESSAGES_DUPLICATE
        metrics.add_metric(name=counted.name, unit=counted.unit, value=1)
        inbound = item.inbound
        logger.info(
            "message accepted",
            extra={
                "workspace_id": inbound.workspace_id,
                "session_id": inbound.session_id,
                "event_id": inbound.event_id,
                "status": result.status,
            },
        )

    def platform_answered(self, channel: str, outcome: IngressOutcome) -> None:
        if isinstance(outcome, Accepted):
            metrics.add_metric(
                name=MESSAGES_QUEUED.name, unit=MESSAGES_QUEUED.unit, value=len(outcome.messages)
            )
            for inbound in outcome.messages:
                fields = {
                    "channel": channel,
                    "workspace_id": inbound.workspace_id,
                    "session_id": inbound.session_id,
                    "event_id": inbound.event_id,
                }
                if named := inbound.reply_context.get(ROUTE_KEY):
                    # Which bot it came to (/webhooks/{channel}/{name}); "route" is the API's key.
                    fields["channel_route"] = named
                logger.info("message accepted", extra=fields)
        elif isinstance(outcome, Handshake):
            metrics.add_metric(name=HANDSHAKES.name, unit=HANDSHAKES.unit, value=1)
            logger.info("handshake answered", extra={"channel": channel, "status": outcome.status})
        else:
            metrics.add_metric(name=EVENTS_IGNORED.name, unit=EVENTS_IGNORED.unit, value=1)
            logger.info("event ignored", extra={"channel": channel, "reason": outcome.reason})


def refused(route: str, exc: SigilError) -> None:
    """A request answered with a SigilError's status; `route` is the API's route key."""
    # The reason is ours (never the request body), so it is safe to log. A warning for our own
    # faults (misconfiguration), info for the caller's.
    log = logger.warning if exc.http_status >= 500 else logger.info
    log(
        "request refused",
        extra={"route": route, "status": exc.http_status, "code": exc.code, "reason": exc.message},
    )
    metrics.add_metric(name=REQUESTS_REFUSED.name, unit=REQUESTS_REFUSED.unit, value=1)

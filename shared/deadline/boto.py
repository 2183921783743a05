"""boto3 clients whose every call ends by the deadline in scope (shared.deadline).

A boto3 client's timeouts bound each network wait (connect_timeout, read_timeout: 60 s each by
default), and its retry handler sleeps up to 20 s between attempts: a DynamoDB call of a turn
with two seconds left could take minutes. `bound_to_deadline` adds two hooks to one client's
events, registered under the service's own event names and first among them, so they run before
anything else (moto's stand-in and botocore's retry handler included):

- `before-send` refuses the request once the deadline has passed (DeadlineExceeded), and cuts
  the request's read timeout to the time left (botocore's per-request `read_timeout` in the
  request's context), its connect timeout too where the HTTP session lets it (see
  `_cut_connects`);
- `needs-retry` answers False, no retry, when the retry handler's longest backoff for this attempt
  would not end before the deadline, so no retry starts past it; a wait the cut ended (a read
  timeout on the deadline) is reported as DeadlineExceeded rather than botocore's timeout.

Outside a deadline's scope both hooks do nothing: the client's own timeouts and retries hold.
The hooks import nothing of botocore's at module import (this module is imported where a client
is built, which is where boto3 is imported already).
"""

from __future__ import annotations

from typing import Any

from shared.deadline import current, cut, cut_by, out_of_time, passed, remaining
from shared.errors import DeadlineExceeded

# botocore's standard and legacy retry modes back off by up to 2 ** (attempts - 1) seconds
# (jittered below it), never more than 20 s.
MAX_BACKOFF_S = 20.0


def bound_to_deadline(client: Any) -> Any:
    """`client`, its calls bounded by the deadline in scope (idempotent per client)."""
    events = client.meta.events
    read_timeout = client.meta.config.read_timeout
    service = client.meta.service_model.service_id.hyphenize()

    def before_send(request: Any, **_: Any) -> None:
        at = current()
        if at is None:
            return
        if passed(at):
            raise out_of_time(f"the {service} call")
        context = getattr(request, "context", None)
        if context is not None:
            context["read_timeout"] = cut(read_timeout, at)

    def needs_retry(attempts: int, caught_exception: Exception | None = None, **_: Any) -> bool | None:
        at = current()
        if at is None:
            return None  # the retry handler decides
        if isinstance(caught_exception, DeadlineExceeded):
            return False  # refused by before_send: raised as it is
        if caught_exception is not None and cut_by(at):
            raise out_of_time(f"the {service} call") from None
        left = remaining(at)
        longest = min(MAX_BACKOFF_S, 2.0 ** max(0, attempts - 1))
        if left is not None and left <= longest:
            return False  # a retry would start (or sleep) past the deadline: the last answer stands
        return None

    # Under the service's own event names: botocore calls the handlers of the most specific name
    # first, and the retry handler is registered under `needs-retry.<service>`; first among them,
    # so the answer of `needs_retry` is the one botocore takes. unique_id: a client bound twice
    # keeps one pair of hooks.
    events.register_first(f"before-send.{service}", before_send, unique_id="sigil-deadline-send")
    events.register_first(f"needs-retry.{service}", needs_retry, unique_id="sigil-deadline-retry")
    _cut_connects(client)
    return client


def _cut_connects(client: Any) -> None:
    """The connect timeout of `client`'s requests cut to the time left, as the read timeout is.

    botocore builds a request's timeout from its context's read_timeout and the session's connect
    timeout (URLLib3Session._get_request_timeout); a session without that method (another botocore
    version) keeps its connect timeout, and its reads are still cut.
    """
    session: Any = getattr(getattr(client, "_endpoint", None), "http_session", None)
    resolve = getattr(session, "_get_request_timeout", None)
    if session is None or resolve is None or getattr(resolve, "sigil_cut", False):
        return
    from urllib3.util.timeout import Timeout

    def request_timeout(request: Any) -> Any:
        timeout = resolve(request)
        at = current()
        if timeout is None or at is None or not isinstance(timeout.connect_timeout, int | float):
            return timeout
        return Timeout(connect=cut(float(timeout.connect_timeout), at), read=timeout.read_timeout)

    request_timeout.sigil_cut = True  # type: ignore[attr-defined]
    session._get_request_timeout = request_timeout

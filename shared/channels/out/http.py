"""HTTP for the platform clients: one httpx call with rate-limit retries, typed errors, no secrets.

Only a 429 is retried here. The platform says it did not act on a rate-limited request, so
sending it again cannot post twice; after a 5xx or a broken connection the post may or may not
exist, so the error goes up (retryable) and the lane's retry goes through the send ledger.

Tokens travel in URLs on two platforms (Telegram's /bot<token>/, Discord's interaction-token
webhooks). No error message here is built from a URL, every message passes through `redact`,
and a filter on the `httpx` logger masks both URL shapes, since httpx logs each request's URL
at INFO.

Inside a deadline's scope (a turn's: shared.deadline) a call ends by it: each request's
timeouts are cut to the time left, a request is not started once it has passed, nor a 429 waited
out past it (ChannelRateLimited at once), and a wait the cut ended is DeadlineExceeded. The
turn's retry goes through the send ledger, so a post that did land is not made twice.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from shared.deadline import current, cut, cut_by, out_of_time, passed, remaining
from shared.errors import SigilError

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("sigil.channels")

Sleep = Callable[[float], None]

_URL_SECRETS: Final = (
    re.compile(r"/bot[^/\s]+"),  # Telegram: /bot<token>/method
    re.compile(r"(/webhooks/[^/\s]+/)[^/\s?]+"),  # Discord: /webhooks/<app id>/<interaction token>
)


class ChannelError(SigilError):
    """A platform refused or failed a send. `retryable` says whether sending again can help."""

    code = "channel_error"
    http_status = 502

    def __init__(
        self,
        message: str,
        *,
        platform: str,
        code: str | None = None,
        status: int | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(message, code=code)
        self.platform = platform
        self.status = status
        self.retryable = retryable


class ChannelRateLimited(ChannelError):
    """Still rate limited after the bounded retries; `retry_after` is the platform's last word."""

    code = "channel_rate_limited"
    http_status = 429

    def __init__(self, message: str, *, platform: str, retry_after: float) -> None:
        super().__init__(message, platform=platform, status=429, retryable=True)
        self.retry_after = retry_after


class ChannelNotConfigured(ChannelError):
    """A token or routing value the platform needs is missing: retrying cannot help."""

    code = "channel_not_configured"
    http_status = 503


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds on waiting out 429s: a Lambda must finish, and a reply hours late is no reply."""

    max_attempts: int = 4  # the first try included
    max_total_wait_s: float = 30.0
    # For a 429 that names no wait (WhatsApp's throttling errors carry none).
    default_wait_s: float = 1.0


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with token-bearing URL parts and the given secret values masked."""
    for value in secrets:
        if value:
            text = text.replace(value, "***")
    text = _URL_SECRETS[0].sub("/bot***", text)
    return _URL_SECRETS[1].sub(r"\1***", text)


class _RedactUrls(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            # A malformed record fails in the handler as usual; a filter must not raise into
            # the request that logged it.
            return True
        masked = redact(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


_filter_lock = threading.Lock()


def install_log_redaction() -> None:
    """Mask token-bearing URLs in httpx's request log lines (idempotent)."""
    logger = logging.getLogger("httpx")
    with _filter_lock:
        if not any(isinstance(f, _RedactUrls) for f in logger.filters):
            logger.addFilter(_RedactUrls())


# httpx itself is imported by the first request: a turn that replies on no platform never loads it.
RetryAfter = Callable[["httpx.Response"], float | None]
RateLimited = Callable[["httpx.Response"], bool]


def is_429(response: httpx.Response) -> bool:
    return response.status_code == 429


def retry_after_header(response: httpx.Response) -> float | None:
    """Seconds from a Retry-After header (Slack; Discord sends it too)."""
    value = response.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def json_body(response: httpx.Response) -> dict[str, Any]:
    """The response's JSON object, or {} when the body is not one (an HTML error page)."""
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


class ApiClient:
    """One platform's HTTP calls: base URL, shared httpx client, 429 policy, error wrapping."""

    def __init__(
        self,
        platform: str,
        base_url: str,
        *,
        http: httpx.Client | Callable[[], httpx.Client],
        retry_after: RetryAfter,
        policy: RetryPolicy,
        sleep: Sleep,
        rate_limited: RateLimited = is_429,
    ) -> None:
        self.platform = platform
        self.base_url = base_url.rstrip("/")
        # A client, or what makes it: the platforms share one, made when the first of them sends.
        self._http = http
        self._retry_after = retry_after
        self._rate_limited = rate_limited
        self._policy = policy
        self._sleep = sleep
        install_log_redaction()

    @property
    def http(self) -> httpx.Client:
        return self._http() if callable(self._http) else self._http

    def request(
        self,
        method: str,
        path: str,
        *,
        op: str,
        json: Mapping[str, Any],
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        secrets: Iterable[str] = (),
    ) -> httpx.Response:
        """Send, waiting out rate limits within the policy; any other response is returned as is."""
        import httpx

        waited, attempt, policy = 0.0, 0, self._policy
        at = current()
        while True:
            attempt += 1
            if passed(at):
                raise out_of_time(f"{self.platform} {op}")
            try:
                response = self.http.request(
                    method,
                    self.base_url + path,
                    json=dict(json),
                    headers=headers,
                    params=params,
                    timeout=self._timeout(at),
                )
            except httpx.TransportError as exc:
                if isinstance(exc, httpx.TimeoutException) and cut_by(at):
                    raise out_of_time(f"{self.platform} {op}") from None
                detail = redact(f"{type(exc).__name__}: {exc}", secrets)
                # `from None`: the cause carries the request, and with it the token in the URL.
                raise ChannelError(
                    f"{self.platform} {op}: {detail}",
                    platform=self.platform,
                    code="channel_unavailable",
                    retryable=True,
                ) from None
            if not self._rate_limited(response):
                return response
            wait = self._retry_after(response)
            wait = policy.default_wait_s if wait is None else max(0.0, wait)
            left = remaining(at)
            out_of_policy = attempt == policy.max_attempts or waited + wait > policy.max_total_wait_s
            if out_of_policy or (left is not None and wait >= left):
                raise ChannelRateLimited(
                    f"{self.platform} {op}: still rate limited after {attempt} attempts "
                    f"and {waited:.1f}s of waiting (retry after {wait:.1f}s)",
                    platform=self.platform,
                    retry_after=wait,
                )
            log.warning(
                "rate limited",
                extra={"platform": self.platform, "op": op, "retry_after_s": wait, "attempt": attempt},
            )
            self._sleep(wait)
            waited += wait

    def _timeout(self, at: float | None) -> httpx.Timeout:
        """The client's timeouts, each cut to the time left before `at`."""
        import httpx

        own = self.http.timeout
        return httpx.Timeout(
            connect=cut(own.connect, at),
            read=cut(own.read, at),
            write=cut(own.write, at),
            pool=cut(own.pool, at),
        )

    def error(
        self, op: str, response: httpx.Response, detail: str, *, secrets: Iterable[str] = ()
    ) -> ChannelError:
        """A typed error for a non-429 failure; 5xx are retryable, 4xx are not."""
        status = response.status_code
        return ChannelError(
            redact(f"{self.platform} {op} failed: HTTP {status}: {detail}", secrets),
            platform=self.platform,
            status=status,
            code="channel_unavailable" if status >= 500 else "channel_rejected",
            retryable=status >= 500,
        )

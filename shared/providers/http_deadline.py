"""HTTP clients for the OpenAI and Anthropic SDKs whose every network wait ends by the deadline.

The SDKs talk through httpx2 over httpcore2, which hands each socket operation (connect, TLS
handshake, write, one read) the request's timeout. The network backend here cuts that timeout to
the time left before the deadline in scope (shared.deadline), and refuses the operation
once it has passed. So a call ends by its deadline whether the server is slow to accept, never
sends its headers, or trickles its stream, without a watchdog thread: the wait that crosses the
deadline is an ordinary SDK timeout. Outside a deadline's scope the timeouts are the SDK's own.

The wait the deadline ends raises `stop`, a DeadlineExceeded that is also the SDK's own base
error: both SDKs pass their own errors through without a retry (a timeout they would retry,
after a backoff sleep past the deadline). An error response that would send the SDK into a retry
wait it has no time for is marked `x-should-retry: false`, the header the SDKs obey.

Imported by a provider when it is built (it imports httpx2), never by `import shared.providers`.
"""

from __future__ import annotations

import socket
import ssl
import sys
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

import httpcore2
import httpx2
from httpx2._utils import get_environment_proxies

from shared.deadline import current, cut_by, remaining
from shared.errors import DeadlineExceeded
from shared.providers.resilient import retry_after_s
from shared.tls import tls_context

T = TypeVar("T")

# The longest backoff either SDK sleeps before a retry when the server names no wait.
SDK_MAX_BACKOFF_S = 8.0


_stop_errors: dict[str, type[DeadlineExceeded]] = {}


def stop_error(sdk_error: type[Exception]) -> type[DeadlineExceeded]:
    """DeadlineExceeded that is also `sdk_error`, which its SDK lets through without a retry."""
    name = f"DeadlineExceeded_{sdk_error.__module__.partition('.')[0]}"
    if name not in _stop_errors:
        _stop_errors[name] = cast(type[DeadlineExceeded], type(name, (DeadlineExceeded, sdk_error), {}))
    return _stop_errors[name]


class _DeadlineStream(httpcore2.NetworkStream):
    def __init__(self, inner: httpcore2.NetworkStream, stop: type[DeadlineExceeded]) -> None:
        self._inner = inner
        self._stop = stop

    def _bounded(self, timeout: float | None, operation: Callable[[float | None], T]) -> T:
        return _bounded(timeout, operation, self._stop)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._bounded(timeout, lambda t: self._inner.read(max_bytes, t))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._bounded(timeout, lambda t: self._inner.write(buffer, t))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.NetworkStream:
        inner = self._bounded(timeout, lambda t: self._inner.start_tls(ssl_context, server_hostname, t))
        return _DeadlineStream(inner, self._stop)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


def _bounded(
    timeout: float | None, operation: Callable[[float | None], T], stop: type[DeadlineExceeded]
) -> T:
    """`operation` with its timeout cut to the time left; `stop` when the deadline ends it."""
    at = current()
    left = remaining(at)
    if left is None:
        return operation(timeout)
    if left <= 0:
        raise stop()
    try:
        return operation(left if timeout is None else min(timeout, left))
    except httpcore2.TimeoutException:
        if cut_by(at):
            raise stop() from None
        raise


class _DeadlineBackend(httpcore2.NetworkBackend):
    def __init__(self, inner: httpcore2.NetworkBackend, stop: type[DeadlineExceeded]) -> None:
        self._inner = inner
        self._stop = stop

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        def connect(t: float | None) -> httpcore2.NetworkStream:
            return self._inner.connect_tcp(host, port, t, local_address, socket_options)

        stream = _bounded(timeout, connect, self._stop)
        return _DeadlineStream(stream, self._stop)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.NetworkStream:
        stream = _bounded(
            timeout, lambda t: self._inner.connect_unix_socket(path, t, socket_options), self._stop
        )
        return _DeadlineStream(stream, self._stop)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _keepalive() -> list[Any]:
    # What the Anthropic SDK's default client sets (a long stream's idle connection is probed
    # rather than dropped by a NAT on the way); given a transport, the SDKs set nothing themselves.
    options: list[Any] = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, True)]
    if sys.platform == "linux":
        options += [
            (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 60),
            (socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 60),
            (socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 5),
        ]
    return options


class _DeadlineTransport(httpx2.HTTPTransport):
    def __init__(
        self, stop: type[DeadlineExceeded], limits: httpx2.Limits, proxy: httpx2.Proxy | None = None
    ) -> None:
        # The process's one TLS context (shared.tls), not one more read of the CA bundle.
        super().__init__(limits=limits, socket_options=_keepalive(), proxy=proxy, verify=tls_context())
        pool = self._pool
        # httpx2 builds its pool with no way to pass a network backend; connections take the
        # pool's when they are made, so swapping it before the first request covers every one.
        pool._network_backend = _DeadlineBackend(pool._network_backend, stop)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response = super().handle_request(request)
        left = remaining(current())
        if left is not None and response.status_code >= 400:
            wait = retry_after_s(response.headers) or 0.0
            if left <= max(wait, SDK_MAX_BACKOFF_S):
                # The SDK would sleep into (or past) the deadline before its retry.
                response.headers["x-should-retry"] = "false"
        return response


def deadline_client_options(sdk_error: type[Exception]) -> dict[str, Any]:
    """The `transport` and `mounts` of an SDK's DefaultHttpxClient whose every network wait ends
    by the deadline in scope. `sdk_error` is the SDK's base error class (openai.OpenAIError,
    anthropic.AnthropicError).

    Given a transport, httpx2 no longer reads the proxy variables (HTTPS_PROXY, NO_PROXY...) by
    itself, so their mounts are built here, on the same deadline-cutting transport.
    """
    stop = stop_error(sdk_error)
    limits = httpx2.Limits(max_connections=1000, max_keepalive_connections=100)
    mounts: dict[str, httpx2.BaseTransport | None] = {
        pattern: None if url is None else _DeadlineTransport(stop, limits, httpx2.Proxy(url))
        for pattern, url in get_environment_proxies().items()
    }
    return {"transport": _DeadlineTransport(stop, limits), "mounts": mounts}

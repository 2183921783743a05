"""One TLS context for every HTTPS client of the process: the channels' replies, file downloads,
the model providers' SDKs.

Each httpx (and httpx2, the providers' SDKs') client would otherwise build its own context, reading
the whole CA bundle again: 15 to 30 ms each, and a cold container's first turn made two or three.
The context is the one those clients make by default (httpx's create_ssl_context with verify=True
and trust_env): SSL_CERT_FILE, else SSL_CERT_DIR, else certifi's bundle. An SSLContext is safe to
share between threads and connections.
"""

from __future__ import annotations

import os
import ssl
from functools import cache


@cache
def tls_context() -> ssl.SSLContext:
    """The process's client TLS context, made on first use."""
    if cafile := os.environ.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=cafile)
    if capath := os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=capath)
    import certifi

    return ssl.create_default_context(cafile=certifi.where())

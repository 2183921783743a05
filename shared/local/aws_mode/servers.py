"""The servers that stand in for AWS's own services: moto in server mode, and osmem-server.

moto runs in this process, on a thread; osmem-server is a child process, started with this
process's pid so that it exits when this process does, however it ends.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from unittest import mock

if TYPE_CHECKING:
    from osmem_server import OsmemServer


class _Serialised:
    """A WSGI wrapper that runs one moto request at a time, as each AWS request applies atomically.

    moto's backends have no locking of their own: a DynamoDB TransactWriteItems that fails a
    condition restores a snapshot of the whole table (undoing a write another thread made
    meanwhile), and a Query can fail with "dictionary changed size during iteration" while a
    write lands. tests/support/moto_aws.atomic_requests closes the same gap for in-process moto.
    """

    def __init__(self, app: Callable[..., Any]) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with self.lock:
            result = self.app(environ, start_response)
            try:
                body = b"".join(result)  # the whole response is produced under the lock
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        return [body]


def start_moto(host: str = "127.0.0.1") -> Any:
    """moto's ThreadedMotoServer on a free port, its WSGI app wrapped in `_Serialised`."""
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    class AtomicMotoServer(ThreadedMotoServer):
        # ThreadedMotoServer builds its app inside this method and offers no hook for a wrapper;
        # this is its body (moto 5) with the app wrapped.
        def _server_entry(self) -> None:
            app = _Serialised(DomainDispatcherApplication(create_backend_app))
            self._server = make_server(
                self._ip_address, self._port, app, True, request_handler=MotoRequestHandler
            )
            self._server_ready_event.set()
            self._server.serve_forever()

    # Werkzeug logs every request at INFO; the pollers alone would print twenty lines a second.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = AtomicMotoServer(ip_address=host, port=0, verbose=False)
    server.start()
    return server


@contextlib.contextmanager
def fifo_redelivery_in_order() -> Iterator[None]:
    """Make moto redeliver a FIFO group's timed-out messages in order, as SQS does.

    moto 5 frees a timed-out message of its in-flight mark only when its receive loop reaches it,
    and skips it while a later message of its group is still marked: a batch of m0, m1, m2 that
    timed out comes back as m2 alone, then m0 and m1 after it. Clearing every expired mark before
    moto looks at the groups restores SQS's order. This patches the stand-in, not Sigil's code.
    """
    from moto.sqs.models import SQSBackend

    original = SQSBackend.receive_message

    def receive_message(backend: Any, queue_name: str, *args: Any, **kwargs: Any) -> Any:
        queue = backend.get_queue(queue_name)
        for message in [m for m in queue.pending_messages if m.visible]:
            queue.pending_messages.discard(message)
        return original(backend, queue_name, *args, **kwargs)

    with mock.patch.object(SQSBackend, "receive_message", receive_message):
        yield


def start_osmem() -> OsmemServer:
    try:
        from osmem_server import OsmemServer
    except ImportError:
        raise SystemExit(
            "sigil dev --aws needs osmem-server and moto[server] (the project's dev dependencies): "
            "run `make dev` or `uv pip sync requirements.lock`"
        ) from None
    # Japanese analysis (kuromoji) is not needed: the index maps `text` with the english analyser.
    return OsmemServer.start(addr="127.0.0.1:0", japanese=False)

"""The console's Starlette application: routes, CSRF and the one lock around the backend.

Every request first passes shared.console.guard (its Host, its Origin, the launch secret); then
every POST carries the process's CSRF token in a hidden field (`csrf`), compared in constant
time, and the `confirm` field its confirmation page filled in with what it acts on; without
either it is refused (403, 400) before anything is read. The token is made when the app is
and dies with the process, so a page from an earlier console cannot post to this one. A
destructive action is reached only through its confirmation page (GET), which holds the form.
A replay (POST /replay) needs the token but no confirmation: it only reads the original workspace.
"""

from __future__ import annotations

import hmac
import re
import secrets
import threading
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from shared.backend import Backend
from shared.config import Settings
from shared.console import media, replays, tasks, views
from shared.console.guard import ConsoleGuard, refusal
from shared.console.html import seg
from shared.console.views import Ctx, Html

STATIC = Path(__file__).parent / "static"
# A form of the console is a few hidden fields; anything larger is not one of ours.
MAX_FORM_BYTES = 16 * 1024
# The replay form carries a system prompt (ReplayChange allows 100,000 characters), URL-encoded.
MAX_REPLAY_FORM_BYTES = 120 * 1024

View = Callable[..., Html]
NO_CSRF = "refused: this form has no valid CSRF token (reload the page and try again)"


def create_app(
    backend: Backend,
    settings: Settings,
    *,
    source: str = "",
    target: str = "",
    csrf: str | None = None,
    secret: str | None = None,
    hosts: Iterable[str] = (),
) -> Starlette:
    """The console over `backend`. `source` is what the header says it reads (a data dir, a stack);
    `target` the CLI options that name it, for the commands a page suggests. `secret` is the
    launch secret every request needs (a new random one unless given: `app.state.secret`), and
    `hosts` the names it answers to besides loopback ones (shared.console.guard)."""
    ctx = Ctx(
        backend=backend,
        settings=settings,
        csrf=csrf or secrets.token_urlsafe(32),
        source=source,
        target=target,
    )
    lock = threading.Lock()

    async def render(view: View, *args: object) -> Response:
        def run() -> Html:
            with lock:
                return view(ctx, *args)

        status, body = await run_in_threadpool(run)
        return HTMLResponse(body, status_code=status)

    async def posted(request: Request, limit: int = MAX_FORM_BYTES) -> dict[str, str] | Response:
        """The POST's fields when it carries this process's token; else the refusal."""
        body = await request.body()
        if len(body) > limit:
            return refusal(413, "form too large", source=ctx.source)
        parsed = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
        fields = {k: v[0] for k, v in parsed.items()}
        if not (token := fields.get("csrf", "")) or not hmac.compare_digest(
            token.encode(), ctx.csrf.encode()
        ):
            return refusal(403, NO_CSRF, source=ctx.source)
        return fields

    async def checked(request: Request, expected: str) -> Response | None:
        """None when the POST carries this process's token and confirms `expected`; else the refusal."""
        fields = await posted(request)
        if isinstance(fields, Response):
            return fields
        if fields.get("confirm", "") != expected:
            return refusal(400, "refused: not confirmed (use the confirmation page)", source=ctx.source)
        return None

    def p(request: Request, name: str) -> str:
        value: str = request.path_params[name]
        return value

    async def home(request: Request) -> Response:
        return RedirectResponse("/workspaces", status_code=303)

    async def workspaces(request: Request) -> Response:
        return await render(views.workspaces)

    async def workspace(request: Request) -> Response:
        return await render(views.workspace, p(request, "ws"), request.query_params.get("user") or None)

    async def sessions_all(request: Request) -> Response:
        return await render(views.sessions_all)

    async def sessions(request: Request) -> Response:
        return await render(views.sessions, p(request, "ws"))

    async def session(request: Request) -> Response:
        return await render(views.session, p(request, "ws"), p(request, "sid"))

    async def memory_home(request: Request) -> Response:
        known = await run_in_threadpool(ctx.workspace_ids)
        if not known:
            return await render(views.workspaces)
        chosen = settings.default_workspace if settings.default_workspace in known else known[0]
        return RedirectResponse(f"/workspaces/{seg(chosen)}/memory", status_code=303)

    async def memory(request: Request) -> Response:
        query = request.query_params
        return await render(views.memory, p(request, "ws"), query.get("q") or None, query.get("mode"))

    async def fact(request: Request) -> Response:
        return await render(views.fact, p(request, "ws"), p(request, "fid"))

    async def rollback(request: Request) -> Response:
        ws, run = p(request, "ws"), p(request, "run")
        if request.method == "GET":
            return await render(views.rollback_confirm, ws, run)
        return await checked(request, run) or await render(views.rollback, ws, run)

    async def erase(request: Request) -> Response:
        ws, user = p(request, "ws"), p(request, "user")
        if request.method == "GET":
            return await render(views.erase_confirm, ws, user)
        return await checked(request, user) or await render(views.erase, ws, user)

    async def dead_letters(request: Request) -> Response:
        return await render(views.dead_letters)

    async def dead_letter(request: Request) -> Response:
        return await render(views.dead_letter, p(request, "id"))

    async def redrive(request: Request) -> Response:
        entry = p(request, "id")
        if request.method == "GET":
            return await render(_confirming(views.dead_letter), entry)
        return await checked(request, entry) or await render(views.redrive, entry)

    routes: list[Route | Mount] = [
        Route("/", home),
        Route("/workspaces", workspaces),
        Route("/workspaces/{ws}", workspace),
        Route("/workspaces/{ws}/sessions", sessions),
        Route("/workspaces/{ws}/sessions/{sid}", session),
        _media_route(backend, ctx, lock),
        Route("/workspaces/{ws}/memory", memory),
        Route("/workspaces/{ws}/facts/{fid}", fact),
        Route("/workspaces/{ws}/runs/{run}/rollback", rollback, methods=["GET", "POST"]),
        Route("/workspaces/{ws}/users/{user}/erase", erase, methods=["GET", "POST"]),
        *_task_routes(render, checked),
        Route("/sessions", sessions_all),
        Route("/memory", memory_home),
        Route("/dead-letters", dead_letters),
        Route("/dead-letters/{id}", dead_letter),
        Route("/dead-letters/{id}/redrive", redrive, methods=["GET", "POST"]),
        *_replay_routes(render, posted),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    launch = secret or secrets.token_urlsafe(32)
    app = Starlette(routes=routes, middleware=[Middleware(ConsoleGuard, secret=launch, hosts=tuple(hosts))])
    app.state.csrf = ctx.csrf
    app.state.secret = launch
    return app


def _media_route(backend: Backend, ctx: Ctx, lock: threading.Lock) -> Route:
    """An image's bytes for its thumbnail (shared.console.media): a 404 for anything else."""

    async def media_file(request: Request) -> Response:
        ws, mid = request.path_params["ws"], request.path_params["mid"]

        def read() -> media.Thumbnail | None:
            with lock:
                return media.thumbnail(backend.media, ws, mid)

        found = await run_in_threadpool(read)
        if found is None:
            return refusal(404, "no such image", source=ctx.source)
        headers = {
            "X-Content-Type-Options": "nosniff",
            # Shown as a picture only: were it opened on its own, nothing in it could run.
            "Content-Security-Policy": "default-src 'none'; sandbox",
            "Cache-Control": "private, max-age=300",
        }
        return Response(found.body, media_type=found.content_type, headers=headers)

    return Route("/workspaces/{ws}/media/{mid}", media_file)


Render = Callable[..., Awaitable[Response]]
Posted = Callable[[Request, int], Awaitable[dict[str, str] | Response]]


def _replay_routes(render: Render, posted: Posted) -> list[Route]:
    """The replay form, its POST, and the reports it keeps (shared.console.replays)."""
    reports = replays.Reports()

    async def replay(request: Request) -> Response:
        if request.method == "GET":
            query = request.query_params
            return await render(replays.listing, query.get("workspace"), query.get("session"))
        fields = await posted(request, MAX_REPLAY_FORM_BYTES)
        if isinstance(fields, Response):
            return fields
        return await render(replays.run, reports, fields)

    async def report(request: Request) -> Response:
        key: str = request.path_params["key"]
        kind: str | None = request.path_params.get("kind")
        found = replays.download(reports, key, kind) if kind in ("json", "md") else None
        if found is None:
            # The page of a kept report; an unknown key or kind is its 404 page.
            return await render(replays.stored, reports, key if kind is None else f"{key}.{kind}")
        text, name = found
        media = "application/json" if kind == "json" else "text/markdown; charset=utf-8"
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)
        disposition = {"Content-Disposition": f'attachment; filename="{safe}"'}
        return Response(text, media_type=media, headers=disposition)

    return [
        Route("/replay", replay, methods=["GET", "POST"]),
        Route("/replay/{key}.{kind}", report),
        Route("/replay/{key}", report),
    ]


Checked = Callable[[Request, str], Awaitable[Response | None]]


def _task_routes(render: Render, checked: Checked) -> list[Route]:
    """A workspace's delegated tasks, one task, and its cancel (shared.console.tasks)."""

    def p(request: Request, name: str) -> str:
        value: str = request.path_params[name]
        return value

    async def task_list(request: Request) -> Response:
        return await render(tasks.tasks, p(request, "ws"))

    async def task(request: Request) -> Response:
        return await render(tasks.task, p(request, "ws"), p(request, "tid"))

    async def task_cancel(request: Request) -> Response:
        ws, tid = p(request, "ws"), p(request, "tid")
        if request.method == "GET":
            return await render(_confirming(tasks.task), ws, tid)
        return await checked(request, tid) or await render(tasks.cancel, ws, tid)

    return [
        Route("/workspaces/{ws}/tasks", task_list),
        Route("/workspaces/{ws}/tasks/{tid}", task),
        Route("/workspaces/{ws}/tasks/{tid}/cancel", task_cancel, methods=["GET", "POST"]),
    ]


def _confirming(view: Callable[..., Html]) -> Callable[..., Html]:
    def confirm(ctx: Ctx, *args: object) -> Html:
        return view(ctx, *args, confirm=True)

    return confirm


__all__ = ["create_app"]

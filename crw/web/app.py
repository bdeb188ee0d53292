"""The ASGI app of `crw flow ui` (Starlette): its routes, who may call them
(`crw.web.guard`) and the pages (Jinja2, autoescaped: a node id or an answer is
text, never markup).

Routes: `/` the runs, `/runs/{run}` one run (`?page=` its calls, `?before=` its
rows), `/runs/{run}/calls/{call}` one call, `/runs/{run}/timeline.svg`, the
events of both lists (`/events`, `/runs/{run}/events`), the fragments a page
fetches again when an event says so (`?part=1`), and `POST /runs/{run}/do` the
decisions (a confirmation first, then the command and its output).

Every request is answered only to a loopback client naming the server's Host; a
POST needs the token and the same origin besides. The token is written into a
page's forms only for a reader who showed it (the URL printed at start, then
the cookie it sets), so another local user cannot read it off a page.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from crw.web import decide, live, views
from crw.web.guard import TOKEN_FIELD, TOKEN_HEADER, Guard

HERE = Path(__file__).parent
COOKIE = "crw_ui_token"
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "object-src 'self'; frame-ancestors 'self'; form-action 'self'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


@dataclass
class Ui:
    """What the app serves: the runs of `state_dir`, guarded by `guard`; the
    decisions run in `cwd`."""

    state_dir: Path
    guard: Guard
    cwd: Path


def make_app(ui: Ui) -> Starlette:
    """The app serving `ui`."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )

    def page(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        shown = _shown_token(request, ui.guard)
        html = env.get_template(name).render(token=shown, state_dir=str(ui.state_dir), **context)
        response = HTMLResponse(html, status_code=status)
        if shown and request.cookies.get(COOKIE) != shown:
            response.set_cookie(COOKIE, shown, httponly=True, samesite="strict")
        return response

    def missing(request: Request, what: str) -> HTMLResponse:
        return page(request, "missing.html", 404, what=what)

    async def runs(request: Request) -> Response:
        query = request.query_params
        states = frozenset(s for s in query.getlist("state") if s)
        workflow = query.get("workflow") or None
        data = await trio.to_thread.run_sync(
            lambda: views.runs(
                ui.state_dir, states=states, workflow=workflow, page=_int(query.get("page"))
            )
        )
        name = "runs_table.html" if query.get("part") else "runs.html"
        return page(request, name, chosen=sorted(states), workflow=workflow or "", **data)

    async def run(request: Request) -> Response:
        found = views.known_run(ui.state_dir, request.path_params["run"])
        if found is None:
            return missing(request, f"run {request.path_params['run']}")
        query = request.query_params
        data = await trio.to_thread.run_sync(
            lambda: views.run_page(found, ui.state_dir, page=_int(query.get("page")))
        )
        actions = decide.offered(data, data["held"])
        if query.get("part"):
            return page(request, "run_live.html", status=200, run=data, actions=actions)
        before = _int(query.get("before"), None)
        rows = await trio.to_thread.run_sync(lambda: views.history(found, before=before))
        return page(
            request, "run.html", run=data, actions=actions, history=rows, following=before is None
        )

    async def call(request: Request) -> Response:
        found = views.known_run(ui.state_dir, request.path_params["run"])
        if found is None:
            return missing(request, f"run {request.path_params['run']}")
        data = await trio.to_thread.run_sync(lambda: views.run_page(found, ui.state_dir, page=1))
        wanted = request.path_params["call"]
        entry = data["by_call"].get(wanted)
        if entry is None:
            return missing(request, f"call {wanted} of run {found.id}")
        return page(request, "call.html", run=data, call=views.call_cells(entry))

    async def timeline(request: Request) -> Response:
        found = views.known_run(ui.state_dir, request.path_params["run"])
        if found is None:
            return PlainTextResponse("no such run", status_code=404)
        svg = await trio.to_thread.run_sync(views.timeline_svg, found)
        return Response(svg, media_type="image/svg+xml")

    async def run_events(request: Request) -> Response:
        found = views.known_run(ui.state_dir, request.path_params["run"])
        if found is None:
            return PlainTextResponse("no such run", status_code=404)
        return _stream(live.run_events(found, ui.state_dir))

    async def runs_events(request: Request) -> Response:
        return _stream(live.runs_events(ui.state_dir))

    async def do(request: Request) -> Response:
        form = await request.form()
        token = request.headers.get(TOKEN_HEADER) or _text(form.get(TOKEN_FIELD))
        refused = ui.guard.refuses_write(
            _client(request),
            request.headers.get("host"),
            request.headers.get("origin"),
            request.headers.get("referer"),
            token,
        )
        if refused is not None:
            return PlainTextResponse(f"refused: {refused}", status_code=403)
        found = views.known_run(ui.state_dir, request.path_params["run"])
        if found is None:
            return missing(request, f"run {request.path_params['run']}")
        action = decide.Action(
            _text(form.get("verb")), _text(form.get("call")), _text(form.get("choice"))
        )
        data = await trio.to_thread.run_sync(lambda: views.run_page(found, ui.state_dir, page=1))
        if action not in decide.offered(data, data["held"]):
            return page(request, "refused.html", 409, run=data, action=action)
        command = decide.argv(action, found.id, ui.state_dir)
        if not form.get("confirmed"):
            return page(request, "confirm.html", run=data, action=action, command=command)
        done = await decide.run(command, ui.cwd)
        return page(request, "done.html", run=data, action=action, done=done)

    routes = [
        Route("/", runs),
        Route("/events", runs_events),
        Route("/runs/{run}", run),
        Route("/runs/{run}/events", run_events),
        Route("/runs/{run}/timeline.svg", timeline),
        Route("/runs/{run}/calls/{call:path}", call),
        Route("/runs/{run}/do", do, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(routes=routes, middleware=[])


def guarded(app: ASGIApp, guard: Guard) -> ASGIApp:
    """`app` answering only a loopback client that names the server's Host, with
    the security headers on every answer."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        request = Request(scope)
        refused = guard.refuses_read(_client(request), request.headers.get("host"))
        if refused is not None:
            await PlainTextResponse(f"refused: {refused}", status_code=403)(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await app(scope, receive, with_headers)

    return wrapped


def build(ui: Ui) -> ASGIApp:
    """The guarded app serving `ui`."""
    return guarded(make_app(ui), ui.guard)


def _stream(events: Any) -> StreamingResponse:
    return StreamingResponse(events, media_type="text/event-stream")


def _shown_token(request: Request, guard: Guard) -> str:
    """The token, when the request showed it (in the query or the cookie), else ""."""
    shown = (request.query_params.get(TOKEN_FIELD), request.cookies.get(COOKIE))
    return guard.token if any(guard.knows(given) for given in shown) else ""


def _client(request: Request) -> str | None:
    return request.client.host if request.client is not None else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: str | None, default: int | None = 1) -> Any:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default

"""The ASGI app of `crw flow ui` (Starlette): its routes, who may call them
(`crw.web.guard`) and the pages (Jinja2, autoescaped: a node id or an answer is
text, never markup).

Routes: `/` the runs, `/runs/{run}` one run (`?page=` its calls, `?before=` its
rows), `/runs/{run}/calls/{call}` one call (`?transcript=1`: the host asked
for its newest turn's transcript), `/runs/{run}/timeline.svg`, the
events of both lists (`/events`, `/runs/{run}/events`), the fragments a page
fetches again when an event says so (`?part=1` a run's live part, `?part=rows`
its last page of rows), and `POST /runs/{run}/do` the
decisions (a confirmation first, then the command and its output).

Every request is answered only to a loopback client naming the server's Host; a
POST needs the token and the same origin besides. The token is written into a
page's forms only for a reader who showed it (the URL printed at start, then
the cookie it sets), so another local user cannot read it off a page.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
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

from crw.engine.run.rundir import RunDir
from crw.engine.views.call_detail import CallDetail, TranscriptView
from crw.journal.replay import TOKEN_PARTS
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
TRANSCRIPT_WAIT = 5.0
"""Seconds a call page asked for its transcript (`?transcript=1`) waits for the host."""


@dataclass
class Ui:
    """What the app serves: the runs of `state_dir`, guarded by `guard`; the
    decisions run in `cwd`."""

    state_dir: Path
    guard: Guard
    cwd: Path


def make_app(ui: Ui) -> Starlette:
    """The app serving `ui`."""
    pages = Pages(ui)
    routes = [
        Route("/", pages.runs),
        Route("/events", pages.runs_events),
        Route("/runs/{run}", pages.run),
        Route("/runs/{run}/events", pages.run_events),
        Route("/runs/{run}/timeline.svg", pages.timeline),
        Route("/runs/{run}/calls/{call:path}", pages.call),
        Route("/runs/{run}/do", pages.do, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(routes=routes)


class Pages:
    """The handlers of the app's routes, over `ui`. The reads of run files run in
    a worker thread: a 10,000-call run's status takes a few hundred ms."""

    def __init__(self, ui: Ui) -> None:
        self.ui = ui
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.env.filters["pretty"] = views.pretty

    def page(self, request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        """Template `name` rendered; the token in it (and its cookie set) only for a
        reader who showed it."""
        shown = _shown_token(request, self.ui.guard)
        template = self.env.get_template(name)
        html = template.render(token=shown, state_dir=str(self.ui.state_dir), **context)
        response = HTMLResponse(html, status_code=status)
        if shown and request.cookies.get(COOKIE) != shown:
            response.set_cookie(COOKIE, shown, httponly=True, samesite="strict")
        return response

    def missing(self, request: Request, what: str) -> HTMLResponse:
        return self.page(request, "missing.html", 404, what=what)

    def found(self, request: Request) -> RunDir | None:
        """The run the path names, by its id under the state directory."""
        return views.known_run(self.ui.state_dir, request.path_params["run"])

    async def run_page(self, run: RunDir, page: int = 1) -> dict[str, Any]:
        return await trio.to_thread.run_sync(
            lambda: views.run_page(run, self.ui.state_dir, page=page)
        )

    async def runs(self, request: Request) -> Response:
        query = request.query_params
        states = frozenset(s for s in query.getlist("state") if s)
        workflow = query.get("workflow") or None
        number = _page(query.get("page"))
        data = await trio.to_thread.run_sync(
            lambda: views.runs(self.ui.state_dir, states=states, workflow=workflow, page=number)
        )
        name = "runs_table.html" if query.get("part") else "runs.html"
        return self.page(request, name, chosen=sorted(states), workflow=workflow or "", **data)

    async def run(self, request: Request) -> Response:
        found = self.found(request)
        if found is None:
            return self.missing(request, f"run {request.path_params['run']}")
        query = request.query_params
        before = _offset(query.get("before"))
        if query.get("part") == "rows":
            rows = await trio.to_thread.run_sync(lambda: views.history(found, before=None))
            return self.page(request, "rows_body.html", history=rows)
        data = await self.run_page(found, _page(query.get("page")))
        actions = decide.offered(data, data["held"])
        if query.get("part"):
            return self.page(request, "run_live.html", run=data, actions=actions)
        rows = await trio.to_thread.run_sync(lambda: views.history(found, before=before))
        return self.page(request, "run.html", run=data, actions=actions, history=rows,
                         following=before is None)  # fmt: skip

    async def call(self, request: Request) -> Response:
        found = self.found(request)
        if found is None:
            return self.missing(request, f"run {request.path_params['run']}")
        data = await self.run_page(found)
        wanted = request.path_params["call"]
        entry = data["by_call"].get(wanted)
        if entry is None:
            return self.missing(request, f"call {wanted} of run {found.id}")
        detail = await trio.to_thread.run_sync(
            lambda: views.call_view(found, self.ui.state_dir, wanted)
        )
        if detail is not None and request.query_params.get("transcript"):
            detail = replace(detail, transcript=await _transcript(found, detail))
        actions = [a for a in decide.offered(data, data["held"]) if a.call == wanted]
        return self.page(request, "call.html", run=data, call=views.call_cells(entry),
                         detail=detail, actions=actions, parts=TOKEN_PARTS,
                         transcript_wait=f"{TRANSCRIPT_WAIT:g}")  # fmt: skip

    async def timeline(self, request: Request) -> Response:
        found = self.found(request)
        if found is None:
            return PlainTextResponse("no such run", status_code=404)
        svg = await trio.to_thread.run_sync(views.timeline_svg, found)
        return Response(svg, media_type="image/svg+xml")

    async def run_events(self, request: Request) -> Response:
        found = self.found(request)
        if found is None:
            return PlainTextResponse("no such run", status_code=404)
        return _stream(live.run_events(found, self.ui.state_dir))

    async def runs_events(self, request: Request) -> Response:
        return _stream(live.runs_events(self.ui.state_dir))

    async def do(self, request: Request) -> Response:
        """A decision: refused 403 without the token and the same origin, 409 when
        the run's state does not offer it; else its confirmation, or once
        confirmed the command run and its output."""
        form = await request.form()
        token = request.headers.get(TOKEN_HEADER) or _text(form.get(TOKEN_FIELD))
        headers = request.headers
        refused = self.ui.guard.refuses_write(_client(request), headers.get("host"),
                                              headers.get("origin"), headers.get("referer"),
                                              token)  # fmt: skip
        if refused is not None:
            return PlainTextResponse(f"refused: {refused}", status_code=403)
        found = self.found(request)
        if found is None:
            return self.missing(request, f"run {request.path_params['run']}")
        action = decide.Action(
            _text(form.get("verb")), _text(form.get("call")), _text(form.get("choice"))
        )
        data = await self.run_page(found)
        if action not in decide.offered(data, data["held"]):
            return self.page(request, "refused.html", 409, run=data, action=action)
        command = decide.argv(action, found.id, self.ui.state_dir)
        if not form.get("confirmed"):
            return self.page(request, "confirm.html", run=data, action=action, command=command)
        done = await decide.run(command, self.ui.cwd)
        return self.page(request, "done.html", run=data, action=action, done=done)


async def _transcript(run: RunDir, detail: CallDetail) -> TranscriptView:
    """The host's transcript of the call's newest turn, or why the host gave none
    (it did not answer in TRANSCRIPT_WAIT seconds, or is gone)."""
    from crw.cli.read.call import newest_turn
    from crw.cli.read.call_transcript import read_transcript
    from crw.cli.read.run_spec import spec_json

    host = (await trio.to_thread.run_sync(spec_json, run)).get("host")
    turn = newest_turn(detail)
    thread_id, turn_id = (turn.thread_id, turn.turn_id) if turn is not None else (None, None)
    with trio.move_on_after(TRANSCRIPT_WAIT):
        return await read_transcript(host if isinstance(host, str) else None, thread_id, turn_id)
    why = f"the host did not answer in {TRANSCRIPT_WAIT:g} s"
    return TranscriptView(thread_id, turn_id, None, (), why)


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


def _page(value: str | None) -> int:
    """A page number from the query (1 when none or not a number)."""
    try:
        return int(value) if value is not None else 1
    except ValueError:
        return 1


def _offset(value: str | None) -> int | None:
    """A journal offset from the query (None when none or not a number)."""
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None

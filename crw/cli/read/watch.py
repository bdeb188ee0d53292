"""`crw flow watch RUN`: a run's live view, until the run ends.

It reads the run directory only, like `show`, and wakes when the run commits rows
(`crw.cli.read.follow`: an inotify watch, no polling). A run only the database
keeps (its directory on another machine) is read from the database as `show`
reads it (`crw.cli.read.remote_run`): woken by the NOTIFY its commits send, live
while its writer's lease runs, its workflow's plan from the run.json kept there.

On a terminal it draws, with rich, a bar of the calls done of all, the calls in
flight (state, attempt, turns, how long since each was prepared), the tokens the
ended calls counted and the last rows. Piped, it prints each new row's line (as
`show` does) and a progress line whenever the count of calls done changes, and
once the run ended. `--json` prints the view as one JSON object a line, each time
it changes.

Calls done of all, and in flight, as `status` and `list` count them
(`crw.engine.views.counts`: every call the rows name, review rounds included, and
the calls the workflow's nodes still need at least); a paused or ended run has
none in flight, and a held call waits: it is not in flight.

Exit 0 once the run ends; 1 when no process runs it (paused, crashed, waiting for
an answer: a line says so) or its journal is corrupt; Ctrl-C stops it quietly
(exit 130, as every command).
"""

from __future__ import annotations

import os
import sys
from collections import deque
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crw.cli.output import say, say_json
from crw.cli.read.follow import JournalTail, Rows, follow
from crw.cli.read.remote_run import Elsewhere, find_here_or_elsewhere
from crw.cli.read.run_spec import spec_json, workflow_file, workflow_plan
from crw.cli.read.show import RowPrinter, stopped
from crw.engine.run.locks import run_is_live
from crw.engine.run.rundir import RunDir, resolve_state
from crw.engine.views.counts import counts, shown_state
from crw.engine.views.run_view import call_views
from crw.journal.log import JournalCorruptError
from crw.journal.stores import store_at

if TYPE_CHECKING:
    from rich.console import RenderableType

LAST_ROWS = 8
"""How many of the last rows the live view shows."""
TICK = 1.0
"""Seconds between redraws of the live view when no row comes: its elapsed times
move on. Each is a read of the journal's tail, not of the whole journal."""


def watch_command(run: str, *, state: str | None, json: bool) -> int:
    run_dir, elsewhere = find_here_or_elsewhere(resolve_state(state, os.environ, Path.cwd()), run)
    tail = JournalTail(run_dir.journal)
    spec = spec_json(run_dir) if elsewhere is None else elsewhere.spec
    view = WatchView(run_dir, tail, workflow_plan(workflow_file(spec)), elsewhere)
    try:
        if json:
            ended = _watch_json(run_dir, tail, view)
        elif sys.stdout.isatty():
            ended = _watch_live(run_dir, tail, view)
        else:
            ended = _watch_plain(run_dir, tail, view)
    except JournalCorruptError as err:
        RowPrinter(json=json, call=None).corrupt(err)
        return 1
    if ended:
        return 0
    say(stopped(run_dir, tail, state), file=sys.stderr)
    return 1


class WatchView:
    """What the view shows: the run's rows so far, folded, and the last of them."""

    def __init__(
        self,
        run_dir: RunDir,
        tail: JournalTail,
        plan: dict[str, int],
        elsewhere: Elsewhere | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.tail = tail
        self.plan = plan
        self.elsewhere = elsewhere
        """A run only the database keeps: live while its writer's lease runs."""
        self.last: deque[dict[str, Any]] = deque(maxlen=LAST_ROWS)

    def is_live(self) -> bool:
        """Whether a process holds the run: its locks here, else its lease."""
        if self.elsewhere is not None:
            return self.elsewhere.live_now()
        return run_is_live(self.run_dir)

    def add(self, rows: Rows) -> None:
        self.last.extend(rows)

    def payload(self, now: datetime) -> dict[str, Any]:
        """{run, state, done, total, held, in_flight: [{call, role, state, attempt,
        turns, elapsed}], tokens}: `elapsed` in seconds since the call was
        prepared; state, done, total, held and the calls in flight as `status`
        shows them (`crw.engine.views.counts`: a run no process holds has none in
        flight, and is `crashed` when it needs one)."""
        run = self.tail.state
        live = run.state in ("ended", "paused") or self._live()
        counted = counts(run, {} if run.state == "ended" else self.plan, live=live)
        flying = frozenset(counted.in_flight)
        return {
            "run": self.run_dir.id,
            "state": shown_state(run.state, live),
            "done": counted.done,
            "total": counted.total,
            "held": counted.held,
            "in_flight": [
                {
                    "call": call.call,
                    "role": call.role,
                    "state": call.state,
                    "attempt": call.attempt,
                    "turns": call.turns,
                    "elapsed": None if call.seconds is None else round(call.seconds, 1),
                }
                for call in call_views(run, now)
                if call.call in flying
            ],
            "tokens": run.spent,
        }

    def _live(self) -> bool:
        """Whether a process holds the run, or rows came that the view has not
        read yet (a process writes its last rows before it lets its locks go: read
        after the locks, the journal's size says whether they are read; a torn
        tail left by a process that died is no row to come)."""
        if self.is_live():
            return True
        try:
            if self.elsewhere is None:
                size = self.run_dir.journal.stat().st_size
            else:
                size = store_at(self.run_dir.journal).size()
            unread = size > self.tail.offset
        except OSError:
            return False
        return unread and self.tail.torn is None


def _watch_json(run_dir: RunDir, tail: JournalTail, view: WatchView) -> bool:
    shown: list[Any] = []

    def show(rows: Rows) -> None:
        view.add(rows)
        payload = view.payload(datetime.now(UTC))
        # A change of the elapsed times alone is no change.
        flight = [{k: v for k, v in c.items() if k != "elapsed"} for c in payload["in_flight"]]
        key = [payload["state"], payload["done"], payload["total"], flight]
        if key != shown:
            shown[:] = key
            say_json(payload)

    return follow(run_dir, tail, show, is_live=view.is_live)


def _watch_plain(run_dir: RunDir, tail: JournalTail, view: WatchView) -> bool:
    printer = RowPrinter(json=False, call=None)
    counted: list[tuple[int, int, bool]] = []

    def show(rows: Rows) -> None:
        view.add(rows)
        printer(rows)
        payload = view.payload(datetime.now(UTC))
        count = (payload["done"], payload["total"], payload["state"] == "ended")
        if [count] != counted:
            counted[:] = [count]
            say(_progress_line(payload))

    return follow(run_dir, tail, show, is_live=view.is_live)


def _progress_line(payload: dict[str, Any]) -> str:
    return (
        f"-- run {payload['run']} {payload['state']}: {payload['done']}/{payload['total']} "
        f"calls done, {len(payload['in_flight'])} in flight, "
        f"tokens {payload['tokens']['total']}"
    )


def _watch_live(run_dir: RunDir, tail: JournalTail, view: WatchView) -> bool:
    """Redrawn at each wake: when rows come, and every TICK seconds for the clocks."""
    from rich.live import Live

    with Live(auto_refresh=False) as live:

        def show(rows: Rows) -> None:
            view.add(rows)
            live.update(live_view(view, datetime.now(UTC)), refresh=True)

        return follow(run_dir, tail, show, every=TICK, is_live=view.is_live)


def live_view(view: WatchView, now: datetime) -> RenderableType:
    """The live view at `now`: a bar, the calls in flight, tokens, the last rows."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    from crw.cli.output import one_line
    from crw.engine.views.durations import duration
    from crw.engine.views.row_lines import row_line

    payload = view.payload(now)
    bar = Table.grid(padding=(0, 1))
    bar.add_row(
        Text(f"run {payload['run']}", style="bold"),
        ProgressBar(total=max(payload["total"], 1), completed=payload["done"], width=30),
        f"{payload['done']}/{payload['total']} calls done",
        payload["state"],
    )
    calls = Table("call", "role", "state", "attempt", "turns", "elapsed", box=None)
    for call in payload["in_flight"]:
        elapsed = call["elapsed"]
        calls.add_row(
            one_line(call["call"]), one_line(call["role"] or "-"), call["state"],
            str(call["attempt"]), str(call["turns"]),
            duration(elapsed),
        )  # fmt: skip
    last = [Text(one_line(row_line(row)), no_wrap=True, overflow="ellipsis") for row in view.last]
    tokens = Text(f"tokens {payload['tokens']['total']} (of the calls that ended)")
    in_flight = calls if payload["in_flight"] else Text("no call in flight")
    return Group(bar, in_flight, tokens, Text("last rows:", style="bold"), *last)

"""`crw flow wait RUN [--timeout S]` (and `crw flow start … --wait`): wait for a
run's outcome, showing its progress, and exit by it.

It reads the run directory only, as `watch` does: the journal's new rows at each
wake (`crw.cli.read.follow.JournalTail`, never the whole journal again) and
whether a process holds the run; it sleeps on the run directory's inotify watch
(`RunWake`), never a poll. The outcome it ends on and its exit code are
`crw.engine.views.run_outcome`'s: 0 completed, 1 failed or aborted, 3 waiting for
a decision, 4 paused, 5 cancelled, 124 its --timeout ran out. A run whose process
died has not ended: it waits on (a resume goes on with it) and says so once.

On a terminal the progress is one rich line (calls done of all, in flight,
tokens, the run's state, the time waited), redrawn at each wake and every TICK
seconds; piped, a plain line each time the run's state (running and
waiting_session alike), its counts or whether a process holds it change. --json
prints no progress: one JSON object at the end. The last line (or the object)
says the outcome and what to do next.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from crw.cli.output import emit, say
from crw.cli.read.follow import SAFETY_WAKE, JournalTail, RunWake
from crw.cli.read.run_spec import spec_json, workflow_file, workflow_plan
from crw.cli.read.watch import WatchView
from crw.engine.held_fix import answer_choices
from crw.engine.held_reasons import paused_why
from crw.engine.run.locks import is_launching, run_is_live
from crw.engine.run.rundir import RunDir, find_run, resolve_state
from crw.engine.views.run_outcome import exit_code, settled
from crw.engine.views.run_view import outcome as run_outcome
from crw.journal.log import JournalCorruptError

TICK = 1.0
"""Seconds between redraws of the terminal's line when no row comes (its clock)."""

GOING = frozenset({"running", "waiting_session"})
"""States a piped progress line does not tell apart (a session run's steps)."""

Payload = dict[str, Any]


def wait_command(run: str, *, timeout: float | None, state: str | None, json: bool) -> int:
    run_dir = find_run(resolve_state(state, os.environ, Path.cwd()), run)
    code, payload, line = wait_run(run_dir, timeout=timeout, state=state, json=json)
    emit(json, payload, line)
    return code


def wait_run(
    run_dir: RunDir, *, timeout: float | None, state: str | None, json: bool
) -> tuple[int, Payload, str]:
    """Wait for `run_dir`'s outcome (at most `timeout` seconds; None: no limit),
    showing progress unless `json`: the exit code, the --json object and the last
    line. `state` is the --state as the user gave it (named in the commands)."""
    more = f" --state {shlex.quote(state)}" if state else ""
    tail = JournalTail(run_dir.journal)
    view = WatchView(run_dir, tail, workflow_plan(workflow_file(spec_json(run_dir))))
    began = time.monotonic()
    deadline = None if timeout is None else began + timeout
    shown = _Quiet() if json else _Live(more) if sys.stdout.isatty() else _Plain(more)
    try:
        with shown, RunWake(run_dir) as wake:
            for _ in tail.pieces():  # the rows so far, a piece at a time
                pass
            while True:
                # Liveness first: a process that let the run go wrote its rows before.
                live = run_is_live(run_dir) or is_launching(run_dir)
                tail.read()
                ended = settled(tail.state, live)
                left = None if deadline is None else deadline - time.monotonic()
                shown(view.payload(datetime.now(UTC)), live)
                if ended is not None or (left is not None and left <= 0):
                    break
                wake.wait(min(TICK if shown.ticks else SAFETY_WAKE, left or SAFETY_WAKE))
    except JournalCorruptError as err:
        payload = {"run": run_dir.id, "outcome": "corrupt", "exit": 1, "error": err.damage,
                   "fix": err.FIX, "corrupt": err.report()}  # fmt: skip
        return 1, payload, f"run {run_dir.id}: {err.damage}\n{err.FIX}"
    outcome = ended or "timeout"
    payload = _payload(view, outcome, live, round(time.monotonic() - began, 2))
    return exit_code(outcome), payload, _last_line(payload, tail, more, timeout)


def _payload(view: WatchView, outcome: str, live: bool, waited: float) -> Payload:
    """The --json object: run, outcome, exit, state, reason (a paused run's, an
    ended run's status), unfinished (an ended run's nodes that did not complete,
    with their end), held (the held calls of a run waiting on a decision), live,
    done, total, in_flight (how many), tokens, waited (seconds)."""
    now = view.payload(datetime.now(UTC))
    why = run_outcome(view.tail.state)
    return {
        "run": view.run_dir.id,
        "outcome": outcome,
        "exit": exit_code(outcome),
        "state": why.state,
        "reason": why.reason,
        "unfinished": why.unfinished,
        "held": why.held,
        "live": live,
        "done": now["done"],
        "total": now["total"],
        "in_flight": len(now["in_flight"]),
        "tokens": now["tokens"],
        "waited": waited,
    }


def _last_line(payload: Payload, tail: JournalTail, more: str, timeout: float | None) -> str:
    """What the outcome is, and the command that goes on from it."""
    run, outcome = payload["run"], payload["outcome"]
    counts = f"{payload['done']}/{payload['total']} calls done, tokens {payload['tokens']['total']}"
    status = f"crw flow status {run}{more}"
    if outcome == "completed":
        return f"run {run} completed ({counts}); its answers: crw flow result {run}{more}"
    if outcome == "paused":
        resume = f"crw flow resume {run} --detach{more}"
        return f"run {run} paused {paused_why(payload['reason'])}; go on with: {resume}"
    if outcome == "waiting_decision":
        calls = tail.state.calls
        held = ", ".join(f"{call} ({calls[call].reason or 'held'})" for call in payload["held"])
        choices = "|".join(f"--{choice}" for choice in answer_choices(tail.state.backend))
        return (
            f"run {run} waits for a decision on {held}: answer each with crw flow answer "
            f"{run} CALL {choices}{more} ({status} names each command)"
        )
    if outcome == "timeout":
        gone = "" if payload["live"] else (
            f"; no process runs it: resume it with crw flow resume {run} --detach{more}"
        )  # fmt: skip
        return (
            f"run {run} has not ended after {timeout:g}s ({payload['state']}, {counts}){gone}; "
            f"wait again with: crw flow wait {run}{more}"
        )
    ends = ", ".join(f"{node} {end}" for node, end in payload["unfinished"].items())
    return f"run {run} {outcome}{f': {ends}' if ends else ''} ({counts}); see why: {status}"


class _Shown:
    """How the progress is shown: called at each wake with the view's payload and
    whether a process holds the run."""

    ticks = False
    """Whether it wants a wake every TICK seconds (a clock to redraw)."""

    def __enter__(self) -> _Shown:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __call__(self, payload: Payload, live: bool) -> None:
        return None


class _Quiet(_Shown):
    """--json: no progress, the object at the end."""


class _Plain(_Shown):
    """Piped: a line each time the state, the counts or the liveness change."""

    def __init__(self, more: str) -> None:
        self.more = more
        self.last: tuple[Any, ...] | None = None

    def __call__(self, payload: Payload, live: bool) -> None:
        flight = len(payload["in_flight"])
        # A session run goes between running and waiting_session at each step: no line.
        going = payload["state"] in GOING
        key = (
            "going" if going else payload["state"],
            payload["done"],
            payload["total"],
            flight,
            live,
        )
        if key == self.last:
            return
        self.last = key
        say(_progress_line(payload, live, self.more))


def _progress_line(payload: Payload, live: bool, more: str) -> str:
    line = (
        f"-- run {payload['run']} {payload['state']}: {payload['done']}/{payload['total']} "
        f"calls done, {len(payload['in_flight'])} in flight, tokens {payload['tokens']['total']}"
    )
    if live or payload["state"] in ("ended", "paused", "waiting_decision"):
        return line
    return (
        f"{line}; no process runs it: waiting until it is resumed "
        f"(crw flow resume {payload['run']} --detach{more})"
    )


class _Live(_Shown):
    """A terminal: a first line naming the run, then one rich progress line (a
    spinner, a bar of the calls done, the counts, the state, the time waited),
    drawn from the first payload on and redrawn at each wake."""

    ticks = True

    def __init__(self, more: str) -> None:
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.more = more
        self.progress = Progress(
            SpinnerColumn(),
            BarColumn(bar_width=16),
            TextColumn("{task.fields[line]}"),
            TimeElapsedColumn(),
            auto_refresh=False,
        )
        self.task: Any = None

    def __exit__(self, *exc: object) -> None:
        if self.task is not None:
            self.progress.stop()

    def __call__(self, payload: Payload, live: bool) -> None:
        from crw.cli.output import one_line

        if self.task is None:
            say(f"waiting for run {payload['run']} (Ctrl-C stops the wait, not the run)")
            self.task = self.progress.add_task("", total=None, line="")
        state = payload["state"]
        if not live and state not in ("ended", "paused", "waiting_decision"):
            resume = f"crw flow resume {payload['run']} --detach{self.more}"
            state = f"{state}, no process runs it ({resume})"
        line = (
            f"{payload['done']}/{payload['total']} calls done, {len(payload['in_flight'])} in "
            f"flight, tokens {payload['tokens']['total']}, {state}"
        )
        self.progress.update(
            self.task,
            total=max(payload["total"], 1),
            completed=payload["done"],
            line=one_line(line),
        )
        if not self.progress.live.is_started:
            self.progress.start()
        self.progress.refresh()

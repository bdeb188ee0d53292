"""`crw flow show RUN`: the run's history, one line per journal row.

It reads the run directory only, never a lock it would hold and never a row: the
journal, from its start. Each row is one line (`crw.engine.views.row_lines`): its time
(UTC), seq, call, kind and key fields. `--call` keeps the rows of one call;
`--json` prints each row as the journal holds it, one JSON object a line (JSON
Lines), framing left out. `--follow` goes on printing the rows the run commits
(`crw.cli.read.follow`) until the run ends (exit 0), or until no process runs it
(paused, crashed, waiting for an answer: exit 1, with a line saying so); Ctrl-C
stops it quietly (exit 130, as every command).

A torn tail of a run no process holds (a batch cut short) is dropped and warned
about once, as `status` does. A corrupt journal (damage with whole rows after
it) shows the rows before the damage, then where the damage is and what to do
(with --json a last line `{"corrupt": {...}}`, the object `crw flow status
--json` names so).
"""

from __future__ import annotations

import functools
import json as json_module
import logging
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crw.cli.output import json_text, one_line, say, say_json
from crw.cli.read.follow import JournalTail, Rows, follow
from crw.cli.read.remote_run import find_here_or_elsewhere
from crw.engine.run.locks import run_is_live
from crw.engine.run.rundir import RunDir, resolve_state
from crw.engine.views.row_lines import row_line
from crw.errors import InputError
from crw.journal.log import JournalCorruptError

log = logging.getLogger("crw.journal")


def show_command(
    run: str, *, call: str | None, follow_run: bool, state: str | None, json: bool
) -> int:
    run_dir, elsewhere = find_here_or_elsewhere(resolve_state(state, os.environ, Path.cwd()), run)
    # A run only the database keeps is live while its machine's writer holds its lease.
    is_live = functools.partial(run_is_live, run_dir) if elsewhere is None else elsewhere.live_now
    tail = JournalTail(run_dir.journal)
    # One call's lines wait until the journal is known to hold the call.
    printer = RowPrinter(json=json, call=call, held=call is not None)
    header = None if json else functools.partial(_header, run_dir)
    damage: JournalCorruptError | None = None
    try:
        for rows in tail.pieces():  # shown as read: the rows are never held whole
            printer(rows, header)
    except JournalCorruptError as err:
        printer(err.intact.rows, header)
        damage = err
    else:
        if tail.torn is not None and not is_live():
            log.warning("%s", tail.torn.message)
    if call is not None and call not in tail.state.calls and not follow_run and not damage:
        raise InputError(_no_such_call(run_dir, call, tail, state))
    printer([], header)
    printer.release()
    if damage is not None:
        printer.corrupt(damage)
        return 1 if follow_run else 0
    try:
        if not follow_run or follow(run_dir, tail, printer, is_live=is_live):
            return 0
    except JournalCorruptError as err:
        printer.corrupt(err)
        return 1
    say(stopped(run_dir, tail, state), file=sys.stderr)
    return 1


class RowPrinter:
    """Prints rows, each as its line or (`json`) its JSON object; `call`: only that
    call's rows. Flushed at once, for a reader at the other end of a pipe; `held`:
    kept until `release`."""

    def __init__(self, *, json: bool, call: str | None, held: bool = False) -> None:
        self.json = json
        self.call = call
        self.held: list[str] | None = [] if held else None
        self.headed = False

    def __call__(self, rows: Rows, header: Callable[[Rows], str] | None = None) -> None:
        """Print `rows`, after `header`'s line of the first rows (or of none)."""
        if header is not None and not self.headed:
            self.headed = True
            self._print(header(rows))
        shown = [row for row in rows if self.call is None or row.get("call") == self.call]
        if shown:
            self._print("\n".join(map(self.line, shown)))

    def _print(self, text: str) -> None:
        if self.held is not None:
            self.held.append(text)
        else:
            self._out(text)

    def _out(self, text: str) -> None:
        if self.json:  # JSON lines are escaped already (`json_text`)
            print(text, flush=True)
        else:
            say(text)

    def release(self) -> None:
        """Print what was held, and from now on print at once."""
        held, self.held = self.held, None
        if held:
            self._out("\n".join(held))

    def line(self, row: dict[str, Any]) -> str:
        if self.json:
            return json_text(row)
        return one_line(row_line(row))

    def corrupt(self, err: JournalCorruptError) -> None:
        """Where the damage is and what to do, after the rows before it."""
        if self.json:
            say_json({"corrupt": err.report()})
        else:
            say(f"{err.damage}; the rows after it are not shown\n{err.FIX}")


def _header(run_dir: RunDir, rows: Rows) -> str:
    at = next((row["at"] for row in rows if isinstance(row.get("at"), str)), None)
    if at is None:
        return f"run {run_dir.id}: no rows yet"
    return f"run {run_dir.id}: its rows from {at[:10]} (times in UTC)"


def stopped(run_dir: RunDir, tail: JournalTail, state: str | None) -> str:
    """Why following stopped before the run ended, and what to run next."""
    more = f" --state {shlex.quote(state)}" if state else ""
    return (
        f"crw: no process runs run {run_dir.id} (its rows leave it {tail.state.state}), so "
        f"its journal grows no more; see what to do with: crw flow status {run_dir.id}{more}"
    )


def _no_such_call(run_dir: RunDir, call: str, tail: JournalTail, state: str | None) -> str:
    calls = ", ".join(list(tail.state.calls)[:10]) or "none yet"
    more = f" --state {shlex.quote(state)}" if state else ""
    return (
        f"run {run_dir.id} has no call {json_module.dumps(call)} (its calls: {calls}); "
        f"name one as crw flow status {run_dir.id}{more} lists them"
    )

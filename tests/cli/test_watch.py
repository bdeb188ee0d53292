"""`crw flow watch`: a run's live view on a terminal, its plain lines when piped and
its JSON lines, on a finished, a running and a crashed run of real processes.

Every process is reaped at teardown by pid (the drill's `reap`, `Followers`).
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cli.conftest import REPO
from tests.cli.test_show import (
    FOLLOW_END,
    Followers,
    crashed,
    hanging,
    line,
    raw,
    watching,
)
from tests.drill.test_crash_drill import CALL, Drill, kill, wait_until

pytest_plugins = ["tests.cli.test_show"]


def watch(drill: Drill, *args: str) -> tuple[int, list[str], str]:
    assert drill.run is not None
    done = raw(drill.crw, "flow", "watch", drill.run.id, *args, "--state", str(drill.crw.state))
    return done.code, done.stdout.splitlines(), done.stderr


def progress(run: str, state: str, done: int, total: int, flight: int, tokens: int) -> str:
    return f"-- run {run} {state}: {done}/{total} calls done, {flight} in flight, tokens {tokens}"


def total_tokens(rows: list[dict[str, Any]]) -> int:
    return sum((row.get("tokens") or {}).get("total", 0) for row in rows if row.get("call"))


class Terminal:
    """`crw flow watch` on a pseudo-terminal; what it drew, read as it comes."""

    def __init__(self, drill: Drill) -> None:
        assert drill.run is not None
        main, side = pty.openpty()
        env = drill.crw.env | {"TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
        argv = ["flow", "watch", drill.run.id, "--state", str(drill.crw.state)]
        self.child = subprocess.Popen(
            [sys.executable, "-m", "crw", *argv],
            stdin=subprocess.DEVNULL, stdout=side, stderr=subprocess.DEVNULL, env=env, cwd=REPO,
        )  # fmt: skip
        os.close(side)
        self.main = main
        self.drawn = b""
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        with contextlib.suppress(OSError):  # EIO: the child closed its side
            while chunk := os.read(self.main, 65536):
                self.drawn += chunk

    def text(self) -> str:
        return self.drawn.decode(errors="replace")

    def close(self) -> None:
        kill(self.child.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.child.wait(timeout=5)
        self.reader.join(timeout=5)
        os.close(self.main)


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    made: list[Terminal] = []
    try:
        yield made
    finally:
        for terminal in made:
            terminal.close()


def test_watch_of_a_finished_run_piped_prints_its_rows_and_the_calls_done(
    drill: Drill, terminals: list[Terminal]
) -> None:
    drill.start(crash_after=None)
    rows = drill.finish()
    assert drill.run is not None
    code, lines, _ = watch(drill)
    assert code == 0
    tokens = total_tokens(rows)
    assert lines == [*map(line, rows), progress(drill.run.id, "ended", 3, 3, 0, tokens)]

    code, objects, _ = watch(drill, "--json")
    assert code == 0
    assert [json.loads(text) for text in objects] == [
        {
            "run": drill.run.id,
            "state": "ended",
            "done": 3,
            "total": 3,
            "held": 0,
            "in_flight": [],
            "tokens": json.loads(objects[0])["tokens"] | {"total": tokens},
        }
    ]

    terminal = Terminal(drill)
    terminals.append(terminal)
    assert terminal.child.wait(timeout=FOLLOW_END) == 0
    terminal.reader.join(timeout=5)
    drawn = terminal.text()
    assert "\x1b[" in drawn, "no terminal drawing"
    assert "━" in drawn and "3/3 calls done" in drawn and "no call in flight" in drawn
    assert f"tokens {tokens} (of the calls that ended)" in drawn
    assert "ended" in drawn and "last rows:" in drawn


def test_watch_of_a_running_run_follows_it_to_its_end(
    drill: Drill, followers: Followers, terminals: list[Terminal]
) -> None:
    """The calls in flight, then the run's end: piped, as JSON and on a terminal;
    each wakes on the rows the run commits after it started and exits 0."""
    rows = hanging(drill)
    assert drill.run is not None
    piped = followers.start("plain", "flow", "watch", drill.run.id)
    as_json = followers.start("json", "flow", "watch", drill.run.id, "--json")
    terminal = Terminal(drill)
    terminals.append(terminal)
    turn = line(rows[-1])
    wait_until("the piped watch printed the rows so far", lambda: turn in followers.output("plain"))
    wait_until("it sleeps on an inotify watch", lambda: watching(piped.pid))

    def flight() -> list[tuple[str, str]]:
        objects = [json.loads(text) for text in followers.output("json").splitlines()]
        return (
            [(call["call"], call["state"]) for call in objects[-1]["in_flight"]] if objects else []
        )

    wait_until("the JSON watch shows build in flight", lambda: flight() == [(CALL, "running")])
    wait_until("the terminal shows build in flight", lambda: "build.1" in terminal.text())
    assert "1/3 calls done" in terminal.text() and "running" in terminal.text()

    cancelled = drill.crw("flow", "cancel", drill.run.id, "--state", str(drill.crw.state))
    assert cancelled.code == 0, cancelled.stderr
    every = drill.rows()
    plain = followers.ended("plain", piped)
    assert plain.code == 0, plain.stderr
    lines = plain.stdout.splitlines()
    assert [text for text in lines if not text.startswith("-- ")] == list(map(line, every))
    # The calls it ran: explore done, build held (cancelled); none in flight.
    assert lines[-1] == progress(drill.run.id, "ended", 1, 2, 0, total_tokens(every))
    last = json.loads(followers.ended("json", as_json).stdout.splitlines()[-1])
    assert (last["state"], last["done"], last["total"], last["held"]) == ("ended", 1, 2, 1)
    assert last["in_flight"] == []
    assert terminal.child.wait(timeout=FOLLOW_END) == 0


def test_watch_of_a_crashed_run_says_no_process_runs_it(drill: Drill) -> None:
    rows = crashed(drill)
    assert drill.run is not None
    code, lines, stderr = watch(drill)
    assert code == 1
    crashed_ = progress(drill.run.id, "crashed", 1, 3, 0, total_tokens(rows))
    assert lines == [*map(line, rows), crashed_]  # its process is gone: none in flight
    assert stderr.startswith(f"crw: no process runs run {drill.run.id} (its rows leave it running)")

"""A run paused host_unavailable goes on by itself when its host answers again.

The run process that paused the run (its paused row durable, its locks let go,
`crw.actors.run`) stays to wait for the host on run.json's URI, for the run's
`host_wait` (docs/timers.md; 0: no wait, the process exits as before). It holds
`host_wait.lock` meanwhile (`crw.engine.run.host_wait`: `status` shows the wait) and:

- probes the host with one cheap request (`thread/loaded/list {limit: 1}` on a
  fresh connection, given `host_timeout` to answer) 1 s after the pause, then at
  an interval that doubles up to `host_timeout`;
- looks at the journal every `poll_interval`: a row appended after its paused row
  (a resume's started row, a cancel's ended row, an answer) means the run went on
  without it, and it stops; so does a run directory removed;
- stops when told (SIGTERM: `crw flow pause`, `cancel` and `rm` tell it);
- when the host answers, hands the run to `go_on` (the launch `crw flow resume
  --detach` makes, under the run's launch lock, refused there as a resume is:
  a run a process holds, one that ended, or one whose journal moved on);
- when `host_wait` runs out, stops; the run stays paused and its log says so
  (the log gets one line when the wait ends, whichever way, and none before).

The waiter writes no row: a by-hand resume and this one write the same.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

import trio

from crw.engine.run.host_wait import (
    FIRST_PROBE,
    Waiting,
    held,
    next_interval,
    paused_here,
    take_wait_lock,
)
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunSpec
from crw.errors import CrwError
from crw.host.errors import HostError, HostUnavailable
from crw.journal.streamed import pieces
from crw.settings import Settings

log = logging.getLogger("crw.run")

Outcome = Literal["answered", "went_on", "ran_out", "told"]
Probe = Callable[[], Awaitable[bool]]
PROBE = "thread/loaded/list"


def journal_size(journal: Path) -> int | None:
    """The journal's size, or None when it is gone (the run removed)."""
    try:
        return journal.stat().st_size
    except OSError:
        return None


async def wait_for_host(journal: Path, end: int, settings: Settings, probe: Probe) -> Outcome:
    """Wait up to `settings.host_wait` for `probe` to answer True; "went_on" as
    soon as the journal is no longer `end` bytes long (a row appended, or the run
    removed). Probes FIRST_PROBE after the call, then at intervals doubling up to
    `host_timeout`; looks at the journal every `poll_interval` between."""
    deadline = trio.current_time() + settings.host_wait
    interval = min(FIRST_PROBE, settings.host_timeout)
    probe_at = trio.current_time() + interval
    while True:
        if journal_size(journal) != end:
            return "went_on"
        now = trio.current_time()
        if now >= probe_at:
            if await probe():
                return "went_on" if journal_size(journal) != end else "answered"
            interval = next_interval(interval, settings.host_timeout)
            probe_at = trio.current_time() + interval
            now = trio.current_time()
        if now >= deadline:
            return "ran_out"
        await trio.sleep(min(settings.poll_interval, probe_at - now, deadline - now))


def host_probe(spec: RunSpec, run_dir: RunDir, settings: Settings) -> Probe:
    """Whether the host on run.json's URI answers one request within `host_timeout`
    (an error it answers with is an answer)."""
    from crw.host.connect import connect_host
    from crw.host.uri import parse_host_uri

    async def probe() -> bool:
        with trio.move_on_after(settings.host_timeout):
            try:
                async with connect_host(
                    parse_host_uri(spec.host or "codex"),
                    codex_bin=spec.codex_bin,
                    stderr=run_dir.root / "host.log",
                    follows=frozenset(),
                ) as client:
                    await client.request(PROBE, {"limit": 1})
            except HostUnavailable:
                return False
            except HostError:
                return True
            return True
        return False

    return probe


async def _until_told(journal: Path, end: int, settings: Settings, probe: Probe) -> Outcome:
    """`wait_for_host`, or "told" at the first SIGTERM."""
    outcome: Outcome = "told"
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def told() -> None:
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    return

            async def wait() -> None:
                nonlocal outcome
                outcome = await wait_for_host(journal, end, settings, probe)
                nursery.cancel_scope.cancel()

            nursery.start_soon(told)
            nursery.start_soon(wait)
    return outcome


TAIL = 64 << 10
"""The journal's last bytes `paused_end` reads first; four times more each time
its last row is not whole in them (a big run's ended row names every node: 2 MB
at 100,000 nodes)."""


def paused_end(journal: Path, pid: int) -> int | None:
    """The end of the journal's whole batches when its last row is the paused
    host_unavailable row of the process `pid` (`paused_here`); else None. The
    journal is read a piece at a time, and only when its last line is such a
    row: a run that ended, the most common exit, costs one read of its tail, not
    the decode of every row (for a big run, the process's peak memory).

    Raises what `crw.journal.streamed.pieces` raises.
    """
    tail = _tail(journal)
    lines = tail.rsplit(b"\n", 2)
    if tail.endswith(b"\n") and len(lines) == 3:  # a whole last line, another before it
        try:
            last = json.loads(lines[1])
        except ValueError:
            last = None
        kind = (last.get("row"), last.get("reason")) if isinstance(last, dict) else None
        if kind is not None and kind != ("paused", "host_unavailable"):
            return None
    end, last_row, started = 0, None, None
    for read, _ in pieces(journal):
        end += read.end
        if read.rows:
            last_row = read.rows[-1]
        started = next((r for r in reversed(read.rows) if r.get("row") == "started"), started)
    rows = [row for row in (started, last_row) if row is not None]
    return end if paused_here(rows, pid) is not None else None


def _tail(journal: Path) -> bytes:
    """The journal's last bytes, from TAIL up, until they hold its last line whole
    and the end of the line before it (or the whole journal)."""
    with journal.open("rb") as file:
        size, want = os.fstat(file.fileno()).st_size, TAIL
        while True:
            start = max(0, size - want)
            file.seek(start)
            tail = file.read(size - start)
            if start == 0 or tail.count(b"\n", 0, len(tail) - 1):
                return tail
            want *= 4


def wait_then_go_on(
    run_dir: RunDir,
    spec: RunSpec,
    go_on: Callable[[int], int],
    *,
    probe: Probe | None = None,
) -> Outcome | None:
    """In the run process, once the run is let go: wait for the host when this
    process paused the run host_unavailable (the journal's last row), then call
    `go_on(end)` (it launches the resume, refused unless the journal is still
    `end` bytes long; returns the launched pid). None: no wait to make."""
    settings = spec.run_settings()
    if settings.host_wait <= 0:
        return None
    try:
        end = paused_end(run_dir.journal, os.getpid())
    except (CrwError, OSError):
        return None
    if end is None:
        return None
    until = datetime.now(UTC) + timedelta(seconds=settings.host_wait)
    waiting = Waiting(os.getpid(), until.isoformat(timespec="seconds").replace("+00:00", "Z"))
    lock = take_wait_lock(run_dir, waiting, timeout=2 * settings.poll_interval + 1)
    if lock is None:
        log.warning("run %s: another process waits for its host; this one stops", spec.id)
        return None
    # Nothing said until the wait ends: the process's log is complete when its
    # process lock goes (`crw.actors.run`); `status` shows the wait meanwhile.
    gc.enable()  # a long wait: its probes' garbage is collected
    with held(lock):
        outcome = trio.run(
            _until_told,
            run_dir.journal,
            end,
            settings,
            probe or host_probe(spec, run_dir, settings),
        )
        if outcome == "answered":
            try:
                pid = go_on(end)
            except CrwError as err:
                log.warning(
                    "run %s: its host answers again, but it is not resumed: %s", spec.id, err
                )
                return "went_on"
            log.warning("run %s: its host answers again; resumed in process %d", spec.id, pid)
        elif outcome == "ran_out":
            log.warning(
                "run %s: its host did not answer within host_wait (%g s); the run stays "
                "paused: bring the host back, then: crw flow resume %s --detach",
                spec.id,
                settings.host_wait,
                spec.id,
            )
        elif outcome == "told":
            log.warning(
                "run %s: told to stop waiting for its host (crw flow pause, cancel or rm)",
                spec.id,
            )
        else:
            log.info("run %s went on without this process; it stops waiting", spec.id)
    return outcome

"""A wake for a session run's step and close files: `crw flow next --wait` sleeps on
it between two reads, so a step written during the wait is answered once its file
is renamed in, not at the next read (10 ms into a wait, 50 ms after its first
ten reads).

It watches (inotify, `crw.bus.dirwatch.inotify_simple`) each call directory the
holder's index (`crw.bus.live`) marks, where step and close files are renamed
in, and `steps/` itself, where a new call makes its directory and the index gets
its marks: a directory made or marked there is watched from then on, and looked
at once (a file renamed in before its watch was set is found so). Only a step
or close file wakes the reader (a packet, a mark, a new directory do not: each
wake costs it a whole read). A run without an index (no process holds it, or an
older crw does) is watched at the directories made during the wait. Like
`DirWatch` it only shortens a wait: the reads go on at their pace whatever it
says, so a lost event, or a watch that cannot be set, costs a poll's delay,
never a step.

Closing an inotify descriptor that held a watch waits for the kernel's grace
period (`crw.bus.dirwatch`): `close` removes the watches and keeps the
descriptor for the process's next wake (an owner that asks `next` in one process
again and again pays it once, at its exit).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import os
import re
import select
import threading
import time
from collections.abc import Iterable
from typing import Any

from crw.bus import live
from crw.bus.dirwatch import inotify_simple, read_events
from crw.bus.live import live_calls
from crw.engine.run.rundir import RunDir

log = logging.getLogger("crw.bus")

_BUS_FILE = re.compile(r"(t\d+-a\d+|close-a\d+-.+)\.json")
"""A step file's or a close step's name (`crw.bus.steps`): what arrives and wakes
(a packet is renamed in just before its step file and wakes nobody)."""
MOST_CALLS = 64
"""The most call directories one wake watches (the index marks the calls in
flight and the close steps not yet taken: a few more than the pool)."""
SPARE = 2
"""The most idle descriptors a process keeps."""

_spare: list[Any] = []
_spare_lock = threading.Lock()


class StepWake:
    """inotify watches on a run's `steps/` and on its marked call directories."""

    def __init__(self, inotify: Any, flags: Any, run: RunDir) -> None:
        self._inotify = inotify
        self._run = run
        self._steps = os.fspath(run.steps)
        self._poller = select.poll()
        self._poller.register(inotify.fileno(), select.POLLIN)
        self._moved_to = int(flags.MOVED_TO)
        self._create = int(flags.CREATE)
        self._isdir = int(flags.ISDIR)
        self._overflow = int(flags.Q_OVERFLOW)
        self._ignored = int(flags.IGNORED)
        mask = int(flags.CREATE | flags.MODIFY | flags.MOVED_TO)
        self._steps_wd = inotify.add_watch(self._steps, mask)
        self._watched: dict[str, int] = {}
        """Each call directory watched, and its watch descriptor."""
        self._by_wd: dict[int, str] = {}
        self._found = False
        """A step or close file was found in a directory when its watch was set,
        and no wait has returned for it yet."""

    @classmethod
    def open(cls, run: RunDir) -> StepWake | None:
        """A wake for `run`'s steps, watching the call directories its index
        marks now; None where none can be set (not Linux, no inotify left, no
        `steps/`): the reads alone then find the files."""
        module = inotify_simple()
        if module is None:
            return None
        with _spare_lock:
            inotify = _spare.pop() if _spare else None
        try:
            if inotify is None:
                inotify = module.INotify(nonblocking=True)
        except (OSError, AttributeError) as err:  # AttributeError: a libc without inotify
            log.debug("no inotify for %s: %s", run.steps, err)
            return None
        try:
            wake = cls(inotify, module.flags, run)
        except OSError as err:
            log.debug("no inotify watch of %s: %s", run.steps, err)
            _keep(inotify)
            return None
        wake._found = wake._follow(live_calls(run) or ())
        return wake

    def wait(self, seconds: float) -> bool:
        """Block until a step or close file is renamed into a watched call
        directory (or is found in one watched from now on), or events were lost
        (True); or until `seconds` pass (False)."""
        if self._found:  # renamed in since the caller's read, before the watch
            self._found = False
            return True
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self._poller.poll(max(math.ceil(left * 1000), 0)):
                return False
            if self._woken(read_events(self._inotify)):
                return True

    def _woken(self, events: list[Any]) -> bool:
        woken = marked = False
        for event in events:
            if event.mask & self._overflow:
                woken = True
            elif event.wd == self._steps_wd:
                if event.mask & self._create and event.mask & self._isdir:
                    woken |= self._follow([os.path.join(self._steps, event.name)])
                elif event.name.startswith(live.PREFIX) or event.name == live.LINK:
                    marked = True  # the index: a call marked again, its directory there
            elif event.mask & self._ignored:  # its directory went: the kernel removed it
                call = self._by_wd.pop(event.wd, None)
                if call is not None:
                    self._watched.pop(call, None)
            elif event.mask & self._moved_to and _BUS_FILE.fullmatch(event.name):
                woken = True
        if marked:
            woken |= self._follow(live_calls(self._run) or ())
        return woken

    def _follow(self, calls: Iterable[str]) -> bool:
        """Watch each of these call directories not watched yet (up to MOST_CALLS;
        one that is gone is skipped); whether one of them holds a step or close
        file already (renamed in before its watch was set)."""
        found = False
        for call in calls:
            if call in self._watched or len(self._watched) >= MOST_CALLS:
                continue
            try:
                wd = self._inotify.add_watch(call, self._moved_to)
                names = os.listdir(call)
            except OSError:  # gone, or no watch left: its files come at a read
                continue
            self._watched[call] = wd
            self._by_wd[wd] = call
            found = found or any(_BUS_FILE.fullmatch(name) for name in names)
        return found

    def close(self) -> None:
        """Remove the watches; the descriptor is kept for the process's next wake."""
        inotify, self._inotify = self._inotify, None
        if inotify is None:
            return
        for wd in (self._steps_wd, *self._by_wd):
            with contextlib.suppress(OSError):
                inotify.rm_watch(wd)
        self._watched.clear()
        self._by_wd.clear()
        read_events(inotify)  # what came meanwhile, and the removals' IN_IGNORED
        _keep(inotify)

    def __enter__(self) -> StepWake:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _keep(inotify: Any) -> None:
    """Keep an idle descriptor for the next wake (SPARE at most; closed past it)."""
    with _spare_lock:
        if len(_spare) < SPARE:
            _spare.append(inotify)
            return
    inotify.close()


@atexit.register
def _close_spare() -> None:
    """Close the kept descriptors as the process exits (the grace period is paid
    there, once), not left to the interpreter's teardown, which warns of each."""
    with _spare_lock:
        kept = _spare[:]
        _spare.clear()
    for inotify in kept:
        inotify.close()

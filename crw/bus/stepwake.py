"""A wake for a reader that waits for a session run's next step (`crw flow next
--wait`): Linux inotify, through `inotify_simple`, so the reader learns of a step
when the run writes it instead of at its next poll.

What it watches, and why that is enough:

- the directory of each call the holder's live index marks (`crw.bus.live`): a
  step or close file renamed in (`IN_MOVED_TO`; the bus writes each under a
  hidden temporary name first, and a hidden name wakes nobody);
- steps/ itself, for the index: the holder marks a call before it writes a step
  or close file in its directory, so a file in a directory not watched yet comes
  after the index changed (an append, a compaction or a new holder's index, an
  index abandoned); at that wake the reader watches the directories marked now
  (`follow`), and reads the bus only when one it watches anew holds a file
  already (an unmark, or a mark whose file is not written yet, is no read). A
  call marked before its directory was made (a close step of a call no step was
  written in) is watched once steps/ shows its directory made;
- the journal's file (`IN_MODIFY`): rows appended, which may change the run's state.

It only shortens a wait, as `crw.bus.dirwatch`'s does: the reader reads the run
itself, and reads it again at a bounded poll whatever came, so a run with no
index to trust (no process holds it, an older crw's, an index abandoned), a
platform without inotify, a watch that could not be set or events lost to an
overflow cost a poll, never a step.

Closing an inotify descriptor that held a watch waits for an RCU grace period
(8-16 ms on this machine: `crw.bus.dirwatch`), so `close` keeps the descriptor,
its watches set, for the next `open` of the same run in this process (an owner
that calls `next` again and again, the bench's and the scripted one): its events
queued meanwhile are taken as a wake. A process's kept descriptors are closed by
the kernel at its exit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crw.bus import live
from crw.engine.run.rundir import RunDir

log = logging.getLogger("crw.bus")

KEPT = 4
"""The most descriptors (one a run) a process keeps between its waits."""
_kept: dict[str, StepWake] = {}
_kept_lock = threading.Lock()


@dataclass(frozen=True)
class Woke:
    """What the events taken say: `bus`, a step or close file may have come (read
    the bus); `index`, the holder's index changed (`follow` it: a directory it
    watches now may hold a file already); `journal`, rows were appended. All
    three when events were lost."""

    bus: bool = False
    index: bool = False
    journal: bool = False


class StepWake:
    """One inotify descriptor watching a run's steps/, its marked calls'
    directories and its journal."""

    def __init__(self, inotify: Any, flags: Any, run: RunDir, journal: Path | None) -> None:
        self._inotify = inotify
        self._flags = flags
        self._run = run
        self._journal = journal
        self._steps_wd: int | None = None
        self._journal_wd: int | None = None
        self._dirs: dict[str, int] = {}
        """The call directories watched, by path, and their watch descriptors."""
        self._calls: dict[int, str] = {}
        self._missing: set[str] = set()
        """Marked calls whose directory could not be watched (not made yet)."""

    @classmethod
    def open(cls, run: RunDir, journal: Path | None) -> StepWake | None:
        """The wake of `run` (`journal`: the journal's file, None when its store is
        no file), kept by this process or new; None where none can be set (not
        Linux, no inotify left, no steps/): the caller polls."""
        key = os.fspath(run.root)
        with _kept_lock:
            kept = _kept.pop(key, None)
        if kept is not None:
            return kept
        try:
            from inotify_simple import INotify, flags
        except ImportError:
            return None
        try:
            inotify = INotify(nonblocking=True)
        except (OSError, AttributeError) as err:  # AttributeError: a libc without inotify
            log.debug("no inotify for %s: %s", run.root, err)
            return None
        wake = cls(inotify, flags, run, journal)
        try:
            mask = flags.CREATE | flags.MODIFY | flags.MOVED_TO | flags.DELETE
            wake._steps_wd = int(inotify.add_watch(run.steps, mask))
        except OSError as err:  # no steps/ yet: nothing to watch (no watch: closed at once)
            log.debug("no inotify watch of %s: %s", run.steps, err)
            inotify.close()
            return None
        if journal is not None:
            with contextlib.suppress(OSError):  # no journal file: its rows by the poll
                wake._journal_wd = int(inotify.add_watch(journal, flags.MODIFY))
        return wake

    def fileno(self) -> int:
        """The descriptor: readable when events are pending (then `take` them)."""
        return int(self._inotify.fileno())

    def follow(self) -> list[str] | None:
        """Watch the directories of the calls the holder's index marks now, and no
        others; the directories watched anew, or None when there is no index to
        trust (every directory may get a step: the caller polls)."""
        calls = live.live_calls(self._run)
        if calls is None:
            return None
        wanted = set(calls)
        for directory in [d for d in self._dirs if d not in wanted]:
            wd = self._dirs.pop(directory)
            self._calls.pop(wd, None)
            with contextlib.suppress(OSError):  # the kernel removed it: its directory went
                self._inotify.rm_watch(wd)
        self._missing &= wanted
        new = []
        for directory in wanted:
            if directory in self._dirs:
                continue
            try:
                wd = int(self._inotify.add_watch(directory, self._flags.MOVED_TO))
            except OSError:  # not made yet: watched once steps/ shows it made
                self._missing.add(directory)
                continue
            self._missing.discard(directory)
            self._dirs[directory] = wd
            self._calls[wd] = directory
            new.append(directory)
        return new

    def arrived(self) -> bool | None:
        """`follow`, then whether a directory it watches anew holds a step or close
        file already (written before its watch was set); None as `follow`."""
        new = self.follow()
        if new is None:
            return None
        return any(live.holds_files(directory) for directory in new)

    def take(self) -> Woke:
        """The pending events, taken without waiting, and what they say."""
        flags = self._flags
        bus = index = journal = False
        for event in self._inotify.read(timeout=0):
            if event.mask & flags.Q_OVERFLOW:
                return Woke(bus=True, index=True, journal=True)
            if event.wd == self._journal_wd:
                journal = True
            elif event.wd == self._steps_wd:
                if event.name.startswith(live.LINK):  # the index, or its link
                    index = True
                elif event.mask & flags.ISDIR and self._missing:
                    index = index or os.path.join(self._run.steps, event.name) in self._missing
            elif event.wd in self._calls:
                if event.mask & flags.IGNORED:  # the directory went: its watch with it
                    self._dirs.pop(self._calls.pop(event.wd), None)
                elif event.name.endswith(".json") and not event.name.startswith("."):
                    bus = True
        return Woke(bus=bus, index=index, journal=journal)

    def close(self) -> None:
        """Keep the descriptor, its watches set, for the next `open` of the run in
        this process (the oldest kept one past KEPT is closed)."""
        with _kept_lock:
            old = _kept.pop(os.fspath(self._run.root), None)
            _kept[os.fspath(self._run.root)] = self
            evicted = [_kept.pop(next(iter(_kept))) for _ in range(len(_kept) - KEPT)]
        for wake in [w for w in (old, *evicted) if w is not None]:
            wake._inotify.close()

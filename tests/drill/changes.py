"""A wake for a drill that waits for a run directory to change (Linux inotify,
through `inotify_simple`), instead of asking again every few milliseconds.

A drill that plays the owner asks `crw flow next` (a process), or reads the
run's steps and rows, for what to do next; what it is told changes only when a
file in the run's directory does: a row appended to the journal, a step file
written or removed, a report or a control request in the inbox. `RunChanges`
watches the run directories it is given and every directory made under them
(steps/<call>/ among them) for a write, a file made, renamed in or out, or
removed, and `wait` returns at the first such change since the last wait, or
after `seconds` (a bound: a directory made between its parent's event and its
watch, or a change the drill does not see as a file, costs that delay, never
a step). Reads (the drill's own, `next`'s) and locks change nothing it watches.
"""

from __future__ import annotations

import os
from pathlib import Path

from inotify_simple import INotify, flags

MASK = (
    flags.MODIFY
    | flags.CREATE
    | flags.MOVED_TO
    | flags.MOVED_FROM
    | flags.DELETE
    | flags.DELETE_SELF
)


class RunChanges:
    """The changes under `roots` (run directories), as they come."""

    def __init__(self, roots: list[Path]) -> None:
        self._inotify = INotify(nonblocking=True)
        self._dirs: dict[int, Path] = {}
        for root in roots:
            self._watch_tree(root)

    def wait(self, seconds: float) -> bool:
        """Until something under the roots changed since the last wait, or
        `seconds` passed; whether something did."""
        events = list(self._inotify.read(timeout=int(seconds * 1000)))
        for event in events:
            if event.mask & flags.ISDIR and event.mask & (flags.CREATE | flags.MOVED_TO):
                parent = self._dirs.get(event.wd)
                if parent is not None:
                    self._watch_tree(parent / event.name)
        return bool(events)

    def close(self) -> None:
        self._inotify.close()

    def _watch_tree(self, top: Path) -> None:
        for where, _, _ in os.walk(top):
            try:
                self._dirs[self._inotify.add_watch(where, MASK)] = Path(where)
            except OSError:
                continue  # gone since the walk listed it

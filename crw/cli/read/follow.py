"""Following a run's journal as it grows: what `show --follow` and `watch` share.

`JournalTail` reads the rows appended since its last read, whole batches only (a
batch the run is writing this moment is read once it is whole). `follow` hands
each new piece of rows to its caller until the run ends or no process runs it.

It sleeps between reads, never polls: an inotify watch on the run's directory
wakes it when the journal is appended to, or when a lock of the run is let go
(the file closed after its holder wrote to it: a run process that exited or was
killed, a command that wrote a row, `crw flow start` handing over). The watch is
made before the first read, so no append is missed between the two. A wake with
nothing new costs a read of the journal's tail. In case an event is lost (the
kernel's queue overflowed) it also wakes every SAFETY_WAKE seconds.
"""

from __future__ import annotations

import dataclasses
import select
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from inotify_simple import INotify
from inotify_simple import flags as inotify_flags

from crw.bus.dirwatch import inotify_simple
from crw.engine.run.locks import run_is_live
from crw.engine.run.rundir import RunDir
from crw.journal.log import JournalCorruptError, TornTail, decode
from crw.journal.replay import RunState, replay
from crw.journal.stores import store_at

SAFETY_WAKE = 5.0
"""Seconds between wakes when no event comes: bounds the wait after a lost event."""
PIECE = 4 * 1024 * 1024
"""About how many bytes of journal `JournalTail.pieces` reads at a time."""

Rows = list[dict[str, Any]]


@dataclass
class JournalTail:
    """The rows of `journal` read so far, and the run state they replay to."""

    journal: Path
    offset: int = 0
    last_seq: int = 0
    state: RunState = field(default_factory=RunState)
    ended: bool = False
    """An ended row was read: the run is over and its journal grows no more."""
    torn: TornTail | None = None
    """What the last read left for later: a batch not whole yet (a live run is
    writing it), or a torn tail (a run no process holds)."""
    _ahead: bytes = field(default=b"", repr=False)
    _ahead_at: int = field(default=0, repr=False)
    """A store that is no file: the bytes its last query gave from offset
    `_ahead_at`, handed out a piece at a time."""

    def read(self) -> Rows:
        """The whole batches appended since the last read.

        Raises:
            JournalCorruptError: damage that is not a torn tail, its offsets the
                whole journal's; `intact` holds the new rows before the damage.
        """
        return self._read(None)[0]

    def pieces(self, size: int | None = None) -> Iterator[Rows]:
        """The whole batches appended since the last read, about `size` bytes of
        journal (default PIECE) at a time (a batch larger is a piece of its own), each read when
        it is asked for: a reader that shows or replays a piece and lets it go
        holds one piece, never the whole journal's rows.

        Raises:
            JournalCorruptError: as `read`; `intact` holds the piece's rows before it.
        """
        size = PIECE if size is None else size
        while True:
            rows, more = self._read(size)
            if rows:
                yield rows
            if not more:
                return
            if not rows:  # no whole batch in the piece: a larger batch
                size *= 2

    def _read(self, limit: int | None) -> tuple[Rows, bool]:
        """The whole batches in the next `limit` bytes (None: all), and whether
        the journal held more than that when it was read."""
        data, more = self._bytes(limit)
        if more:  # whole lines only: a cut batch is read again with the next piece
            data = data[: data.rfind(b"\n") + 1]
        try:
            read = decode(data, self.journal, after=self.last_seq)
        except JournalCorruptError as err:
            if self.offset:
                raise err.shifted(self.offset) from None
            raise
        torn = read.torn  # its offset the whole journal's, as a damage's
        self.torn = dataclasses.replace(torn, offset=self.offset + torn.offset) if torn else None
        self.offset += read.end
        self.last_seq = read.last_seq
        replay(read.rows, into=self.state)
        self.ended = self.ended or any(row.get("row") == "ended" for row in read.rows)
        return read.rows, more

    def _bytes(self, limit: int | None) -> tuple[bytes, bool]:
        """The journal's bytes from the offset, at most `limit` (None: all), and
        whether it held more. A file is read where the offset is; a store that is
        no file (a database) is asked once for the rows from the offset on (by
        their offsets: the rows after those read, never the journal from its
        start), handed out a piece at a time, and asked again once they are read."""
        store = store_at(self.journal)
        if store.wake_file is not None:
            try:
                with store.open_bytes() as file:
                    file.seek(self.offset)
                    data = file.read(-1 if limit is None else limit)
            except FileNotFoundError:
                return b"", False
            return data, limit is not None and len(data) == limit
        start = self.offset - self._ahead_at
        if not 0 <= start < len(self._ahead):
            self._ahead, self._ahead_at, start = store.read_from(self.offset), self.offset, 0
        end = len(self._ahead) if limit is None else min(start + limit, len(self._ahead))
        data = self._ahead[start:end]
        if end == len(self._ahead):
            self._ahead = b""  # all handed out: the next read asks the store again
            return data, False
        return data, True


class RunWake:
    """An inotify watch on a run's directory: `wait` returns once the journal
    grew or a lock of the run was let go, or after `timeout` seconds."""

    MASK = inotify_flags.MODIFY | inotify_flags.CLOSE_WRITE | inotify_flags.MOVED_TO
    CREATE = inotify_flags.CREATE

    def __init__(self, run: RunDir) -> None:
        store = store_at(run.journal)
        self._names = {run.run_lock.name, run.start_lock.name}
        if store.wake_file is not None:
            self._names.add(store.wake_file.name)
        inotify_simple()  # its libc loaded without find_library's child process
        self._inotify = INotify()
        try:
            try:
                self._inotify.add_watch(run.root, self.MASK | self.CREATE)
            except FileNotFoundError:
                if store.wake_file is not None:
                    raise
                # A run only the database keeps (its directory on another machine):
                # its store's wake is its only one.
            self._store_wake = store.open_wake()  # a store's own wake (NOTIFY), if any
        except OSError:
            self._inotify.close()
            raise
        self._poll = select.poll()
        self._poll.register(self._inotify.fileno(), select.POLLIN)
        if self._store_wake is not None:
            self._poll.register(self._store_wake.fileno(), select.POLLIN)

    def __enter__(self) -> RunWake:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._inotify.close()
        if self._store_wake is not None:
            self._store_wake.close()

    def fileno(self) -> int:
        """The watch's descriptor: readable when an event is pending (an async
        reader waits on it, then calls `woke`)."""
        return int(self._inotify.fileno())

    def woke(self) -> bool:
        """The pending events read without waiting: whether one is the journal's
        or a lock's (or a lost one)."""
        return any(
            event.name in self._names or event.mask & inotify_flags.Q_OVERFLOW
            for event in self._inotify.read(timeout=0)
        )

    def wait(self, timeout: float) -> None:
        """Sleep until an event of the journal or a lock (or a lost one: the queue
        overflowed), or the store's wake names the run, or `timeout` seconds;
        events of other files sleep on."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            ready = {fd for fd, _ in self._poll.poll(max(1, int(left * 1000)))}
            store = self._store_wake
            if store is not None and store.fileno() in ready and store.woken():
                return
            if self._inotify.fileno() not in ready:
                continue
            for event in self._inotify.read(timeout=0):
                if event.name in self._names or event.mask & inotify_flags.Q_OVERFLOW:
                    return


def follow(
    run: RunDir,
    tail: JournalTail,
    show: Callable[[Rows], None],
    every: float = SAFETY_WAKE,
    is_live: Callable[[], bool] | None = None,
) -> bool:
    """Show each piece of new rows as the run commits it, until the run ends
    (True) or no process runs it (False: paused, crashed, waiting for an answer;
    `is_live` says whether one does, the run's locks here by default).
    `show` is called at each wake, with the rows read (none, after `every` seconds
    without an event: a live view redraws its clock then).

    Raises:
        JournalCorruptError: as `JournalTail.read`; the rows before it are shown.
    """
    with RunWake(run) as wake:
        while True:
            # Liveness first: a process that let the run go wrote its last rows
            # before, so the read after it sees them all.
            live = run_is_live(run) if is_live is None else is_live()
            try:
                rows = tail.read()
            except JournalCorruptError as err:
                show(err.intact.rows)
                raise
            show(rows)
            if tail.ended:
                return True
            if not live:
                return False
            wake.wait(every)

"""The JournalWriter actor: the sole writer of `<run>/journal.jsonl`, with group commit.

`await journal.commit(rows)` returns once the rows are durable. A commit is a
request on a bounded memory channel carrying its own reply slot; the writer task
takes every request pending at that moment, gives the group consecutive seqs and
one `at` stamp, writes it with one `write` and makes it durable with one fsync,
then answers each request. Requests that arrive while the fsync runs form the
next group: under load the cost of one fsync is shared by every commit waiting
for it (group commit, as a database flushes its write-ahead log). Each commit's
rows are one batch of the framing in `crw.journal.log`, so after a crash they are
read back whole or not at all.

`await journal.commit_behind(rows)` queues a batch the same way and returns without
waiting for it: for a row that announces no effect of its own (the turn the host
already started, a call's end), since the writer keeps the order of its requests,
every commit made after it, and so every effect announced after it, comes only once
it is durable. A crash before that leaves what a crash before its commit left.
"""

from __future__ import annotations

import errno
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from crw.actors import thread_hop
from crw.clock import WallClock, system_clock
from crw.errors import RefusedError
from crw.journal.log import JournalRead, encode_batch, encode_body
from crw.journal.rows import RowModel
from crw.journal.store import JournalAppender, StoreError, renewal_due
from crw.journal.stores import store_at

QUEUE_BOUND = 256
"""Requests the channel buffers. Every commit awaits its reply, so each committing
task has at most one request in flight and the queue never holds more requests
than there are committing tasks: the bound is a backstop on memory, not a
throttle. A run commits from a handful of actors and at most
agents.max_threads - 1 calls in flight (CMD-RESUME-6), far below 256, so a
committer never parks on `send` in practice (a parked sender costs an extra
wakeup); if one does, the writer takes parked senders with the buffer anyway."""


AfterCommit = Callable[[Sequence[RowModel]], None]


class JournalWriteError(RefusedError):
    """The journal could not be opened, written or synced; the commit is not durable."""


class JournalClosedError(RefusedError):
    """A commit reached a journal writer that is closed."""


class _Commit:
    """One commit request: the batch's encoded rows and its reply slot.

    The reply wakes the one waiting committer with `trio.lowlevel.reschedule`,
    as `trio.Event` does but without its parking lot: measurably cheaper on the
    hot path, where every row pays for one wait and one wake.
    """

    __slots__ = ("_waiter", "answered", "at", "behind", "bodies", "closed", "error", "first_seq")

    def __init__(self, bodies: list[bytes], behind: Sequence[RowModel] | None = None) -> None:
        self.bodies = bodies
        self.behind = behind
        """The rows of a commit nobody waits for (`commit_behind`), for the writer's
        `after_commit`; None for an awaited commit."""
        self.first_seq = 0
        self.at = ""
        self.error: OSError | None = None
        self.closed = False
        self.answered = False
        self._waiter: trio.lowlevel.Task | None = None

    async def wait(self) -> None:
        """Wait for the answer (at once if it came already: the send that
        queued the request was the checkpoint)."""
        if self.answered:
            return

        def abort(_: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
            self._waiter = None
            return trio.lowlevel.Abort.SUCCEEDED

        self._waiter = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(abort)

    def answer(self) -> None:
        """Deliver the reply set on the request; a cancelled committer is gone."""
        self.answered = True
        if self._waiter is not None:
            trio.lowlevel.reschedule(self._waiter)
            self._waiter = None


class JournalWriter:
    """The handle committers hold; the writer task runs in `open_journal_writer`."""

    def __init__(
        self,
        path: Path,
        send: trio.MemorySendChannel[_Commit],
        after_commit: AfterCommit | None = None,
    ) -> None:
        self.path = path
        self._send = send
        self._after_commit = after_commit
        self.broken: OSError | None = None
        """The error of a group that held a commit nobody waited for: no row is
        written after such rows, so every later commit fails with it."""
        self.told = False
        """Whether a commit raised `broken` (else the writer's close raises it)."""

    async def commit(self, rows: Sequence[RowModel], *, stamped: bool = True) -> list[RowModel]:
        """Append `rows` as one batch and return once they are durable.

        Returns:
            Copies of `rows` with `seq` and `at` set, in order; the seqs are
            contiguous. `commit([])` returns `[]` at once. With `stamped` False,
            `[]`: a caller that keeps the rows it built does not pay for a copy
            of each (a session call commits ~5 rows a call).

        Raises:
            JournalWriteError: the write or fsync failed; none of the rows is
                in the journal.
            JournalClosedError: the writer is closed (or was cancelled before it
                answered, in which case the rows may or may not be durable).
            ValueError, TypeError: a row cannot be encoded (`encode_body`).

        A commit cancelled while it waits may or may not be durable: the rows
        of its batch are read back all or none, as after a crash.
        """
        if not rows:
            return []
        request = _Commit([encode_body(row) for row in rows])
        await self._queue(request)
        await request.wait()
        if request.error is not None:
            err = request.error
            self.told = self.told or err is self.broken
            raise self.write_error(err) from err
        if request.closed:
            raise self._closed_error()
        first, at = request.first_seq, request.at
        committed = (
            [row.model_copy(update={"seq": first + i, "at": at}) for i, row in enumerate(rows)]
            if stamped
            else []
        )
        if self._after_commit is not None:
            self._after_commit(committed if stamped else rows)
        return committed

    async def commit_behind(self, rows: Sequence[RowModel]) -> None:
        """Queue `rows` as one batch of the writer's next group and return without
        waiting for them to be durable (no schedule point unless the queue is
        full). The writer keeps its requests' order, so every commit made after
        this one returns only once these rows are durable too: for rows that
        announce no effect of their own. `after_commit` sees them once durable,
        in the writer's task.

        Should their group fail, the journal takes no row after them: every
        later commit fails with the error (the run stops, `crw.actors.faults`), and
        so does the writer's close when no commit came after them.

        Raises:
            JournalClosedError: the writer is closed.
            ValueError, TypeError: a row cannot be encoded (`encode_body`).
        """
        if rows:
            hook = list(rows) if self._after_commit is not None else ()
            await self._queue(_Commit([encode_body(row) for row in rows], hook))

    async def _queue(self, request: _Commit) -> None:
        try:
            try:
                self._send.send_nowait(request)
            except trio.WouldBlock:
                await self._send.send(request)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            # The writer is gone; if that is because this task's scope is
            # cancelled too, say so rather than "closed".
            await trio.lowlevel.checkpoint_if_cancelled()
            raise self._closed_error() from None

    def write_error(self, err: OSError) -> JournalWriteError:
        """The one-line error of a group that could not be written."""
        return JournalWriteError(
            f"could not write the journal {self.path}: {err.strerror or err}; "
            "free disk space or fix the disk, then resume the run"
        )

    def _written(self, group: list[_Commit]) -> None:
        """`group` was written (or failed): show the unawaited rows to `after_commit`,
        or break the writer when they are lost."""
        for request in group:
            if request.behind is None:
                continue
            if request.error is not None:
                self.broken = self.broken or request.error
            elif self._after_commit is not None:
                self._after_commit(request.behind)

    def _closed_error(self) -> JournalClosedError:
        return JournalClosedError(
            f"the journal writer of {self.path} is closed; commit inside open_journal_writer"
        )


@asynccontextmanager
async def open_journal_writer(
    path: Path,
    *,
    clock: WallClock = system_clock,
    after_commit: AfterCommit | None = None,
    known: JournalRead | None = None,
    sync_in_thread: bool = False,
) -> AsyncIterator[JournalWriter]:
    """Open the journal at `path` (creating it) and run its writer until the block
    exits; commits pending at exit are written first. A torn tail is dropped
    before the first append and reported once. The writer task runs in a nursery
    this context manager owns.

    `known` is the caller's read of the journal under the run lock (it is then not
    read again; see `JournalFile.open`).

    `after_commit` sees each commit's rows once they are durable, in the committing
    task, before `commit` returns (the crash drill's kill point, `crw.actors.crash`).

    Each group's write and fsync run inline: the Trio loop waits for the disk
    (bench/journal.py, 2026-11-29: one commit 0.22-0.27 ms inline, 0.38-0.41 ms
    through a worker thread, whose hop alone is ~0.1 ms; 64 committers 46-48k rows/s
    inline, 35k so). With `sync_in_thread` they run in a worker thread: the loop
    goes on with the process's other tasks while the disk works, and the commits
    those make meanwhile form the next group. A run process wants that: a
    session run's loop has the host's frames, the inbox and the step files to get
    on with (bench/scale.py's session run, 1,000 calls, 2026-11-30: 2.36 -> 1.57
    fdatasyncs a call; inline, each blocked its loop 0.3-0.9 ms quiet, 4-6 ms under
    load), an App Server run's the host's frames of its other calls (3,000 calls,
    2026-12-01, alternated with the inline tree: 193.7, 196.6 and 173.2 calls/s
    against 165.2, 147.6 and 184.0; inline, 17% of its py-spy samples had the loop
    blocked in the sync).

    Raises:
        JournalWriteError: the journal cannot be opened or read.
        JournalCorruptError: the journal is damaged (not a torn tail); it is left as
            it is and nothing is appended (`crw.journal.log`).
    """
    try:
        journal = await trio.to_thread.run_sync(store_at(path).open_appender, known)
    except OSError as err:
        # A store that is no file says what to do (the database, the run's lease).
        hint = (
            err.fix
            if isinstance(err, StoreError)
            else "check the run directory's permissions and disk"
        )
        raise JournalWriteError(
            f"could not open the journal {path}: {err.strerror or err}; {hint}"
        ) from err
    send, receive = trio.open_memory_channel[_Commit](QUEUE_BOUND)
    lease = _Lease(trio.current_time())
    writer = JournalWriter(path, send, after_commit)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_run_writer, writer, journal, receive, clock, sync_in_thread, lease)
            if journal.lease is not None:
                nursery.start_soon(_keep_lease, journal, journal.lease, lease, path)
            try:
                with send:
                    yield writer
            finally:
                lease.scope.cancel()  # the pending commits still renew it
        if writer.broken is not None and not writer.told:  # rows nobody waited for are lost
            raise writer.write_error(writer.broken) from writer.broken
    finally:
        journal.close()


class _Lease:
    """When the writer's lease was last renewed (Trio time), by a commit or by
    `_keep_lease`; `scope` ends the renewals."""

    def __init__(self, renewed_at: float) -> None:
        self.renewed_at = renewed_at
        self.scope = trio.CancelScope()

    def renewed(self, at: float) -> None:
        self.renewed_at = max(self.renewed_at, at)


async def _keep_lease(journal: JournalAppender, seconds: float, lease: _Lease, path: Path) -> None:
    """Renew the writer's lease while the run commits nothing (a long turn), so that
    no other machine takes a run whose process lives. A renewal that finds the run
    taken (the writer fenced) raises `JournalWriteError`, which stops the run as a
    fenced commit does; one that fails otherwise is tried again a third of the
    lease later (the lease outlives two failures)."""
    tried_at = lease.renewed_at
    with lease.scope:
        while True:
            await trio.sleep_until(renewal_due(max(lease.renewed_at, tried_at), seconds))
            now = trio.current_time()
            if renewal_due(lease.renewed_at, seconds) > now:
                continue  # a commit renewed it meanwhile
            tried_at = now
            try:
                await trio.to_thread.run_sync(journal.renew)
            except OSError as err:
                if err.errno != errno.ESTALE:
                    continue
                raise JournalWriteError(
                    f"could not write the journal {path}: {err.strerror or err}"
                ) from err
            lease.renewed(now)


async def _run_writer(
    writer: JournalWriter,
    journal: JournalAppender,
    receive: trio.MemoryReceiveChannel[_Commit],
    clock: WallClock,
    in_thread: bool,
    lease: _Lease,
) -> None:
    """Write groups until the send side closes; on exit, answer every request
    still unanswered with "closed" (the writer was cancelled)."""
    group: list[_Commit] = []
    with receive:
        try:
            while True:
                try:  # the requests that came during the last sync: no schedule point
                    first = receive.receive_nowait()
                except trio.WouldBlock:
                    try:
                        first = await receive.receive()
                    except trio.EndOfChannel:
                        break
                except trio.EndOfChannel:
                    break
                group = [first]
                while True:
                    try:
                        group.append(receive.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                # An append that waits on the network never blocks the loop.
                started = trio.current_time()
                if writer.broken is not None:  # rows nobody waited for were lost
                    for request in group:
                        request.error = writer.broken
                        request.answer()
                    continue
                if await _write_group(journal, group, clock, in_thread or journal.blocking):
                    lease.renewed(started)  # its transaction renewed the lease
                writer._written(group)
        finally:
            while True:
                try:
                    group.append(receive.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            for request in group:
                if not request.answered:
                    request.closed = True
                    request.answer()


async def _write_group(
    journal: JournalAppender, group: list[_Commit], clock: WallClock, in_thread: bool
) -> bool:
    """Write one group as one `write` and one fsync, then answer its requests:
    whether it is durable."""
    at = clock()
    first = seq = journal.last_seq + 1
    lines: list[bytes] = []
    for request in group:
        request.first_seq, request.at = seq, at
        lines.append(encode_batch(seq, at, request.bodies))
        seq += len(request.bodies)
    data = b"".join(lines)
    try:
        if in_thread:
            await thread_hop.run_sync(journal.append, data, seq - first)
        else:
            journal.append(data, seq - first)
    except OSError as err:
        for request in group:
            request.error = err
    for request in group:
        request.answer()
    return group[0].error is None

"""What a run needs from the store that keeps its journal: the `JournalStore` Protocol.

A journal is a sequence of framed lines (`crw.journal.framing`): whatever keeps
them, a reader sees the same bytes, so every reader above (replay, the snapshot,
next, status, show, watch) decodes them as it decodes a file. Two stores
implement it: `crw.journal.file_store.FileJournal`, the run's `journal.jsonl`
(the default), and `crw.journal.postgres.PostgresJournal`, one row a line in a
PostgreSQL table. `crw.journal.stores.store_at` picks a run's from its run.json.

Offsets are the journal's bytes as the file holds them: a store that is no file
keeps each line's offset with it, so a reader's `end` (a batch's end) means the
same on either.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Protocol

from crw.journal.log import JournalRead


class StoreError(OSError):
    """An error of a store that is no file (the database is down, another writer
    took the run): `fix` says what to do, where a file's error names the disk."""

    def __init__(self, code: int, message: str, fix: str) -> None:
        super().__init__(code, message)
        self.fix = fix


def renewal_due(renewed_at: float, lease: float) -> float:
    """When a writer whose lease was last renewed at `renewed_at` (by a commit or a
    renewal) renews it again: a third of the lease later, so that two renewals in a
    row can fail (the database away a moment) before the lease lapses."""
    return renewed_at + lease / 3


class JournalAppender(Protocol):
    """The open journal, for its one writer: appends whole batches durably."""

    @property
    def last_seq(self) -> int:
        """The seq of the last durable row."""
        ...

    @property
    def blocking(self) -> bool:
        """Whether an append waits on the network (the writer then always runs it
        in its worker thread, never in the Trio loop)."""
        ...

    @property
    def lease(self) -> float | None:
        """Seconds the writer's hold on the run lasts past its last commit or
        renewal (`renew`); None: the store keeps no lease (a file lock holds the run)."""
        ...

    def renew(self) -> None:
        """Renew the writer's lease while it commits nothing (a store with a lease).

        Raises:
            OSError: the lease was not renewed; ESTALE: another writer took the run,
                and this one is fenced (every later append raises too).
        """
        ...

    def append(self, data: bytes, rows: int) -> None:
        """Append `data`, whole batches holding `rows` rows (`encode_batch`), as
        one group commit, and return once it is durable; on failure none of it is.

        Raises:
            OSError: the group is not durable (the store's error mapped to it).
        """
        ...

    def close(self) -> None: ...


class AppendWake(Protocol):
    """A store's wake on append for live views: readable (`fileno`) when rows may
    have been appended; a hint only, the view reads the rows after its last seq."""

    def fileno(self) -> int: ...

    def woken(self) -> bool:
        """Take what the wake heard: whether it names this run's rows."""
        ...

    def close(self) -> None: ...


class JournalStore(Protocol):
    """Where a run's journal lives: reading its rows and bytes, and its appender."""

    @property
    def path(self) -> Path:
        """The run's `journal.jsonl`: what messages name (the file itself for the
        file store)."""
        ...

    @property
    def location(self) -> str:
        """Where the journal is, for a person: a path or a database and run."""
        ...

    def read(self, after: int = 0) -> JournalRead:
        """The whole batches of rows after seq `after` (a torn tail dropped and
        reported once); offsets are those of the bytes read.

        Raises:
            OSError: the store cannot be read.
            JournalCorruptError: the rows are damaged.
        """
        ...

    def last_seq(self) -> int:
        """The seq of the journal's last whole row (0: empty)."""
        ...

    def open_bytes(self) -> io.BufferedIOBase:
        """The journal's bytes as a readable, seekable stream (empty when there is
        no journal yet). The caller closes it.

        Raises:
            OSError: the store cannot be read.
        """
        ...

    def size(self) -> int:
        """The journal's bytes (0: no journal yet).

        Raises:
            OSError: the store cannot be read.
        """
        ...

    def open_pieces(self) -> io.BufferedIOBase:
        """The journal's bytes from its start as a readable stream, not seekable,
        holding no more than the piece each `read(size)` returns (at least a whole
        line, so perhaps more than `size`; the file store's file reads `size`).
        The caller closes it.

        Raises:
            OSError: the store cannot be read.
        """
        ...

    def read_from(self, offset: int) -> bytes:
        """The journal's bytes from `offset` (a line's start) to its end.

        Raises:
            OSError: the store cannot be read.
        """
        ...

    def open_appender(self, known: JournalRead | None = None) -> JournalAppender:
        """Open the journal to continue it (creating it); `known` is a read the
        caller made under the run lock (not read again).

        Raises:
            OSError: the store cannot be opened or read.
            JournalCorruptError: the journal is damaged; nothing is appended.
        """
        ...

    def snapshot_tail(self) -> tuple[bytes | None, int, bytes] | None:
        """The run's replay snapshot the store keeps (its sealed bytes, None: none
        that ends at a row's end), where it ends (0 without one) and the journal's
        bytes from there, in one read; None: the store keeps no snapshot (the
        file store: `replay.snapshot` lies beside the journal).

        Raises:
            OSError: the store cannot be read.
        """
        ...

    def keep_snapshot(
        self, sealed: bytes, end: int, last_seq: int, summary: bytes | None = None
    ) -> bool:
        """Keep the replay snapshot `sealed` of the journal's first `end` bytes
        (rows up to `last_seq`) in the store, with an ended run's `summary`
        (`crw.journal.run_summary`); False: it keeps none (the caller writes the
        file).

        Raises:
            OSError: the store cannot be written.
        """
        ...

    @property
    def wake_file(self) -> Path | None:
        """The file whose change means rows were appended, which live views watch;
        None: no file changes, live views read the tail at each safety wake."""
        ...

    def open_wake(self) -> AppendWake | None:
        """A wake on append for a store whose appends change no file (None: the
        live views watch `wake_file`).

        Raises:
            OSError: the store cannot be reached.
        """
        ...

    def files(self) -> tuple[Path, ...]:
        """The files in the run's directory the store owns."""
        ...

"""The file store: a run's journal as its `<run>/journal.jsonl` (`crw.journal.log`)."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

from crw.journal.log import JournalFile, JournalRead, read_journal
from crw.rawfile import read_from


@dataclass(frozen=True)
class FileJournal:
    """The `JournalStore` of a journal file: what the run did before there were stores."""

    path: Path

    @property
    def location(self) -> str:
        return str(self.path)

    def read(self, after: int = 0) -> JournalRead:
        read = read_journal(self.path)
        if not after:
            return read
        rows = [row for row in read.rows if row["seq"] > after]
        return JournalRead(rows, read.end, read.last_seq, read.torn)

    def last_seq(self) -> int:
        return read_journal(self.path).last_seq

    def open_bytes(self) -> io.BufferedIOBase:
        try:
            return self.path.open("rb")
        except FileNotFoundError:
            return io.BytesIO()

    def size(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def open_pieces(self) -> io.BufferedIOBase:
        return self.open_bytes()

    def read_from(self, offset: int) -> bytes:
        return read_from(self.path, offset)

    def open_appender(self, known: JournalRead | None = None) -> JournalFile:
        return JournalFile.open(self.path, known)

    def snapshot_tail(self) -> None:
        return None  # replay.snapshot, beside the journal

    def keep_snapshot(
        self, sealed: bytes, end: int, last_seq: int, summary: bytes | None = None
    ) -> bool:
        return False

    @property
    def wake_file(self) -> Path:
        return self.path

    def open_wake(self) -> None:
        return None

    def files(self) -> tuple[Path, ...]:
        return (self.path,)

"""Which store keeps a run's journal.

Every reader and the writer ask `store_at` for the run's store rather than open
`journal.jsonl` themselves, so the run's store is chosen in one place.
"""

from __future__ import annotations

from pathlib import Path

from crw.journal.file_store import FileJournal
from crw.journal.log import JournalRead
from crw.journal.store import JournalStore


def store_at(journal: Path) -> JournalStore:
    """The store of the run whose journal file is `journal` (`<run>/journal.jsonl`)."""
    return FileJournal(journal)


def read_run_journal(journal: Path) -> JournalRead:
    """The whole batches of the run's journal, from whichever store keeps it
    (`crw.journal.log.read_journal` for a file)."""
    return store_at(journal).read()

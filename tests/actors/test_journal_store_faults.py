"""The line a run process stops with when its journal's store is a database."""

from __future__ import annotations

import errno
from pathlib import Path

from crw.actors import faults
from crw.actors.journal_writer import JournalWriteError
from crw.journal.store import StoreError


def _stopped(cause: OSError) -> str:
    err = JournalWriteError("could not write the journal")
    err.__cause__ = cause
    fault = faults.classify(err, "R", Path("/s/flow/R/journal.jsonl"))
    assert fault is not None and fault.reason == "journal_unwritable"
    return fault.line


def test_a_database_the_journal_cannot_reach_names_the_database_not_the_disk() -> None:
    """A store error's own fix, never the disk's: the journal is not on this disk."""
    fix = "check that the database is up and reachable at the URL run.json's journal_db names"
    line = _stopped(StoreError(errno.EIO, "could not write the journal to the db", fix))
    assert f"; {fix}, then go on with: crw flow resume R --detach" in line
    assert "disk" not in line
    assert "disk" in _stopped(OSError(errno.EIO, "Input/output error"))

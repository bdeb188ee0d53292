"""What an ended run's bus no longer needs: the replies and the handled reports.

Once the run's ended row is durable, nothing answers a dispatch report again and
no `crw flow dispatched` waits on a reply it has not read (a report about an
ended run is refused without a file), so what is left of `replies/` (a
`dispatched` takes the reply it reads: those no process took, such as the
answers to `queued` reports) and the reports the run answered (those with a
reply) are removed. What a later command reads stays: the journal, run.json,
steps/ (next hands out the close steps of an ended run), outbox/ (a wake's
message is kept) and the reports no process answered. Reports
go before replies, so a crash mid-clean leaves nothing that reads otherwise than
before: a handled report keeps its reply until it is gone itself.

A blocking function: the run process calls it from its last moments, holding the run.
"""

from __future__ import annotations

import logging
import os

from crw.bus import live
from crw.engine.run.rundir import RunDir
from crw.private import write_atomic

log = logging.getLogger("crw.bus")


def clean_ended(run: RunDir) -> None:
    """Keep the step index of the ended run (`seal`), then remove the handled
    reports and temporary files of `inbox/`, then every file of `replies/`. A
    file that cannot be removed is warned about and stays."""
    seal(run)
    replies = set(_names(run.replies))  # one listing, not a stat a report
    for name in _names(run.inbox):
        handled = name.endswith(".json") and name in replies
        if handled or name.endswith(".tmp"):
            _remove(os.path.join(run.inbox, name))
    for name in sorted(replies):
        _remove(os.path.join(run.replies, name))


def seal(run: RunDir) -> None:
    """Write what the holding process's step index marks as `steps/.ended`
    (`live.ended_index`), atomically and synced: a later read of the ended run
    lists only the calls whose close steps may wait. A write that fails is warned
    about; readers then list every call's directory."""
    data = live.ended_index(run)
    if data is None:
        return
    path = run.steps / live.ENDED
    try:
        write_atomic(path, data)
    except OSError as err:
        log.warning("cannot keep the ended run's step index %s: %s", path, err.strerror or err)


def _names(directory: os.PathLike[str]) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except FileNotFoundError:
        return []


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as err:
        log.warning("cannot remove %s of the ended run: %s", path, err.strerror or err)

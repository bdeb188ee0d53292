"""The outbox: the run's staged wakes, one file a logical id (StageWake's relay).

`outbox/<name>.json`, the name the logical id without its `run:<run>/` head and
with `/` as `.` (`run:r1/b-1a2b/e2/r1` is `b-1a2b.e2.r1.json`). A file is made
once and kept for good: a wake whose id the outbox holds already stages nothing
(WAKE-7). The file is whole or absent (a temporary name, then a hard link that
fails when the name is taken), and durable before `stage` returns.

Blocking functions: the wake scheduler calls them from a worker thread.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from crw.engine.run.rundir import RunDir
from crw.private import fsync_dir, write_atomic


def entry_path(run: RunDir, wake_id: str) -> Path:
    """The file of the wake `wake_id` (`run:<run>/<batch>[/e<n>][/r<m>]`)."""
    _, _, rest = wake_id.partition("/")
    name = rest.replace("/", ".")
    if not name or name.startswith(".") or os.sep in name:
        raise ValueError(f"wake id {wake_id!r} names no outbox entry")
    return run.outbox / f"{name}.json"


def stage(run: RunDir, wake_id: str, body: dict[str, Any]) -> bool:
    """Stage the wake: True when its file was made, False when the outbox holds
    that id already (nothing is written then).

    Raises:
        OSError: the file could not be written; no partial file is left.
    """
    path = entry_path(run, wake_id)
    if path.exists():
        return False
    temp = path.with_name(f".{path.name}.tmp")
    data = (json.dumps({"wake_id": wake_id} | body, ensure_ascii=False) + "\n").encode()
    write_atomic(temp, data, path.with_name(f".{path.name}.tmp2"))
    try:
        os.link(temp, path)
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(OSError):
            temp.unlink()
    fsync_dir(path.parent)
    return True

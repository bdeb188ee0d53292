"""The drills' undisturbed runs, made once a test session and shared.

A drill compares each killed run with the run of the same workflow, on the same
host scripts, that nothing disturbed: its reference. Several modules compare with
the same one (the crash drill, the torn-step drill and the crash drill on
PostgreSQL; the kill drills and their PostgreSQL cases), and a module-scoped
fixture is made again in each module that uses it, on each xdist worker. So a
reference is made by `undisturbed(key, make)`: once a process (kept under `key`),
and under pytest-xdist once a session, by the first worker that asks; the others
wait for it and read its results (a JSON file beside the workers' temporary
directories, written under a file lock). Whichever test asks first makes it, so
no test depends on another having run; a reference that failed to be made is
made again by the next that asks (and fails there the same way).

`key` names everything the results depend on (the workflow, the host's scripts,
the backend): two drills share a key only when they run the same undisturbed run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from tests.deadlines import LOADED

_made: dict[str, Any] = {}


def undisturbed(
    key: str, make: Callable[[Path], Any], tmp_path_factory: pytest.TempPathFactory
) -> Any:
    """The results `make(root)` returns (JSON data), made once in a fresh `root`."""
    if key in _made:
        return _made[key]
    shared = _shared_dir(tmp_path_factory)
    if shared is None:
        _made[key] = make(tmp_path_factory.mktemp("reference"))
        return _made[key]
    path = shared / f"reference-{key}.json"
    with FileLock(str(path) + ".lock", timeout=3 * LOADED):
        if path.exists():
            _made[key] = json.loads(path.read_text())
        else:
            _made[key] = make(tmp_path_factory.mktemp("reference"))
            spare = path.with_suffix(".part")
            spare.write_text(json.dumps(_made[key]))
            spare.replace(path)
    return _made[key]


def _shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """The directory every xdist worker of this session shares (the parent of the
    workers' base temporary directories); None outside xdist."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    return tmp_path_factory.getbasetemp().parent

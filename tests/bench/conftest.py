"""The benches' tests: a directory for a bench's state, and what still runs under it.

A bench run inside a test starts its run processes and hosts as crw starts them,
fresh children of its own: it reaps them by pid and reads their CPU and peak RSS
from `wait4`, which a process forked from the worker's server (tests/zygote.py,
whose `start_crw` the suite puts in place) would not give it (`cold_detached`)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crw import detach
from tests import zygote
from tests.processes import processes_under

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def load_bench(name: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """bench/<name>.py as a module (a bench is a script, not a package): the bench
    directory on the path for the siblings it imports, the module in sys.modules
    for its dataclasses to look up, both undone after the test."""
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    spec = importlib.util.spec_from_file_location(f"{name}_bench", BENCH_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def where() -> Iterator[Path]:
    """A directory for the bench's state; whatever still runs under it at teardown
    is killed by pid, then it is removed. A short one in /tmp, not `tmp_path`: the
    host's unix socket lies a few levels below it, a socket path holds ~107 bytes,
    and an xdist worker's `tmp_path` is longer by its `popen-gwN/`."""
    with tempfile.TemporaryDirectory(prefix="crw-bench-", dir="/tmp") as short:
        yield Path(short)
        for pid in processes_under(Path(short)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture(autouse=True)
def cold_detached(monkeypatch: pytest.MonkeyPatch) -> None:
    """crw's own `start_crw` for the bench's detached processes: its children."""
    monkeypatch.setattr(detach, "start_crw", zygote.cold_start)

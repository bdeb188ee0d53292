"""bench/session_syncs.py's count of strace's lines: each call once, an unfinished
call joined with its resumption, a sync told by the file it synced."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.conftest import load_bench

TRACE = """\
101 openat(AT_FDCWD</w>, "/s/steps/a.1/.p.tmp", O_WRONLY|O_CREAT, 0600) = 7</s/steps/a.1/.p.tmp>
102 fdatasync(9</s/flow/r/journal.jsonl> <unfinished ...>
101 mkdir("/s/flow/r/steps/a.1", 0700) = -1 EEXIST (File exists)
101 fsync(7</s/steps/a.1/.p.tmp>) = 0
102 <... fdatasync resumed>) = 0
101 openat(AT_FDCWD</w>, "/s/flow/r/run.json", O_RDONLY|O_CLOEXEC) = 8</s/flow/r/run.json>
101 mkdir("/s/flow/r/calls/a.1", 0700) = 0
101 openat(AT_FDCWD</w>, "/s/x", O_WRONLY|O_CREAT, 0600) = -1 ENOENT (No such file or directory)
101 rename("/s/steps/a.1/.p.tmp", "/s/steps/a.1/p") = 0
101 +++ exited with 0 +++
"""


def test_the_counts_of_a_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = load_bench("session_syncs", monkeypatch)
    out = tmp_path / "strace.out"
    out.write_text(TRACE)
    assert bench.counts(out, 1) == {
        "syncs_per_call": 2.0,
        "syncs_by_file_per_call": {"journal": 1.0, "steps": 1.0},
        "opens_per_call": 3.0,
        "creates_per_call": 1.0,
        "mkdirs_per_call": 1.0,
        "mkdir_eexist_per_call": 1.0,
        "renames_per_call": 1.0,
    }


def test_the_cpu_of_a_live_process_and_of_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's CPU is read from /proc while it lives; a process that is gone
    (or none) reads 0, and the owner's CPU is this process's, threads included."""
    import os
    import threading
    import time

    bench = load_bench("session_syncs", monkeypatch)
    before = bench.owner_cpu()

    def spin() -> None:
        end = time.thread_time() + 0.05
        while time.thread_time() < end:
            pass

    worker = threading.Thread(target=spin)
    worker.start()
    worker.join()
    assert bench.owner_cpu() - before >= 0.04
    assert bench.process_cpu(os.getpid()) >= 0.04
    assert bench.process_cpu(None) == 0.0

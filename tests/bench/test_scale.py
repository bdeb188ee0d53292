"""bench/scale.py at a tiny size: the figures it prints, and no process left behind."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.bench.conftest import load_bench
from tests.processes import processes_under

BENCH = Path(__file__).resolve().parents[2] / "bench" / "scale.py"
FIGURES = {
    "wall_s",
    "calls_per_s",
    "per_call_ms",
    "rows",
    "run_rss_mb",
    "run_cpu_s",
    "host_requests_per_call",
    "host_notifications_per_call",
    "journal_bytes_per_call",
    "flat_ratio",
}


def bench(where: Path, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--json", "--tmp", str(where), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result = json.loads(done.stdout)
    assert isinstance(result, dict)
    return result


def test_prints_every_figure_per_backend_and_size_and_reaps_its_processes(where: Path) -> None:
    result = bench(where, "--sizes", "2,3")
    assert set(result) == {"app_server", "session"}
    for sizes in result.values():
        assert set(sizes) == {"2", "3"}
        for size, figures in sizes.items():
            assert set(figures) == FIGURES
            assert figures["rows"] >= 2 * int(size) and figures["run_rss_mb"] > 0
            assert figures["run_cpu_s"] > 0
            assert figures["host_requests_per_call"] > 0
        assert sizes["2"]["flat_ratio"] == 1.0
    # The host posts a call's turn only what the run follows: an app-server run
    # the token count and turn/completed; a session run also status active,
    # turn/started and status idle, and its subagent's close (status notLoaded;
    # the last calls' may come after the run's connection closed). The run and the
    # bench's own client opt out of the rest (the items' texts, every thread's start).
    for size in ("2", "3"):
        assert result["app_server"][size]["host_notifications_per_call"] == 2.0
        assert 5.0 <= result["session"][size]["host_notifications_per_call"] <= 6.0
    assert processes_under(where) == []
    assert list(where.iterdir()) == []  # every size's state removed at the end


def test_a_size_s_state_is_removed_when_the_bench_ends_not_before_the_next_size(
    where: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host is stopped and the run reaped when a size ends, but its state (a
    file or more a call) stays until every size has run: removing thousands of
    files makes the next size's creates slower on ext4 without a journal."""
    scale = load_bench("scale", monkeypatch)
    with contextlib.ExitStack() as kept:
        with scale.trial_with_host("app-server", 1, where, "crw-scale-", kept) as first:
            pass
        assert processes_under(where) == []
        with scale.trial_with_host("app-server", 1, where, "crw-scale-", kept) as second:
            assert first.state.is_dir()
        assert first.state.is_dir() and second.state.is_dir()
    assert list(where.iterdir()) == []


def test_a_size_past_its_limit_is_skipped_and_its_processes_reaped(where: Path) -> None:
    result = bench(where, "--sizes", "300,400", "--backend", "app-server", "--limit", "0.2")
    skipped = result["app_server"]
    assert re.fullmatch(
        r"did not end within 0\.2 s \(\d+ of 300 calls completed\)", skipped["300"]["skipped"]
    )
    assert skipped["400"] == {"skipped": "a smaller size did not end in time"}
    assert processes_under(where) == []


async def test_the_session_owner_waits_for_its_replies_on_one_watch_without_a_thread(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """spec: DISP-1, DISP-2, CMD-DISP-3: the bench's owner writes each report as `crw
    flow dispatched` does and waits for its reply as that command waits (read when
    its file is renamed into replies/), every wait on one watch in the owner's
    Trio loop: no worker thread a dispatch, and each reply read twice (before it
    came, and when it came: no look is due, REPLY_LOOK and POLL are made longer
    than the test)."""
    import trio

    from crw.bus.inbox import read_reports, write_reply
    from crw.engine.run.locks import run_lock
    from crw.engine.run.rundir import RunDir

    scale = load_bench("scale", monkeypatch)
    hops: list[Any] = []
    run_sync = trio.to_thread.run_sync

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(fn)
        return await run_sync(fn, *args, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", counted)
    monkeypatch.setattr(scale, "POLL", 3600.0)
    monkeypatch.setattr(scale, "REPLY_LOOK", 3600.0)
    reads: list[str] = []
    take_reply = scale.take_reply

    def counted_read(run: RunDir, report_id: str) -> dict[str, Any] | None:
        reads.append(report_id)
        reply: dict[str, Any] | None = take_reply(run, report_id)
        return reply

    monkeypatch.setattr(scale, "take_reply", counted_read)
    run = RunDir.of(tmp_path / "state", "r1")
    run.create()
    owner = scale.FastOwner(None, "r1", "owner", state=str(tmp_path / "state"))
    steps = [{"call": f"n0000{n}.1", "k": 1, "attempt": 1} for n in (1, 2)]
    replies: list[dict[str, Any]] = []

    async def owner_side(step: dict[str, Any]) -> None:
        replies.append(await owner.dispatched(step, f"thread-{step['call']}"))

    with run_lock(run), trio.fail_after(20):
        async with owner.watching(), trio.open_nursery() as nursery:
            for step in steps:
                nursery.start_soon(owner_side, step)
            while len(reads) < 2:  # noqa: ASYNC110 - both looked once
                await trio.sleep(0.001)
            reports = sorted(read_reports(run), key=lambda r: r.call)
            for report in reversed(reports):
                write_reply(run, {"id": report.id, "reply": "bound", "call": report.call})
    assert sorted((r["call"], r["reply"], r["agent_id"]) for r in replies) == [
        ("n00001.1", "bound", "thread-n00001.1"),
        ("n00002.1", "bound", "thread-n00002.1"),
    ]
    assert hops == []
    assert sorted(reads) == sorted(2 * [r.id for r in reports])
    assert os.listdir(run.replies) == []  # each reply taken, as dispatched takes its one


def test_the_run_s_peak_rss_is_its_own_not_the_bench_s_that_launched_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """wait4's ru_maxrss keeps the RSS of the process that forked the child, as it
    was when the child exec'd: the bench loads a 100,000-node workflow before it
    launches the run (240 MB), so a run's figure read 244 MB where the run itself
    never passed 222 MB. The figure is the run process's own VmHWM."""
    scale = load_bench("scale", monkeypatch)
    held = b"x" * (200 << 20)  # the launching process's memory, touched
    quiet = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
    argv = [sys.executable, "-c", "import time; time.sleep(1)"]
    pid = os.posix_spawn(sys.executable, argv, os.environ, file_actions=quiet)
    trial = scale.Trial("app-server", 1, tmp_path, pid=pid)
    try:
        trio.run(scale.wait_exit, trial)
    finally:
        if trial.pid is not None:  # wait_exit reaps it; else it is reaped here
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    assert len(held) == 200 << 20
    assert trial.pid is None and 0 < trial.rss_kb < 100 << 10, trial.rss_kb

"""The owner claim: one live run per owner thread (BIND-LINE-21 .. -24)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crw.binding.owner import (
    BindResult,
    LastLine,
    bind_owner,
    close_owner,
    owner_file,
    plan_bind,
    read_last_line,
)
from crw.engine.config.role_names import ROLES

OWNER = "019a-thread"


PAIRS: dict[str, dict[str, str]] = {role: {} for role in ROLES}


def _line(run_id: str, digest: str = "d1") -> dict[str, Any]:
    return {"kind": "orchestrator", "run_id": run_id, "policyDigest": digest, "helperPairs": PAIRS}


def _lines(state: Path) -> list[dict[str, Any]]:
    text = owner_file(state, OWNER).read_text()
    return [json.loads(raw) for raw in text.splitlines()]


def _live(*runs: str) -> Any:
    return lambda run_id: run_id in runs


def test_first_bind_writes_the_line(tmp_path: Path) -> None:
    result = bind_owner(tmp_path, OWNER, _line("a"), _live())
    assert result == BindResult(bound=True)
    assert _lines(tmp_path) == [_line("a")]


def test_a_live_run_keeps_the_thread(tmp_path: Path) -> None:
    """spec: BIND-LINE-22"""
    bind_owner(tmp_path, OWNER, _line("a"), _live())
    result = bind_owner(tmp_path, OWNER, _line("b"), _live("a"))
    assert not result.bound
    assert result.warning is not None
    assert result.warning.startswith(f"owner thread {OWNER} is bound to live run a;")
    assert _lines(tmp_path) == [_line("a")]


def test_open_line_of_a_run_not_live_is_closed_before_the_new_line(tmp_path: Path) -> None:
    """spec: BIND-LINE-21"""
    bind_owner(tmp_path, OWNER, _line("a"), _live())
    result = bind_owner(tmp_path, OWNER, _line("b"), _live())
    assert result == BindResult(bound=True)
    assert _lines(tmp_path) == [_line("a"), {"kind": "closed", "run_id": "a"}, _line("b")]


def test_a_closed_line_binds_without_another_close(tmp_path: Path) -> None:
    bind_owner(tmp_path, OWNER, _line("a"), _live())
    assert close_owner(tmp_path, OWNER, "a") is None
    bind_owner(tmp_path, OWNER, _line("b"), _live("a"))
    assert _lines(tmp_path) == [_line("a"), {"kind": "closed", "run_id": "a"}, _line("b")]


def test_the_run_rebinds_its_own_line_only_when_it_changed(tmp_path: Path) -> None:
    bind_owner(tmp_path, OWNER, _line("a"), _live())
    assert bind_owner(tmp_path, OWNER, _line("a"), _live("a")).bound
    assert _lines(tmp_path) == [_line("a")]
    assert bind_owner(tmp_path, OWNER, _line("a", "d2"), _live("a")).bound
    assert _lines(tmp_path) == [_line("a"), _line("a", "d2")]


def test_close_owner_closes_only_its_own_run(tmp_path: Path) -> None:
    bind_owner(tmp_path, OWNER, _line("a"), _live())
    assert close_owner(tmp_path, OWNER, "b") is None
    assert _lines(tmp_path) == [_line("a")]
    close_owner(tmp_path, OWNER, "a")
    close_owner(tmp_path, OWNER, "a")
    assert _lines(tmp_path) == [_line("a"), {"kind": "closed", "run_id": "a"}]


def test_unreadable_last_line_is_warned_and_read_as_no_binding(tmp_path: Path) -> None:
    path = owner_file(tmp_path, OWNER)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(_line("a")) + '\n{"kind": "orch')  # a torn append
    result = bind_owner(tmp_path, OWNER, _line("b"), _live("a"))
    assert result.bound
    assert result.warning is not None
    assert "unreadable" in result.warning
    assert str(path) in result.warning
    assert read_last_line(path) == LastLine(_line("b"))
    assert path.read_text().splitlines()[-2:] == ['{"kind": "orch', json.dumps(_line("b"))]


def test_binding_that_cannot_be_written_is_a_warning(tmp_path: Path) -> None:
    """spec: BIND-LINE-24"""
    # A state directory under a regular file cannot be made, even by root.
    (tmp_path / "file").write_text("")
    result = bind_owner(tmp_path / "file" / "state", OWNER, _line("a"), _live())
    assert not result.bound
    assert result.warning is not None
    assert result.warning.startswith(f"cannot bind owner thread {OWNER} to run a: ")
    assert "\n" not in result.warning


def test_owner_file_that_cannot_be_opened_is_a_warning(tmp_path: Path) -> None:
    """spec: BIND-LINE-24"""
    owner_file(tmp_path, OWNER).mkdir(parents=True)
    result = bind_owner(tmp_path, OWNER, _line("a"), _live())
    assert not result.bound
    assert result.warning is not None
    assert "cannot bind owner thread" in result.warning


def test_a_liveness_check_that_fails_is_a_warning(tmp_path: Path) -> None:
    bind_owner(tmp_path, OWNER, _line("a"), _live())

    def broken(run_id: str) -> bool:
        raise OSError(f"cannot read the locks of {run_id}")

    result = bind_owner(tmp_path, OWNER, _line("b"), broken)
    assert not result.bound
    assert result.warning is not None
    assert "cannot tell whether its run is live" in result.warning
    assert _lines(tmp_path) == [_line("a")]


def test_an_owner_id_that_is_no_file_name_is_a_warning(tmp_path: Path) -> None:
    result = bind_owner(tmp_path, "../x", _line("a"), _live())
    assert not result.bound
    assert not (tmp_path / "x.jsonl").exists()


def test_only_orchestrator_lines_are_bound(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        bind_owner(tmp_path, OWNER, {"kind": "closed", "run_id": "a"}, _live())


def test_plan_bind_is_decided_by_the_last_line() -> None:
    line = _line("b")
    assert plan_bind(OWNER, LastLine(None), line, _live()).append == [line]
    assert plan_bind(OWNER, LastLine({"kind": "closed", "run_id": "a"}), line, _live()).append == [
        line
    ]
    assert plan_bind(OWNER, LastLine(_line("a")), line, _live()).append == [
        {"kind": "closed", "run_id": "a"},
        line,
    ]
    refused = plan_bind(OWNER, LastLine(_line("a")), line, _live("a"))
    assert refused.append == []
    assert refused.refused is not None


def test_racing_threads_bind_one_run(tmp_path: Path) -> None:
    """spec: BIND-LINE-23"""
    runs = [f"r{n}" for n in range(8)]
    barrier = threading.Barrier(len(runs))
    results: dict[str, BindResult] = {}

    def start(run_id: str) -> None:
        barrier.wait()
        results[run_id] = bind_owner(tmp_path, OWNER, _line(run_id), lambda _: True)

    threads = [threading.Thread(target=start, args=(run_id,)) for run_id in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [run_id for run_id, result in results.items() if result.bound]
    assert len(winners) == 1
    assert _lines(tmp_path) == [_line(winners[0])]
    for run_id, result in results.items():
        if run_id != winners[0]:
            assert result.warning is not None
            assert f"is bound to live run {winners[0]}" in result.warning


# Binds `run_id` for OWNER with every run live, once a go file appears, and prints
# the result as JSON.
_STARTER = """
import json, os, sys, time
from pathlib import Path
from crw.binding.owner import bind_owner
from crw.engine.config.role_names import ROLES

state, owner, run_id, go = Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4])
print("ready", flush=True)
while not go.exists():
    time.sleep(0.001)
pairs = {role: {} for role in ROLES}
line = {"kind": "orchestrator", "run_id": run_id, "policyDigest": "d1", "helperPairs": pairs}
result = bind_owner(state, owner, line, lambda _: True)
print(json.dumps({"bound": result.bound, "warning": result.warning}), flush=True)
"""


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)
        if proc.stdout is not None:
            proc.stdout.close()


def test_racing_processes_bind_one_run(
    tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    """spec: BIND-LINE-23"""
    state, go = tmp_path / "state", tmp_path / "go"
    runs = [f"r{n}" for n in range(4)]
    for run_id in runs:
        processes.append(
            subprocess.Popen(
                [sys.executable, "-c", _STARTER, str(state), OWNER, run_id, str(go)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        )
    for proc in processes:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    go.touch()
    results = {}
    for run_id, proc in zip(runs, processes, strict=True):
        assert proc.stdout is not None
        results[run_id] = json.loads(proc.stdout.readline())
        assert proc.wait(timeout=20) == 0
    winners = [run_id for run_id, result in results.items() if result["bound"]]
    assert len(winners) == 1
    assert _lines(state) == [_line(winners[0])]
    losers = [result for run_id, result in results.items() if run_id != winners[0]]
    assert all(f"is bound to live run {winners[0]}" in result["warning"] for result in losers)

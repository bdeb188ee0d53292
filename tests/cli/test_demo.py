"""`crw flow demo`: a whole run on the simulated host, on either backend.

Each test runs the demo as a user does (a real `crw` process); the demo starts
the simulated host and the run process itself and must stop the host before it
exits. The pids it reports are reaped at teardown all the same.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from tests.cli.conftest import Crw, Result


def _demo(crw: Crw, *args: str) -> Result:
    """Run the demo; every pid it reports (host and run process) is reaped at teardown."""
    result = crw("flow", "demo", "--state", str(crw.state), *args)
    if "--json" in args and result.code == 0:
        host_pid = result.json().get("host_pid")
        crw.pids += [host_pid] if isinstance(host_pid, int) else []
    else:
        crw.pids += [int(pid) for pid in re.findall(r"\bpid (\d+)", result.stdout)]
    return result


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _turns(out: dict[str, Any]) -> dict[str, int]:
    return {call["call"]: call["turns"] for call in out["calls"]}


def _assert_stopped(crw: Crw, out: dict[str, Any]) -> None:
    assert not (crw.state / "host.sock").exists()  # the simulated host was stopped
    assert not _alive(out["host_pid"])
    assert not list(Path(out["run_dir"]).glob("process.*.lock"))  # the run process exited


def test_session_demo_completes_every_call_with_one_repair_and_one_review_round(
    crw: Crw,
) -> None:
    """spec: GEN-1, GEN-2, GEN-8, STEP-27, BIND-7, HARV-9, ATT-37, STEP-25"""
    result = _demo(crw, "--json")
    assert result.code == 0, result.stderr
    out = result.json()
    assert out["state"] == "ended" and out["ended_status"] == "completed"
    assert out["backend"] == "session"
    assert [call["state"] for call in out["calls"]] == ["completed"] * 7
    assert _turns(out) == {
        "explore.1": 1,
        "plan.1": 1,
        "build.1": 2,
        "build.2": 1,
        "build.3": 1,
        "build.4": 1,
        "critique.1": 1,
    }
    roles = {call["call"]: call["role"] for call in out["calls"]}
    assert [roles[f"build.{n}"] for n in (1, 2, 3, 4)] == [
        "executor",
        "reviewer",
        "executor",
        "reviewer",
    ]
    assert [(r["call"], r["kind"], r.get("verdict"), r.get("resume")) for r in out["reviews"]] == [
        ("build.2", "review", "reject", None),
        ("build.3", "fix", None, "build.1"),
        ("build.4", "review", "accept", None),
    ]
    taken = [(s["call"], s["action"], s["reply"]) for s in out["steps"] if s["action"] != "close"]
    assert ("build.1", "send_input", "bound") in taken  # the repair went to the open subagent
    assert {reply for _, _, reply in taken} == {"bound"}
    spawned = {s["agent_id"] for s in out["steps"] if s["action"] == "spawn"}
    closed = {s["agent_id"] for s in out["steps"] if s["action"] == "close"}
    assert len(spawned) == 7 and closed == spawned  # the owner closed each subagent
    assert out["tokens"]["total"] > 0
    _assert_stopped(crw, out)


def test_session_demo_prints_each_step_its_reply_and_a_summary(crw: Crw) -> None:
    """spec: CMD-NEXT-1, CMD-DISP-4"""
    result = _demo(crw)
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    steps = [line.strip() for line in lines if line.strip().startswith("step ")]
    assert [step.split(" -> ")[0] for step in steps] == [
        "step explore.1/t1-a1 spawn",
        "step plan.1/t1-a1 spawn",
        "step build.1/t1-a1 spawn",
        "step build.1/t2-a1 send_input",
        "step build.2/t1-a1 spawn",
        "step build.3/t1-a1 spawn",
        "step build.4/t1-a1 spawn",
        "step critique.1/t1-a1 spawn",
    ]
    assert all(" -> reply bound " in step for step in steps)
    assert sum(line.strip().startswith("close ") for line in lines) == 7
    summary = lines[lines.index("") + 1 :]
    assert summary[0].split() == ["call", "role", "state", "attempts", "turns", "tokens", "time"]
    assert summary[3].split()[:5] == ["build.1", "executor", "completed", "1", "2"]
    assert summary[-4:-1] == [
        "review build.2: reject (1 finding)",
        "fix build.3: continues build.1 on a new subagent",
        "review build.4: accept (0 findings)",
    ]
    assert summary[-1].startswith("run ended: completed; tokens ")
    assert not (crw.state / "host.sock").exists()


ROUND = [
    ("build.2", "review", "reject", None),
    ("build.3", "fix", None, "build.1"),
    ("build.4", "review", "accept", None),
]


def test_app_server_demo_runs_a_whole_workflow_with_its_review_round(crw: Crw) -> None:
    """spec: GEN-9, HARV-9, ATT-37, STEP-25"""
    result = _demo(crw, "--backend", "app-server", "--json")
    assert result.code == 0, result.stderr
    out = result.json()
    assert out["state"] == "ended" and out["ended_status"] == "completed"
    assert out["backend"] == "app-server"
    assert [call["state"] for call in out["calls"]] == ["completed"] * 7
    assert _turns(out) == {
        "explore.1": 1,
        "plan.1": 1,
        "build.1": 2,  # the scripted repair
        "build.2": 1,
        "build.3": 1,
        "build.4": 1,
        "critique.1": 1,
    }
    assert [(r["call"], r["kind"], r.get("verdict"), r.get("resume")) for r in out["reviews"]] == (
        ROUND
    )
    assert out["tokens"]["total"] > 0
    _assert_stopped(crw, out)


def test_app_server_demo_prints_each_row_and_a_summary(crw: Crw) -> None:
    result = _demo(crw, "--backend", "app-server")
    assert result.code == 0, result.stderr
    assert "build.1      turn_started    k 2" in result.stdout
    assert "fix build.3: continues build.1 on a new subagent" in result.stdout
    assert "run ended: completed" in result.stdout


def test_demo_runs_on_the_real_codex_app_server_offline(crw: Crw) -> None:
    """The README's real-codex demo: codex 0.163.0 as a private child, the mock model."""
    result = crw(
        "flow",
        "demo",
        "--backend",
        "app-server",
        "--host",
        "codex",
        "--state",
        str(crw.state),
        "--json",
    )
    assert result.code == 0, result.stderr
    out = result.json()
    assert out["ended_status"] == "completed" and out["backend"] == "app-server"
    assert [call["state"] for call in out["calls"]] == ["completed"] * 7
    assert {call["call"]: call["turns"] for call in out["calls"]}["build.1"] == 2
    assert [(r["call"], r["kind"], r.get("verdict"), r.get("resume")) for r in out["reviews"]] == (
        ROUND
    )
    assert out["requests"] >= 8  # seven turns and the repair reached the mock model
    # The fix runs on a fork of build.1's thread, whose usage codex counts on from
    # build.1's total: the fix's row counts its own turns alone.
    tokens = {call["call"]: call["tokens"]["total"] for call in out["calls"]}
    turns = {call["call"]: call["turns"] for call in out["calls"]}
    assert tokens["build.3"] == tokens["explore.1"] * turns["build.3"]


def test_demo_on_codex_needs_the_app_server_backend(crw: Crw) -> None:
    result = crw("flow", "demo", "--host", "codex", "--state", str(crw.state))
    assert result.code == 2 and "--backend app-server" in result.stderr


def _tmp_entries(crw: Crw) -> list[str]:
    return sorted(path.name for path in Path(crw.env["TMPDIR"]).iterdir())


def test_demo_removes_the_temporary_state_it_made_even_when_refused(crw: Crw) -> None:
    """Without --state or $CRW_STATE the demo runs in a new temporary directory and
    removes it when it ends: completed, and refused before it ran alike."""
    before = _tmp_entries(crw)
    refused = crw("flow", "demo", "--host", "codex")
    assert refused.code == 2 and "--backend app-server" in refused.stderr
    assert _tmp_entries(crw) == before
    done = crw("flow", "demo", "--backend", "app-server", "--json")
    crw.pids += [done.json()["host_pid"], done.json()["pid"]]
    assert done.code == 0, done.stderr
    out = done.json()
    assert (out["state"], out["ended_status"]) == ("ended", "completed")
    assert Path(out["state_dir"]).name.startswith("crw-demo-") and out["kept"] is False
    assert not Path(out["state_dir"]).exists()
    assert not [name for name in _tmp_entries(crw) if name.startswith("crw-demo-")]


def test_demo_keeps_its_temporary_state_with_keep_and_runs_in_crw_state(crw: Crw) -> None:
    """--keep leaves the temporary state (its path printed); $CRW_STATE is the
    state the demo runs in, and is kept."""
    kept = crw("flow", "demo", "--backend", "app-server", "--keep")
    crw.pids += [int(pid) for pid in re.findall(r"\bpid (\d+)", kept.stdout)]
    assert kept.code == 0, kept.stderr
    first = kept.stdout.splitlines()[0]
    found = re.fullmatch(r"crw flow demo: state (\S+) \(app-server backend\)", first)
    assert found is not None, first
    state = Path(found[1])
    assert state.parent == Path(crw.env["TMPDIR"]) and state.name.startswith("crw-demo-")
    assert [p.name[:5] for p in (state / "flow").iterdir()] == ["demo-"]
    assert "removed the demo's state" not in kept.stdout
    mine = crw.state.parent / "mine"
    env = crw.env | {"CRW_STATE": str(mine)}
    done = crw("flow", "demo", "--backend", "app-server", "--json", env=env)
    crw.pids += [done.json()["host_pid"], done.json()["pid"]]
    assert (done.json()["state_dir"], done.json()["kept"]) == (str(mine), True)
    assert Path(done.json()["run_dir"]).parent == mine / "flow"
    assert (Path(done.json()["run_dir"]) / "journal.jsonl").is_file()


def test_the_demo_reads_its_workspaces_only_once_no_process_holds_the_run(
    tmp_path: Path,
) -> None:
    """The process that ended the demo's run need not be the one the demo started
    (a resume launched by `next`, or by a person, may have ended it): the demo
    waits until no process holds the run, so its end has released what the run
    held before the report reads the workspaces (the owner-kill drill read a
    worktree being removed)."""
    import fcntl
    import threading
    import time

    from crw.cli.demo.demo import _await_released
    from crw.engine.run.rundir import RunDir

    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    fd = os.open(run.run_lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    released_at: list[float] = []

    def release() -> None:
        released_at.append(time.monotonic())
        os.close(fd)

    threading.Timer(0.3, release).start()
    _await_released(run)
    assert released_at and time.monotonic() >= released_at[0]

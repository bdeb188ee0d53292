"""Resume and detached launches of a session run on the simulated host: the
backend a resume goes on with, the env every launch gives the run's process, and
the pool a resume holds.

How the spec's Go-era names map onto crw: engine.StartedBackend is
`crw.cli.run.resume.check_backend` (the started row's backend, or the spec's when no
process stored one); the internal/flow/sessionhost adapter is the session backend
of `crw.actors.run` on the run's host; the run's FileStepBus is its step files
(`crw/bus/steps.py`, `<run>/steps/`); crw has no engine `crw flow resume RUN
SCRIPT`, so the foreground `crw flow resume RUN` is the in-process resume. What a
launched process was given is read from /proc/<pid>/environ: the environment the
process started with.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from crw.engine.run.locks import hold_run, is_held
from crw.engine.run.rundir import RunDir
from crw.host.sim.process import launch_sim, stop_sim
from crw.journal.log import read_journal
from tests.cli.conftest import EXAMPLES, Crw, Result, wait_for_exit, waiting_for_no_host
from tests.cli.test_answer import _answer, _held_run, _refused
from tests.cli.test_next import RUN, _append_rows, _make_run
from tests.deadlines import AT_ONCE_WAIT, LOADED
from tests.drill.test_crash_drill import _host

WORKFLOW = str(EXAMPLES / "fix-issue.toml")
STEP = Path("explore.1") / "t1-a1.json"


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Path]:
    socket = tmp_path / "h.sock"
    host = launch_sim(socket, tmp_path / "sim-home")
    yield socket
    stop_sim(host)


def _wait(what: str, done: Any, timeout: float = LOADED) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _environ(pid: int) -> list[str]:
    """The environment process `pid` started with, entry by entry."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return [entry.decode() for entry in raw.split(b"\0") if entry]


def _values(pid: int, name: str) -> list[str]:
    return [entry.split("=", 1)[1] for entry in _environ(pid) if entry.startswith(f"{name}=")]


def _rows(run: RunDir) -> list[dict[str, Any]]:
    return read_journal(run.journal).rows


def _start(crw: Crw, sim: Path, env: dict[str, str], *args: str) -> tuple[RunDir, int]:
    owner = str(trio.run(_host, sim, "sim/startOwner", {})["threadId"])
    out = crw.start(WORKFLOW, "--owner", owner, "--host", f"unix:{sim}", *args, env=env)
    assert out.code == 0, out.stderr
    run = RunDir(Path(out.json()["run_dir"]))
    _wait("the first step", (run.steps / STEP).exists)
    _wait("the owner woken", lambda: any(row["row"] == "session_wake" for row in _rows(run)))
    return run, out.json()["pid"]


def _kill(run: RunDir, pid: int) -> None:
    """Kill the run's process and clear its step files, so the step the next process
    publishes is that process's own."""
    os.kill(pid, signal.SIGKILL)
    _wait("the run lock let go", lambda: not is_held(run.run_lock))
    for path in (run.steps / "explore.1").iterdir():
        path.unlink()


def _published(run: RunDir) -> str:
    """The packet the run's new process published with its step (any attempt)."""

    def steps() -> list[Path]:
        return list((run.steps / "explore.1").glob("t*.json"))

    _wait("the step published again", steps)
    step = json.loads(steps()[0].read_text())
    return Path(step["packet"]).read_text()


def _pid(crw: Crw, result: Result, key: str) -> int:
    """The pid of the process the command launched, reaped at teardown."""
    assert result.code == 0, result.stderr
    pid = result.json()[key]
    assert isinstance(pid, int)
    if pid not in crw.pids:
        crw.pids.append(pid)
    return pid


def test_every_detached_launch_gets_the_callers_env_with_the_recorded_tmpdir(
    crw: Crw, sim: Path, tmp_path: Path
) -> None:
    """spec: ENV-1, ENV-2, ENV-3, STEP-48, GEN-11, CMD-RESUME-1, CMD-RESUME-2,
    CMD-RESUME-3: the start, `resume --detach` from a shell with another TMPDIR,
    the resume `next` starts and the one `answer` starts from shells with none each
    give the process the caller's environment (its own marker) with the recorded
    TMPDIR in place, once; the process, inside, publishes its packet with the
    recorded TMPDIR, never the shell's, on the run's step bus (crw's FileStepBus),
    records the session backend again, and every wake is of the owner its spec
    records."""
    recorded = crw.env["TMPDIR"]
    run, pid = _start(crw, sim, crw.env | {"CALLER": "start"})
    owner = json.loads(run.run_json.read_text())["owner"]
    assert json.loads(run.run_json.read_text())["env"] == {"TMPDIR": recorded}
    assert _values(pid, "CALLER") == ["start"] and _values(pid, "TMPDIR") == [recorded]
    other = tmp_path / "other-tmp"
    other.mkdir()
    no_tmpdir = {key: value for key, value in crw.env.items() if key != "TMPDIR"}
    relaunches = [
        (["flow", "resume", run.id, "--detach"], crw.env | {"TMPDIR": str(other)}, "pid"),
        (["flow", "next", run.id], no_tmpdir, "resumed_pid"),
        (["flow", "answer", run.id, "explore.1", "--retry"], no_tmpdir, "resumed_pid"),
    ]
    pids = []
    for argv, env, key in relaunches:
        _kill(run, pid)
        if argv[1] == "answer":  # the call held, as a process that died holding it left it
            _append_rows(run, {"row": "held", "call": "explore.1", "reason": "host_failure"})
        caller = {"CALLER": argv[1]}
        pid = _pid(crw, crw(*argv, "--state", str(crw.state), "--json", env=env | caller), key)
        pids.append(pid)
        packet = _published(run)
        assert _values(pid, "CALLER") == [argv[1]]
        assert _values(pid, "TMPDIR") == [recorded]
        assert f"`TMPDIR={recorded}`" in packet and str(other) not in packet
    started = [row for row in _rows(run) if row["row"] == "started"]
    assert [(row["backend"], row["pid"]) for row in started][1:] == [
        ("session", pid) for pid in pids
    ]
    wakes = [row["owner"] for row in _rows(run) if row["row"] == "session_wake"]
    assert wakes and set(wakes) == {owner}


def test_a_spec_written_before_the_record_leaves_the_callers_env(
    crw: Crw, sim: Path, tmp_path: Path
) -> None:
    """spec: ENV-4: run.json without env (written before the record): the resume
    gets the caller's TMPDIR, or none when the caller has none, and its packet
    names no TMPDIR."""
    run, pid = _start(crw, sim, crw.env)
    spec = json.loads(run.run_json.read_text())
    del spec["env"]
    run.run_json.write_text(json.dumps(spec))
    other = tmp_path / "other-tmp"
    other.mkdir()
    no_tmpdir = {key: value for key, value in crw.env.items() if key != "TMPDIR"}
    for env, expected in [(crw.env | {"TMPDIR": str(other)}, [str(other)]), (no_tmpdir, [])]:
        _kill(run, pid)
        result = crw(
            "flow", "resume", run.id, "--detach", "--state", str(crw.state), "--json", env=env
        )
        pid = _pid(crw, result, "pid")
        assert "TMPDIR" not in _published(run)
        assert _values(pid, "TMPDIR") == expected


def _paused(crw: Crw, tmp_path: Path, workflow: str | None = None) -> RunDir:
    """A session run whose first process found no host at `tmp_path/h.sock` and
    paused before it admitted a call; its workflow sets host_wait = 0, so that no
    process stays to wait for the host and go on by itself (it would race the
    resume each test makes)."""
    socket = tmp_path / "h.sock"
    workflow = workflow or str(waiting_for_no_host(tmp_path))
    out = crw.start(workflow, "--owner", "owner-1", "--host", f"unix:{socket}")
    assert out.code == 0, out.stderr
    run = RunDir(Path(out.json()["run_dir"]))
    _wait("the pause", lambda: [r["row"] for r in _rows(run)] == ["started", "paused"])
    _wait("the run lock let go", lambda: not is_held(run.run_lock))
    return run


NODE = '[[node]]\nid = "n{n}"\nrole = "explorer"\ntask = "Look."\nschema = {{ type = "object" }}\n'
WIDE = (
    'name = "wide"\npool = 4\n'
    + "".join(NODE.format(n=n) for n in range(4))
    + "[settings]\nhost_wait = 0\n"
)


def test_a_resume_of_a_session_run_holds_max_threads_minus_one_calls(
    crw: Crw, tmp_path: Path
) -> None:
    """spec: CMD-RESUME-6: the pool run.json records (the workflow's 4, what the
    start allowed under the default agents.max_threads 6; crw has no --pool flag)
    is capped again at every resume by agents.max_threads of the resuming
    environment: with 3 there, 2 calls are admitted of the 4 ready."""
    workflow = tmp_path / "wide.toml"
    workflow.write_text(WIDE)
    run = _paused(crw, tmp_path, str(workflow))
    assert json.loads(run.run_json.read_text())["pool"] == 4
    config = crw.state / "codex-home" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("[agents]\nmax_threads = 3\n")
    host = launch_sim(tmp_path / "h.sock", tmp_path / "sim-home")
    try:
        result = crw("flow", "resume", run.id, "--detach", "--state", str(crw.state), "--json")
        _pid(crw, result, "pid")
        _wait("a step", lambda: any(r["row"] == "step_published" for r in _rows(run)))
        time.sleep(1.0)  # the gate admits what the pool allows at once: nothing more comes
        prepared = [r["call"] for r in _rows(run) if r["row"] == "prepared"]
    finally:
        stop_sim(host)
    assert sorted(prepared) == ["n0.1", "n1.1"]  # the first two in file order, in either order


def test_a_run_with_no_started_row_goes_on_with_its_specs_backend(crw: Crw, tmp_path: Path) -> None:
    """spec: CMD-RESUME-5: a run whose first process stored no started row (its
    journal is empty) is no mixed resume whatever its run.json names: the
    foreground resume goes on with the spec's backend, here app-server."""
    run = _paused(crw, tmp_path)
    run.journal.write_bytes(b"")
    spec = json.loads(run.run_json.read_text())
    run.run_json.write_text(json.dumps(spec | {"backend": "app-server"}))
    result = crw("flow", "resume", run.id, "--state", str(crw.state), "--json")
    assert result.code == 0, result.stderr
    assert [(r["row"], r.get("backend")) for r in _rows(run)] == [
        ("started", "app-server"),
        ("paused", None),
    ]


def _mixed(run: RunDir) -> bytes:
    """Make run.json name app-server for a run started on the session backend."""
    spec = json.loads(run.run_json.read_text())
    run.run_json.write_text(json.dumps(spec | {"backend": "app-server"}))
    return run.journal.read_bytes()


def _refused_as_mixed(result: Result) -> None:
    assert result.code == 2
    assert "started on the session backend and its run.json names app-server: a mixed " in (
        result.error()
    )


@pytest.mark.parametrize(
    "argv",
    [["resume"], ["resume", "--detach"], ["_run"]],
    ids=["foreground", "detach", "run-process"],
)
def test_a_mixed_resume_is_refused_before_any_row(
    crw: Crw, tmp_path: Path, argv: list[str]
) -> None:
    """spec: CMD-RESUME-4, GEN-11: a spec that names another backend than the
    started row: the foreground resume, `resume --detach` and a run process
    launched by hand (`crw flow _run`, under the run lock, before its started row)
    are refused as an input error (exit 2) with the reason, before any row, and no
    process starts; `next` resumes nothing and warns with the reason."""
    run = _paused(crw, tmp_path)
    started, _paused_row = run.journal.read_bytes().splitlines(keepends=True)
    run.journal.write_bytes(started)  # its process died running: next would resume it
    before = _mixed(run)
    _refused_as_mixed(crw("flow", argv[0], run.id, *argv[1:], "--state", str(crw.state)))
    nexted = crw("flow", "next", run.id, "--state", str(crw.state), "--json")
    assert nexted.code == 0 and nexted.json().get("resumed_pid") is None
    assert "its resume did not start" in nexted.stderr and "mixed resume" in nexted.stderr
    assert run.journal.read_bytes() == before


def test_an_answer_that_would_resume_a_mixed_run_is_refused_before_its_row(crw: Crw) -> None:
    """spec: CMD-RESUME-4: the answer's resume would go on with another backend
    than the started row: refused (exit 2, the reason) before its decision row;
    --no-resume starts nothing and records the answer."""
    run = _held_run(crw)
    before = _mixed(run)
    _refused_as_mixed(_answer(crw, "--retry"))
    assert run.journal.read_bytes() == before
    assert _answer(crw, "--retry", "--no-resume").code == 0
    assert _rows(run)[-1]["row"] == "decision"


def _files(run: RunDir) -> dict[str, bytes]:
    """Every file of the run directory and its bytes."""
    return {
        str(path.relative_to(run.root)): path.read_bytes()
        for path in sorted(run.root.rglob("*"))
        if path.is_file()
    }


def _unusable(crw: Crw, run: RunDir, how: str) -> str:
    """Make the run's recorded TMPDIR unusable `how`; the words naming it."""
    recorded = Path(crw.env["TMPDIR"])
    if how == "not writable":  # root writes anywhere but /proc
        spec = json.loads(run.run_json.read_text())
        run.run_json.write_text(json.dumps(spec | {"env": {"TMPDIR": "/proc/self"}}))
        return 'the recorded TMPDIR "/proc/self" of its run.json is not writable ('
    recorded.rmdir()
    if how == "missing":
        return f'the recorded TMPDIR "{recorded}" of its run.json does not exist'
    recorded.write_text("a file")
    return f'the recorded TMPDIR "{recorded}" of its run.json is not a directory'


@pytest.mark.parametrize("how", ["missing", "not a directory", "not writable"])
def test_an_unusable_recorded_tmpdir_refuses_every_relaunch_before_anything_changes(
    crw: Crw, how: str
) -> None:
    """spec: ENV-5, ENV-6, ENV-7, ENV-9, ENV-10, ENV-11, ENV-12, ENV-13: the answer
    that would resume is refused with run_env_unusable (exit 1) at once while a
    process holds the run (nothing drained, appended or started); --no-resume is
    not asked and records the answer; the later relaunches refuse: `resume
    --detach` exits 1 naming the directory and `next` resumes nothing and warns
    "its resume did not start" with the reason. No file of the run changes but the
    answer's row, run.json least of all."""
    run = _held_run(crw)
    words = _unusable(crw, run, how)
    spec = run.run_json.read_bytes()
    with hold_run(run):
        before = _files(run)
        begun = time.monotonic()
        refused = _answer(
            crw, "--retry", "--wait", str(AT_ONCE_WAIT), timeout=AT_ONCE_WAIT + LOADED
        )
        # refused at once, not after the AT_ONCE_WAIT the drain may wait
        assert time.monotonic() - begun < LOADED
        assert _files(run) == before
    _refused(refused, 1, f"run_env_unusable: run {RUN}: {words}")
    recorded = _answer(crw, "--retry", "--no-resume")
    assert recorded.code == 0 and recorded.json()["recorded"] is True, recorded.stderr
    assert recorded.json()["resumed_pid"] is None and recorded.stderr == ""
    assert [r["row"] for r in _rows(run)][-2:] == ["held", "decision"]
    before = _files(run)
    resumed = crw("flow", "resume", RUN, "--detach", "--state", str(crw.state), "--json")
    _refused(resumed, 1, f"run {RUN}'s process cannot be launched: {words}")
    nexted = crw("flow", "next", RUN, "--state", str(crw.state), "--json")
    assert nexted.code == 0 and nexted.json().get("resumed_pid") is None
    assert f"run {RUN}: its resume did not start: " in nexted.stderr and words in nexted.stderr
    assert _files(run) == before
    assert run.run_json.read_bytes() == spec


def test_the_refused_answer_applies_once_the_directory_is_made_again(crw: Crw) -> None:
    """spec: ENV-8: once the directory is made again, the same answer appends its
    decision once and resumes the run once; given again it appends and starts
    nothing."""
    run = _held_run(crw)
    recorded = Path(crw.env["TMPDIR"])
    recorded.rmdir()
    _refused(_answer(crw, "--retry"), 1, "run_env_unusable")
    recorded.mkdir()
    first = _answer(crw, "--retry")
    pid = _pid(crw, first, "resumed_pid")
    assert first.json()["recorded"] is True
    _wait("its pause", lambda: [r.get("pid") for r in _rows(run)][-2:] == [pid, None])
    wait_for_exit(run.root)  # the resumed process found no host and paused
    again = _answer(crw, "--retry")
    assert again.code == 0 and again.json()["recorded"] is False, again.stderr
    kinds = [r["row"] for r in _rows(run)]
    assert kinds.count("decision") == 1
    started = [r["pid"] for r in _rows(run) if r["row"] == "started"]
    assert started[1:] == [pid]


@pytest.mark.parametrize("argv", [["_run"], ["resume"]], ids=["run-process", "foreground"])
def test_a_process_that_reads_its_spec_refuses_an_unusable_tmpdir_before_any_lock(
    crw: Crw, argv: list[str]
) -> None:
    """spec: ENV-17: the run process (`crw flow _run`) and the foreground `crw flow
    resume RUN` refuse an unusable recorded TMPDIR with exit 2 and the reason
    naming the directory, before any lock or row: no file of the run changes."""
    run = _held_run(crw)
    _append_rows(run, {"row": "decision", "call": "build.1", "choice": "retry"})
    words = _unusable(crw, run, "missing")
    before = _files(run)
    result = crw("flow", *argv, RUN, "--state", str(crw.state))
    _refused(result, 2, f"run {RUN}: {words}")
    assert _files(run) == before


@pytest.mark.parametrize("shell", ["other", None], ids=["another-tmpdir", "no-tmpdir"])
def test_the_foreground_resume_runs_below_the_recorded_env_and_puts_back_the_shells(
    crw: Crw, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shell: str | None
) -> None:
    """spec: ENV-14, ENV-15, ENV-16: the foreground `crw flow resume RUN` runs the
    run in its own process: it puts the recorded TMPDIR into its environment before
    it takes a lock, so the temp files it makes lie below it whatever the shell's
    TMPDIR was (and whatever gettempdir() had answered before), and puts back the
    shell's when the run is done (a run whose host is gone pauses at once)."""
    from crw.cli.run.resume import resume_command

    run = _make_run(crw)
    recorded = crw.env["TMPDIR"]
    monkeypatch.setenv("CODEX_HOME", crw.env["CODEX_HOME"])
    if shell is None:
        monkeypatch.delenv("TMPDIR", raising=False)
    else:
        (tmp_path / shell).mkdir()
        monkeypatch.setenv("TMPDIR", str(tmp_path / shell))
    monkeypatch.setattr(tempfile, "tempdir", None)
    shells = tempfile.gettempdir()  # computed once, then kept by tempfile
    at_lock: list[tuple[str | None, str]] = []

    def hold(run_dir: RunDir) -> Any:
        at_lock.append((os.environ.get("TMPDIR"), tempfile.gettempdir()))
        return hold_run(run_dir)

    monkeypatch.setattr("crw.actors.run.hold_run", hold)
    assert resume_command(RUN, detach=False, state=str(crw.state), json=True) == 0
    assert at_lock == [(recorded, recorded)]
    assert [r["row"] for r in _rows(run)][-2:] == ["started", "paused"]
    assert os.environ.get("TMPDIR") == (None if shell is None else str(tmp_path / shell))
    assert tempfile.gettempdir() == shells


FAKE_CODEX = """#!{python}
import json, os, sys, tempfile
fd, temp = tempfile.mkstemp(prefix="codex-")
os.close(fd)
with open({record!r}, "a") as out:
    out.write(json.dumps({{"TMPDIR": os.environ.get("TMPDIR"), "temp": temp}}) + "\\n")
"""
"""A `codex` that notes its TMPDIR and where its temp file landed, then exits: the
run finds its host gone and pauses."""


def test_a_child_the_run_starts_after_its_lock_makes_its_temp_files_below_the_recorded_tmpdir(
    crw: Crw, tmp_path: Path
) -> None:
    """spec: ENV-16: a foreground `crw flow resume RUN` from a shell with another
    TMPDIR: the host child the run starts once it holds the run (its private codex
    app-server) sees the recorded TMPDIR, and the temp file it makes lies there."""
    record = tmp_path / "codex.jsonl"
    codex = tmp_path / "codex"
    codex.write_text(FAKE_CODEX.format(python=sys.executable, record=str(record)))
    codex.chmod(0o755)
    recorded = crw.env["TMPDIR"]
    out = crw.start(
        str(waiting_for_no_host(tmp_path)),
        "--backend",
        "app-server",
        "--host",
        "codex",
        "--codex-bin",
        str(codex),
    )
    assert out.code == 0, out.stderr
    run = RunDir(Path(out.json()["run_dir"]))
    wait_for_exit(run.root)
    record.unlink()  # the started process's host: launched with the recorded env
    (tmp_path / "shell").mkdir()
    shell = crw.env | {"TMPDIR": str(tmp_path / "shell")}
    result = crw("flow", "resume", run.id, "--state", str(crw.state), "--json", env=shell)
    assert result.code == 0, result.stderr
    assert [r["row"] for r in _rows(run)][-2:] == ["started", "paused"]
    (seen,) = [json.loads(line) for line in record.read_text().splitlines()]
    assert seen["TMPDIR"] == recorded
    assert Path(seen["temp"]).parent == Path(recorded)
    assert Path(seen["temp"]).is_file()

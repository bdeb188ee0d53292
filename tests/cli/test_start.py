"""`crw flow start`: refusals before anything is written, run.json, the run process."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from crw.engine.run.rundir import RunDir
from crw.journal.log import read_journal
from crw.settings import Settings
from tests.cli.conftest import EXAMPLES, Crw, wait_for_exit, waiting_for_no_host
from tests.deadlines import LOADED

WORKFLOW = str(EXAMPLES / "fix-issue.toml")


def _runs(crw: Crw) -> list[str]:
    flow = crw.state / "flow"
    return sorted(os.listdir(flow)) if flow.exists() else []


def test_session_start_records_run_json_and_the_started_row(crw: Crw) -> None:
    """spec: CMD-START-3 (no --backend: a session run), CMD-START-5, CMD-START-6,
    CMD-START-8, GEN-8"""
    result = crw.start(WORKFLOW, "--owner", "owner-1")
    assert result.code == 0, result.stderr
    out = result.json()
    assert out["run"] in out["run_dir"] and out["backend"] == "session"
    run = RunDir(Path(out["run_dir"]))
    spec = json.loads(run.run_json.read_text())
    assert spec["format"] == "crw-flow-run/1"
    assert spec["backend"] == "session" and spec["owner"] == "owner-1"
    assert spec["env"] == {"TMPDIR": crw.env["TMPDIR"]}
    assert spec["workflow"]["digest"].startswith("sha256:")
    wait_for_exit(run.root)
    rows = read_journal(run.journal).rows
    # Its host (the codex daemon's socket under CODEX_HOME) is not there: it pauses.
    assert [row["row"] for row in rows] == ["started", "paused"]
    assert rows[1]["reason"] == "host_unavailable"
    started = rows[0]
    assert started["seq"] == 1 and started["backend"] == "session"
    assert started["pid"] == out["pid"]
    assert isinstance(started["process"], str) and started["policy_digest"].startswith("sha256:")
    assert set(started["role_pairs"]) == {
        "architect",
        "executor",
        "executor-t1",
        "reviewer",
        "explorer",
        "critic",
    }


def test_run_process_removes_its_process_lock_file_when_it_ends(crw: Crw) -> None:
    """spec: BIND-LINE-17"""
    out = crw.start(WORKFLOW, "--owner", "owner-1").json()
    run = RunDir(Path(out["run_dir"]))
    wait_for_exit(run.root)
    assert list(run.root.glob("process.*.lock")) == []


def test_tmpdir_default_is_recorded_as_the_temp_function_answers(crw: Crw) -> None:
    """spec: CMD-START-9, CMD-START-11"""
    env = {key: value for key, value in crw.env.items() if key != "TMPDIR"}
    env |= {"PATH": os.environ["PATH"], "GOFLAGS": "-x", "GOTOOLCHAIN": "local"}
    out = crw.start(WORKFLOW, "--owner", "o", env=env).json()
    spec = json.loads(RunDir(Path(out["run_dir"])).run_json.read_text())
    assert spec["env"] == {"TMPDIR": "/tmp"}
    assert "PATH" not in json.dumps(spec) and "GOFLAGS" not in json.dumps(spec)


def test_tmpdir_is_recorded_as_written(crw: Crw) -> None:
    """spec: CMD-START-8"""
    written = crw.env["TMPDIR"] + "/./"
    out = crw.start(WORKFLOW, "--owner", "o", env=crw.env | {"TMPDIR": written}).json()
    spec = json.loads(RunDir(Path(out["run_dir"])).run_json.read_text())
    assert spec["env"]["TMPDIR"] == written


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda tmp: "relative/dir", "not absolute"),
        (lambda tmp: str(tmp / "missing"), "missing"),
        (lambda tmp: str(tmp / "afile"), "not a directory"),
        (lambda tmp: "/proc/1", "not writable"),
    ],
    ids=["relative", "missing", "file", "unwritable"],
)
def test_unusable_tmpdir_stops_the_start_before_anything_is_written(
    crw: Crw, tmp_path: Path, make: object, reason: str
) -> None:
    """spec: CMD-START-12, CMD-START-13, CMD-START-14"""
    (tmp_path / "afile").write_text("x")
    tmpdir = make(tmp_path)  # type: ignore[operator]
    result = crw.start(WORKFLOW, "--owner", "o", env=crw.env | {"TMPDIR": tmpdir})
    assert result.code == 1
    assert reason in result.error() and result.error().count("\n") == 1
    assert _runs(crw) == []
    assert not (crw.state / "flow-bound").exists()


def test_owner_defaults_to_the_codex_thread_of_the_shell(crw: Crw) -> None:
    out = crw.start(WORKFLOW, env=crw.env | {"CODEX_THREAD_ID": "thread-from-shell"}).json()
    assert out["owner"] == "thread-from-shell"


def test_session_run_refuses_the_private_codex_host(crw: Crw) -> None:
    result = crw.start(WORKFLOW, "--owner", "o", "--host", "codex")
    assert result.code == 1 and "share its owner's host" in result.error()
    assert _runs(crw) == []


def test_session_run_pool_is_capped_by_the_owners_thread_limit(crw: Crw) -> None:
    """spec: CMD-START-15, CMD-START-16"""
    home = Path(crw.env["CODEX_HOME"])
    home.mkdir(parents=True)
    (home / "config.toml").write_text("[agents]\nmax_threads = 3\n")
    out = crw.start(WORKFLOW, "--owner", "o").json()
    assert out["pool"] == 2


def test_app_server_run_records_its_backend_and_host(crw: Crw) -> None:
    """spec: GEN-9, CMD-START-4 (its calls' threads: test_app_server_run)"""
    out = crw.start(WORKFLOW, "--backend", "app-server").json()
    assert (out["backend"], out["host"], out["owner"]) == ("app-server", "codex", None)
    rows = read_journal(RunDir(Path(out["run_dir"])).journal).rows
    assert rows[0]["backend"] == "app-server"


def test_an_app_server_start_runs_its_reviewed_nodes_with_their_review(crw: Crw) -> None:
    """A node's review runs on both backends: neither start warns that a reviewed
    node runs without it (the rounds: tests/actors/test_app_server_review.py)."""
    for backend in ("app-server", "session"):
        args = ("--backend", "app-server") if backend == "app-server" else ("--owner", "o")
        out = crw.start(WORKFLOW, *args).json()
        assert out["backend"] == backend
        assert not any("review" in warning for warning in out["warnings"]), out["warnings"]


def test_malformed_workflow_is_an_input_error_and_creates_no_run(crw: Crw, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[[node]]\nid = "a"\nrole = "wizard"\ntask = "t"\nschema = {}\n')
    result = crw.start(str(bad), "--owner", "o")
    assert result.code == 2
    assert str(bad) in result.error() and result.error().count("\n") == 1
    assert _runs(crw) == []


def test_second_start_on_an_owner_bound_to_a_live_run_warns_and_does_not_bind(crw: Crw) -> None:
    from crw.engine.run.locks import run_lock

    first = crw.start(WORKFLOW, "--owner", "shared-owner").json()
    run = RunDir(Path(first["run_dir"]))
    wait_for_exit(run.root)
    with run_lock(run):  # the first run is live while its run lock is held
        second = crw.start(WORKFLOW, "--owner", "shared-owner").json()
    assert any(first["run"] in warning for warning in second["warnings"])
    lines = (crw.state / "flow-bound" / "shared-owner.jsonl").read_text().splitlines()
    assert [json.loads(line)["run_id"] for line in lines] == [first["run"]]


def test_start_after_the_bound_run_ended_closes_its_line_and_binds(crw: Crw) -> None:
    first = crw.start(WORKFLOW, "--owner", "o2").json()
    wait_for_exit(Path(first["run_dir"]))
    second = crw.start(WORKFLOW, "--owner", "o2").json()
    assert second["warnings"] == []
    lines = [
        json.loads(x) for x in (crw.state / "flow-bound" / "o2.jsonl").read_text().splitlines()
    ]
    assert [(line["kind"], line["run_id"]) for line in lines] == [
        ("orchestrator", first["run"]),
        ("closed", first["run"]),
        ("orchestrator", second["run"]),
    ]
    assert lines[2]["policyDigest"].startswith("sha256:")


# The start leaves its detached child running: Popen warns when it is collected.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_slow_start_is_reported_coming_up_and_keeps_the_start_lock(
    crw: Crw, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: BIND-LINE-19, BIND-LINE-20: the start lock is held until the run's
    process holds the run lock, however long it takes; a live child is never
    reported as not started."""
    from crw.cli.run.start import start_run
    from crw.engine.run.locks import is_held, run_is_live
    from crw.settings import Settings

    monkeypatch.chdir(crw.state.parent)
    outcome = start_run(
        waiting_for_no_host(crw.state.parent),  # the child exits once paused
        backend="session",
        owner="owner-1",
        host=None,
        state=str(crw.state),
        environ=dict(crw.env),
        settings=Settings(start_wait=0.0),  # the process cannot have come up yet
    )
    assert outcome.pid is not None
    crw.pids.append(outcome.pid)
    assert not outcome.started
    assert any("still coming up" in warning for warning in outcome.warnings)
    run = outcome.run
    # handed to the child, which lets it go once it holds the run lock (BIND-LINE-20:
    # the start lock asked first, so a run coming up is never read as held by neither)
    assert run_is_live(run) or read_journal(run.journal).rows
    deadline = time.monotonic() + LOADED
    while not read_journal(run.journal).rows and time.monotonic() < deadline:
        time.sleep(0.02)
    wait_for_exit(run.root)
    with contextlib.suppress(ChildProcessError):  # forked: the worker's fork server reaps it
        os.waitpid(outcome.pid, 0)  # the start's child: reap it
    rows = read_journal(run.journal).rows
    assert [row["row"] for row in rows] == ["started", "paused"]
    assert rows[0]["pid"] == outcome.pid
    assert not is_held(run.start_lock)


def test_start_records_the_workflow_settings_in_run_json(crw: Crw, tmp_path: Path) -> None:
    """A user can make LostAfter 30 s: every process of the run reads it from run.json."""
    workflow = tmp_path / "wf.toml"
    text = Path(WORKFLOW).read_text()
    workflow.write_text(text.replace("[[node]]", "[settings]\nlost_after = 30\n\n[[node]]", 1))
    shutil.copytree(EXAMPLES / "schemas", tmp_path / "schemas")
    result = crw.start(str(workflow), "--owner", "owner-1")
    assert result.code == 0, result.stderr
    run = RunDir(Path(result.json()["run_dir"]))
    recorded = json.loads(run.run_json.read_text())["settings"]
    assert recorded == asdict(Settings(lost_after=30.0))
    wait_for_exit(run.root)


def test_start_trace_records_the_trace_option_in_run_json(crw: Crw) -> None:
    """spec: HARV-44. `crw flow start --trace` is SessionConfig.Trace, recorded for
    every process of the run; a start without it records trace off."""
    result = crw.start(WORKFLOW, "--owner", "owner-1", "--trace")
    assert result.code == 0, result.stderr
    run = RunDir(Path(result.json()["run_dir"]))
    assert json.loads(run.run_json.read_text())["settings"]["trace"] is True
    wait_for_exit(run.root)
    plain = crw.start(WORKFLOW, "--owner", "owner-2")
    assert plain.code == 0, plain.stderr
    untraced = RunDir(Path(plain.json()["run_dir"]))
    assert json.loads(untraced.run_json.read_text())["settings"]["trace"] is False
    wait_for_exit(untraced.root)

"""Bad input at the command line: one line, exit 2, and nothing changed."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from crw.engine.run.rundir import RunDir
from tests.cli.conftest import EXAMPLES, Crw, Result, wait_for_exit

WORKFLOW = str(EXAMPLES / "fix-issue.toml")


def refused(result: Result) -> str:
    """The one line of an input error, with no traceback (a --json command's error
    object, `crw.start`'s among them, as that line)."""
    assert result.code == 2, result.stderr
    result = Result(result.code, "", result.error())
    assert result.stderr.startswith("crw: error: ") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr
    return result.stderr


def snapshot(directory: Path) -> list[tuple[str, bytes]]:
    files = (p for p in directory.rglob("*") if p.is_file() and not p.name.endswith(".lock"))
    return sorted((str(p), p.read_bytes()) for p in files)


@pytest.fixture(scope="module")
def paused_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A state directory holding a session run that paused (its host is not there)
    and its run id: made once for the module, by `crw flow start` and its run
    process, which has exited."""
    root = tmp_path_factory.mktemp("paused")
    (root / "tmp").mkdir()
    starter = Crw(root / "state", root / "tmp")
    try:
        out = starter.start(WORKFLOW, "--owner", "owner-1")
        assert out.code == 0, out.stderr
        run = RunDir(Path(out.json()["run_dir"]))
        wait_for_exit(run.root)
    finally:
        starter.reap()
    yield starter.state, run.id


@pytest.fixture
def paused_run(crw: Crw, paused_state: tuple[Path, str]) -> RunDir:
    """A session run that paused (its host is not there): no process holds it. Each
    test gets its own copy of the module's run, byte for byte: the refusals here
    read it and change nothing, so one `crw flow start` serves them all."""
    state, run_id = paused_state
    shutil.copytree(state, crw.state, symlinks=True)
    return RunDir.of(crw.state, run_id)


def commands(run: str) -> list[list[str]]:
    """Every command that takes RUN."""
    return [
        ["status", run],
        ["next", run],
        ["resume", run],
        ["dispatched", run, "fix.1", "--agent", "a", "--k", "1", "--attempt", "1"],
        ["_run", run],
    ]


@pytest.mark.parametrize("run", ["a" * 300, "run\nid", "a/" * 2100])
def test_run_that_is_no_run_id_is_an_input_error_for_every_command(
    crw: Crw, paused_run: RunDir, run: str
) -> None:
    before = snapshot(crw.state)
    for args in commands(run):
        line = refused(crw("flow", *args, "--state", str(crw.state)))
        assert "list the runs with" in line
    assert snapshot(crw.state) == before


@pytest.mark.parametrize(
    ("option", "value"),
    [("--k", "1.5"), ("--attempt", "1.5"), ("--k", "2.0"), ("--attempt", "1e0")],
)
def test_turn_and_attempt_are_whole_numbers_never_rounded(
    crw: Crw, paused_run: RunDir, option: str, value: str
) -> None:
    numbers = {"--k": "1", "--attempt": "1", option: value}
    args = [part for pair in numbers.items() for part in pair]
    call = ["flow", "dispatched", paused_run.id, "fix.1", "--agent", "a", *args, "--wait", "0"]
    line = refused(crw(*call, "--state", str(crw.state)))
    assert f"{option}: {value} is not a whole number" in line
    assert os.listdir(paused_run.inbox) == []


@pytest.mark.parametrize("wait", ["nan", "inf", "-inf"])
def test_wait_is_a_finite_number_of_seconds(crw: Crw, paused_run: RunDir, wait: str) -> None:
    before = snapshot(crw.state)
    line = refused(crw("flow", "next", paused_run.id, "--wait", wait, "--state", str(crw.state)))
    assert f'"{wait}" for --wait' in line
    dispatched = ["dispatched", paused_run.id, "fix.1", "--agent", "a", "--k", "1"]
    line = refused(
        crw("flow", *dispatched, "--attempt", "1", "--wait", wait, "--state", str(crw.state))
    )
    assert f'"{wait}" for --wait' in line
    assert snapshot(crw.state) == before


@pytest.mark.parametrize(
    "args",
    [
        ["fix\n.1", "--agent", "a"],
        ["fix.1", "--agent", "a\nb"],
        ["fix.1", "--agent", "a\x01b"],
    ],
)
def test_ids_with_a_control_character_are_refused(
    crw: Crw, paused_run: RunDir, args: list[str]
) -> None:
    call = ["flow", "dispatched", paused_run.id, *args, "--k", "1", "--attempt", "1"]
    line = refused(crw(*call, "--wait", "0", "--state", str(crw.state)))
    assert "holds a control character" in line
    assert os.listdir(paused_run.inbox) == []


def test_owner_with_a_newline_is_refused_and_starts_nothing(crw: Crw) -> None:
    line = refused(crw.start(WORKFLOW, "--owner", "owner\n1"))
    assert 'Invalid value "owner\\n1" for --owner' in line
    assert not crw.state.exists()


@pytest.mark.parametrize("variable", ["CRW_OWNER_THREAD", "CODEX_THREAD_ID"])
def test_owner_from_the_environment_with_a_newline_is_refused(crw: Crw, variable: str) -> None:
    env = crw.env | {variable: "owner\n1"}
    line = refused(crw("flow", "start", WORKFLOW, "--state", str(crw.state), env=env))
    assert "owner\\n1" in line and variable in line
    assert not (crw.state / "flow").exists()


def test_workflow_that_is_a_fifo_is_refused_at_once(crw: Crw, tmp_path: Path) -> None:
    fifo = tmp_path / "w.toml"
    os.mkfifo(fifo)
    line = refused(crw.start(str(fifo), "--owner", "o"))
    assert line == f"crw: error: {fifo}: the workflow is not a regular file; give a file's path\n"
    assert not crw.state.exists()


def _capped() -> None:
    # Were the device read, the process would fill memory: 2 GiB ends it first.
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_workflow_that_is_a_device_is_refused_at_once(crw: Crw, device: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "crw", "flow", "start", device, "--owner", "o"],
        env=crw.env | {"CRW_STATE": str(crw.state)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        cwd=crw.state.parent,
        preexec_fn=_capped,
    )
    line = refused(Result(done.returncode, done.stdout, done.stderr))
    assert line == f"crw: error: {device}: the workflow is not a regular file; give a file's path\n"
    assert not crw.state.exists()


def test_role_store_value_that_becomes_a_path_is_refused(crw: Crw) -> None:
    crw.state.mkdir()
    (crw.state / "roles.toml").write_text('[explorer]\nagent_type = "../../x"\n')
    line = refused(crw.start(WORKFLOW, "--owner", "o"))
    assert line == (
        f'crw: error: {crw.state / "roles.toml"}:2: [explorer]: agent_type = "../../x" '
        "holds '..'; write the name without '..'\n"
    )
    assert not (crw.state / "flow").exists()


def test_a_bad_setting_is_refused_and_starts_nothing(crw: Crw, tmp_path: Path) -> None:
    workflow = tmp_path / "wf.toml"
    text = Path(WORKFLOW).read_text()
    workflow.write_text(text.replace("[[node]]", "[settings]\nlost_after = 0\n\n[[node]]", 1))
    shutil.copytree(EXAMPLES / "schemas", tmp_path / "schemas")
    line = refused(crw.start(str(workflow), "--owner", "o"))
    assert line.startswith(f"crw: error: {workflow}:")
    assert line.endswith(
        ": [settings]: lost_after = 0 is not positive; give it above 0, as lost_after = 30\n"
    )
    assert not (crw.state / "flow").exists()

"""No process a test started outlives the session unseen (tests/leaks.py): the
finder sees a process by the directory its environment names, and a session
whose test forgets a process ends in an error naming that test, the process
killed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import REPO
from tests.leaks import leak_report
from tests.processes import processes_naming, reap_naming

SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]


@pytest.fixture
def reaped(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    reap_naming(tmp_path)


def test_a_process_is_found_by_the_directory_its_environment_names(reaped: Path) -> None:
    (reaped / "tmp").mkdir()
    env = os.environ | {"TMPDIR": str(reaped / "tmp")}
    child = subprocess.Popen(SLEEP, env=env, cwd="/", start_new_session=True)
    try:
        assert processes_naming(reaped) == {child.pid: " ".join(SLEEP)}
        assert child.pid not in processes_naming(Path(f"{reaped}/tm"))  # a prefix is not a path
        assert child.pid not in processes_naming(reaped.with_name(reaped.name + "x"))
        assert reap_naming(reaped) == {child.pid: " ".join(SLEEP)}
        assert child.wait(timeout=10) == -9
        assert processes_naming(reaped) == {}
    finally:
        child.kill()
        child.wait()


def test_a_shell_set_up_process_found_by_its_environment_only_is_killed_not_reported(
    reaped: Path,
) -> None:
    """A program the suite does not start (the user's `pyenv-rehash` that a real
    codex's tool shell ran in a test's directory), named only by its working
    directory and the TMPDIR it inherited, is killed and is no leak; a program of
    the suite's own so named is one."""
    (reaped / "tmp").mkdir()
    env = os.environ | {"TMPDIR": str(reaped / "tmp")}
    shell = subprocess.Popen(["sleep", "120"], env=env, cwd=reaped, start_new_session=True)
    try:
        assert leak_report(reaped, {}, grace=0) is None
        assert shell.wait(timeout=10) == -9
    finally:
        shell.kill()
        shell.wait()
    ours = subprocess.Popen(SLEEP, env=env, cwd="/", start_new_session=True)
    try:
        report = leak_report(reaped, {}, grace=0)
        assert report is not None and f"pid {ours.pid} " in report
        assert ours.wait(timeout=10) == -9
    finally:
        ours.kill()
        ours.wait()


INNER = """
import os, subprocess, sys

def test_forgets_its_process(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env,
                     start_new_session=True)

def test_starts_nothing(tmp_path):
    pass
"""


def test_a_session_whose_test_leaves_a_process_fails_naming_the_test(reaped: Path) -> None:
    (reaped / "test_inner.py").write_text(INNER)
    base = reaped / "base"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.leaks", "-p", "no:cacheprovider",
         "-q", "-W", "ignore", f"--basetemp={base}", "test_inner.py"],
        cwd=reaped, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout
    assert "2 passed, 1 error" in done.stdout, done.stdout
    assert "1 process(es) outlived the tests that started them" in done.stdout
    assert "started by test_inner.py::test_forgets_its_process" in done.stdout
    assert processes_naming(base) == {}  # killed by the session's end

"""No process a test started outlives the session, a plugin of the whole suite
(tests/conftest.py loads it).

Each test reaps what it started, by pid, at its teardown. What one misses (a
detached run process a command launched after the test killed that command's
parent) would run on, unseen, after a green suite. So at the end of each session
(each xdist worker's) every process whose command line, working directory or
environment names the session's base temporary directory is a leak: every
process a test starts has its `TMPDIR` or its state there. Each is killed by
pid, and the session ends with an error that names it and the test whose
`tmp_path` it names (a module fixture's directory, by its name).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes import processes_naming, reap_naming

GRACE = 2.0
"""Seconds a process found at the end may take to finish exiting (a test's
SIGKILL just sent) before it counts as a leak."""

_tmp_paths = pytest.StashKey[dict[str, str]]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Which test each `tmp_path` is (read before the test's fixtures go)."""
    tmp_path = getattr(item, "funcargs", {}).get("tmp_path")
    if isinstance(tmp_path, Path):
        item.config.stash.setdefault(_tmp_paths, {})[tmp_path.name] = item.nodeid


def leaked(base: Path, grace: float = GRACE) -> dict[int, str]:
    """The processes that name `base` and are still there after `grace` seconds."""
    deadline = time.monotonic() + grace
    found = processes_naming(base)
    while found and time.monotonic() < deadline:
        time.sleep(0.05)
        found = processes_naming(base)
    return found


def _named_by(pid: int) -> Iterator[bytes]:
    """Process `pid`'s command line, working directory and environment."""
    proc = Path(f"/proc/{pid}")
    with contextlib.suppress(OSError):
        yield (proc / "cmdline").read_bytes()
        yield os.fsencode(os.readlink(proc / "cwd"))
        yield (proc / "environ").read_bytes()


def started_by(pid: int, base: Path, tests: dict[str, str]) -> str:
    """The test (or else the directory under `base`) that process `pid` names."""
    under = re.compile(re.escape(os.fsencode(base)) + rb"/([^/\0]+)")
    for text in _named_by(pid):
        if match := under.search(text):
            name = os.fsdecode(match.group(1))
            return tests.get(name, f"a fixture of directory {base / name}")
    return "an unknown test"


OURS = ("python", "crw", "codex", "node", "postgres", "chrom")
"""The programs the suite starts, by how their executable's name begins."""


def ours(pid: int, base: Path) -> bool:
    """Whether process `pid` is the suite's own: it runs a program the suite
    starts, or names `base` in its command line. Any other process found through
    its working directory or an environment it inherited is the user's shell
    set-up that a real codex's tool shell ran in a test's directory
    (`~/.bashrc`'s `pyenv init`: a `pyenv-rehash` waiting for its lock, its
    `sleep 0.1`); it is killed with the others, never reported as a leak."""
    proc = Path(f"/proc/{pid}")
    under = re.compile(re.escape(os.fsencode(base)) + rb"(?=[/\0]|$)")
    with contextlib.suppress(OSError):
        if under.search((proc / "cmdline").read_bytes()):
            return True
        return Path(os.readlink(proc / "exe")).name.startswith(OURS)
    return False


def leak_report(base: Path, tests: dict[str, str], grace: float = GRACE) -> str | None:
    """None when no process of the suite's own names `base`; else every process
    that names it is killed and the report says which of its own (and which test
    started it)."""
    found = {pid: command for pid, command in leaked(base, grace).items() if ours(pid, base)}
    if not found:
        reap_naming(base)
        return None
    lines = [f"pid {pid} ({command}), started by {started_by(pid, base, tests)}"
             for pid, command in found.items()]  # fmt: skip
    reap_naming(base)
    return (
        f"{len(found)} process(es) outlived the tests that started them (killed now; "
        f"reap them in that test's teardown, by pid):\n  " + "\n  ".join(lines)
    )


@pytest.fixture(scope="session", autouse=True)
def no_process_outlives_the_session(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Torn down last, after every other fixture: then no process names the base."""
    yield
    report = leak_report(tmp_path_factory.getbasetemp(), request.config.stash.get(_tmp_paths, {}))
    if report is not None:
        pytest.fail(report, pytrace=False)

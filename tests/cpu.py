"""Where the suite's CPU goes, per test module, a plugin of the whole suite
(tests/conftest.py loads it); off unless `CRW_TEST_CPU=PATH` names a file.

Each test's CPU is its worker's own (user + system, setup to teardown) and that
of the children the worker waited for meanwhile (a `crw` command the test ran; a
detached run process is nobody's child and is not counted; nor is a command,
run process or simulated host forked from the worker's server, tests/zygote.py,
which waits for them: set `CRW_TEST_COLD=1` to count the commands and hosts as
the worker's children). Each worker appends
one JSON line a module, `{"module", "tests", "own", "children", "wall"}` in
seconds, to PATH; `docs/performance.md` ("Where the CPU goes") reads them so:

    CRW_TEST_CPU=/tmp/cpu.jsonl make test
    python -m tests.cpu /tmp/cpu.jsonl

`python -m tests.cpu tree CMD...` runs CMD as a child subreaper: every process
under it, a detached run process too, is reaped here when it ends, so the CPU it
prints is that of the whole tree (`time CMD` counts only what CMD's own
descendants waited for).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path

import pytest

VARIABLE = "CRW_TEST_CPU"
_totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    if not os.environ.get(VARIABLE):
        return (yield)
    own, children = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    wall = time.monotonic()
    try:
        return (yield)
    finally:
        total = _totals[item.nodeid.split("::")[0]]
        total[0] += 1
        total[1] += _cpu(resource.RUSAGE_SELF) - own
        total[2] += _cpu(resource.RUSAGE_CHILDREN) - children
        total[3] += time.monotonic() - wall


def pytest_sessionfinish() -> None:
    path = os.environ.get(VARIABLE)
    if not path or not _totals:
        return
    with open(path, "a", encoding="utf-8") as out:
        for module, (tests, own, children, wall) in _totals.items():
            line = {"module": module, "tests": tests, "own": round(own, 2),
                    "children": round(children, 2), "wall": round(wall, 2)}  # fmt: skip
            out.write(json.dumps(line) + "\n")


def summary(path: Path, top: int = 25) -> str:
    """The modules by CPU, most first, and the totals."""
    modules: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for line in path.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        total = modules[entry["module"]]
        for at, key in enumerate(("tests", "own", "children", "wall")):
            total[at] += entry[key]
    ranked = sorted(modules.items(), key=lambda item: -(item[1][1] + item[1][2]))
    own = sum(t[1] for t in modules.values())
    children = sum(t[2] for t in modules.values())
    lines = [f"{len(modules)} modules: {own:.0f} s own CPU + {children:.0f} s children's",
             "  cpu s   own  child  tests  module"]  # fmt: skip
    for module, (tests, mine, theirs, _) in ranked[:top]:
        lines.append(f"{mine + theirs:7.1f} {mine:5.1f} {theirs:6.1f} {tests:6.0f}  {module}")
    return "\n".join(lines)


PR_SET_CHILD_SUBREAPER = 36


def tree(argv: list[str]) -> int:
    """Run `argv`, reap every orphan it leaves until none is left (60 s at most),
    print its wall time and the CPU of the whole tree; its exit code."""
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    began = time.monotonic()
    code = subprocess.call(argv)
    wall = time.monotonic() - began
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                time.sleep(0.1)
        except ChildProcessError:
            break
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"tree: exit {code}, wall {wall:.1f} s, CPU {used.ru_utime:.1f} s user + "
          f"{used.ru_stime:.1f} s sys", file=sys.stderr)  # fmt: skip
    return code


if __name__ == "__main__":
    if sys.argv[1] == "tree":
        sys.exit(tree(sys.argv[2:]))
    print(summary(Path(sys.argv[1])))

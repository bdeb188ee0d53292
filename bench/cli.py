"""Cold start of the owner's commands, each a fresh process, end to end.

Three figures (the targets in brackets), each the median of --runs processes:

- `next_finished`: `crw flow next RUN --json` on a finished run of --calls
  (10,000) independent one-turn calls [150 ms];
- `status_finished`: `crw flow status RUN --json` on the same run [300 ms];
- `next_live`: `crw flow next RUN --json` on a live session run of
  crw/examples/demo.toml, its first step waiting (nobody takes it) [100 ms].

The finished run is real: `crw host sim serve` with instant turns, the
app-server backend, pool 8, its detached run process waited for (about 30 s at
10,000 calls on a quiet machine). The live run's owner thread is one the
simulated host starts (`sim/startOwner`). Every process is reaped by pid.

Each command is `python -m crw flow ...` with this checkout on PYTHONPATH.
Bytecode: an installed crw (pip compiles it at install) starts from cached
bytecode, while this checkout's editable crw under PYTHONDONTWRITEBYTECODE=1
compiles its modules in every process. The figures (`NAME_ms`) are taken the
installed way: bytecode written and read under a private PYTHONPYCACHEPREFIX,
after one untimed run of each command; `NAME_nocache_ms` the checkout's way.
`NAME_cpu_ms` is the median user+sys CPU of the process, `NAME_cpu_min_ms` the
least: on a shared machine they move less with the load than the wall time. With
`--against TREE` the same commands are also timed with the crw/ of TREE (e.g.
`git archive REV crw | tar -x -C TREE`) as `against_NAME_ms`: the samples of all
the commands are taken in turn, so a change of load hits each alike. TREE's
commands read a copy of the finished run's state directory: each crw keeps its
own replay snapshot beside the journal, and one that finds the other's format
would read the journal whole.
`load` is the load average (1, 5, 15 min) before and after.

    .venv/bin/python bench/cli.py [--runs N] [--calls N] [--against TREE] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio
from keep import state_tempdir

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from crw.bus.steps import list_bus  # noqa: E402
from crw.cli.run.start import start_run  # noqa: E402
from crw.engine.run.rundir import RunDir  # noqa: E402
from crw.host.connect import connect_host  # noqa: E402
from crw.host.sim.process import launch_sim, stop_sim  # noqa: E402
from crw.host.uri import parse_host_uri  # noqa: E402

POOL = 8
TARGETS = {"next_finished": 150, "status_finished": 300, "next_live": 100}
SCHEMA = {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}
LIVE_LIMIT = 30.0
"""Seconds the live run may take to publish its first step."""


def workflow(calls: int) -> str:
    """N independent one-turn nodes sharing the schema file s.json."""
    nodes = [
        f'\n[[node]]\nid = "n{i:05d}"\nrole = "explorer"\ntask = "Answer ok."\nschema = "s.json"\n'
        for i in range(calls)
    ]
    return f'name = "cold"\npool = {POOL}\n' + "".join(nodes)


async def host_request(socket: Path, method: str, params: dict[str, Any]) -> dict[str, Any]:
    async with connect_host(parse_host_uri(f"unix:{socket}")) as client:
        answer = await client.request(method, params)
    assert isinstance(answer, dict)
    return answer


def environ(state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRW_", "CODEX_"))}
    return env | {"CODEX_HOME": str(state / "codex-home")}


def prepare(state: Path) -> Path:
    """A state directory with a codex home; the host's socket path."""
    (state / "codex-home").mkdir(parents=True)
    (state / "codex-home" / "config.toml").write_text(f"[agents]\nmax_threads = {POOL + 1}\n")
    return state / "host.sock"


def reap(pid: int | None) -> None:
    """SIGKILL the run process `pid` if it still lives; reap it if it is our child."""
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def finished_run(state: Path, calls: int) -> str:
    """A completed app-server run of `calls` instant calls; its id."""
    socket = prepare(state)
    wf = state.parent / "cold.toml"
    wf.write_text(workflow(calls))
    (state.parent / "s.json").write_text(json.dumps(SCHEMA))
    host = launch_sim(socket, state / "codex-home", state / "host.log")
    pid = None
    try:
        trio.run(host_request, socket, "sim/script", {"match": {}, "behaviour": {"seconds": 0}})
        outcome = start_run(
            wf,
            backend="app-server",
            owner=None,
            host=f"unix:{socket}",
            state=str(state),
            environ=environ(state),
        )
        pid = outcome.pid
        assert pid is not None
        os.waitpid(pid, 0)
        pid = None
    finally:
        reap(pid)
        stop_sim(host)
    return outcome.spec.id


def live_run(state: Path) -> tuple[str, int, Callable[[], None]]:
    """A live session run of the demo with its first step waiting: its id, its
    process's pid, and what stops it and its host."""
    socket = prepare(state)
    host = launch_sim(socket, state / "codex-home", state / "host.log")
    pid = None

    def stop() -> None:
        reap(pid)
        stop_sim(host)

    try:
        owner = trio.run(host_request, socket, "sim/startOwner", {})["threadId"]
        outcome = start_run(
            REPO / "crw" / "examples" / "demo.toml",
            backend="session",
            owner=str(owner),
            host=f"unix:{socket}",
            state=str(state),
            environ=environ(state),
        )
        pid = outcome.pid
        assert pid is not None
        deadline = time.monotonic() + LIVE_LIMIT
        while not list_bus(outcome.run)[0]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the demo run published no step in {LIVE_LIMIT:g} s")
            time.sleep(0.05)
    except BaseException:
        stop()
        raise
    return outcome.spec.id, pid, stop


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall and user+sys CPU milliseconds of one fresh process running `argv` in
    `cwd` (not this checkout: `python -m` imports from its working directory first)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        argv, check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=env, cwd=cwd
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall * 1000, cpu * 1000


Command = tuple[list[str], dict[str, str]]


def measure(commands: dict[str, Command], runs: int, cwd: Path) -> dict[str, float]:
    """Each command once untimed (it writes its bytecode caches), then `runs` times,
    the commands in turn; the median wall (`NAME_ms`) and CPU (`NAME_cpu_ms`), and
    the least CPU (`NAME_cpu_min_ms`)."""
    for argv, env in commands.values():
        timed(argv, env, cwd)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, (argv, env) in commands.items():
            samples[name].append(timed(argv, env, cwd))
    figures = {}
    for name, taken in samples.items():
        figures[f"{name}_ms"] = round(statistics.median(wall for wall, _ in taken), 1)
        figures[f"{name}_cpu_ms"] = round(statistics.median(cpu for _, cpu in taken), 1)
        figures[f"{name}_cpu_min_ms"] = round(min(cpu for _, cpu in taken), 1)
    return figures


def commands(
    big: tuple[Path, str], live: tuple[Path, str], pyc: Path, against: Path | None
) -> dict[str, Command]:
    """What is timed: the three commands with bytecode caches, without them, and
    with --against the same with the crw of that tree (on PYTHONPATH), on a copy of
    the finished run."""
    (big_state, big_run), (live_state, live_run_id) = big, live

    def verbs_on(state: Path) -> dict[str, list[str]]:
        return {
            "next_finished": ["next", big_run, "--state", str(state), "--json"],
            "status_finished": ["status", big_run, "--state", str(state), "--json"],
            "next_live": ["next", live_run_id, "--state", str(live_state), "--json"],
        }

    verbs = verbs_on(big_state)
    base = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")
    }
    trees = {"": (REPO, verbs)}
    if against:
        copy = big_state.parent.with_name(big_state.parent.name + "-against") / "state"
        shutil.copytree(big_state, copy, symlinks=True, ignore=shutil.ignore_patterns("*.sock"))
        trees["against_"] = (against, verbs_on(copy))
    timed_commands: dict[str, Command] = {"python_bare": ([sys.executable, "-c", "pass"], base)}
    for prefix, (tree, tree_verbs) in trees.items():
        env = base | {"PYTHONPATH": str(tree), "PYTHONPYCACHEPREFIX": str(pyc)}
        for name, args in tree_verbs.items():
            timed_commands[prefix + name] = ([sys.executable, "-m", "crw", "flow", *args], env)
    nocache = base | {"PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    for name, args in verbs.items():
        timed_commands[f"{name}_nocache"] = ([sys.executable, "-m", "crw", "flow", *args], nocache)
    return timed_commands


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--against", type=Path, help="a tree holding another crw/ to compare")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with state_tempdir("crw-cli-") as tmp:
        big, live = Path(tmp) / "big" / "state", Path(tmp) / "live" / "state"
        big_run = finished_run(big, args.calls)
        live_id, _pid, stop = live_run(live)
        try:
            timed_commands = commands(
                (big, big_run), (live, live_id), Path(tmp) / "pyc", args.against
            )
            figures: dict[str, Any] = measure(timed_commands, args.runs, Path(tmp))
        finally:
            stop()
        journal = RunDir(big / "flow" / big_run).journal.stat().st_size
    figures |= {"calls": args.calls, "journal_mb": round(journal / 2**20, 1), "runs": args.runs}
    figures["load"] = [round(x, 2) for x in (*load_before, *os.getloadavg())]
    if args.json:
        print(json.dumps(figures))
        return
    print(f"cold start, median of {args.runs} fresh processes ({args.calls:,}-call run)")
    print(f"  {'':<16} {'ms':>7} {'cpu ms':>7} {'no bytecode':>12} {'target':>7}")
    for name, target in TARGETS.items():
        row = [figures[f"{name}_ms"], figures[f"{name}_cpu_ms"], figures[f"{name}_nocache_ms"]]
        print(f"  {name:<16} {row[0]:7.1f} {row[1]:7.1f} {row[2]:12.1f} {target:7}")
        if args.against:
            print(f"  {'  --against':<16} {figures['against_' + name + '_ms']:7.1f}", end="")
            print(f" {figures['against_' + name + '_cpu_ms']:7.1f}")
    print(f"  {'python -c pass':<16} {figures['python_bare_ms']:7.1f}")
    print(f"  load average before, after: {figures['load']}")


if __name__ == "__main__":
    main()

"""The CPU of starting each `crw` command the owner (and the suite) runs most.

Each command is a fresh `python -m crw ...` process, as a test or an owner agent
runs it: the median user+sys CPU of --runs processes (`os.wait4`'s rusage of
that process alone, not of a run process it launches detached), the modules it
imported, and which of the heavy packages it loaded and by which chain (`python
-X importtime`, once), the costliest first. The commands in turn, `runs` rounds,
after one untimed round, so a change of load hits each alike.

What each command does here (one state directory; a workflow that pauses at once
for want of a host, `host_wait = 0`, so its run process exits):

- start: starts a new run of it (the run process it launches is waited for,
  untimed, before the next command);
- _run: runs the paused run's process again (it pauses again);
- resume: resumes it (launches its process, waited for untimed);
- next, status, list, show, wait --timeout 0, pause (it is paused already),
  shadow (the paused run replayed);
- call: the call of a run with a call in its rows;
- dispatched: a report on a call with rows of a run no process holds (queued);
- answer: a call that is not held (refused);
- hook: the spawn hook on a shell tool call (allowed);
- sim serve: the simulated host until its socket exists, then SIGTERM.

With `--tree TREE` the commands run the crw/ of TREE (on PYTHONPATH; e.g. `git
archive REV crw | tar -x -C TREE`, then `python -m compileall -q TREE/crw`), and
with `--against TREE` those of TREE too, each command by each tree in turn, so
both see the same load: another revision's figures beside this one's.

    .venv/bin/python bench/startup.py [--runs N] [--only NAME,...] [--tree TREE]
        [--against TREE] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "crw" / "examples"
CRW = [sys.executable, "-m", "crw"]
HEAVY = (
    "cyclopts",
    "pydantic",
    "jsonschema",
    "trio",
    "pygit2",
    "psycopg",
    "rich",
    "filelock",
    "tomli",
    "regex",
    "wsproto",
    "inotify_simple",
    "starlette",
    "hypercorn",
    "jinja2",
    "crw.host.client",
    "crw.host.sim.server",
    "crw.engine.config.workflow",
    "crw.journal.rows",
)
"""The packages (and crw's own heavy modules) whose chain the table names."""
DEADLINE = 60.0
HOOK_INPUT = {
    "hook_event_name": "PreToolUse",
    "session_id": "owner",
    "turn_id": "turn-1",
    "tool_name": "shell",
    "tool_use_id": "call_1",
    "tool_input": {"command": ["ls"]},
}


@dataclass
class Command:
    argv: list[str]
    stdin: bytes = b""
    after: Any = None
    """Called with the command's stdout once it exited (untimed): waits for what it launched."""
    until_socket: Path | None = None
    """A server: timed from its start until this socket exists, then stopped."""
    samples: list[float] = field(default_factory=list)
    codes: set[int] = field(default_factory=set)


def environ(state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRW_", "CODEX_"))}
    return env | {"CODEX_HOME": str(state / "codex-home")}


def run_once(
    command: Command, env: dict[str, str], cwd: Path, flags: tuple[str, ...] = ()
) -> tuple[int, float, str]:
    """Run `command` once (the interpreter given `flags`): its exit code, its
    user+sys CPU seconds, its stderr."""
    argv = [command.argv[0], *flags, *command.argv[1:]]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=out, stderr=err, env=env, cwd=cwd
        )
        assert proc.stdin is not None
        if command.until_socket is not None:
            proc.stdin.close()
            deadline = time.monotonic() + DEADLINE
            while not command.until_socket.exists() and time.monotonic() < deadline:
                time.sleep(0.005)
            proc.send_signal(signal.SIGTERM)
        else:
            proc.stdin.write(command.stdin)
            proc.stdin.close()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read().decode(errors="replace")
    if command.until_socket is not None:
        command.until_socket.unlink(missing_ok=True)
    if command.after is not None:
        command.after(stdout)
    return proc.returncode, usage.ru_utime + usage.ru_stime, stderr


def wait_for_exit(run_dir: Path) -> None:
    """Until the run's process removed its process lock file (it does so last)."""
    deadline = time.monotonic() + DEADLINE
    while list(run_dir.glob("process.*.lock")):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the run process of {run_dir} did not exit")
        time.sleep(0.01)


def launched(out: bytes) -> None:
    """After a start or a resume with --json: wait for the run process it launched."""
    answer = json.loads(out)
    wait_for_exit(Path(answer["run_dir"]))


def prepare(root: Path) -> tuple[Path, Path, str, str]:
    """The state directory, the workflow, the paused run's id and the id of a run
    with a call in its rows that no process holds."""
    from crw.engine.config.workflow import load_workflow
    from crw.engine.run.rundir import RunDir
    from crw.engine.run.runspec import RunSpec, WorkflowRef, write_run_spec
    from crw.journal.log import encode_batch, encode_body
    from crw.journal.rows import RowModel, Started

    state = root / "state"
    (state / "codex-home").mkdir(parents=True)
    text = (EXAMPLES / "fix-issue.toml").read_text().replace("schemas/", f"{EXAMPLES}/schemas/")
    workflow = root / "fix-issue.toml"
    workflow.write_text(text + "\n[settings]\nhost_wait = 0\n")
    start = [*CRW, "flow", "start", str(workflow), "--owner", "o", "--state", str(state), "--json"]
    done = subprocess.run(
        start, capture_output=True, env=environ(state), cwd=root, check=True, timeout=DEADLINE
    )
    paused = json.loads(done.stdout)
    wait_for_exit(Path(paused["run_dir"]))
    queued = RunDir.of(state, "queued")
    queued.create()
    ref = WorkflowRef(path=str(workflow), digest=load_workflow(workflow).digest)
    write_run_spec(queued.run_json, RunSpec(id="queued", workflow=ref, backend="session", pool=2))
    rows = [
        Started(backend="session"),
        RowModel.model_validate({"row": "prepared", "call": "build.1"}),
    ]
    with open(queued.journal, "ab") as journal:
        journal.write(encode_batch(1, "2026-12-06T00:00:00Z", [encode_body(r) for r in rows]))
    return state, workflow, paused["run"], "queued"


def commands(root: Path, state: Path, workflow: Path, run: str, queued: str) -> dict[str, Command]:
    st = ["--state", str(state)]
    sock = root / "sim.sock"
    return {
        "python -c pass": Command([sys.executable, "-c", "pass"]),
        "flow start": Command(
            [*CRW, "flow", "start", str(workflow), "--owner", "o", *st, "--json"], after=launched
        ),
        "flow _run": Command([*CRW, "flow", "_run", run, *st]),
        "flow resume": Command([*CRW, "flow", "resume", run, *st, "--json"], after=launched),
        "flow next": Command([*CRW, "flow", "next", run, *st, "--json"]),
        "flow status": Command([*CRW, "flow", "status", run, *st, "--json"]),
        "flow list": Command([*CRW, "flow", "list", *st, "--json"]),
        "flow show": Command([*CRW, "flow", "show", run, *st]),
        "flow wait": Command([*CRW, "flow", "wait", run, "--timeout", "0", *st]),
        "flow pause": Command([*CRW, "flow", "pause", run, *st, "--json"]),
        "flow dispatched": Command(
            [
                *CRW,
                "flow",
                "dispatched",
                queued,
                "build.1",
                "--agent",
                "a",
                "--k",
                "1",
                "--attempt",
                "1",
                "--wait",
                "0",
                *st,
                "--json",
            ]
        ),
        "flow shadow": Command([*CRW, "flow", "shadow", run, *st, "--json"]),
        "flow call": Command([*CRW, "flow", "call", queued, "build.1", *st, "--json"]),
        "flow answer": Command([*CRW, "flow", "answer", run, "build.1", "--retry", *st, "--json"]),
        "flow hook spawn": Command(
            [*CRW, "flow", "hook", "spawn", *st], stdin=json.dumps(HOOK_INPUT).encode()
        ),
        "host sim serve": Command(
            [*CRW, "host", "sim", "serve", "--socket", str(sock)], until_socket=sock
        ),
    }


def import_chains(command: Command, env: dict[str, str], cwd: Path) -> tuple[int, list[str]]:
    """The modules `command` imports (`-X importtime`, one run) and, for each heavy
    package it loads, its cumulative import time and the chain that first imported
    it, the costliest first."""
    _code, _cpu, err = run_once(command, env, cwd, ("-X", "importtime"))
    rows: list[tuple[int, int, str]] = []  # cumulative us, depth, name
    for line in err.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, total, name = line[len("import time:") :].split("|")
        depth = (len(name) - len(name.lstrip())) // 2
        rows.append((int(total), depth, name.strip()))
    chains: list[tuple[int, str]] = []
    for heavy in HEAVY:
        for i, (us, depth, name) in enumerate(rows):
            if name == heavy or name.startswith(heavy + "."):
                chain = [name]
                for later_us, later_depth, later in rows[i + 1 :]:
                    if later_depth < depth:
                        chain.append(later)
                        depth = later_depth
                        if later == heavy:
                            us = later_us
                chain.reverse()
                top = next(k for k, m in enumerate(chain) if m == heavy or m.startswith(heavy))
                chains.append((us, " > ".join(chain[: top + 1])))
                break
    chains.sort(reverse=True)
    return len(rows), [f"{us / 1000:6.1f} ms  {chain}" for us, chain in chains]


def measure(
    trees: dict[str, dict[str, str]], timed: dict[str, dict[str, Command]], runs: int, root: Path
) -> dict[str, dict[str, Any]]:
    """Each command of each tree once untimed (caches warm, the run paused again),
    then `runs` rounds, each command run by each tree in turn (one load for both);
    per tree and command: the median and least CPU, exit codes, modules, chains."""
    names = list(next(iter(timed.values())))
    for name in names:
        for label, env in trees.items():
            run_once(timed[label][name], env, root)
    for _ in range(runs):
        for name in names:
            for label, env in trees.items():
                code, cpu, _err = run_once(timed[label][name], env, root)
                timed[label][name].samples.append(cpu)
                timed[label][name].codes.add(code)
    figures: dict[str, dict[str, Any]] = {}
    for label, env in trees.items():
        figures[label] = {}
        for name, command in timed[label].items():
            modules, chains = import_chains(command, env, root)
            figures[label][name] = {
                "cpu_ms": round(1000 * statistics.median(command.samples), 1),
                "cpu_min_ms": round(1000 * min(command.samples), 1),
                "exit": sorted(command.codes),
                "modules": modules,
                "chains": chains,
            }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", help="the commands to time, by name, comma-separated")
    parser.add_argument("--chains", type=int, default=4, help="chains shown a command")
    parser.add_argument("--tree", type=Path, help="a tree holding the crw/ to time")
    parser.add_argument("--against", type=Path, help="a tree whose crw/ is timed beside it")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="crw-startup-") as tmp:
        root = Path(tmp)
        state, workflow, run, queued = prepare(root)
        env = environ(state)
        trees = {"crw": env if args.tree is None else env | {"PYTHONPATH": str(args.tree)}}
        if args.against is not None:
            trees["against"] = env | {"PYTHONPATH": str(args.against.resolve())}
        timed: dict[str, dict[str, Command]] = {}
        for label in trees:
            timed[label] = commands(root, state, workflow, run, queued)
            if args.only:
                wanted = tuple(args.only.split(","))
                timed[label] = {n: c for n, c in timed[label].items() if n.endswith(wanted)}
        figures = measure(trees, timed, args.runs, root)
    load = [round(x, 2) for x in (*load_before, *os.getloadavg())]
    if args.json:
        print(json.dumps({"load": load} | figures, indent=2))
        return
    print(f"load (1 min) before {load[0]:.2f}, after {load[3]:.2f}; median of {args.runs} runs")
    mine = figures["crw"]
    other = figures.get("against")
    head = f"{'command':18s} {'exit':>6s} {'CPU ms':>7s} {'min':>6s} {'modules':>7s}"
    print(head + (f" {'against':>8s} {'modules':>7s}" if other else ""))
    for name, f in mine.items():
        codes = ",".join(map(str, f["exit"]))
        line = f"{name:18s} {codes:>6s} {f['cpu_ms']:7.1f} {f['cpu_min_ms']:6.1f} {f['modules']:7d}"
        if other:
            line += f" {other[name]['cpu_ms']:8.1f} {other[name]['modules']:7d}"
        print(line)
    for name, f in mine.items():
        if f["chains"]:
            print(f"\n{name}:")
            for chain in f["chains"][: args.chains]:
                print(f"  {chain}")


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()

"""How a run's cost grows with its number of calls, on the simulated host.

For each size N, a workflow of N independent one-turn nodes, pool 8, every turn
instant (`sim/script {"match": {}, "behaviour": {"seconds": 0}}`), timed from the
start of the run (`start_run`, what `crw flow start` calls, in-process) to its
`ended` row. The processes are real: `crw host sim serve` and the detached run
process, both reaped by pid when the size is done, whatever happens. With the
session backend the owner is played in-process (`crw flow next`'s function, the
subagents spawned on the host, each dispatch reported with the function `crw flow
dispatched` writes it with, the steps of one answer taken concurrently), so
neither the CLI's start-up nor an owner's pace is what is measured: what those
functions import is imported before the timer starts. crw's modules are compiled
first (`compileall`, what pip does at install and `make bench` does), so that
where PYTHONDONTWRITEBYTECODE is set a run process does not compile them again
at each start.

Per size: wall_s, calls_per_s, per_call_ms, rows, run_rss_mb (the run process's
own peak RSS, its VmHWM looked at every 0.25 s), run_cpu_s (the run process's
user+sys CPU seconds, from wait4's rusage; its children, if any, are not counted),
host_requests_per_call (app-server methods the host served, `sim/stats`, less
the sim/* control methods the owner uses), host_notifications_per_call (the
notifications the host posted to its connections, `sim/stats`: one a connection
it went to),
journal_bytes_per_call (the journal lines that name the call, mean over calls),
flat_ratio (per_call_ms over the smallest size's). A size that does not end
within --limit seconds is reported as {"skipped": why}; the larger ones are then
skipped too.

    .venv/bin/python bench/scale.py [--json] [--sizes 100,1000,10000]
        [--backend app-server|session|both] [--limit SECONDS] [--tmp DIR] [--db URL]

With --db URL each run keeps its journal in that PostgreSQL database (`CRW_DB`);
bench/pg.py runs the App Server sizes so on its throwaway cluster.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import datetime as dt
import json
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import inotify_simple  # noqa: F401 - what the replies' watch imports, before the timer
import pygit2  # noqa: F401 - what start_run finds the workflow's repository with
import trio
from keep import state_tempdir

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from crw.bus.dirwatch import DirWatch  # noqa: E402
from crw.bus.inbox import Report, take_reply, write_report  # noqa: E402
from crw.cli.demo.scripted_owner import DONE_STATES, IDLE_PAUSE, ScriptedOwner  # noqa: E402
from crw.cli.owner.dispatched import POLL  # noqa: E402
from crw.cli.owner.next import next_command  # noqa: E402, F401 - imported before the timer
from crw.cli.run.start import start_run  # noqa: E402
from crw.clock import system_clock  # noqa: E402
from crw.engine.run.rundir import RunDir  # noqa: E402
from crw.errors import CrwError  # noqa: E402
from crw.host.client import HostClient  # noqa: E402
from crw.host.connect import connect_host  # noqa: E402
from crw.host.sim.process import launch_sim, stop_sim  # noqa: E402
from crw.host.uri import parse_host_uri  # noqa: E402
from crw.journal.stores import store_at  # noqa: E402
from crw.settings import MAX_FILE_BYTES, MAX_FILE_BYTES_ENV  # noqa: E402

POOL = 8
SIZES = (100, 1000, 10000)
LIMIT = 300.0
"""Seconds a size may take, start to ended, before it is skipped."""
REAP_POLL = 0.02
KEYS = {"app-server": "app_server", "session": "session"}


SCHEMA = {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}


def workflow(calls: int) -> str:
    """N independent nodes, each a one-turn call, pool 8. Their schema is the file
    s.json (an inline schema per node makes 10,000 nodes larger than a workflow
    file may be)."""
    nodes = [
        f'\n[[node]]\nid = "n{i:05d}"\nrole = "explorer"\ntask = "Answer ok."\nschema = "s.json"\n'
        for i in range(calls)
    ]
    return f'name = "scale"\npool = {POOL}\n' + "".join(nodes)


REPLY_LOOK = 0.5
"""Seconds between two looks at every awaited reply when the watch saw none (a
reply whose event was lost is still found)."""


class Replies:
    """The owner's waits for the run's replies to its reports, all on one watch of
    replies/ (`crw.bus.dirwatch`) in the owner's Trio loop, as `crw flow dispatched`
    waits for its one (read when its file is renamed in): a wait costs no worker
    thread nor watch of its own. Without a watch, every awaited reply is looked
    for every POLL."""

    def __init__(self, run: RunDir) -> None:
        self.run = run
        self.awaited: dict[str, trio.Event] = {}
        """The event of each report whose reply is awaited, set when a file of its
        name arrives (or a look of every one is due)."""

    async def serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Watch replies/ (once it exists) and wake the waits whose reply arrived."""
        watch = DirWatch.open(self.run.replies)
        task_status.started()
        try:
            while True:
                if watch is None:
                    await trio.sleep(POLL)
                    names = None
                    watch = DirWatch.open(self.run.replies)
                else:
                    names = await watch.arrived(REPLY_LOOK)
                for report_id, event in list(self.awaited.items()):
                    if not names or f"{report_id}.json" in names:
                        event.set()
        finally:
            if watch is not None:
                watch.close()

    async def reply(self, report: Report, wait: float) -> dict[str, Any]:
        """The run's reply to `report` (written after this wait began), its report's
        members first as `dispatched` prints them; `queued` after `wait` seconds."""
        head = {"id": report.id, "run": report.run, "call": report.call, "k": report.k}
        head |= {"attempt": report.attempt, "agent_id": report.agent_id}
        try:
            with trio.move_on_after(wait):
                while True:
                    event = self.awaited[report.id] = trio.Event()
                    got = take_reply(self.run, report.id)
                    if got is not None:
                        return head | got
                    await event.wait()
            return head | {"reply": "queued", "reason": f"no reply within {wait:g} s"}
        finally:
            self.awaited.pop(report.id, None)


class FastOwner(ScriptedOwner):
    """The scripted owner, taking the steps of one answer concurrently, each
    report's reply waited for on one watch of replies/ for all (`Replies`), as
    `crw flow dispatched` waits for its one."""

    async def play_all(self) -> None:
        async with self.watching():
            while True:
                answer = await self.next()
                async with trio.open_nursery() as nursery:
                    for step in answer["steps"]:
                        nursery.start_soon(self.take, step)
                if answer["state"] in DONE_STATES:
                    return
                if not answer["steps"]:
                    await trio.sleep(IDLE_PAUSE)

    @asynccontextmanager
    async def watching(self) -> AsyncIterator[None]:
        """The replies' watch (`Replies`) for the block, begun before it."""
        self.replies = Replies(RunDir(Path(self.state or "") / "flow" / self.run))
        async with trio.open_nursery() as nursery:
            await nursery.start(self.replies.serve)
            yield
            nursery.cancel_scope.cancel()

    async def dispatched(self, step: dict[str, Any], agent: str) -> dict[str, Any]:
        """The report written and its reply awaited as `crw flow dispatched` does,
        without the command's checks of the run (a read of its whole journal each,
        what a fresh `dispatched` process pays but not what is measured here)."""
        report = Report.new(
            self.run, step["call"], step["k"], step["attempt"], agent, system_clock()
        )
        write_report(self.replies.run, report)  # the watch began before: no reply missed
        return await self.replies.reply(report, self.dispatch_wait)


@dataclass
class Trial:
    """One size on one backend: where it runs, and what was seen of its run process."""

    backend: str
    calls: int
    state: Path
    pid: int | None = None
    rss_kb: int | None = None
    cpu_s: float | None = None
    sys_s: float | None = None
    """The kernel's part of cpu_s (ru_stime)."""
    db: str | None = None
    """The database that keeps the run's journal (`CRW_DB`), None: the file."""
    run_id: str = ""
    host_pid: int | None = None
    """The simulated host's process, while it runs."""
    served: Counter[str] = field(default_factory=Counter)
    notified: Counter[str] = field(default_factory=Counter)
    """Notifications the host posted during the run, by method (one a connection)."""

    @property
    def socket(self) -> Path:
        return self.state / "host.sock"

    def environ(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CRW_", "CODEX_"))}
        return env | {"CODEX_HOME": str(self.state / "codex-home")} | _db_env(self.db)


def _db_env(db: str | None) -> dict[str, str]:
    return {} if db is None else {"CRW_DB": db}


def journal_bytes(run: RunDir) -> bytes:
    """The run's journal, from whichever store keeps it."""
    return store_at(run.journal).read_from(0)


async def drive(
    trial: Trial, limit: float, started: Callable[[Trial], None] | None = None
) -> float:
    """Start the run, play its owner if it is a session run, wait for its process
    to exit; the seconds from the start to its ended row. `started` (a blocking
    function) is called with the trial once its run process is up, before the
    owner plays (`bench/session_syncs.py` attaches strace there)."""
    wf = trial.state.parent / "scale.toml"
    wf.write_text(workflow(trial.calls))
    (wf.parent / "s.json").write_text(json.dumps(SCHEMA))
    async with host_client(trial.socket) as client:
        await client.request("sim/script", {"match": {}, "behaviour": {"seconds": 0}})
        owner = None
        if trial.backend == "session":
            owner = str((await client.request("sim/startOwner", {}))["threadId"])
            await busy(client, owner)
        before = await client.request("sim/stats", {})
        t0 = time.time()
        with trio.fail_after(limit):
            await trio.to_thread.run_sync(start, trial, wf, owner)
            if started is not None:
                await trio.to_thread.run_sync(started, trial)
            async with trio.open_nursery() as nursery:
                if owner is not None:
                    player = FastOwner(
                        client, trial.run_id, owner, state=str(trial.state), wait=1.0
                    )
                    nursery.start_soon(player.play_all)
                await wait_exit(trial)
                nursery.cancel_scope.cancel()
        after = await client.request("sim/stats", {})
    trial.served = Counter(after["requests"]) - Counter(before["requests"])
    trial.notified = Counter(after["notifications"]) - Counter(before["notifications"])
    return ended_at(RunDir(trial.state / "flow" / trial.run_id)) - t0


OWNER_TURN = "crw-flow-op: owner/t1-a1\nTake the run's steps with crw flow next."
"""The owner's own turn: a real owner takes the steps from inside a turn of its
own (its shell runs `crw flow next --wait`), so the run sees it busy and stages
no wake at each publication."""


async def busy(client: HostClient, owner: str) -> None:
    """Start the owner's turn, which lasts for the whole trial."""
    hold = {"match": {"marker": "owner/*"}, "behaviour": {"seconds": 10**9}}
    await client.request("sim/script", hold)
    text = {"type": "text", "text": OWNER_TURN, "text_elements": []}
    await client.request("turn/start", {"threadId": owner, "input": [text]})


@asynccontextmanager
async def host_client(socket: Path) -> AsyncIterator[HostClient]:
    """A client of the host on `socket` (`launch_sim` returned once it listens)."""
    async with connect_host(parse_host_uri(f"unix:{socket}"), follows=frozenset()) as client:
        yield client


def start(trial: Trial, wf: Path, owner: str | None, env: Mapping[str, str] | None = None) -> None:
    """`crw flow start`'s work (with `env` added to the run process's environment);
    the run process's pid is kept before anything can cancel the bench, so it is
    reaped whatever happens next. A workflow over the default file limit (past
    some 13,000 nodes) is started with `$CRW_MAX_FILE_BYTES` set to its size."""
    size = wf.stat().st_size
    limit = {MAX_FILE_BYTES_ENV: str(size)} if size > MAX_FILE_BYTES else {}
    outcome = start_run(
        wf,
        backend=trial.backend,
        owner=owner,
        host=f"unix:{trial.socket}",
        state=str(trial.state),
        environ=trial.environ() | limit | dict(env or {}),
    )
    trial.pid, trial.run_id = outcome.pid, outcome.spec.id


HWM_POLL = 0.25
"""Seconds between two looks at the run process's own peak RSS (`VmHWM`)."""


def own_peak_kb(pid: int) -> int | None:
    """The process's own peak RSS so far (`VmHWM`, KiB); None once it is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


async def wait_exit(trial: Trial) -> None:
    """Until the run process exits: reap it, keep its peak RSS (KiB) and its CPU
    seconds (ru_utime + ru_stime).

    The peak is the process's own `VmHWM`, looked at every HWM_POLL while it runs
    (its last HWM_POLL before it exits are not seen), not wait4's ru_maxrss:
    Linux keeps in that the RSS of the process that forked it, as it was when the
    child exec'd, and this bench has loaded the workflow (up to 240 MB at
    100,000 nodes) before it launches the run. Without /proc, ru_maxrss.
    It sleeps on the process's pidfd (Linux), else looks every REAP_POLL."""
    assert trial.pid is not None
    try:
        pidfd: int | None = os.pidfd_open(trial.pid)
    except (AttributeError, OSError):
        pidfd = None
    own: int | None = None
    try:
        while True:
            pid, _status, usage = os.wait4(trial.pid, os.WNOHANG)  # noqa: ASYNC222 - never blocks
            if pid:
                trial.rss_kb, trial.pid = own or usage.ru_maxrss, None
                trial.cpu_s = usage.ru_utime + usage.ru_stime
                trial.sys_s = usage.ru_stime
                return
            own = max(own or 0, own_peak_kb(trial.pid) or 0) or None
            if pidfd is None:
                await trio.sleep(REAP_POLL)
            else:
                with trio.move_on_after(HWM_POLL):
                    await trio.lowlevel.wait_readable(pidfd)
    finally:
        if pidfd is not None:
            with contextlib.suppress(RuntimeError):
                trio.lowlevel.notify_closing(pidfd)
            os.close(pidfd)


def reap(trial: Trial) -> None:
    """SIGKILL the run process if it still lives, and any other process that names
    the trial's state directory (one an owner's `next` resumed); reap our children."""
    pids = [trial.pid] if trial.pid is not None else []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if str(trial.state).encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    trial.pid = None


def journal_lines(run: RunDir) -> list[tuple[dict[str, Any], int]]:
    """Each journal line as its object and its size in bytes (newline included)."""
    return [(json.loads(line), len(line) + 1) for line in journal_bytes(run).splitlines()]


def ended_at(run: RunDir) -> float:
    for line in reversed(journal_bytes(run).splitlines()):  # the ended row is last
        row = json.loads(line)
        if row["row"] == "ended":
            if row.get("status") != "completed":
                raise RuntimeError(f"the run ended {row.get('status')}, not completed")
            return dt.datetime.fromisoformat(row["at"].replace("Z", "+00:00")).timestamp()
    raise RuntimeError(f"the run's process exited without an ended row; see {run.log}")


def figures(trial: Trial, wall: float) -> dict[str, Any]:
    lines = journal_lines(RunDir(trial.state / "flow" / trial.run_id))
    per_call: Counter[str] = Counter()
    completed = set()
    for row, size in lines:
        if "call" in row:
            per_call[row["call"]] += size
        if row["row"] == "completed":
            completed.add(row["call"])
    requests = sum(n for method, n in trial.served.items() if not method.startswith("sim/"))
    n = trial.calls
    return {
        "wall_s": round(wall, 3),
        "calls_per_s": round(n / wall, 1),
        "per_call_ms": round(wall * 1000 / n, 3),
        "rows": len(lines),
        "run_rss_mb": round((trial.rss_kb or 0) / 1024, 1),
        "run_cpu_s": round(trial.cpu_s or 0.0, 2),
        "host_requests_per_call": round(requests / n, 2),
        "host_notifications_per_call": round(sum(trial.notified.values()) / n, 2),
        "journal_bytes_per_call": round(sum(per_call[c] for c in completed) / len(completed)),
    }


@contextlib.contextmanager
def trial_with_host(
    backend: str,
    calls: int,
    where: Path,
    prefix: str,
    kept: contextlib.ExitStack | None = None,
    db: str | None = None,
) -> Iterator[Trial]:
    """A trial in a fresh state directory under `where` (named `prefix`...) with a
    fresh simulated host (its agents' max_threads the pool's and one: a session
    pool of 8 too); the host stopped and the trial's processes reaped at the end,
    whatever happens. The state directory is removed then too, or, with `kept`,
    when `kept` closes: on ext4 without a journal (this project's machines) a
    create scans past every inode its block group freed in the last 60 s (360 s
    while the inode table is not yet written back), so removing one size's
    thousands of files slows the next size's creates; the bench removes them all
    at its end instead."""
    with contextlib.ExitStack() as own:
        tmp = (kept or own).enter_context(state_tempdir(prefix, where))
        trial = Trial(backend, calls, Path(tmp) / "state", db=db)
        trial.state.mkdir()
        (trial.state / "codex-home").mkdir()
        (trial.state / "codex-home" / "config.toml").write_text(
            f"[agents]\nmax_threads = {POOL + 1}\n"
        )
        host = launch_sim(trial.socket, trial.state / "codex-home", trial.state / "host.log")
        trial.host_pid = host.pid
        try:
            yield trial
        finally:
            stop_sim(host)
            reap(trial)


def measure(
    backend: str,
    calls: int,
    limit: float,
    where: Path,
    kept: contextlib.ExitStack,
    db: str | None = None,
) -> dict[str, Any]:
    """One size on one backend, in a fresh state directory under `where` (removed
    when `kept` closes) with a fresh host; `db`: the journal in that database."""
    with trial_with_host(backend, calls, where, "crw-scale-", kept, db) as trial:
        try:
            wall = trio.run(drive, trial, limit)
        except trio.TooSlowError:
            return {"skipped": f"did not end within {limit:g} s{progress(trial)}"}
        except (RuntimeError, CrwError) as err:
            return {"skipped": str(err)}
        return figures(trial, wall)


def progress(trial: Trial) -> str:
    """` (N of M calls completed)` once the run has a journal, else nothing."""
    run = RunDir(trial.state / "flow" / trial.run_id)
    if not trial.run_id or not run.run_json.exists():
        return ""
    done = sum(1 for row, _ in journal_lines(run) if row["row"] == "completed")
    return f" ({done} of {trial.calls} calls completed)"


def run_backend(
    backend: str,
    sizes: list[int],
    limit: float,
    where: Path,
    kept: contextlib.ExitStack,
    db: str | None = None,
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for calls in sizes:
        if any("skipped" in r for r in results.values()):
            results[str(calls)] = {"skipped": "a smaller size did not end in time"}
            continue
        results[str(calls)] = measure(backend, calls, limit, where, kept, db)
    base = results[str(sizes[0])]
    for result in results.values():
        if "per_call_ms" in result and "per_call_ms" in base:
            result["flat_ratio"] = round(result["per_call_ms"] / base["per_call_ms"], 2)
    return results


def table(results: dict[str, dict[str, Any]]) -> str:
    from rich.console import Console
    from rich.table import Table

    names = ["wall_s", "calls_per_s", "per_call_ms", "rows", "run_rss_mb", "run_cpu_s"]
    names += ["host_requests_per_call", "host_notifications_per_call"]
    names += ["journal_bytes_per_call", "flat_ratio"]
    grid = Table("backend", "calls", *names, title="scale (simulated host, instant turns)")
    for backend, sizes in results.items():
        for calls, result in sizes.items():
            if "skipped" in result:
                grid.add_row(backend, calls, f"skipped: {result['skipped']}")
            else:
                grid.add_row(backend, calls, *(str(result.get(n, "-")) for n in names))
    console = Console(width=160)
    with console.capture() as captured:
        console.print(grid)
    return captured.get()


def add_tmp_argument(parser: argparse.ArgumentParser) -> None:
    """`--tmp DIR`: where a bench's state directories go."""
    parser.add_argument(
        "--tmp",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where the state directories go (the system temp directory: outside every git "
        "checkout, so the runs' calls work in plain directories, not worktrees of this one)",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--backend", choices=["app-server", "session", "both"], default="both")
    parser.add_argument("--limit", type=float, default=LIMIT, help="seconds per size")
    parser.add_argument("--db", help="a PostgreSQL URL: the runs' journals there (CRW_DB)")
    add_tmp_argument(parser)
    args = parser.parse_args()
    try:
        sizes = sorted({int(s) for s in args.sizes.split(",")})
    except ValueError:
        parser.error(f"--sizes {args.sizes}: pass sizes as 100,1000,10000")
    if not sizes or sizes[0] < 1:
        parser.error(f"--sizes {args.sizes}: every size must be at least 1")
    backends = ["app-server", "session"] if args.backend == "both" else [args.backend]
    compileall.compile_dir(REPO / "crw", quiet=1)  # changed files only; see the docstring
    with contextlib.ExitStack() as kept:  # every size's state, removed at the end
        results = {
            KEYS[b]: run_backend(b, sizes, args.limit, args.tmp, kept, args.db) for b in backends
        }
    print(json.dumps(results) if args.json else table(results), end="\n")


if __name__ == "__main__":
    main()

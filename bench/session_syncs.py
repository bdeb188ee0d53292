"""What a session call costs the run process in syncs and files, on the simulated host.

For each size N, the session run of `bench/scale.py` (N independent one-turn
calls, pool 8, instant turns, the owner played in-process), twice in fresh
state directories: once as it runs, for calls_per_s, cpu_ms_per_call (the run
process's user+sys CPU, from wait4; sys_share the kernel's part of it),
owner_cpu_ms_per_call (this process's CPU over the run: the owner played here, its
threads included), host_cpu_ms_per_call (the simulated host's, from /proc) and
run_rss_mb (its peak RSS); and once (sizes in --trace-sizes) with `strace -f -y`
attached to the run process once it is up and before the owner takes a step,
for what the run process asks the kernel a call: syncs_per_call (fsync and
fdatasync), split by the file synced (journal: the journal's files; steps: under
steps/; other), opens_per_call (openat), creates_per_call (an openat with O_CREAT
that succeeded), mkdirs_per_call (a mkdir that made a directory; mkdir_eexist_per_call
one that found it there) and renames_per_call. The traced run is slower (every
traced call stops the process); only its counts are reported. The counts are
strace's own lines, read back from its output file. strace must be on PATH
(`make bench-syncs` says how to get it).

    .venv/bin/python bench/session_syncs.py [--json] [--sizes 1000,10000]
        [--trace-sizes 1000] [--limit SECONDS] [--tmp DIR]
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from scale import (  # noqa: E402
    REPO,
    Trial,
    add_tmp_argument,
    drive,
    figures,
    progress,
    trial_with_host,
)

SIZES = (1000,)
LIMIT = 600.0
ATTACH_WAIT = 30.0
"""Seconds strace has to attach to the run process."""
TRACED = "fsync,fdatasync,openat,mkdir,mkdirat,rename,renameat,renameat2"
_LINE = re.compile(r"^(\d+)\s+(.*)$")
_CALL = re.compile(r"^(\w+)\((.*)$")
_RESUMED = re.compile(r"^<\.\.\. (\w+) resumed>(.*)$")
_RESULT = re.compile(r"\)\s+=\s+(-?\d+)")
_FD_PATH = re.compile(r"^\d+<([^>]*)>")


class Strace:
    """strace attached to a trial's run process (`attach`), its output in `out`."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.proc: subprocess.Popen[bytes] | None = None

    def attach(self, trial: Trial) -> None:
        assert trial.pid is not None
        argv = ["strace", "-f", "-qq", "-y", "-e", f"trace={TRACED}", "-o", str(self.out)]
        self.proc = subprocess.Popen(
            [*argv, "-p", str(trial.pid)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + ATTACH_WAIT
        while _tracer(trial.pid) == 0:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"strace did not attach to pid {trial.pid}")
            time.sleep(0.01)

    def wait(self) -> None:
        """Until strace has written all it saw (its tracee is gone by now)."""
        if self.proc is not None:
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _tracer(pid: int) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("TracerPid:"):
                return int(line.split()[1])
    return 0


def calls_of(out: Path) -> list[tuple[str, str]]:
    """Each traced call as (name, its arguments and result), an unfinished call
    joined with its resumption."""
    pending: dict[str, tuple[str, str]] = {}
    calls: list[tuple[str, str]] = []
    for raw in out.read_text(errors="replace").splitlines():
        line = _LINE.match(raw)
        if line is None:
            continue
        pid, text = line.groups()
        resumed = _RESUMED.match(text)
        if resumed is not None:
            name, head = pending.pop(pid, (resumed[1], ""))
            calls.append((name, head + resumed[2]))
            continue
        call = _CALL.match(text)
        if call is None:  # a signal or an exit line
            continue
        if text.endswith("<unfinished ...>"):
            pending[pid] = (call[1], call[2].removesuffix("<unfinished ...>"))
        else:
            calls.append((call[1], call[2]))
    return calls


def counts(out: Path, n: int) -> dict[str, Any]:
    """The per-call figures of one strace output (see the module docstring)."""
    seen: Counter[str] = Counter()
    syncs: Counter[str] = Counter()
    for name, rest in calls_of(out):
        result = _RESULT.search(rest)
        ok = result is not None and int(result[1]) >= 0
        if name in ("fsync", "fdatasync"):
            where = _FD_PATH.match(rest)
            path = where[1] if where else ""
            kind = "steps" if "/steps" in path else "journal" if "journal" in path else "other"
            syncs[kind] += 1
        elif name == "openat":
            seen["opens"] += 1
            seen["creates"] += ok and "O_CREAT" in rest
        elif name in ("mkdir", "mkdirat"):
            seen["mkdirs" if ok else "mkdir_eexist"] += ok or "EEXIST" in rest
        elif name.startswith("rename"):
            seen["renames"] += 1
    per = {k: round(v / n, 2) for k, v in syncs.items()}
    return {
        "syncs_per_call": round(sum(syncs.values()) / n, 2),
        "syncs_by_file_per_call": dict(sorted(per.items())),
        "opens_per_call": round(seen["opens"] / n, 2),
        "creates_per_call": round(seen["creates"] / n, 2),
        "mkdirs_per_call": round(seen["mkdirs"] / n, 2),
        "mkdir_eexist_per_call": round(seen["mkdir_eexist"] / n, 2),
        "renames_per_call": round(seen["renames"] / n, 2),
    }


def measure(calls: int, traced: bool, limit: float, where: Path, kept: contextlib.ExitStack) -> Any:
    with trial_with_host("session", calls, where, "crw-syncs-", kept) as trial:
        strace = Strace(trial.state.parent / "strace.out")
        host_before, owner_before = process_cpu(trial.host_pid), owner_cpu()
        try:
            wall = trio.run(drive, trial, limit, strace.attach if traced else None)
        except trio.TooSlowError:
            return {"skipped": f"did not end within {limit:g} s{progress(trial)}"}
        finally:
            strace.wait()
        host_cpu, owner = process_cpu(trial.host_pid) - host_before, owner_cpu() - owner_before
        if traced:
            return counts(strace.out, calls)
        got = figures(trial, wall)
        return {
            "calls_per_s": got["calls_per_s"],
            "wall_s": got["wall_s"],
            "cpu_ms_per_call": round((trial.cpu_s or 0.0) * 1000 / calls, 3),
            "sys_share": round((trial.sys_s or 0.0) / (trial.cpu_s or 1.0), 2),
            "owner_cpu_ms_per_call": round(owner * 1000 / calls, 3),
            "host_cpu_ms_per_call": round(host_cpu * 1000 / calls, 3),
            "run_rss_mb": got["run_rss_mb"],
            "load_1min": round(os.getloadavg()[0], 2),
        }


def process_cpu(pid: int | None) -> float:
    """The user+sys CPU seconds of a live process (`/proc/<pid>/stat`), 0 if none."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def owner_cpu() -> float:
    """This process's user+sys CPU seconds, its threads included: the owner is
    played here (`bench/scale.py`'s FastOwner), with the host's client."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--trace-sizes", default="1000", help="sizes also run under strace")
    parser.add_argument("--limit", type=float, default=LIMIT, help="seconds per run")
    add_tmp_argument(parser)
    args = parser.parse_args()
    try:
        sizes = sorted({int(s) for s in args.sizes.split(",")})
        traced = {int(s) for s in args.trace_sizes.split(",") if s}
    except ValueError:
        parser.error("--sizes and --trace-sizes take sizes as 1000,10000")
    if traced and shutil.which("strace") is None:
        parser.error("strace is not on PATH: apt-get install strace, or pass --trace-sizes ''")
    compileall.compile_dir(REPO / "crw", quiet=1)
    results: dict[str, Any] = {}
    with contextlib.ExitStack() as kept:
        for calls in sizes:
            result = measure(calls, False, args.limit, args.tmp, kept)
            if calls in traced and "skipped" not in result:
                result |= measure(calls, True, args.limit, args.tmp, kept)
            results[str(calls)] = result
    if args.json:
        print(json.dumps(results))
        return
    for size, figures_of in results.items():
        print(f"{size} calls: " + ", ".join(f"{k} {v}" for k, v in figures_of.items()))


if __name__ == "__main__":
    main()

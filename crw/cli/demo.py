"""`crw flow demo`: a whole run, end to end, on the simulated host.

It starts the simulated host (`crw host sim serve`) in a temporary state
directory, scripts one call to answer against its schema first so that the run
sends its repair turn, starts `examples/demo.toml` on the app-server backend
(the detached run process opens a thread per call), follows the run's journal
row by row, and prints a summary table. The session backend's demo, in which a
scripted owner spawns the subagents, comes with the session-call issue.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from crw.cli.output import emit
from crw.cli.start import start_run
from crw.cli.status import status_payload
from crw.errors import InputError, RefusedError
from crw.journal.log import read_journal
from crw.journal.replay import replay

REPAIRED_CALL = "build.1"
RUN_TIMEOUT = 120.0


def demo_workflow() -> Path:
    """examples/demo.toml of the source tree crw runs from."""
    path = Path(__file__).resolve().parents[2] / "examples" / "demo.toml"
    if not path.is_file():
        raise InputError(f"the demo workflow {path} is missing; run the demo from a crw checkout")
    return path


def demo_command(*, state: str | None, json: bool) -> int:
    state_dir = Path(state) if state else Path(tempfile.mkdtemp(prefix="crw-demo-"))
    state_dir.mkdir(parents=True, exist_ok=True)
    socket = state_dir / "host.sock"
    say = (lambda line: None) if json else print
    say(f"crw flow demo: state {state_dir}")
    host = _start_sim(state_dir, socket)
    try:
        import trio

        trio.run(_script_repair, socket)
        say(f"  simulated host pid {host.pid} on unix:{socket}; {REPAIRED_CALL} will need a repair")
        outcome = start_run(
            demo_workflow(),
            backend="app-server",
            owner=None,
            host=f"unix:{socket}",
            state=str(state_dir),
            environ=os.environ,
        )
        say(f"  run {outcome.spec.id} (pid {outcome.pid}): {outcome.run.root}")
        rows = _follow(outcome.run.journal, say)
    finally:
        host.send_signal(signal.SIGTERM)
        host.wait(timeout=10)
    run = replay(rows)
    payload: dict[str, Any] = status_payload(outcome.spec.id, run)
    payload |= {"run_dir": str(outcome.run.root), "pid": outcome.pid}
    emit(json, payload, _summary(rows))
    return 0 if run.ended_status == "completed" else 1


def _start_sim(state_dir: Path, socket: Path) -> subprocess.Popen[bytes]:
    log = open(state_dir / "host.log", "ab")  # noqa: SIM115 - the child keeps it
    host = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "crw",
            "host",
            "sim",
            "serve",
            "--socket",
            str(socket),
            "--codex-home",
            str(state_dir / "codex-home"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 15
    while not socket.exists():
        if host.poll() is not None or time.monotonic() > deadline:
            host.kill()
            raise RefusedError(f"the simulated host did not start; see {state_dir / 'host.log'}")
        time.sleep(0.02)
    return host


async def _script_repair(socket: Path) -> None:
    from crw.host.connect import connect_host
    from crw.host.uri import parse_host_uri

    async with connect_host(parse_host_uri(f"unix:{socket}")) as client:
        behaviour = {"invalidFirst": True}
        await client.request(
            "sim/script", {"match": {"marker": f"{REPAIRED_CALL}/*"}, "behaviour": behaviour}
        )


def _follow(journal: Path, say: Any) -> list[dict[str, Any]]:
    """Print each row as the run commits it, until the run leaves running."""
    deadline = time.monotonic() + RUN_TIMEOUT
    shown = 0
    while True:
        rows = read_journal(journal).rows
        for row in rows[shown:]:
            say(f"  {row['seq']:>3} {row.get('call') or '':<12} {row['row']:<15} {_detail(row)}")
        shown = len(rows)
        if replay(rows).state in ("ended", "paused", "waiting_decision"):
            return rows
        if time.monotonic() > deadline:
            raise RefusedError(f"the demo run did not end within {RUN_TIMEOUT:g} s; see {journal}")
        time.sleep(0.05)


def _detail(row: dict[str, Any]) -> str:
    kind = row["row"]
    if kind == "turn_started":
        return f"k {row.get('k')} turn {row.get('turn_id')}"
    if kind == "thread_started":
        return f"thread {row.get('thread_id')}"
    if kind in ("completed", "null_model", "held"):
        tokens = (row.get("tokens") or {}).get("total", 0)
        return f"{row.get('reason') or ''} tokens {tokens}".strip()
    if kind == "ended":
        return str(row.get("status"))
    return ""


def _summary(rows: list[dict[str, Any]]) -> str:
    run = replay(rows)
    begun = {r["call"]: r["at"] for r in rows if r["row"] == "prepared"}
    ended = {
        r["call"]: r["at"]
        for r in rows
        if r.get("call") and r["row"] in ("completed", "null_model", "held")
    }
    head = ("call", "role", "state", "attempts", "turns", "tokens", "time")
    lines = ["", "{:<12} {:<10} {:<10} {:>8} {:>5} {:>7} {:>7}".format(*head)]
    for call in run.calls.values():
        seconds = _seconds(begun.get(call.call), ended.get(call.call))
        lines.append(
            f"{call.call:<12} {call.role or '-':<10} {call.state:<10} {call.attempt or 1:>8} "
            f"{call.turns:>5} {call.tokens['total']:>7} {seconds:>6.2f}s"
        )
    lines.append(f"run {run.state}: {run.ended_status}; tokens {run.spent['total']}")
    return "\n".join(lines)


def _seconds(start: str | None, end: str | None) -> float:
    from datetime import datetime

    if not start or not end:
        return 0.0
    parse = datetime.fromisoformat
    return (parse(end.replace("Z", "+00:00")) - parse(start.replace("Z", "+00:00"))).total_seconds()

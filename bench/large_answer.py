"""The peak memory of `show` and `status --results --json` on a run with 10 MB answers.

One real run is made (bench/cli.py's `finished_run`: `crw host sim serve`, the
app-server backend, one instant call) for its run directory and run.json; its
journal is then replaced by one built here, framed as the journal writer frames
it: --calls calls, each with an answer of --mb MB that broke its schema (the
repair step's row keeps it) and a repaired answer of the same size, after prose,
in its completed row, as a run whose `[settings] answer_max_bytes` allows them
would leave; with --lost the repair's attempt was lost and attempt 2 took it
again. --rows says how the rows keep the answers (`FORMS`): as the run's code
writes them now, or as an older crw did. Figures: the journal's size (and its
bytes per MB of answer, two answers a call) and each command's peak RSS
(`ru_maxrss` of its process), wall time and exit code, as `python -m crw flow
...` in a fresh process.

    .venv/bin/python bench/large_answer.py [--mb N] [--calls N] [--rows FORM] [--lost]
        [--json] [--tmp DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cli import finished_run  # noqa: E402
from journal_file import write_batches  # noqa: E402

from crw.engine.answers import answer, harvest  # noqa: E402
from crw.engine.steps import packet, step_input  # noqa: E402
from crw.host.protocol import AgentMessage, Turn  # noqa: E402
from crw.journal.rows import (  # noqa: E402
    Completed,
    Ended,
    Prepared,
    RowModel,
    SessionAttemptLost,
    Started,
    StepPublished,
    ThreadStarted,
    Tokens,
    TurnStarted,
)
from crw.journal.snapshot import SNAPSHOT  # noqa: E402

AT = "2026-12-06T00:00:00.000000Z"
SCHEMA = {"type": "object", "required": ["summary"], "properties": {"summary": {"type": "string"}}}


FORMS = ("before-fold", "copies", "now")
"""How the rows keep the answers: `before-fold` as a crw before `step_input`
(the repair row holds the answer in its input and its previous_answer, the
attempt after a lost repair a copy, the completed row its message and its
result), `copies` as main before `previous_answer_in` and `result_span` (the
repair row holds it once, the rest as before-fold), `now` as the run's code writes
them (the completed row its message, with the span its result stands in)."""


def call_life(n: int, mb: float, form: str, lost: bool) -> list[list[RowModel]]:
    """The batches of one call whose answers are `mb` MB each: the first broke its
    schema and was repaired once (with `lost`, the repair's attempt was lost and
    attempt 2 took it again on a new subagent); the repaired answer came after
    prose, so its result was taken out of it."""
    call, size = f"build{n}.1", int(mb * 1_000_000)
    broken = json.dumps({"summary": 5, "lines": ["x" * 70] * (size // 76)})
    fixed = {"summary": "done", "lines": ["y" * 70] * (size // 76)}
    errors = ["$.summary: 5 is not of type 'string'"]
    mark = packet.marker(call, 2, 1)
    message = packet.send_input_message(mark, packet.repair_text(errors, broken, SCHEMA))
    repair = StepPublished(
        call=call, k=2, op=f"{call}/t2", marker=mark, attempt=1, action="send_input",
        input=message, input_digest=answer.digest(message), agent_id=f"th-{n}", repair=True,
        conversation_turn=2, previous_answer=broken, repair_errors=errors,
    )  # fmt: skip
    first = dict(call=call, k=1, op=f"{call}/t1", marker=f"{call}/t1-a1", attempt=1)
    batches: list[list[RowModel]] = [
        [Prepared(call=call, node=f"build{n}", role="executor", backend="app-server")],
        [StepPublished(**first, action="spawn", input="task", conversation_turn=1)],
        [
            ThreadStarted(call=call, thread_id=f"th-{n}", attempt=1, via="app-server"),
            TurnStarted(**first, turn_id=f"tu-{n}-1", conversation_turn=1),
        ],
        [repair if form == "before-fold" else step_input.fold(repair)],
        [TurnStarted(call=call, k=2, op=f"{call}/t2", marker=mark, attempt=1, turn_id="t2")],
    ]  # fmt: skip
    attempt = 1
    if lost:
        attempt, again_mark = 2, packet.marker(call, 2, 2)
        again = StepPublished(
            call=call, k=2, op=f"{call}/t2", marker=again_mark, attempt=2, action="spawn",
            input=f"crw-flow-op: {again_mark}\nRead the packet", conversation_turn=2,
            replaces_turn=mark, repair=True, previous_answer=broken, repair_errors=errors,
        )  # fmt: skip
        batches += [
            [SessionAttemptLost(call=call, attempt=1, k=2, host_status="systemError")],
            [again if form != "now" else step_input.refer(again, step_input.holder(repair))],
            [
                ThreadStarted(call=call, thread_id=f"th-{n}-2", attempt=2, via="session"),
                TurnStarted(call=call, k=2, op=f"{call}/t2", marker=again_mark, attempt=2),
            ],
        ]  # fmt: skip
    said = f"Fixed, here it is:\n\n{json.dumps(fixed)}"
    turn = Turn(id="t", status="completed", items=[AgentMessage(id="m", text=said)])
    tokens = Tokens(input=100, output=10, total=110)
    end = harvest.decide(call, SCHEMA, turn, tokens, repaired=True, attempt=attempt, k=2)
    assert isinstance(end.row, Completed)
    done = end.row
    assert done.raw_text == said and done.result_span is not None
    if form != "now":
        done = done.model_copy(update={"result_span": None})
    return [*batches, [done]]


def write_journal(path: Path, calls: int, mb: float, form: str, lost: bool) -> int:
    """The run's journal: started, each call's life, ended. Its size in bytes."""
    batches: list[list[RowModel]] = [[Started(backend="app-server", process="p", pid=1)]]
    for n in range(calls):
        batches += call_life(n, mb, form, lost)
    batches.append([Ended(status="completed")])
    write_batches(path, batches, AT)
    return path.stat().st_size


MEASURE = """
import json, os, subprocess, sys
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
print(json.dumps([usage.ru_maxrss, os.waitstatus_to_exitcode(status)]))
"""
"""Runs the command and prints its peak RSS (KiB) and exit code. The command is
started from this small process, not from the bench's: a child's ru_maxrss counts
the memory of the process it was forked from."""


def peak(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """The command's peak RSS (MiB), wall time (ms) and exit code; output dropped."""
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, *argv], env=env, capture_output=True, check=True
    )
    kib, code = json.loads(done.stdout)
    return {
        "rss_mib": round(kib / 1024, 1),
        "ms": round((time.monotonic() - began) * 1000),
        "exit": code,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=10.0)
    parser.add_argument("--calls", type=int, default=1)
    parser.add_argument("--rows", choices=FORMS, default="now", help=FORMS.__doc__)
    parser.add_argument("--lost", action="store_true", help="each repair's attempt is lost")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--tmp", help="where its temporary directory goes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="crw-large-", dir=args.tmp) as tmp:
        state = Path(tmp) / "runs" / "state"
        run_id = finished_run(state, 1)
        run = state / "flow" / run_id
        (run / SNAPSHOT).unlink(missing_ok=True)
        size = write_journal(run / "journal.jsonl", args.calls, args.mb, args.rows, args.lost)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env |= {"PYTHONPATH": str(REPO), "PYTHONPYCACHEPREFIX": str(Path(tmp) / "pyc")}
        crw = [sys.executable, "-m", "crw", "flow"]
        at = ["--state", str(state)]
        figures: dict[str, Any] = {"journal_mib": round(size / 2**20, 1)}
        figures |= {"mb": args.mb, "calls": args.calls, "rows": args.rows, "lost": args.lost}
        figures["journal_bytes_per_answer_mb"] = round(size / (args.calls * args.mb * 2))
        figures["status_json"] = peak([*crw, "status", run_id, *at, "--json"], env)
        figures["show"] = peak([*crw, "show", run_id, *at], env)
        figures["show_json"] = peak([*crw, "show", run_id, *at, "--json"], env)
        figures["status_results_json"] = peak(
            [*crw, "status", run_id, *at, "--results", "--json"], env
        )
    if args.json:
        print(json.dumps(figures))
        return
    lost = ", the repair lost once" if args.lost else ""
    print(f"{args.calls} call(s), answers of {args.mb:g} MB{lost}, rows {args.rows}: ", end="")
    print(f"journal {figures['journal_mib']} MiB", end="")
    print(f" ({figures['journal_bytes_per_answer_mb']:,} bytes per answer MB)")
    for name in ("status_json", "show", "show_json", "status_results_json"):
        got = figures[name]
        print(f"  {name:<20} peak {got['rss_mib']:>7} MiB  {got['ms']:>6} ms  exit {got['exit']}")


if __name__ == "__main__":
    main()

"""`crw flow list --status --workflow --since --limit`: each narrows what the others
leave, in `--json` and in the table, and a bad value is one line (exit 2). The
runs are run directories whose journals hold rows at times before now; each
list is a real `crw` process."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from crw.engine.config.workflow import load_workflow
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunSpec, WorkflowRef, write_run_spec
from crw.journal.log import encode_batch, encode_body
from crw.journal.rows import Ended, Paused, RowModel, Started
from tests.cli.conftest import EXAMPLES, Crw, Result

FIX = EXAMPLES / "fix-issue.toml"
DEMO = EXAMPLES / "demo.toml"
NOW = datetime.now(UTC)


def _stamp(ago: timedelta) -> str:
    return (NOW - ago).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _run(crw: Crw, workflow: Path, ago: timedelta, tag: str, *ends: RowModel) -> str:
    """A run of `workflow` started `ago` before now (its id carries that time), its
    `ends` committed a minute after."""
    name = load_workflow(workflow).name
    run_id = f"{name}-{(NOW - ago):%Y%m%d-%H%M%S}-{tag}"
    run = RunDir.of(crw.state, run_id)
    run.create()
    ref = WorkflowRef(path=str(workflow), digest=load_workflow(workflow).digest)
    write_run_spec(run.run_json, RunSpec(id=run_id, workflow=ref, backend="session", pool=2))
    batches: list[tuple[timedelta, list[RowModel]]] = [(ago, [Started(backend="session")])]
    if ends:
        batches.append((ago - timedelta(minutes=1), list(ends)))
    seq = 1
    with open(run.journal, "ab") as journal:
        for at, rows in batches:
            journal.write(encode_batch(seq, _stamp(at), [encode_body(r) for r in rows]))
            seq += len(rows)
    return run_id


def _list(crw: Crw, *args: str) -> Result:
    return crw("flow", "list", "--state", str(crw.state), *args, env=crw.env | {"COLUMNS": "100"})


def _ids(crw: Crw, *args: str) -> tuple[list[str], int, int]:
    """The runs a `list --json` with `args` shows, and its hidden and more."""
    result = _list(crw, *args, "--json")
    assert result.code == 0, result.stderr
    view: dict[str, Any] = result.json()
    return [entry["run"] for entry in view["runs"]], view["hidden"], view["more"]


def test_list_filters_narrow_what_each_other_leaves(crw: Crw) -> None:
    """--status (a state, or an ended run's status), --workflow (name or file),
    --since (an age or a date; it replaces the 7-day window of ended runs) and
    --limit (the newest N, the rest counted as more), alone and together."""
    done = _run(crw, FIX, timedelta(hours=1), "aaaa", Ended(status="completed"))
    failed = _run(crw, FIX, timedelta(hours=3), "bbbb", Ended(status="failed"))
    running = _run(crw, DEMO, timedelta(minutes=30), "cccc")  # no process: crashed
    paused = _run(crw, FIX, timedelta(days=2), "dddd", Paused(reason="host_unavailable"))
    old = _run(crw, FIX, timedelta(days=20), "eeee", Ended(status="failed"))

    assert _ids(crw) == ([running, done, failed, paused], 1, 0)
    assert _ids(crw, "--status", "failed") == ([failed], 1, 0)
    assert _ids(crw, "--status", "failed", "--since", "30d") == ([failed, old], 0, 0)
    assert _ids(crw, "--status", "ended", "--all") == ([done, failed, old], 0, 0)
    assert _ids(crw, "--status", "crashed,paused") == ([running, paused], 0, 0)
    assert _ids(crw, "--status", "crashed", "--status", "completed") == ([running, done], 0, 0)
    assert _ids(crw, "--status", "running") == ([], 0, 0)  # listed as no process runs it
    assert _ids(crw, "--workflow", "fix-issue", "--limit", "2") == ([done, failed], 1, 1)
    assert _ids(crw, "--workflow", str(DEMO)) == ([running], 0, 0)
    assert _ids(crw, "--since", "2h") == ([running, done], 0, 0)
    since = (NOW - timedelta(days=3)).strftime("%Y-%m-%d")
    assert _ids(crw, "--since", since, "--workflow", "fix-issue", "--status", "paused") == (
        [paused],
        0,
        0,
    )
    assert _ids(crw, "--since", "1h30m", "--status", "failed") == ([], 0, 0)

    table = _list(crw, "--workflow", "fix-issue", "--limit", "1")
    assert table.code == 0, table.stderr
    lines = table.stdout.splitlines()
    assert [line.split()[0] for line in lines[:2]] == ["RUN", done]
    assert lines[2:] == [
        "(2 older runs not shown: a higher --limit lists them)",
        "(1 ended runs older than 7 days not shown: --all lists them)",
        f"see one with: crw flow status RUN --state {crw.state}",
    ]
    none = _list(crw, "--status", "aborted")
    assert (none.code, none.stdout) == (
        0,
        f"no run under {crw.state / 'flow'} matches; list every run with: "
        f"crw flow list --all --state {crw.state}\n",
    )


def test_list_filter_errors_are_one_line_exit_2(crw: Crw) -> None:
    """A bad filter value is refused in one line that says what to pass."""
    _run(crw, FIX, timedelta(hours=1), "aaaa", Ended(status="completed"))
    cases = {
        ("--status", "done"): '--status "done" is no run state; pass one of starting, '
        "running, waiting_session, waiting_decision, paused, ended, crashed, corrupt, unreadable, "
        "or an ended run's status: completed, failed, aborted, cancelled",
        ("--since", "yesterday"): '--since "yesterday" is no time; pass YYYY-MM-DD or an '
        "ISO 8601 time such as 2026-11-30T12:00:00Z, or an age such as 30m, 2h, 7d or "
        "1h30m (s, m, h, d, w)",
        ("--since", "0d"): '--since "0d" is no age; pass an age such as 30m, 2h, 7d or '
        "1h30m (s, m, h, d, w), more than 0",
        ("--limit", "0"): "Invalid value for --limit: 0 is no number of runs; pass a whole "
        "number, 1 or more; see crw flow list --help",
        ("--limit", "1.5"): "Invalid value for --limit: 1.5 is no number of runs; pass a "
        "whole number, 1 or more; see crw flow list --help",
        ("--workflow", " "): "--workflow is empty; pass a workflow's name (a run id's head) "
        "or its file",
    }
    for args, said in cases.items():
        result = _list(crw, *args)
        assert (result.code, result.stdout, result.stderr) == (2, "", f"crw: error: {said}\n")
        result = _list(crw, *args, "--json")  # the same line, as {"error", "fix"} on stdout
        assert (result.code, result.stderr, result.error()) == (2, "", f"crw: error: {said}\n")

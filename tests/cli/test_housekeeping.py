"""`crw flow rm RUN` and `crw flow gc --ended-before DATE`: a live run is refused
(or skipped) and left whole; a finished or crashed run's directory is removed.
Live runs are real run processes on the simulated host."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from crw.binding.owner import bind_owner, orchestrator_line, owner_file
from crw.cli.run.housekeeping import close_line
from crw.engine.config.workflow import load_workflow
from crw.engine.run.locks import run_is_live, run_lock
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunSpec, WorkflowRef, write_run_spec
from crw.errors import CrwError
from crw.journal.log import encode_batch, encode_body
from crw.journal.rows import Ended, RowModel, Started
from crw.journal.snapshot import replay_journal
from tests.cli.conftest import Crw, Result, wait_for_exit
from tests.cli.test_dispatched import WORKFLOW
from tests.cli.test_resume_env import sim as sim
from tests.deadlines import LOADED


def _flow(crw: Crw, *args: str) -> Result:
    return crw("flow", *args, "--state", str(crw.state))


def _live_run(crw: Crw, sim: Path, owner: str | None = None) -> tuple[str, int]:
    """A session run on the simulated host whose process waits for its first step."""
    if owner is None:
        owner = crw("host", "sim", "owner", "start", "--socket", str(sim), "--json").json()[
            "thread_id"
        ]
    start = crw.start(str(WORKFLOW), "--owner", owner, "--host", f"unix:{sim}")
    assert start.code == 0, start.stderr
    run = start.json()["run"]
    step = crw.state / "flow" / run / "steps" / "explore.1" / "t1-a1.json"
    deadline = time.monotonic() + LOADED
    while not step.exists():
        assert time.monotonic() < deadline, "the run published no step"
        time.sleep(0.05)
    return run, start.json()["pid"]


def test_rm_refuses_a_live_run_then_removes_it_once_cancelled(crw: Crw, sim: Path) -> None:
    """A running run is refused in one line and left whole; once it ended (cancelled)
    its directory is removed and the run is gone."""
    run, pid = _live_run(crw, sim)
    run_dir = crw.state / "flow" / run
    refused = _flow(crw, "rm", run)
    assert (refused.code, refused.stdout) == (1, "")
    assert refused.stderr == (
        f"crw: error: run {run} is live: a process holds its run.lock (pid {pid}); it is not "
        f"removed: cancel it (crw flow cancel {run}) or let it end, then remove it\n"
    )
    assert (run_dir / "journal.jsonl").is_file() and (run_dir / "run.json").is_file()
    cancel = _flow(crw, "cancel", run, "--json")
    assert cancel.code == 0, cancel.stderr
    wait_for_exit(run_dir)
    removed = _flow(crw, "rm", run, "--json")
    assert removed.code == 0, removed.stderr
    assert removed.json() == {
        "run": run,
        "run_dir": str(run_dir),
        "removed": True,
        "state": "ended",
        "ended_status": "cancelled",
        "closed_line": None,  # the cancel closed it
    }
    assert sorted(p.name for p in (crw.state / "flow").iterdir()) == []
    gone = _flow(crw, "status", run)
    assert gone.code == 2 and "not found" in gone.stderr


def _lines(crw: Crw, owner: str) -> list[tuple[str, str]]:
    """The owner's flow-bound lines: (kind, run_id) each."""
    text = owner_file(crw.state, owner).read_text()
    return [(line["kind"], line["run_id"]) for line in map(json.loads, text.splitlines())]


def test_rm_removes_a_crashed_run_and_closes_the_line_it_left_open(crw: Crw, sim: Path) -> None:
    """A run whose process died (its locks free) is not live: rm removes it, and
    the owner's last line, the run's open orchestrator line the dead process never
    closed, is closed (CloseOrchestrator) before the directory goes."""
    owner = crw("host", "sim", "owner", "start", "--socket", str(sim), "--json").json()
    run, pid = _live_run(crw, sim, owner["thread_id"])
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + LOADED
    while run_is_live(RunDir.of(crw.state, run)):  # the kernel lets a dead process's locks go
        assert time.monotonic() < deadline, "the killed run process still holds the run"
        time.sleep(0.02)
    assert _lines(crw, owner["thread_id"])[-1] == ("orchestrator", run)
    removed = _flow(crw, "rm", run)
    assert removed.code == 0, removed.stderr
    assert removed.stdout == (
        f"removed run {run} (waiting_session): {crw.state / 'flow' / run}; "
        f"closed owner thread {owner['thread_id']}'s line, which it left open\n"
    )
    assert not (crw.state / "flow" / run).exists()
    assert _lines(crw, owner["thread_id"])[-2:] == [("orchestrator", run), ("closed", run)]


def test_rm_closes_only_the_runs_own_open_line_and_only_once(crw: Crw) -> None:
    """The close is the run's own: an owner whose last line is another run's is left
    as it is; a run whose line a first rm closed before it died mid-way (the run
    still there) closes nothing the second time, and is removed."""
    ended: tuple[str, list[RowModel]] = ("2026-11-02T09:00:00Z", [Ended(status="failed")])
    mine = _run(crw, "mine", ended, owner="owner-1")
    other = _run(crw, "other", ended, owner="owner-2")
    _bind(crw, "owner-1", "mine")
    _bind(crw, "owner-2", "third")
    assert close_line(mine) == "owner-1"  # a first rm that died before the removal
    assert _lines(crw, "owner-1") == [("orchestrator", "mine"), ("closed", "mine")]
    again = _flow(crw, "rm", "mine", "--json")
    assert again.code == 0, again.stderr
    assert again.json()["closed_line"] is None
    assert _lines(crw, "owner-1") == [("orchestrator", "mine"), ("closed", "mine")]
    assert _flow(crw, "rm", other.id, "--json").json()["closed_line"] is None
    assert _lines(crw, "owner-2") == [("orchestrator", "third")]


def test_gc_closes_the_open_line_of_a_run_it_removes_but_not_on_a_dry_run(crw: Crw) -> None:
    """An ended run whose owner's last line is still its open one (its process died
    after the ended row, before the close)."""
    ended: tuple[str, list[RowModel]] = ("2026-11-02T09:00:00Z", [Ended(status="completed")])
    _run(crw, "old", ended, owner="owner-1")
    _bind(crw, "owner-1", "old")
    dry = _flow(crw, "gc", "--ended-before", "2026-11-10", "--dry-run", "--json")
    assert dry.json()["removed"][0]["closed_line"] is None
    assert _lines(crw, "owner-1") == [("orchestrator", "old")]
    done = _flow(crw, "gc", "--ended-before", "2026-11-10")
    assert done.code == 0, done.stderr
    assert done.stdout.splitlines()[0] == (
        "removed run old (ended completed at 2026-11-02T09:00:00Z); "
        "closed owner thread owner-1's line, which it left open"
    )
    assert _lines(crw, "owner-1") == [("orchestrator", "old"), ("closed", "old")]


def _bind(crw: Crw, owner: str, run_id: str) -> None:
    """The owner's open orchestrator line of `run_id`, as a start writes it."""
    line = orchestrator_line(run_id, {}, "sha256:0")
    assert bind_owner(crw.state, owner, line, lambda _run: False).bound


def _run(
    crw: Crw, run_id: str, *batches: tuple[str, list[RowModel]], owner: str | None = None
) -> RunDir:
    """Run `run_id` of WORKFLOW with each batch of rows committed at its time."""
    run = RunDir.of(crw.state, run_id)
    run.create()
    ref = WorkflowRef(path=str(WORKFLOW), digest=load_workflow(WORKFLOW).digest)
    spec = RunSpec(id=run_id, workflow=ref, backend="session", pool=2, owner=owner)
    write_run_spec(run.run_json, spec)
    seq = 1
    with open(run.journal, "ab") as journal:
        for at, rows in batches:
            journal.write(encode_batch(seq, at, [encode_body(r) for r in rows]))
            seq += len(rows)
    return run


def test_gc_removes_the_runs_ended_before_the_date_and_skips_live_ones(crw: Crw) -> None:
    """Ended before DATE (the ended row's time) and not live: removed; --dry-run
    removes nothing; a live one is skipped with why; a later or open run stays."""
    started: tuple[str, list[RowModel]] = ("2026-11-01T08:00:00Z", [Started(backend="session")])
    _run(crw, "old", started, ("2026-11-02T09:00:00Z", [Ended(status="completed")]))
    held = _run(crw, "held", started, ("2026-11-03T09:00:00Z", [Ended(status="failed")]))
    _run(crw, "new", started, ("2026-11-20T09:00:00Z", [Ended(status="completed")]))
    _run(crw, "open", started)
    aside = crw.state / "flow" / ".removed-gone-0a1b2c3d"
    aside.mkdir()
    dry = _flow(crw, "gc", "--ended-before", "2026-11-10", "--dry-run", "--json")
    assert dry.code == 0, dry.stderr
    assert dry.json()["removed"] == [
        {"run": "held", "ended_status": "failed", "ended_at": "2026-11-03T09:00:00Z"}
        | {"closed_line": None},
        {"run": "old", "ended_status": "completed", "ended_at": "2026-11-02T09:00:00Z"}
        | {"closed_line": None},
    ]
    assert len(list((crw.state / "flow").iterdir())) == 5
    with run_lock(held):
        done = _flow(crw, "gc", "--ended-before", "2026-11-10")
    assert done.code == 0, done.stderr
    assert done.stdout.splitlines() == [
        "removed run old (ended completed at 2026-11-02T09:00:00Z)",
        f"skipped: run held is live: a process holds its run.lock (pid {os.getpid()}); it is "
        "not removed: cancel it (crw flow cancel held) or let it end, then remove it",
        "gc: 1 run(s) removed, 1 live skipped (ended before 2026-11-10T00:00:00Z)",
    ]
    assert sorted(p.name for p in (crw.state / "flow").iterdir()) == ["held", "new", "open"]


def test_rm_and_gc_input_errors_are_one_line(crw: Crw) -> None:
    """A date that is none, and a run directory a start has not written run.json into."""
    bad = _flow(crw, "gc", "--ended-before", "last week")
    assert (bad.code, bad.stderr) == (
        2,
        'crw: error: --ended-before "last week" is no date; pass YYYY-MM-DD or an ISO 8601 '
        "time such as 2026-11-30T12:00:00Z\n",
    )
    RunDir.of(crw.state, "starting").create()
    starting = _flow(crw, "rm", "starting")
    assert starting.code == 1
    assert starting.stderr == (
        "crw: error: run starting has no run.json: a start is writing it; try again after it\n"
    )
    assert (crw.state / "flow" / "starting").is_dir()


def _bus_files(run: RunDir) -> None:
    """A reply and the report it answered (handled), and a report nothing answered."""
    (run.replies / "aa11.json").write_text('{"id": "aa11", "reply": "bound"}\n')
    (run.inbox / "aa11.json").write_text("{}\n")
    (run.inbox / "bb22.json").write_text("{}\n")


def _assert_cleaned(run: RunDir) -> None:
    assert sorted(p.name for p in run.replies.iterdir()) == []
    assert sorted(p.name for p in run.inbox.iterdir()) == ["bb22.json"]


def test_an_abort_that_ends_the_run_cleans_its_bus(crw: Crw) -> None:
    """The answer --abort ends the run with no process to clean after it: it removes
    the replies and the handled report itself, once its row is durable."""
    from tests.cli.test_answer import _answer, _held_run

    run = _held_run(crw)
    _bus_files(run)
    result = _answer(crw, "--abort")
    assert result.code == 0 and result.json()["state"] == "ended", result.stderr
    _assert_cleaned(run)


def test_a_cancel_that_ends_a_paused_run_itself_cleans_its_bus(crw: Crw) -> None:
    """A paused run no process holds is cancelled by the command itself: it cleans
    the bus after the cancelled and ended rows."""
    out = crw.start(str(WORKFLOW), "--owner", "thread-owner").json()
    run = RunDir(Path(out["run_dir"]))
    wait_for_exit(run.root)  # its host is not there: it paused
    _bus_files(run)
    cancelled = _flow(crw, "cancel", out["run"], "--json")
    assert cancelled.code == 0, cancelled.stderr
    _assert_cleaned(run)


def test_rm_removes_a_run_whose_journal_cannot_be_read(crw: Crw) -> None:
    """A damaged journal (a line that is no row before a whole batch) is no reason to
    keep a run that is not live: rm removes it, saying its state is unreadable."""
    run = _run(crw, "broken")
    batch = encode_batch(2, "2026-11-01T08:00:00Z", [encode_body(Started(backend="session"))])
    run.journal.write_bytes(b"not a row\n" + batch)
    with pytest.raises(CrwError):  # the journal is corrupt, not merely torn
        replay_journal(run.journal)
    removed = _flow(crw, "rm", "broken", "--json")
    assert removed.code == 0, removed.stderr
    assert (removed.json()["state"], removed.json()["ended_status"]) == ("unreadable", None)
    assert not run.root.exists()

"""How often the run's tasks are resumed for a call: Trio's scheduling is the
largest single part of an App Server call's CPU, so each resume a call does not
need is kept out, and this bound is red when one is added back.

An App Server call needs 6 resumes of its own task: its start, 2 commits' replies
(its 5 rows in 4 commits, turn_started and its end committed behind: nothing waits
for them) and 3 host replies (thread/start, turn/start, thread/read).
Besides those, the journal writer's group (its wake and its sync's thread hop, 2
resumes, and the one of Trio's thread-result task) is shared by the commits that
arrive together. (The gate takes an end that came while it ran without a wait of
its own too; how many do depends on the threads' timing, so it is not pinned.)
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import trio
from trio.testing import MockClock

from crw.actors.app_server_context import CallContext
from crw.actors.app_server_run import run_app_server_calls
from crw.actors.journal_writer import open_journal_writer
from crw.clock import fixed_clock
from crw.engine.config.roles import RoleTable
from crw.journal.log import JournalFile, read_journal
from crw.journal.replay import RunState
from tests.actors.test_app_server_run import harness, kinds

CALLS = 40
POOL = 8
OWN = 20.3
"""A call's own task's resumes, at most: its start, 2 commit replies and 3 host
replies, and here the in-memory connection's, whose every send to the simulated
host yields (19.1-19.2 measured, 19.55 once in CI: the sync's thread hop lands
before or after a step as the machine allows; 21.1-21.2 when the call waited for
turn_started and its end, which this bound still refuses)."""
GROUP = 2
"""The writer's resumes a group (a write and its sync), at most: its wake and its
sync's one thread hop; 3-4 with the requests taken through the channel's wait and
the sync through `trio.to_thread` (whose limiter's acquire yields). Besides, one
resume a group of Trio's thread-result task. (bench/scale.py's 1,000-call run, 8
calls at once on a real socket: writer, hops and gate 6.1 -> 3.0 a call.)"""


SCHEMA = '{ type = "object", required = ["ok"], properties = { ok = { type = "boolean" } } }'


def workflow(calls: int) -> str:
    nodes = "".join(
        f'\n[[node]]\nid = "n{i:03d}"\nrole = "explorer"\ntask = "Answer."\nschema = {SCHEMA}\n'
        for i in range(calls)
    )
    return f'name = "many"\npool = {POOL}\n' + nodes


class Resumes(trio.abc.Instrument):
    """Counts each task's steps (resumes) by the task's name."""

    def __init__(self) -> None:
        self.steps: Counter[str] = Counter()

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps[task.name] += 1


async def test_a_call_resumes_the_runs_tasks_a_bounded_number_of_times(
    tmp_path: Path, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: GEN-9 (a thread per call, its rows committed before it goes on)"""
    groups = []
    append = JournalFile.append

    def counted(self: JournalFile, data: bytes, rows: int) -> None:
        groups.append(rows)
        append(self, data, rows)

    monkeypatch.setattr(JournalFile, "append", counted)
    async with harness(tmp_path, workflow(CALLS)) as h:
        path = h.run_dir / "journal.jsonl"
        resumes = Resumes()
        async with open_journal_writer(path, clock=fixed_clock(), sync_in_thread=True) as journal:
            ctx = CallContext(
                journal=journal,
                reader=h.reader,
                workflow=h.workflow,
                run_dir=h.run_dir,
                tmpdir="/run/tmp",
                pairs=RoleTable.undecided().roles,
                settings=h.settings,
            )
            trio.lowlevel.add_instrument(resumes)
            try:
                state = await run_app_server_calls(ctx, POOL, RunState(), [])
            finally:
                trio.lowlevel.remove_instrument(resumes)
    rows = read_journal(path).rows
    assert state == "ended" and kinds(rows).count("completed") == CALLS
    own = sum(n for name, n in resumes.steps.items() if name.endswith("call_task"))
    writer = sum(n for name, n in resumes.steps.items() if "journal_writer" in name)
    hops = sum(n for name, n in resumes.steps.items() if "run_sync_soon" in name)
    assert own <= OWN * CALLS, resumes.steps
    assert writer <= GROUP * len(groups) + 1, (len(groups), resumes.steps)  # + its start
    assert hops <= len(groups) + 1, (len(groups), resumes.steps)  # + the journal's open

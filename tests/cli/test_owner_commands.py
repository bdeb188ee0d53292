"""What every owner command shares: the run's directory, never the journal; and
what the start holds while it binds and launches."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crw.binding.owner import bind_owner
from crw.cli.run import start as start_module
from crw.engine.run.locks import is_held, start_lock
from crw.engine.run.rundir import RunDir
from crw.engine.run.tmploc import dir_from
from crw.journal.log import read_journal
from tests.cli.conftest import Crw, start_in_process
from tests.cli.test_next import RUN, held

__all__ = ["held"]  # test_next's fixture: a run this test process holds as its process would


def test_owner_commands_read_the_run_directory_and_write_no_row(
    crw: Crw, held: RunDir, tmp_path: Path
) -> None:
    """spec: CMD-START-1, CMD-START-2: status, next and dispatched find the run at
    `<state>/flow/<run>/` (and nowhere else), and none of them writes its journal.
    The run is live as its own process holds it (`held`: its started row names the
    process lock, the owner's line is bound), so next resumes nothing and answers at
    once, and dispatched is not answered."""
    run = held
    assert run.root == crw.state / "flow" / RUN
    state = ("--state", str(crw.state))
    before = run.journal.read_bytes()
    status = crw("flow", "status", RUN, *state, "--json")
    step = crw("flow", "next", RUN, *state, "--json")
    report = crw(
        "flow", "dispatched", RUN, "build.1", "--agent", "agent-1", "--k", "1",
        "--attempt", "1", "--wait", "0.2", *state, "--json",
    )  # fmt: skip
    after = run.journal.read_bytes()
    assert status.code == 0 and status.json()["run_dir"] == str(run.root)
    assert step.code == 0 and step.json()["run"] == RUN
    assert report.json()["reply"] == "queued" and len(list(run.inbox.glob("*.json"))) == 1
    assert after == before
    elsewhere = crw("flow", "status", RUN, "--state", str(tmp_path / "other"), "--json")
    assert elsewhere.code == 2 and str(tmp_path / "other" / "flow") in elsewhere.error()


def test_start_lock_is_held_from_before_the_bind_until_the_process_holds_the_run(
    crw: Crw, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: BIND-LINE-19, CMD-START-10: the start takes start.lock, binds the owner
    under it and hands it to its process, which lets it go only once it holds the run
    lock: the run is live all along. The temp location is asked once."""
    events: list[tuple[str, bool]] = []
    asked: list[dict[str, str]] = []

    @contextlib.contextmanager
    def watched_start_lock(run: RunDir) -> Iterator[Any]:
        with start_lock(run) as lock:
            events.append(("taken", is_held(run.start_lock)))
            yield lock
        # The start handed its lock to the child, which holds it until it holds
        # the run lock: the run is live all along.
        rows = read_journal(run.journal).rows
        started = any(row["row"] == "started" for row in rows)
        held = is_held(run.start_lock) or is_held(run.run_lock)
        events.append(("handed", held or started))

    def watched_bind(state: Path, owner: str, line: dict[str, Any], live: Any) -> Any:
        events.append(("bind", is_held(RunDir.of(state, line["run_id"]).start_lock)))
        return bind_owner(state, owner, line, live)

    def counted_dir_from(environ: Any) -> str:
        asked.append(dict(environ))
        return dir_from(environ)

    monkeypatch.setattr(start_module, "start_lock", watched_start_lock)
    monkeypatch.setattr(start_module, "bind_owner", watched_bind)
    monkeypatch.setattr(start_module, "dir_from", counted_dir_from)
    outcome = start_in_process(crw, monkeypatch, "owner-1")
    assert outcome.started
    assert events == [("taken", True), ("bind", True), ("handed", True)]
    assert len(asked) == 1 and outcome.spec.env is not None
    assert crw.env["TMPDIR"] == outcome.spec.env.TMPDIR
    assert not is_held(outcome.run.start_lock)

"""Whose pairs the spawn formats of `crw flow next --json` are, asked as a user does
(a real `crw flow next` process) of run directories built by hand: the pins of the
newest started row while a process holds the run, else the role store's."""

from __future__ import annotations

from typing import Any

from crw.engine.config.roles import load_roles
from crw.engine.run.locks import hold_run, run_lock
from crw.journal.log import read_journal
from tests.cli.conftest import Crw
from tests.cli.test_next import RUN, _append_rows, _make_run, bind_line
from tests.cli.test_next_window import PINS, PINS_TOML

STORE_TOML = PINS_TOML.replace('model = "m-exec"', 'model = "m-store"')
"""The role store as it reads now: its executor another model than the pins'."""


def _next(crw: Crw) -> dict[str, Any]:
    result = crw("flow", "next", RUN, "--state", str(crw.state), "--json")
    assert result.code == 0, result.stderr
    answer: dict[str, Any] = result.json()
    assert "resumed_pid" not in answer  # nothing launched: the formats are the point
    return answer


def _executor_model(answer: dict[str, Any]) -> Any:
    (executor,) = [f for f in answer["spawn_formats"] if f["role"] == "executor"]
    return executor["model"]


def test_a_started_row_naming_no_process_gives_the_formats_when_no_process_lock_is_held(
    crw: Crw,
) -> None:
    """spec: CMD-NEXT-23: a process of a crw before the process lock holds the run
    lock alone; the newest started row, which names no process, gives the pairs."""
    run = _make_run(crw)
    (crw.state / "roles.toml").write_text(STORE_TOML)
    _append_rows(run, {"row": "started", "backend": "session", "pid": 2, "role_pairs": PINS})
    with run_lock(run):  # no process lock: as an older crw's process
        answer = _next(crw)
    assert answer["state"] == "running"
    assert _executor_model(answer) == "m-exec"


def test_a_run_no_process_holds_answers_the_role_stores_formats(crw: Crw) -> None:
    """spec: CMD-NEXT-35: its last process pinned other pairs; a paused run is not
    resumed by next (CMD-NEXT-20), so nothing holds it while next answers."""
    run = _make_run(crw)
    (crw.state / "roles.toml").write_text(STORE_TOML)
    _append_rows(
        run,
        {"row": "started", "backend": "session", "pid": 2, "role_pairs": PINS},
        {"row": "paused", "reason": "host_unavailable"},
    )
    answer = _next(crw)
    assert answer["state"] == "paused"
    assert _executor_model(answer) == "m-store"
    assert [row["row"] for row in read_journal(run.journal).rows][-1] == "paused"


def test_a_held_run_that_recorded_no_pairs_answers_the_role_stores(crw: Crw) -> None:
    """spec: CMD-NEXT-40: its process holds it (process lock, run lock, its started
    row naming that process, the owner's line bound to it) and pinned nothing."""
    run = _make_run(crw)
    (crw.state / "roles.toml").write_text(STORE_TOML)
    with hold_run(run) as process:
        assert process is not None
        started = {"row": "started", "backend": "session", "process": process.token}
        _append_rows(run, started | {"role_pairs": None})
        pairs = load_roles(crw.state / "roles.toml").role_pairs()
        line = {"run_id": RUN, "policyDigest": "sha256:x", "helperPairs": pairs}
        bind_line(crw, {"kind": "orchestrator"} | line)
        answer = _next(crw)
    assert (answer["state"], answer["warnings"]) == ("running", [])
    assert _executor_model(answer) == "m-store"

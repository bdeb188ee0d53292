"""What `status` and `next` say of a call held because the host could not reach
its model: the host's words (the held row's error) and what to do."""

from __future__ import annotations

from crw.engine.answers import unreachable
from crw.host.protocol import TurnError
from crw.journal.rows import Escalation, Held, Prepared, SessionWake, Started
from tests.cli.conftest import Crw, unfolded
from tests.cli.test_fault_views import commit, flow
from tests.cli.test_next import RUN, new_run

RETRYING = unreachable.Retrying(
    first_at=0.3,
    count=4,
    error=TurnError(
        message="Reconnecting... waiting for network",
        codexErrorInfo={"responseStreamDisconnected": {"httpStatusCode": None}},
        additionalDetails="Connection failed: error sending request",
    ),
)
ERROR = unreachable.describe(RETRYING, 60.3)


def test_call_held_for_an_unreachable_model_shows_the_hosts_error_and_the_fix(crw: Crw) -> None:
    """spec: HARV-14 (the held call's reason is read from the host's error)"""
    run = new_run(crw)
    commit(
        run,
        Started(backend="app-server", pid=1),
        Prepared(call="build.1", node="build", role="executor"),
        Held(call="build.1", reason="host_failure", error=ERROR),
    )
    (call,) = flow(crw, "status")["calls"]
    retry = f"crw flow answer {RUN} build.1 --retry --state {crw.state}"
    assert (call["state"], call["reason"], call["error"]) == ("held", "host_failure", ERROR)
    assert call["fix"].startswith("the host could not reach the call's model")
    assert f"then {retry} to run the turn again" in call["fix"]
    human = crw("flow", "status", RUN, "--state", str(crw.state)).stdout.splitlines()
    at = next(n for n, line in enumerate(human) if line.startswith("    held (host_failure): "))
    assert unfolded(human, at) == f"    held (host_failure): {' '.join(ERROR.split())}"
    fix = next(n for n, line in enumerate(human) if line.startswith("    fix: "))
    assert unfolded(human, fix) == f"    fix: {call['fix']}"
    assert len(human[fix]) <= 80 and human[fix + 1].startswith("      ")  # folded
    state = str(crw.state)
    assert all(len(line) <= 80 for line in human[at:] if state not in line), human[at:]
    (held,) = flow(crw, "next")["held"]
    assert (held["error"], held["fix"]) == (ERROR, call["fix"])


LONG_NODE = "a" * 64


def test_a_long_call_id_does_not_widen_every_row(crw: Crw) -> None:
    """A 64-character node id is on a line of its own above its row; every other
    row keeps 80 columns."""
    run = new_run(crw)
    commit(
        run,
        Started(backend="app-server", pid=1),
        Prepared(call="build.1", node="build", role="executor"),
        Prepared(call=f"{LONG_NODE}.1", node=LONG_NODE, role="executor-t1"),
        Held(call="build.1", reason="host_failure", error=ERROR),
    )
    human = crw("flow", "status", RUN, "--state", str(crw.state)).stdout.splitlines()
    header = next(n for n, line in enumerate(human) if line.startswith("  call "))
    table = human[header:]
    assert f"  {LONG_NODE}.1" in table
    below = table[table.index(f"  {LONG_NODE}.1") + 1]
    assert below.split()[:2] == ["executor-t1", "prepared"] and len(below) <= 80
    rows = [line for line in table if line.startswith(("  call ", "  build.1 "))]
    assert len(rows) == 2 and all(len(line) <= 80 for line in rows), rows


def test_a_duration_is_printed_rounded(crw: Crw) -> None:
    """`show` prints a wake's and an escalation's wait as a person reads it."""
    run = new_run(crw)
    commit(
        run,
        Started(backend="session", pid=1),
        SessionWake(wake_id="run:r/b", owner="o", waiting_seconds=0.10407947400017292),
        Escalation(reason="session_unresponsive", waiting_seconds=7260.4),
    )
    shown = crw("flow", "show", RUN, "--state", str(crw.state))
    assert shown.code == 0, shown.stderr
    assert "waited 0.1s" in shown.stdout and "waited 2h01m" in shown.stdout
    assert "0.104" not in shown.stdout and "7260" not in shown.stdout

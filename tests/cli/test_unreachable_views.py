"""What `status` and `next` say of a call held because the host could not reach
its model: the host's words (the held row's error) and what to do."""

from __future__ import annotations

from crw.engine.answers import unreachable
from crw.host.protocol import TurnError
from crw.journal.rows import Held, Prepared, Started
from tests.cli.conftest import Crw
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
    human = crw("flow", "status", RUN, "--state", str(crw.state)).stdout
    assert f"    held (host_failure): {ERROR}\n" in human
    assert "    fix: the host could not reach the call's model" in human
    (held,) = flow(crw, "next")["held"]
    assert (held["error"], held["fix"]) == (ERROR, call["fix"])

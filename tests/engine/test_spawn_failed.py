"""The run's answer to a report of a spawn the host refused (`--failed`): it holds
only the spawn step its call waits on, once."""

from __future__ import annotations

from crw.actors.session_run import answer_unrouted
from crw.bus.inbox import Report
from crw.engine.steps.bind import AttemptState, Reply, SpawnFailed
from crw.engine.steps.replies import CallRecords
from crw.host.protocol import Thread
from tests.engine.test_bind import AGENT, decide, repair_step, report

REFUSED = "Unknown model `gpt-5.4-mini` for spawn_agent. Available models: gpt-5.5"
PUBLISHED = {"row": "step_published", "call": "build.1", "k": 1, "attempt": 1}


def test_failed_spawn_of_the_waiting_step_holds_the_call_with_the_hosts_message() -> None:
    decision = decide(rep=report(agent_id=None, failed=REFUSED))
    assert isinstance(decision, SpawnFailed)
    assert (decision.kind, decision.reason) == ("held", f"spawn_failed: {REFUSED}")
    assert decision.held.model_dump(exclude_none=True) == {
        "row": "held",
        "call": "build.1",
        "reason": "spawn_failed",
        "error": REFUSED,
    }


def test_failed_report_for_a_send_input_or_a_bound_attempt_is_refused() -> None:
    send_input = decide(
        rep=report(k=2, agent_id=None, failed=REFUSED),
        step=repair_step(),
        attempt=AttemptState(thread_id=AGENT),
    )
    bound = decide(rep=report(agent_id=None, failed=REFUSED), attempt=AttemptState(AGENT))
    assert send_input == Reply(
        "refused",
        f"step build.1/t2-a1 is a send_input to {AGENT}, not a spawn: "
        "report what it dispatched with --agent",
    )
    assert bound == Reply("refused", f"its turn is bound to {AGENT}: its spawn did not fail")


async def no_read(thread_id: str) -> Thread:
    raise AssertionError(f"a failed spawn's report reads no host ({thread_id})")


async def test_second_failed_report_after_the_hold_is_refused_by_the_run() -> None:
    """The run's side of a failed spawn reported twice: the call the first held
    waits on nothing, so the inbox answers the second from the rows."""
    records = CallRecords([PUBLISHED, {"row": "held", "call": "build.1", "reason": "spawn_failed"}])
    again = Report.new("run-1", "build.1", 1, 1, None, "t", failed=REFUSED)
    assert await answer_unrouted(records, no_read, again) == {
        "reply": "refused",
        "reason": "the call is held already (a failed spawn is reported once): answer it as "
        "crw flow next or crw flow status shows",
    }
    waiting = CallRecords([PUBLISHED])
    assert await answer_unrouted(waiting, no_read, again) is None  # its call actor answers it

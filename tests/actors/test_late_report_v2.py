"""A report no call waits for on multi-agent v2 (`answer_unrouted`): the owner
reports its spawn by the child's path, and the call bound that child by its task
name before the report was read (the poll's lookup came first)."""

from __future__ import annotations

from crw.actors.session_run import answer_unrouted
from crw.bus.inbox import Report
from crw.engine.steps.replies import CallRecords
from crw.engine.steps.task_name import agent_path, task_name
from crw.host.protocol import Thread

RUN = "run-1"
AGENT = "019a0000-0000-7000-8000-0000000000a1"
ROWS = [
    {"row": "step_published", "call": "build.1", "k": 1, "attempt": 1},
    {"row": "thread_started", "call": "build.1", "thread_id": AGENT, "attempt": 1},
    {"row": "turn_started", "call": "build.1", "k": 1, "attempt": 1, "turn_id": "turn-1"},
]


async def no_read(thread_id: str) -> Thread:
    raise AssertionError(f"the bound child's report reads no host ({thread_id})")


async def test_the_bound_childs_path_reported_late_is_answered_bound_not_close() -> None:
    """spec: DISP-6 on v2: the path of the step's task name is the child the call
    bound, answered bound again; told close, the owner interrupted the run's own
    turn (interrupt_agent), and the call ended held with no interrupt_requested (the
    kill drill running-cancel-v2 under load). Another path of the run's is still a
    second subagent, told to close."""
    records = CallRecords(ROWS)
    path = agent_path(task_name(RUN, "build.1/t1-a1"))
    late = Report.new(RUN, "build.1", 1, 1, path, "t")
    assert await answer_unrouted(records, no_read, late) == {
        "reply": "bound",
        "reason": "already bound",
    }

"""The run's answer to a multi-agent v2 report no call actor waits for: a report
that names the child by its path (`--agent /root/<task_name>`, as a v2 spawn
step's `then` spells it) after the lookup bound that child already."""

from __future__ import annotations

import uuid
from typing import Any

from crw.actors.session_run import answer_unrouted
from crw.bus.inbox import Report
from crw.engine.steps.replies import CallRecords
from crw.host.errors import HostRequestError
from crw.host.protocol import Thread

CHILD = str(uuid.uuid4())
PATH = "/root/crw_0123456789ab_plan_1_t1_a1"
ROWS: list[dict[str, Any]] = [
    {"row": "step_published", "call": "plan.1", "k": 1, "attempt": 1, "action": "spawn"},
    {"row": "thread_started", "call": "plan.1", "thread_id": CHILD},
    {"row": "turn_started", "call": "plan.1", "k": 1, "attempt": 1},
]


async def codex_read(agent: str) -> Thread:
    """thread/read as codex answers an id that is no uuid (a path, on v2)."""
    uuid.UUID(CHILD)  # the bound child's id is one
    raise HostRequestError(
        "thread/read",
        -32600,
        "invalid thread id: invalid character: expected an optional prefix of `urn:uuid:` "
        f"followed by [0-9a-fA-F-], found `{agent[0]}` at 1",
    )


async def owner_names(path: str) -> tuple[str | None, str | None]:
    return (CHILD, None) if path == PATH else (None, None)


async def test_a_late_report_by_path_of_the_bound_child_is_answered_bound() -> None:
    """spec: DISP-6 (the lookup bound plan.1's child before the owner's report,
    which names it by path, came in: the report is answered bound, as a report by
    thread id is, not retry because the host reads no path as a thread id)"""
    report = Report.new("run-1", "plan.1", 1, 1, PATH, "t")
    reply = await answer_unrouted(CallRecords(ROWS), codex_read, report, owner_names)
    assert reply == {"reply": "bound", "reason": "already bound"}
    by_id = Report.new("run-1", "plan.1", 1, 1, CHILD, "t")
    assert await answer_unrouted(CallRecords(ROWS), codex_read, by_id, owner_names) == reply


async def test_a_late_report_of_a_path_the_owner_does_not_name_is_retried() -> None:
    """spec: DISP-9 (a path no child of the owner has yet: the host cannot answer
    for it now)"""
    report = Report.new("run-1", "plan.1", 1, 1, "/root/crw_other_t1_a1", "t")
    reply = await answer_unrouted(CallRecords(ROWS), codex_read, report, owner_names)
    assert reply is not None and reply["reply"] == "retry", reply
    assert "names no child /root/crw_other_t1_a1" in reply["reason"]

"""A real Codex owner thread whose reviewer subagent cannot reach its model.

The owner's model, and the first three calls' subagents, are the mock model; when
the review's subagent (spawned by the owner with the real multi_agent_v1 tools)
sends its first request, the mock's endpoint goes away (`mock_replies.unreachable`:
that connection dropped, every later one refused). Codex 0.163.0 (the provider's
stream retries on) does not fail the turn: it only retries it, `error {willRetry:
true}` "Reconnecting... waiting for network" on the subagent's thread, as for a
private model whose endpoint refuses connections. The run process follows those
notifications and, `unreachable_after` (1 s here) after the first, interrupts the
turn and holds the call host_failure with what the host said.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crw.engine.held_fix import UNREACHABLE
from tests.codex_owner.harness import WORKFLOW, owned_run
from tests.codex_owner.policy import OwnerPolicy, Policies, SubagentPolicy

pytestmark = pytest.mark.codex

GIVE_UP = 1.0
CALL = "review.1"


async def test_a_subagent_whose_model_goes_away_is_held_with_the_hosts_words(
    tmp_path: Path,
) -> None:
    """spec: HARV-14 (on the real host: the session subagent's marker turn the host
    only retries is interrupted and its call held host_failure within the bound)"""
    workflow = f"{WORKFLOW}\n[settings]\nunreachable_after = {GIVE_UP}\n"
    policies = Policies(OwnerPolicy(), SubagentPolicy(unreachable=frozenset({f"{CALL}/t1"})))
    with owned_run(tmp_path, policies, retries=2) as setup:
        await setup.begin(workflow)
        bound = await setup.until_row("turn_started", lambda r: r.get("call") == CALL)
        # until_row's deadline is the hang guard; that the hold comes within the
        # bound is proved under a MockClock (tests/actors/test_session_unreachable.py):
        # here the time would be the loaded machine's.
        held = await setup.until_row("held")
        rows = setup.rows()

    mine = [r for r in rows if r.get("call") == CALL]
    assert [r["row"] for r in mine] == [
        "prepared",
        "step_published",
        "thread_started",
        "turn_started",
        "interrupt_requested",
        "held",
    ], mine
    asked = mine[4]
    assert (asked["reason"], asked["turn_id"]) == ("host_failure", bound["turn_id"])
    assert (held["call"], held["reason"]) == (CALL, "host_failure")
    assert held["error"].startswith(
        f"{UNREACHABLE}the host said Reconnecting... waiting for network "
        "(Connection failed: error sending request) [responseStreamDisconnected], "
    ), held["error"]
    assert asked["error"] == held["error"]
    ends = {r["call"]: r["row"] for r in rows if r["row"] in ("completed", "held")}
    assert ends == {
        "explore.1": "completed",
        "plan.1": "completed",
        "build.1": "completed",
        CALL: "held",
    }

"""A session run owned by a real Codex owner thread on a shared app-server, end to
end: the owner's model (the mock's owner policy) starts the run from its shell,
takes each step with the real multi_agent_v1 tools and reports it; real subagent
threads answer; the spawn hook gives each spawn its role's pair."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from crw.host.mock_model import CODEX_MODEL
from crw.host.mock_replies import Usage
from tests.codex_owner.harness import PAIRS, TERMINAL, owned_run, roles_toml
from tests.codex_owner.policy import (
    MARKER_LINE,
    OwnerPolicy,
    Policies,
    SubagentPolicy,
    shell_json,
)
from tests.hook.spawn_helpers import ledger_lines
from tests.host.test_codex_workflow import plus, row_tokens

pytestmark = pytest.mark.codex

CALLS = ("explore.1", "plan.1", "build.1", "review.1")
ROLE_OF = {
    "explore.1": "explorer",
    "plan.1": "explorer",
    "build.1": "executor",
    "review.1": "reviewer",
}
USAGE = {
    "explore.1": Usage(1100, 100, 40, 5),
    "plan.1": Usage(1200, 200, 50, 6),
    "build.1": Usage(1300, 300, 60, 7),
    "review.1": Usage(1400, 400, 70, 8),
}


def markers_asked(requests: list) -> Counter[str]:  # type: ignore[type-arg]
    """How many subagent turns began on each marker (a turn's first request)."""
    seen: Counter[str] = Counter()
    for request in requests:
        found = MARKER_LINE.search(request.user_text)
        last = (request.body.get("input") or [{}])[-1]
        if found and last.get("role") == "user":
            seen[found.group(0)] += 1
    return seen


async def test_a_real_owner_thread_runs_a_workflow_to_the_end(tmp_path: Path) -> None:
    """spec: STEP-37, HOOK-1, HOOK-11 (four calls of three roles on the real host, one
    repaired: each completed, its tokens the mock's, each spawn on its role's pair)"""
    subagent = SubagentPolicy(broken=frozenset({"build.1/t1"}), usage=USAGE)
    policies = Policies(OwnerPolicy(drop_pair=True), subagent)
    with owned_run(tmp_path, policies) as setup:
        await setup.begin()
        ended = await setup.until_row("ended")
        await setup.owner_idle()
        rows = setup.rows()
        requests = setup.model.requests

    assert ended["status"] == "completed", rows
    terminal = {row["call"]: row for row in rows if row["row"] in TERMINAL}
    assert {call: row["row"] for call, row in terminal.items()} == dict.fromkeys(CALLS, "completed")
    turns = [(r["call"], r["k"]) for r in rows if r["row"] == "turn_started"]
    assert sorted(turns) == sorted([(c, 1) for c in CALLS] + [("build.1", 2)])
    for call, usage in USAGE.items():
        reported = plus(usage, usage) if call == "build.1" else usage  # the repair's turn
        assert terminal[call]["tokens"] == row_tokens(reported), (call, terminal[call])
    spawns = [line for line in ledger_lines(setup.state, setup.owner) if line["op"]]
    assert sorted(line["op"] for line in spawns) == sorted(f"{c}/t1" for c in CALLS)
    for line in spawns:
        kind, model, effort = PAIRS[ROLE_OF[line["op"].split("/")[0]]]
        assert (line["decision"], line["warnings"]) == ("allow", []), line
        assert (line["agent_type"], line["model"], line["reasoning_effort"]) == (
            kind,
            model,
            effort,
        )
    for request in requests:
        found = MARKER_LINE.search(request.user_text)
        if found:
            _, model, effort = PAIRS[ROLE_OF[found.group(1)]]
            assert (request.body["model"], request.body["reasoning"]["effort"]) == (model, effort)
    asked = markers_asked(requests)
    assert set(asked) == {f"crw-flow-op: {c}/t1-a1" for c in CALLS} | {"crw-flow-op: build.1/t2-a1"}
    assert set(asked.values()) == {1}, asked


async def test_a_spawn_the_host_refuses_is_reported_and_holds_its_call(tmp_path: Path) -> None:
    """spec: HOOK-1 (the reviewer's model is one codex does not serve: its spawn fails,
    the owner reports it --failed, the call is held spawn_failed; answered --retry
    once the role store names a served model, the run goes on and completes)"""
    pairs = PAIRS | {"reviewer": ("reviewer", "gpt-5.4-mini", "low")}
    policies = Policies(OwnerPolicy(), SubagentPolicy())
    with owned_run(tmp_path, policies, pairs) as setup:
        await setup.begin()
        held = await setup.until_row("held")
        owner = await setup.owner_idle()
        run = setup.run_id()
        reports = [
            shell_json(str(item.get("output")))
            for request in setup.model.requests
            for item in request.body.get("input") or []
            if item.get("type") == "function_call_output"
        ]
        (setup.state / "roles.toml").write_text(roles_toml(PAIRS))
        answered = setup.crw("flow", "answer", run, "review.1", "--retry", "--json")
        ended = await setup.until_row("ended")
        rows = setup.rows()

    assert (held["call"], held["reason"]) == ("review.1", "spawn_failed"), held
    assert "Unknown model `gpt-5.4-mini` for spawn_agent" in held["error"], held
    assert next(r for r in reports if r.get("reply") == "held")["call"] == "review.1"
    assert owner["status"]["type"] == "idle"
    assert answered.returncode == 0, answered.stderr
    assert ended["status"] == "completed", rows
    review = [r for r in rows if r.get("call") == "review.1" and r["row"] == "thread_started"]
    assert [(r["model"], r["effort"]) for r in review] == [(CODEX_MODEL, "low")]

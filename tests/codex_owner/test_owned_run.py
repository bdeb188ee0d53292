"""A session run owned by a real Codex owner thread on a shared app-server, end to
end: the owner's model (the mock's owner policy) starts the run from its shell,
takes each step with the real multi-agent tools and reports it; real subagent
threads answer; the spawn hook gives each spawn its role's pair. Each test runs
on both protocols (`multi_agent`): the owner's multi_agent_v1 tools, and v2's
`collaboration` tools (config.toml's `[features] multi_agent_v2 = true`, which
the run's start reads: it speaks v2, binds by task name, repairs by
followup_task)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from crw.host.mock_model import CODEX_MODEL
from crw.host.mock_replies import ModelRequest, Reply, Usage
from tests.codex_owner.harness import PAIRS, TERMINAL, owned_run, roles_toml
from tests.codex_owner.policy import (
    MARKER_LINE,
    WAIT_TOOL,
    OwnerPolicy,
    Policies,
    SubagentPolicy,
    is_subagent,
    shell_json,
    v2_tasks,
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
    """How many subagent turns began on each marker (a turn's first request: its
    newest input the task, a user message on v1, a v2 task on v2)."""
    seen: Counter[str] = Counter()
    for request in requests:
        found = MARKER_LINE.search(request.user_text)
        last = (request.body.get("input") or [{}])[-1]
        if found and (last.get("role") == "user" or list(v2_tasks({"input": [last]}))):
            seen[found.group(0)] += 1
    return seen


def spoken(rows: list[dict[str, Any]]) -> set[str]:
    """The multi-agent protocols the run's processes spoke (`v1`, `v2`): one."""
    return {
        str(r["multi_agent"]).removeprefix("multi_agent_") for r in rows if r["row"] == "started"
    }


def host_tools(requests: list) -> Counter[str]:  # type: ignore[type-arg]
    """The owner's host tool calls (all but its shell's), `namespace.name`, as its
    newest request carries them."""
    owner = [r.body for r in requests if not is_subagent(r.body)][-1]
    return Counter(
        f"{item.get('namespace')}.{item['name']}"
        for item in owner.get("input") or []
        if item.get("type") == "function_call" and item["name"] != "exec_command"
    )


def wait_calls(requests: list) -> list[tuple[dict[str, Any], str]]:  # type: ignore[type-arg]
    """The owner's wait_agent calls, each its arguments and output."""
    owner = [r.body for r in requests if not is_subagent(r.body)][-1]
    items = owner.get("input") or []
    outputs = {i["call_id"]: str(i.get("output")) for i in items if "output" in i}
    return [
        (json.loads(i["arguments"]), outputs.get(i["call_id"], ""))
        for i in items
        if i.get("type") == "function_call" and i["name"] == "wait_agent"
    ]


NAMESPACES = {"v1": "multi_agent_v1", "v2": "collaboration"}
HELD = "review.1/t1"
"""review.1's answer is held until the owner's model calls wait_agent: the owner's
next finds nothing new, so it waits on the subagents, as next's hint says, then
asks next again. The answer may come just before codex begins the wait (the hook
runs first): on both protocols and binaries the wait then ends at once, not timed
out, as when it comes during the wait."""
V1_TOOLS = Counter(
    {
        "multi_agent_v1.spawn_agent": 4,
        "multi_agent_v1.send_input": 1,
        "multi_agent_v1.close_agent": 4,
    }
)
V2_TOOLS = Counter({"collaboration.spawn_agent": 4, "collaboration.followup_task": 1})
"""The owner's host calls in a run of CALLS with build.1 repaired: on v2 the repair
is a follow-up, and an ended call's idle child needs no close."""


async def test_a_real_owner_thread_runs_a_workflow_to_the_end(
    tmp_path: Path, multi_agent: str
) -> None:
    """spec: STEP-37, HOOK-1, HOOK-11 (four calls of three roles on the real host, one
    repaired: each completed, its tokens the mock's, each spawn on its role's pair)"""
    subagent = SubagentPolicy(broken=frozenset({"build.1/t1"}), usage=USAGE)
    subagent.hold(HELD)
    owner = OwnerPolicy(wait=1, drop_pair=True, wait_agents=True)

    def owner_waits(request: ModelRequest) -> Reply:
        """The owner's policy; the held review answers once the owner waits on it."""
        reply = owner(request)
        if any(call.name == WAIT_TOOL for call in reply.calls):
            subagent.release()
        return reply

    policies = Policies(owner_waits, subagent)
    with owned_run(tmp_path, policies, multi_agent=multi_agent) as setup:
        await setup.begin()
        ended = await setup.until_row("ended")
        await setup.owner_idle()
        rows = setup.rows()
        requests = setup.model.requests

    assert ended["status"] == "completed", rows
    assert spoken(rows) == {multi_agent}
    tools, waits = host_tools(requests), wait_calls(requests)
    assert waits, "the owner never waited on the held review"
    assert tools == (V2_TOOLS if multi_agent == "v2" else V1_TOOLS) + Counter(
        {f"{NAMESPACES[multi_agent]}.wait_agent": len(waits)}
    )
    review = next(
        r["thread_id"] for r in rows if r["row"] == "thread_started" and r["call"] == "review.1"
    )
    for arguments, output in waits:  # the hint's call: v2's takes no targets
        targets = {} if multi_agent == "v2" else {"targets": [review]}
        assert arguments == targets | {"timeout_ms": 30000}, arguments
        assert json.loads(output)["timed_out"] is False, output
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
        agent_type = kind if multi_agent == "v1" else None  # v2 asks for no agent type
        assert (line["decision"], line["warnings"]) == ("allow", []), line
        assert (line["agent_type"], line["model"], line["reasoning_effort"]) == (
            agent_type,
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


async def test_a_spawn_the_host_refuses_is_reported_and_holds_its_call(
    tmp_path: Path, multi_agent: str
) -> None:
    """spec: HOOK-1 (the reviewer's model is one codex does not serve: its spawn fails,
    the owner reports it --failed, the call is held spawn_failed; answered --retry
    once the role store names a served model, the run goes on and completes)"""
    pairs = PAIRS | {"reviewer": ("reviewer", "gpt-5.4-mini", "low")}
    policies = Policies(OwnerPolicy(), SubagentPolicy())
    with owned_run(tmp_path, policies, pairs, multi_agent=multi_agent) as setup:
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

    assert spoken(rows) == {multi_agent}
    assert (held["call"], held["reason"]) == ("review.1", "spawn_failed"), held
    assert "Unknown model `gpt-5.4-mini` for spawn_agent" in held["error"], held
    assert next(r for r in reports if r.get("reply") == "held")["call"] == "review.1"
    assert owner["status"]["type"] == "idle"
    assert answered.returncode == 0, answered.stderr
    assert ended["status"] == "completed", rows
    review = [r for r in rows if r.get("call") == "review.1" and r["row"] == "thread_started"]
    assert [(r["model"], r["effort"]) for r in review] == [(CODEX_MODEL, "low")]

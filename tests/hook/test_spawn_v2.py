"""`crw flow hook spawn` on multi-agent v2's spawn: codex names it
`collaborationspawn_agent` to the hook (tests/host/test_codex_multi_agent_v2.py),
with `task_name` and `fork_turns` and no agent_type. It is decided as v1's is: the
role's pair written in, a full-history fork refused, a leaf refused, one ledger line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.hook.spawn_helpers import allow, bind, entry, run_hook, spawn_input
from tests.hook.test_spawn import MARKED, deny

TASK_NAME = "crw_0123456789ab_build_1_t2_a3"


def v2_spawn(role: str = "architect", **tool_input: Any) -> dict[str, Any]:
    """The hook's stdin for the owner's v2 spawn_agent call."""
    call = spawn_input(MARKED.format(role=role), agent_type=None, task_name=TASK_NAME)
    call["tool_name"] = "collaborationspawn_agent"
    call["tool_input"] |= tool_input
    return call


@pytest.mark.parametrize("sent", [{}, {"fork_turns": "none"}])
def test_v2_spawn_is_allowed_with_no_history_and_the_roles_pair(
    tmp_path: Path, sent: dict[str, str]
) -> None:
    """spec: HOOK-1, HOOK-4: fork_turns absent (v2's default is a full-history fork)
    is written `none`; the role comes from the header, and no agent type is compared."""
    bind(tmp_path)
    hooked = run_hook(tmp_path, v2_spawn(**sent))
    assert hooked.reply == allow(
        {
            "message": MARKED.format(role="architect"),
            "model": "gpt-arch",
            "reasoning_effort": "high",
            "task_name": TASK_NAME,
            "fork_turns": "none",
        }
    )
    assert hooked.ledger == [
        entry(
            role="architect",
            op="build.1/t2",
            agent_type=None,
            model="gpt-arch",
            reasoning_effort="high",
        )
    ]


@pytest.mark.parametrize("fork_turns", ["all", "3", None, True])
def test_v2_spawn_asking_for_history_is_refused_as_a_full_history_fork(
    tmp_path: Path, fork_turns: object
) -> None:
    """spec: HOOK-3"""
    bind(tmp_path)
    hooked = run_hook(tmp_path, v2_spawn(fork_turns=fork_turns))
    assert hooked.reply == deny(
        "full_history_fork_refused: a full-history fork keeps the parent's pair, not its "
        'role\'s; spawn with fork_turns="none"'
    )
    [line] = hooked.ledger
    assert (line["decision"], line["refusal"], line["op"]) == (
        "deny",
        "full_history_fork_refused",
        "build.1/t2",
    )


def test_v2_spawn_by_a_subagent_is_refused_as_a_leaf(tmp_path: Path) -> None:
    """spec: HOOK-2 (codex gives a v2 child no spawn tool; the hook refuses one all the same)"""
    bind(tmp_path)
    hooked = run_hook(tmp_path, v2_spawn(fork_turns="none") | {"agent_id": "019a-child"})
    [line] = hooked.ledger
    assert (line["decision"], line["refusal"], line["agent_id"]) == (
        "deny",
        "leaf_spawn_refused",
        "019a-child",
    )


def test_another_collaboration_tool_is_left_alone(tmp_path: Path) -> None:
    """spec: HOOK-1"""
    bind(tmp_path)
    call = v2_spawn() | {"tool_name": "collaborationfollowup_task"}
    hooked = run_hook(tmp_path, call)
    assert (hooked.stdout, hooked.ledger) == ("", [])

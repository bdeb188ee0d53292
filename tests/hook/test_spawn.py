"""`crw flow hook spawn`: the owner's spawns decided by its orchestrator line, the
hook's reply as codex reads it and the ledger line of each decision."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crw.binding.owner import close_owner
from crw.host.sim.behaviour import role_of
from tests.hook.spawn_helpers import (
    OWNER,
    PAIRS,
    RUN,
    allow,
    bind,
    entry,
    run_hook,
    spawn_input,
)

MARKED = "crw-flow-op: build.1/t2-a3\nCRW-ROLE: {role}\n\nDo the task."


def deny(reason: str) -> dict[str, object]:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }


def test_owner_spawn_is_decided_by_its_open_line_and_not_once_it_is_closed(
    tmp_path: Path,
) -> None:
    """spec: HOOK-1"""
    call = spawn_input(MARKED.format(role="explorer"))
    assert run_hook(tmp_path, call).stdout == "" and run_hook(tmp_path, call).ledger == []

    bind(tmp_path)
    bound = run_hook(tmp_path, call)
    assert bound.reply == allow(
        call["tool_input"] | {"model": "gpt-explore", "reasoning_effort": "low"}
    )

    assert close_owner(tmp_path, OWNER, RUN) is None
    closed = run_hook(tmp_path, call)
    assert closed.stdout == ""
    assert closed.ledger == [entry(op="build.1/t2")]


def test_other_tools_are_left_alone(tmp_path: Path) -> None:
    """spec: HOOK-1"""
    bind(tmp_path)
    call = spawn_input(MARKED.format(role="explorer")) | {
        "tool_name": "exec_command",
        "tool_input": {"cmd": "ls"},
    }
    hooked = run_hook(tmp_path, call)
    assert (hooked.stdout, hooked.ledger) == ("", [])


def test_owner_defaults_to_codex_thread_id(tmp_path: Path) -> None:
    """spec: HOOK-1"""
    bind(tmp_path)
    call = spawn_input(MARKED.format(role="explorer"))
    del call["session_id"]
    hooked = run_hook(tmp_path, call, environ={"CODEX_THREAD_ID": OWNER})
    assert hooked.ledger == [entry(op="build.1/t2")]


def test_spawn_by_a_subagent_is_refused_as_a_leaf(tmp_path: Path) -> None:
    """spec: HOOK-2"""
    bind(tmp_path)
    call = spawn_input(MARKED.format(role="executor"), agent_type="executor") | {
        "agent_id": "019a-child",
        "agent_type": "explorer",
    }
    hooked = run_hook(tmp_path, call)
    assert hooked.reply == deny(
        "leaf_spawn_refused: a subagent of a crw flow run is a leaf and never spawns agents; "
        "do the task yourself and answer as the packet says"
    )
    assert hooked.ledger == [
        entry(
            agent_id="019a-child",
            decision="deny",
            refusal="leaf_spawn_refused",
            role="executor",
            op="build.1/t2",
            agent_type="executor",
            model="gpt-sent",
            reasoning_effort="minimal",
        )
    ]


def test_full_history_fork_is_refused(tmp_path: Path) -> None:
    """spec: HOOK-3"""
    bind(tmp_path)
    hooked = run_hook(tmp_path, spawn_input(MARKED.format(role="explorer"), fork_context=True))
    assert hooked.reply == deny(
        "full_history_fork_refused: a full-history fork keeps the parent's pair, not its "
        "role's; spawn with fork_context=false"
    )
    assert hooked.ledger == [
        entry(
            decision="deny",
            refusal="full_history_fork_refused",
            op="build.1/t2",
            model="gpt-sent",
            reasoning_effort="minimal",
        )
    ]


def test_other_spawn_is_allowed_with_the_roles_model_and_effort(tmp_path: Path) -> None:
    """spec: HOOK-4"""
    bind(tmp_path)
    call = spawn_input(MARKED.format(role="architect"), agent_type="architect", fork_context=False)
    hooked = run_hook(tmp_path, call)
    assert hooked.reply == allow(
        {
            "message": MARKED.format(role="architect"),
            "model": "gpt-arch",
            "reasoning_effort": "high",
            "agent_type": "architect",
            "fork_context": False,
        }
    )
    assert hooked.ledger == [
        entry(
            role="architect",
            op="build.1/t2",
            agent_type="architect",
            model="gpt-arch",
            reasoning_effort="high",
        )
    ]


@pytest.mark.parametrize("sent", ["minimal", None])
def test_undecided_effort_keeps_the_effort_sent(tmp_path: Path, sent: str | None) -> None:
    """spec: HOOK-5"""
    bind(tmp_path)
    call = spawn_input(MARKED.format(role="executor-t1"), agent_type="executor")
    if sent is None:
        del call["tool_input"]["reasoning_effort"]
    hooked = run_hook(tmp_path, call)
    assert hooked.reply == allow(call["tool_input"] | {"model": "gpt-t1"})
    assert hooked.ledger == [
        entry(
            role="executor-t1",
            op="build.1/t2",
            agent_type="executor",
            model="gpt-t1",
            reasoning_effort=sent,
        )
    ]


def test_undecided_role_keeps_the_whole_spawn_with_role_undecided(tmp_path: Path) -> None:
    """spec: HOOK-6"""
    bind(tmp_path, PAIRS | {"critic": {"agent_type": "reviewer", "effort": "high"}})
    for role in ("reviewer", "critic"):
        hooked = run_hook(tmp_path, spawn_input(MARKED.format(role=role), agent_type="reviewer"))
        assert hooked.reply == allow(hooked_input_of(role))
    assert hooked.ledger == [
        entry(
            role=role,
            op="build.1/t2",
            agent_type="reviewer",
            model="gpt-sent",
            reasoning_effort="minimal",
            warnings=["role_undecided"],
        )
        for role in ("reviewer", "critic")
    ]


def hooked_input_of(role: str) -> dict[str, object]:
    call = spawn_input(MARKED.format(role=role), agent_type="reviewer")
    tool_input: dict[str, object] = call["tool_input"]
    return tool_input


@pytest.mark.parametrize(
    ("header", "role"),
    [
        ("CRW-ROLE: critic", "critic"),
        ("CRW-ROLE:  architect  ", "architect"),
        ("CRW-ROLE: boss\nCRW-ROLE: critic", "explorer"),
        ("CRW-ROLE: critic reviewer", "explorer"),
        ("CRW-ROLE: Critic", "explorer"),
    ],
)
def test_role_is_the_first_crw_role_header_line_when_one_of_the_six(
    tmp_path: Path, header: str, role: str
) -> None:
    """spec: HOOK-7"""
    bind(tmp_path)
    hooked = run_hook(tmp_path, spawn_input(f"crw-flow-op: a.1/t1-a1\n{header}\n\ntask"))
    assert hooked.ledger[0]["role"] == role
    assert hooked.reply["hookSpecificOutput"]["updatedInput"]["model"] == PAIRS[role]["model"]


def test_crw_role_after_the_header_is_not_the_hooks_and_the_oracle_parser_is_unchanged(
    tmp_path: Path,
) -> None:
    """spec: HOOK-8"""
    bind(tmp_path)
    message = "crw-flow-op: a.1/t1-a1\n\nQuote:\nCRW-ROLE: architect"
    hooked = run_hook(tmp_path, spawn_input(message, agent_type="reviewer"))
    assert hooked.ledger[0]["role"] == "reviewer"
    assert role_of(message) == "architect"


@pytest.mark.parametrize(
    ("agent_type", "role"),
    [
        ("worker", "executor"),
        ("executor", "executor"),
        ("reviewer", "reviewer"),
        ("critic", "critic"),
    ],
)
def test_without_a_header_role_the_role_is_the_agent_types(
    tmp_path: Path, agent_type: str, role: str
) -> None:
    """spec: HOOK-9"""
    bind(tmp_path)
    hooked = run_hook(
        tmp_path, spawn_input("crw-flow-op: a.1/t1-a1\n\ntask", agent_type=agent_type)
    )
    assert hooked.ledger[0]["role"] == role


@pytest.mark.parametrize("agent_type", ["default", None])
def test_without_header_or_role_type_the_role_is_explorer(
    tmp_path: Path, agent_type: str | None
) -> None:
    """spec: HOOK-10"""
    bind(tmp_path)
    hooked = run_hook(
        tmp_path, spawn_input("crw-flow-op: a.1/t1-a1\n\ntask", agent_type=agent_type)
    )
    assert hooked.ledger[0]["role"] == "explorer"
    assert hooked.reply["hookSpecificOutput"]["updatedInput"]["model"] == "gpt-explore"


def test_each_decision_is_a_ledger_line_with_role_and_op(tmp_path: Path) -> None:
    """spec: HOOK-11"""
    bind(tmp_path)
    run_hook(tmp_path, spawn_input(MARKED.format(role="explorer")))
    run_hook(tmp_path, spawn_input("crw-flow-op: review.2/t14-a12\nCRW-ROLE: explorer\n\nx"))
    hooked = run_hook(tmp_path, spawn_input(MARKED.format(role="explorer"), fork_context=True))
    assert [(line["decision"], line["role"], line["op"]) for line in hooked.ledger] == [
        ("allow", "explorer", "build.1/t2"),
        ("allow", "explorer", "review.2/t14"),
        ("deny", "explorer", "build.1/t2"),
    ]


@pytest.mark.parametrize(
    ("role", "agent_type", "mismatch"),
    [
        ("executor-t1", "executor", False),
        ("critic", "reviewer", False),
        ("architect", "architect", False),
        ("executor-t1", "executor-t1", True),
        ("critic", "critic", True),
        ("executor", "reviewer", True),
        ("explorer", None, True),
        ("critic", None, True),
    ],
)
def test_header_role_that_does_not_pair_with_the_agent_type_warns(
    tmp_path: Path, role: str, agent_type: str | None, mismatch: bool
) -> None:
    """spec: HOOK-12 (a line an older crw bound has no critic pair)"""
    bind(tmp_path, {name: pair for name, pair in PAIRS.items() if name != "critic"})
    hooked = run_hook(tmp_path, spawn_input(MARKED.format(role=role), agent_type=agent_type))
    undecided = ["role_undecided"] if role == "critic" else []
    expected = ["role_agent_type_mismatch"] if mismatch else []
    assert hooked.ledger[0]["warnings"] == expected + undecided


def test_header_role_pairs_with_the_agent_type_its_run_pinned(tmp_path: Path) -> None:
    """spec: HOOK-12"""
    bind(tmp_path, PAIRS | {"architect": {"agent_type": "worker", "model": "gpt-arch"}})
    hooked = run_hook(tmp_path, spawn_input(MARKED.format(role="architect"), agent_type="worker"))
    assert hooked.ledger[0]["warnings"] == []


@pytest.mark.parametrize(
    "message",
    ["Look around.", "crw-flow-op: build.1\nCRW-ROLE: explorer", "x\ncrw-flow-op: a.1/t1-a1"],
)
def test_spawn_without_a_step_marker_is_unrecorded_spawn(tmp_path: Path, message: str) -> None:
    """spec: HOOK-13"""
    bind(tmp_path)
    hooked = run_hook(tmp_path, spawn_input(message, agent_type="explorer"))
    assert hooked.ledger == [entry(warnings=["unrecorded_spawn"])]
    assert hooked.reply == allow(
        spawn_input(message)["tool_input"] | {"model": "gpt-explore", "reasoning_effort": "low"}
    )


@pytest.mark.parametrize(
    ("agent_type", "role"),
    [("worker", "executor"), ("executor", "executor"), ("architect", "architect")],
)
def test_author_spawn_without_a_marker_is_unrecorded_author(
    tmp_path: Path, agent_type: str, role: str
) -> None:
    """spec: HOOK-14"""
    bind(tmp_path)
    hooked = run_hook(tmp_path, spawn_input("Fix it.", agent_type=agent_type))
    [line] = hooked.ledger
    assert (line["role"], line["warnings"]) == (role, ["unrecorded_author"])


def test_ledger_that_cannot_be_written_allows_the_spawn_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """spec: HOOK-15"""
    bind(tmp_path)
    (tmp_path / "flow-bound" / "decisions").write_text("not a directory\n")
    call = spawn_input(MARKED.format(role="explorer"))
    hooked = run_hook(tmp_path, call)
    assert hooked.reply == allow(
        call["tool_input"] | {"model": "gpt-explore", "reasoning_effort": "low"}
    )
    ledger = tmp_path / "flow-bound" / "decisions" / f"{OWNER}.jsonl"
    assert capsys.readouterr().err == (
        f"crw: warning: cannot write the spawn ledger {ledger}: File exists; the spawn goes "
        f"ahead as decided, unrecorded: make {ledger.parent} the user's own and writable\n"
    )


def test_ledger_open_to_others_is_not_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """spec: HOOK-15"""
    bind(tmp_path)
    decisions = tmp_path / "flow-bound" / "decisions"
    decisions.mkdir(mode=0o700)
    decisions.chmod(0o777)
    hooked = run_hook(tmp_path, spawn_input(MARKED.format(role="explorer")))
    assert hooked.reply["hookSpecificOutput"]["permissionDecision"] == "allow"
    assert list(decisions.iterdir()) == []
    assert "writable by group or others" in capsys.readouterr().err


@pytest.mark.parametrize("what", ["directory", "file", "link"])
def test_untrusted_flow_bound_reads_as_no_binding_and_refuses_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], what: str
) -> None:
    """spec: HOOK-16"""
    bind(tmp_path)
    bound = tmp_path / "flow-bound"
    owner_file = bound / f"{OWNER}.jsonl"
    if what == "directory":
        bound.chmod(0o777)
    elif what == "file":
        owner_file.chmod(0o666)
    else:
        real = tmp_path / "elsewhere.jsonl"
        owner_file.rename(real)
        owner_file.symlink_to(real)
    leaf = spawn_input(MARKED.format(role="explorer")) | {"agent_id": "019a-child"}
    hooked = run_hook(tmp_path, leaf)
    assert (hooked.stdout, hooked.ledger) == ("", [])
    err = capsys.readouterr().err
    assert err.startswith("crw: warning: ") and err.count("\n") == 1
    assert err.endswith("; read as no binding: the owner's spawns go ahead undecided\n")


def test_hook_input_that_is_not_json_goes_ahead(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An input that is not JSON is left alone, with a warning (docs/codex.md, which
    no requirement names)."""
    import io

    from crw.cli.owner.hook import spawn_command

    out = io.StringIO()
    assert spawn_command(str(tmp_path), stdin=io.BytesIO(b"{"), stdout=out, environ={}) == 0
    assert out.getvalue() == ""
    assert "the tool call goes ahead undecided" in capsys.readouterr().err


def test_ledger_line_is_one_json_object_a_line(tmp_path: Path) -> None:
    """spec: HOOK-11"""
    bind(tmp_path)
    run_hook(tmp_path, spawn_input("crw-flow-op: a.1/t1-a1\nCRW-ROLE: explorer\n\nü"))
    raw = (tmp_path / "flow-bound" / "decisions" / f"{OWNER}.jsonl").read_text()
    assert raw.count("\n") == 1 and json.loads(raw)["op"] == "a.1/t1"

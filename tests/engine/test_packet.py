"""The spawn message, the task packet, the App Server turn text and the repair text."""

from __future__ import annotations

import json
from typing import Any

import pytest

from crw.engine.config.roles import ROLES
from crw.engine.holds.app_resume import turn_text
from crw.engine.holds.decision import earlier_attempts
from crw.engine.steps.packet import (
    Packet,
    ToolEntry,
    build_packet,
    command_prefix,
    earlier_note,
    journaled_input,
    marker,
    op,
    overlay,
    repair_text,
    send_input_message,
    shell_environment_config,
    spawn_message,
    tool_entries,
    tools_section,
)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["files"],
    "properties": {"files": {"type": "array", "items": {"type": "string"}}},
}
P = "/work/runs/r1/build.1"
RUN_JSON = "/repo/.crw/flow/r1/run.json"
WORKFLOW = "/repo/fix.toml"
GO = "/usr/local/go"


def packet(**overrides: Any) -> str:
    args: dict[str, Any] = {
        "call": "build.1",
        "role": "executor",
        "workspace": P,
        "task": "Fix the date parser.",
        "output_schema": SCHEMA,
        "tmpdir": "/var/tmp/run",
        "go_root": GO,
        "run_json": RUN_JSON,
        "workflow_file": WORKFLOW,
        "writes": True,
    }
    return build_packet(Packet(**(args | overrides)))


def app_turn(k: int, attempt: int, **args: Any) -> str:
    """The App Server turn text as the call makes it: its journaled input, then the
    Repository tools section."""
    made = Packet(**args)
    tools = tools_section(made.tmpdir, made.go_root, made.run_json, made.workflow_file)
    return turn_text(journaled_input(made, k, attempt), tools)


def app_journal(k: int, attempt: int, **args: Any) -> str:
    return journaled_input(Packet(**args), k, attempt)


def app_args(**overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "call": "build.1",
        "k": 1,
        "attempt": 1,
        "role": "executor",
        "workspace": P,
        "task": "Fix the date parser.",
        "output_schema": SCHEMA,
        "tmpdir": "/var/tmp/run",
        "go_root": GO,
        "run_json": RUN_JSON,
        "workflow_file": WORKFLOW,
        "writes": True,
    }
    return args | overrides


def sections(text: str) -> list[str]:
    """The `## ` headings of a Markdown text, in order."""
    return [line[3:] for line in text.splitlines() if line.startswith("## ")]


def contract_schema(text: str) -> Any:
    """The schema as the shared convention finds it: the last ```json block after
    the last `## Output contract` line."""
    lines = text.splitlines()
    after = len(lines) - lines[::-1].index("## Output contract")
    opens = [i for i in range(after, len(lines)) if lines[i] == "```json"]
    start = opens[-1] + 1
    end = lines.index("```", start)
    return json.loads("\n".join(lines[start:end]))


def test_marker_and_op_name_the_call_turn_and_attempt() -> None:
    assert op("build.1", 2) == "build.1/t2"
    assert marker("build.1", 2, 3) == "build.1/t2-a3"


def test_spawn_message_is_exactly_the_specs_form() -> None:
    """spec: STEP-37, STEP-38"""
    message = spawn_message("build.1", 1, 2, "executor", P, "/s/packet-t1-a2.md")
    assert message.split("\n") == [
        "crw-flow-op: build.1/t1-a2",
        "CRW-ROLE: executor",
        "",
        f"Your shell starts in a directory that is NOT your workspace. Your workspace is {P}: "
        f"run every command with workdir {P} and edit only by absolute paths under {P}.",
        "Read the task packet /s/packet-t1-a2.md in full and follow it exactly. "
        "You are a leaf subagent: never spawn agents.",
        "Your final message is exactly the JSON object the packet names, and nothing else.",
    ]


def test_send_input_message_is_the_marker_line_and_the_input() -> None:
    """spec: STEP-39"""
    assert send_input_message("build.1/t2-a1", "fix it\nnow") == (
        "crw-flow-op: build.1/t2-a1\nfix it\nnow"
    )


def test_packet_confines_the_subagent_to_the_absolute_workspace() -> None:
    """spec: STEP-40"""
    text = packet()
    assert f"Your workspace is the absolute path `{P}`. Work only under it" in text
    assert f"absolute paths under `{P}`" in text


def test_packet_of_a_read_role_says_it_changes_nothing() -> None:
    """spec: STEP-41"""
    assert "Your role writes nothing, so you change nothing" in packet(
        role="explorer", writes=False
    )
    assert "writes nothing" not in packet(writes=True)


def test_packet_forbids_the_git_commands_that_move_the_repository() -> None:
    """spec: STEP-42"""
    text = packet()
    for command in ("commit", "add", "branch", "reset", "checkout"):
        assert f"`git {command}`" in text
    assert "Nobody runs" in text


def test_tools_section_names_the_go_of_verifier_go_root_and_its_file() -> None:
    """spec: STEP-43"""
    section = tools_section(None, GO, RUN_JSON, WORKFLOW)
    assert section is not None
    assert f"the go of verifier.go_root, `{GO}`, set by `[verifier] go_root` in `{WORKFLOW}`" in (
        section
    )


def test_go_prefix_is_the_specs_for_every_command_running_go() -> None:
    """spec: STEP-44"""
    prefix = 'PATH=/usr/local/go/bin:"$PATH" GOROOT=/usr/local/go GOTOOLCHAIN=local'
    assert command_prefix(tool_entries(None, GO)) == prefix
    section = tools_section(None, GO, RUN_JSON, WORKFLOW)
    assert section is not None
    assert f"every command that runs go: `{prefix}`" in section


def test_tmpdir_tool_comes_first_as_a_fact_naming_the_directory_and_run_json() -> None:
    """spec: STEP-45"""
    section = tools_section("/var/tmp/run", GO, RUN_JSON, WORKFLOW)
    assert section is not None
    tools = [line for line in section.splitlines() if line.startswith("- ") and ":" in line]
    assert tools[0] == (
        f"- TMPDIR: this run's temporary directory is `/var/tmp/run`, recorded as env.TMPDIR "
        f"in `{RUN_JSON}`. Every temporary file goes below it."
    )
    assert tools[1].startswith("- go:")


def test_tmpdir_comes_first_in_the_prefix_for_every_command() -> None:
    """spec: STEP-46"""
    prefix = command_prefix(tool_entries("/var/tmp/run", GO))
    assert prefix == (
        'TMPDIR=/var/tmp/run PATH=/usr/local/go/bin:"$PATH" GOROOT=/usr/local/go GOTOOLCHAIN=local'
    )
    section = tools_section("/var/tmp/run", GO, RUN_JSON, WORKFLOW)
    assert section is not None
    assert f"every command you run: `{prefix}`" in section


def test_tmpdir_comes_first_in_the_entries() -> None:
    """spec: STEP-47"""
    assert tool_entries("/var/tmp/run", GO) == [
        ToolEntry("TMPDIR", "/var/tmp/run"),
        ToolEntry("PATH", "/usr/local/go/bin"),
        ToolEntry("GOROOT", GO),
        ToolEntry("GOTOOLCHAIN", "local"),
    ]
    section = tools_section("/var/tmp/run", GO, RUN_JSON, WORKFLOW)
    assert section is not None
    listed = section.split("The entries, in order:\n")[1].splitlines()
    assert listed[0] == "- `TMPDIR=/var/tmp/run`"


def test_configuration_without_go_gives_the_tmpdir_tool_alone() -> None:
    """spec: STEP-49"""
    assert tool_entries("/var/tmp/run", None) == [ToolEntry("TMPDIR", "/var/tmp/run")]
    text = packet(go_root=None)
    assert "## Repository tools" in text
    assert "go_root" not in text
    assert "`TMPDIR=/var/tmp/run`" in text


def test_spec_without_env_gives_the_tools_of_before_without_tmpdir() -> None:
    """spec: STEP-50"""
    text = packet(tmpdir=None)
    assert "TMPDIR" not in text
    assert 'PATH=/usr/local/go/bin:"$PATH" GOROOT=/usr/local/go GOTOOLCHAIN=local' in text


def test_run_without_tools_has_no_tools_section() -> None:
    """spec: STEP-43"""
    assert tool_entries(None, None) == []
    assert tools_section(None, None, RUN_JSON, None) is None
    assert "## Repository tools" not in packet(tmpdir=None, go_root=None)


def test_session_packet_carries_the_entries_spawn_takes_no_environment() -> None:
    """spec: STEP-51: the packet names every entry, since the spawn message carries none."""
    text = packet()
    spawn = spawn_message("build.1", 1, 1, "executor", P, "/s/p.md")
    for entry in tool_entries("/var/tmp/run", GO):
        assert f"`{entry.shell()}`" in text
        assert entry.shell() not in spawn


def test_values_that_need_quoting_are_quoted_in_the_shell_form() -> None:
    assert command_prefix(tool_entries("/tmp/a b", "/opt/my go")) == (
        "TMPDIR='/tmp/a b' PATH='/opt/my go/bin':\"$PATH\" GOROOT='/opt/my go' GOTOOLCHAIN=local"
    )


@pytest.mark.parametrize("role", ROLES)
def test_packet_carries_the_role_overlay_without_a_spawning_section(role: str) -> None:
    """spec: STEP-52"""
    guidance = overlay(role)
    assert guidance
    assert guidance in packet(role=role)
    assert "spawn" not in guidance.lower()
    assert not any(line.startswith("#") for line in guidance.splitlines())


def test_packet_carries_the_note_about_earlier_attempts() -> None:
    """spec: STEP-53 (the note's text is the caller's)"""
    text = packet(note="The previous attempt was cut off. Read git -C P status first.")
    assert "## Earlier attempts\n\nThe previous attempt was cut off." in text
    assert "## Earlier attempts" not in packet()


def test_repair_packet_on_a_new_subagent_names_the_previous_answer_and_errors() -> None:
    text = packet(
        previous_answer='Done: {"files": 1}',
        repair_errors=["$.files: 1 is not of type 'array'"],
    )
    assert "- $.files: 1 is not of type 'array'" in text
    assert '```text\nDone: {"files": 1}\n```' in text
    assert contract_schema(text) == SCHEMA


def test_packet_ends_with_the_task_then_the_output_contract() -> None:
    """spec: STEP-55"""
    text = packet(note="cut off")
    assert sections(text) == [
        "Where you work",
        "Repository tools",
        "Your role",
        "Earlier attempts",
        "Task",
        "Output contract",
    ]
    assert "## Task\n\nFix the date parser.\n\n## Output contract" in text
    assert text.endswith("```\n")
    assert contract_schema(text) == SCHEMA


def test_output_contract_schema_is_pretty_printed_with_sorted_keys() -> None:
    text = packet()
    block = text.split("```json\n")[1].split("\n```")[0]
    assert block == json.dumps(SCHEMA, indent=2, sort_keys=True)


def test_previous_answer_with_backticks_cannot_close_its_fence() -> None:
    answer = '```json\n{}\n```\n## Output contract\n```json\n{"type": "string"}\n```'
    text = packet(previous_answer=answer, repair_errors=["$: no"])
    assert "````text\n" + answer + "\n````" in text
    assert contract_schema(text) == SCHEMA


def test_app_server_turn_text_ends_with_the_tools_section_after_the_task() -> None:
    """spec: STEP-56"""
    text = app_turn(**app_args(attempt=2))
    assert text.startswith("crw-flow-op: build.1/t1-a2\nCRW-ROLE: executor\n\n")
    assert sections(text)[-3:] == ["Task", "Output contract", "Repository tools"]
    section = tools_section("/var/tmp/run", GO, RUN_JSON, WORKFLOW)
    assert section is not None
    assert text.endswith(section + "\n")
    assert contract_schema(text) == SCHEMA


def test_app_server_journaled_input_is_the_turn_text_without_the_tools_section() -> None:
    """spec: STEP-57"""
    journaled = app_journal(**app_args())
    assert "## Repository tools" not in journaled
    assert "TMPDIR" not in journaled
    turn = app_turn(**app_args())
    assert turn.startswith(journaled.removesuffix("\n"))
    assert app_journal(**app_args(tmpdir="/elsewhere")) == journaled


def test_app_server_entries_are_leaf_config_keys_never_a_whole_policy() -> None:
    """spec: STEP-58"""
    config = shell_environment_config(tool_entries("/var/tmp/run", GO), "/usr/bin:/bin")
    assert config == {
        "shell_environment_policy.set.TMPDIR": "/var/tmp/run",
        "shell_environment_policy.set.PATH": "/usr/local/go/bin:/usr/bin:/bin",
        "shell_environment_policy.set.GOROOT": GO,
        "shell_environment_policy.set.GOTOOLCHAIN": "local",
    }
    assert "shell_environment_policy" not in config
    assert next(iter(config)) == "shell_environment_policy.set.TMPDIR"


def test_config_leaves_path_out_when_the_inherited_path_is_unknown() -> None:
    """A config value is literal: `$PATH` would not expand, and go's directory alone
    would hide every other command."""
    config = shell_environment_config(tool_entries(None, GO))
    assert config == {
        "shell_environment_policy.set.GOROOT": GO,
        "shell_environment_policy.set.GOTOOLCHAIN": "local",
    }


def test_repair_text_names_the_errors_the_answer_and_the_contract_again() -> None:
    errors = ["$.files: 1 is not of type 'array'", "$: 'x' is a required property"]
    text = repair_text(errors, 'Here it is: {"files": 1}', SCHEMA)
    for error in errors:
        assert f"- {error}" in text
    assert '```text\nHere it is: {"files": 1}\n```' in text
    assert sections(text) == ["Output contract"]
    assert contract_schema(send_input_message("build.1/t2-a1", text)) == SCHEMA


def test_app_server_repair_text_still_names_the_entries() -> None:
    """spec: STEP-61"""
    section = tools_section("/var/tmp/run", GO, RUN_JSON, WORKFLOW)
    text = repair_text(["$: no"], "{}", SCHEMA, tools=section)
    assert section is not None
    assert text.endswith(section + "\n")
    assert contract_schema(text) == SCHEMA


def test_note_about_earlier_attempts_is_none_for_a_first_turn() -> None:
    """spec: STEP-13"""
    assert earlier_note("executor", "/w/P", conversation_turn=1, attempt=1) is None


def test_note_says_a_repair_runs_on_a_new_subagent() -> None:
    """spec: STEP-13"""
    note = earlier_note("explorer", "/w/P", conversation_turn=2, attempt=1)
    assert note is not None and "repair turn, on a new subagent" in note
    assert "cut off" not in note


def test_note_of_a_later_attempt_says_the_earlier_was_cut_off() -> None:
    """spec: STEP-13, STEP-53: an executor's reads its workspace's state first."""
    executor = earlier_note("executor", "/w/P", conversation_turn=1, attempt=2)
    reviewer = earlier_note("reviewer", "/w/P", conversation_turn=1, attempt=2)
    assert executor is not None and "Attempt 1 of this call was cut off" in executor
    assert "git -C /w/P status" in executor
    assert reviewer is not None and "git" not in reviewer


def _step(k: int, attempt: int, place: int) -> dict[str, Any]:
    return {
        "row": "step_published",
        "call": "build.1",
        "k": k,
        "attempt": attempt,
        "marker": marker("build.1", k, attempt),
        "conversation_turn": place,
    }


def _lost(k: int, attempt: int) -> dict[str, Any]:
    return {
        "row": "session_attempt_lost",
        "call": "build.1",
        "k": k,
        "attempt": attempt,
        "reason": "turn_interrupted",
    }


def _packet_after(rows: list[dict[str, Any]], place: int, attempt: int, **more: Any) -> str:
    note = earlier_note("executor", P, place, attempt, earlier_attempts(rows))
    return packet(note=note, **more)


def test_the_packet_after_a_retried_then_lost_attempt_lists_both_and_is_no_repair() -> None:
    """spec: STEP-53, ATT-46: attempt 1 was held and retried, attempt 2 took its
    turn again at k=2 (the task turn, conversation turn 1) and was lost; attempt 3
    runs the task turn still: its packet lists every earlier attempt and says
    nothing of a repair, whatever its k."""
    held = {"row": "held", "call": "build.1", "reason": "host_failure", "error": "boom"}
    decided = {"row": "decision", "call": "build.1", "choice": "retry"}
    rows = [_step(1, 1, 1), held, decided, _step(2, 2, 1), _lost(2, 2)]
    text = _packet_after(rows, place=1, attempt=3)
    assert "repair turn" not in text and "answer is below" not in text
    assert "- attempt 1: build.1/t1-a1: held (host_failure: boom)" in text
    assert "- attempt 2: build.1/t2-a2: lost (turn_interrupted)" in text
    assert "Attempt 2 of this call was cut off before it answered; this is attempt 3." in text


def test_a_step_published_again_after_its_hold_is_listed_once() -> None:
    """spec: STEP-53, ATT-35: attempt 1's step was held unbound (a pause), published
    again on the resume, then bound and held again: the packet of attempt 2 names
    its marker once, with how it ended last."""
    paused = {"row": "held", "call": "build.1", "reason": "paused"}
    rows = [_step(1, 1, 1), paused, _step(1, 1, 1), paused]
    text = _packet_after(rows, place=1, attempt=2)
    assert "- attempt 1: build.1/t1-a1: held (paused)\n" in text


def test_the_packet_of_a_repair_on_a_new_subagent_says_repair_and_has_the_answer() -> None:
    """spec: STEP-53, ATT-46: the repair turn (conversation turn 2) spawned again
    after its attempt was lost says it is the repair, lists the lost attempt and
    carries the answer it repairs."""
    rows = [_step(1, 1, 1), _step(2, 1, 2), _lost(2, 1)]
    text = _packet_after(
        rows, place=2, attempt=2, previous_answer='{"wrong": 1}', repair_errors=["$: no"]
    )
    assert "This is the call's repair turn, on a new subagent" in text
    assert "- attempt 1: build.1/t1-a1, build.1/t2-a1: lost (turn_interrupted)" in text
    assert '{"wrong": 1}' in text and "- $: no" in text


def test_the_packet_after_a_plain_lost_attempt_lists_it_and_is_no_repair() -> None:
    """spec: STEP-53: the task turn's attempt 1 was lost; attempt 2 says so and
    lists it."""
    text = _packet_after([_step(1, 1, 1), _lost(1, 1)], place=1, attempt=2)
    assert "Attempt 1 of this call was cut off before it answered; this is attempt 2." in text
    assert "- attempt 1: build.1/t1-a1: lost (turn_interrupted)" in text
    assert "repair turn" not in text

"""What a call's turn says: the spawn message, the task packet, the turn texts.

The spec (session-calls.md, "The step") fixes the spawn message word for word and
what the packet holds; the texts here are the only place they are spelled. Two
shared conventions hold for every text built here, and simulated subagents and mock
models rely on them:

- a turn's text starts with the marker line `crw-flow-op: <call>/t<k>-a<n>` (a
  spawn's, and an App Server turn's, then `CRW-ROLE: <role>`);
- the schema the answer must satisfy is the last fenced block opened by a line
  "```json" after the last line `## Output contract`.

Repository tools (CRW-1488, CRW-1570) are entries `NAME=value` a subagent's commands
take: the run's recorded TMPDIR first, then the go of `[verifier] go_root`. They
travel three ways: as a shell prefix in the text (the session backend's only
carrier, since spawn_agent takes no environment), as the leaf config keys
`shell_environment_policy.set.<NAME>` of an App Server thread, and as the list the
packet names.
"""

from __future__ import annotations

import functools
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from crw.engine.config.role_names import WRITING_ROLES
from crw.engine.steps.markers import marker as marker
from crw.engine.steps.markers import op as op
from crw.host.compact import compact_encoder

MARKER_PREFIX = "crw-flow-op: "
ROLE_PREFIX = "CRW-ROLE: "
OUTPUT_CONTRACT = "## Output contract"
_CONFIG_KEY = "shell_environment_policy.set."
_KEY = compact_encoder(ensure_ascii=False, sort_keys=True)
"""The schema's JSON text that keys its section, by an encoder kept (`json.dumps`
builds one a call)."""
_GIT_FORBIDDEN = "`git commit`, `git add`, `git branch`, `git reset` or `git checkout`"


def spawn_message(
    call: str, k: int, attempt: int, role: str, workspace: str, packet_path: str
) -> str:
    """The spawn message, exactly the spec's: the marker and role lines, a blank
    line and three lines naming the workspace P and the packet (STEP-37, STEP-38)."""
    return "\n".join(
        (
            MARKER_PREFIX + marker(call, k, attempt),
            ROLE_PREFIX + role,
            "",
            "Your shell starts in a directory that is NOT your workspace. "
            f"Your workspace is {workspace}: run every command with workdir {workspace} "
            f"and edit only by absolute paths under {workspace}.",
            f"Read the task packet {packet_path} in full and follow it exactly. "
            "You are a leaf subagent: never spawn agents.",
            "Your final message is exactly the JSON object the packet names, and nothing else.",
        )
    )


def send_input_message(step_marker: str, text: str) -> str:
    """A send_input message: the marker line, then the turn's input (STEP-39)."""
    return f"{MARKER_PREFIX}{step_marker}\n{text}"


@dataclass(frozen=True)
class ToolEntry:
    """One repository tool entry. `value` is the variable's own value; for PATH it
    is the directory put in front of the PATH the shell already has."""

    name: str
    value: str

    def shell(self) -> str:
        """The entry as a shell assignment: PATH keeps the shell's own PATH after it."""
        if self.name == "PATH":
            return f'PATH={shlex.quote(self.value)}:"$PATH"'
        return f"{self.name}={shlex.quote(self.value)}"


def tool_entries(tmpdir: str | None, go_root: str | None) -> list[ToolEntry]:
    """The run's tool entries: TMPDIR first when the spec records one (CRW-1570),
    then PATH, GOROOT and GOTOOLCHAIN=local for the go of `go_root` (CRW-1488)."""
    entries = [ToolEntry("TMPDIR", tmpdir)] if tmpdir is not None else []
    if go_root is not None:
        entries += [
            ToolEntry("PATH", f"{go_root}/bin"),
            ToolEntry("GOROOT", go_root),
            ToolEntry("GOTOOLCHAIN", "local"),
        ]
    return entries


def command_prefix(entries: Sequence[ToolEntry]) -> str:
    """The prefix a command takes: `TMPDIR=<dir> PATH=<go_root>/bin:"$PATH" ...`."""
    return " ".join(entry.shell() for entry in entries)


def shell_environment_config(
    entries: Sequence[ToolEntry], inherited_path: str | None = None
) -> dict[str, str]:
    """The entries as leaf config keys `shell_environment_policy.set.<NAME>` for
    thread/start, thread/fork and thread/resume: key by key, never a whole policy,
    so the server's own policy stays (STEP-58).

    A config value is taken literally (Codex expands no `$PATH` in it), so PATH
    becomes `<go_root>/bin:<inherited_path>`, the server's PATH with go in front.
    With no `inherited_path` PATH is left out rather than set to go's directory
    alone, which would hide every other command; the turn text's prefix still
    carries it.
    """
    config: dict[str, str] = {}
    for entry in entries:
        if entry.name != "PATH":
            config[_CONFIG_KEY + entry.name] = entry.value
        elif inherited_path is not None:
            config[_CONFIG_KEY + entry.name] = f"{entry.value}:{inherited_path}"
    return config


def tools_section(
    tmpdir: str | None, go_root: str | None, run_json: str, workflow_file: str | None
) -> str | None:
    """The `## Repository tools` section, or None when the run has no tools.

    The TMPDIR tool comes first, as a fact naming the directory and run.json, and
    its prefix then goes in front of every command; with go alone the prefix goes
    in front of every command that runs go (STEP-43..50).
    """
    entries = tool_entries(tmpdir, go_root)
    if not entries:
        return None
    lines = ["## Repository tools", ""]
    if tmpdir is not None:
        lines.append(
            f"- TMPDIR: this run's temporary directory is `{tmpdir}`, recorded as env.TMPDIR "
            f"in `{run_json}`. Every temporary file goes below it."
        )
    if go_root is not None:
        where = f"`{workflow_file}`" if workflow_file else "the workflow file"
        lines.append(
            f"- go: the go of verifier.go_root, `{go_root}`, set by `[verifier] go_root` in "
            f"{where}. "
            "Use no other go and download no toolchain."
        )
    commands = "every command you run" if tmpdir is not None else "every command that runs go"
    lines += [
        "",
        f"Your shell may not have these set, so put this prefix in front of {commands}: "
        f"`{command_prefix(entries)}`",
        "",
        "The entries, in order:",
        *(f"- `{entry.shell()}`" for entry in entries),
    ]
    return "\n".join(lines)


def output_contract(output_schema: Mapping[str, Any]) -> str:
    """The `## Output contract` section: one sentence and the schema, pretty-printed
    with sorted keys, in a fenced ```json block."""
    return _contract(_KEY(output_schema))


@functools.lru_cache(maxsize=64)
def _contract(compact: str) -> str:
    """The section of the schema whose compact sorted JSON is `compact`, made once for the
    calls of every node that has it: json pretty-prints in Python, not in C."""
    schema = json.dumps(json.loads(compact), indent=2, sort_keys=True, ensure_ascii=False)
    return "\n".join(
        (
            OUTPUT_CONTRACT,
            "",
            "Your final message is exactly one JSON object that satisfies this JSON Schema, "
            "and nothing else.",
            "",
            "```json",
            schema,
            "```",
        )
    )


@functools.cache
def overlay(role: str) -> str:
    """The role's overlay (`crw/engine/overlays/<role>.md`): short guidance, with no
    section on spawning agents (STEP-52). Read once a process: every call's packet
    names it."""
    return (resources.files("crw.engine") / "overlays" / f"{role}.md").read_text("utf-8").strip()


@dataclass(frozen=True)
class Packet:
    """What a call's packet says (STEP-40..55).

    `tmpdir` is env.TMPDIR of run.json (at `run_json`), None when the spec has no
    env; `go_root` is `[verifier] go_root` of the workflow file `workflow_file`, or
    None; `writes` is False for a role that writes nothing. `note`,
    `previous_answer` and `repair_errors` are the earlier attempts'.
    """

    call: str
    role: str
    workspace: str
    task: str
    output_schema: Mapping[str, Any]
    tmpdir: str | None
    go_root: str | None
    run_json: str
    writes: bool
    workflow_file: str | None = None
    note: str | None = None
    previous_answer: str | None = None
    repair_errors: Sequence[str] | None = None


def earlier_note(
    role: str, workspace: str, conversation_turn: int, attempt: int, earlier: Sequence[str] = ()
) -> str | None:
    """The note about earlier attempts of a spawn step (STEP-13, STEP-53), None for
    a call's first turn on its first attempt: an attempt after one that was cut off
    (an executor's reads the state its workspace was left in first), with the
    call's `earlier` attempts one a line, or a repair spawned on a new subagent
    because the one that answered is closed. Whether it is the repair is the
    conversation's place (`conversation_turn` 2, ATT-46), never its k."""
    lines: list[str] = []
    if attempt > 1:
        lines.append(
            f"Attempt {attempt - 1} of this call was cut off before it answered; "
            f"this is attempt {attempt}."
        )
    if conversation_turn == 2:
        lines.append(
            "This is the call's repair turn, on a new subagent: the subagent that "
            "answered the task is closed, and its answer is below."
        )
    if attempt > 1 and earlier:
        lines += ["The call's earlier attempts:", *(f"- {line}" for line in earlier)]
    if attempt > 1 and role in WRITING_ROLES:
        lines.append(
            f"Read `git -C {workspace} status` and the diff first: "
            "the earlier attempts may have left changes there."
        )
    return "\n".join(lines) if lines else None


def _workspace_section(packet: Packet) -> str:
    p = packet.workspace
    scope = (
        f"Edit files only by absolute paths under `{p}` and leave every change in its working tree."
        if packet.writes
        else "Your role writes nothing, so you change nothing: no file, anywhere."
    )
    return "\n".join(
        (
            "## Where you work",
            "",
            f"Your workspace is the absolute path `{p}`. Work only under it: run every command "
            f"with workdir `{p}`.",
            scope,
            f"Nobody runs {_GIT_FORBIDDEN}: the run records the work itself.",
        )
    )


def _earlier_section(packet: Packet) -> str | None:
    if packet.note is None and packet.previous_answer is None:
        return None
    lines = ["## Earlier attempts", ""]
    if packet.note is not None:
        lines += [packet.note.strip(), ""]
    if packet.previous_answer is not None:
        lines += [
            "An earlier answer to this task did not satisfy the output contract:",
            *(f"- {error}" for error in packet.repair_errors or ()),
            "",
            "The answer was:",
            "",
            _fenced(packet.previous_answer, "text"),
            "",
            "Answer the task again with an object that satisfies the output contract.",
        ]
    return "\n".join(lines).rstrip()


def _compose(packet: Packet, tools: bool) -> str:
    """The packet's sections in the spec's order; the tools section goes first (the
    session packet) or nowhere (an App Server step's journaled input: its turn text
    takes the section after it, `app_resume.turn_text`)."""
    tools_text = (
        tools_section(packet.tmpdir, packet.go_root, packet.run_json, packet.workflow_file)
        if tools
        else None
    )
    sections = [
        f"# Task packet: {packet.call}, role {packet.role}",
        _workspace_section(packet),
        tools_text,
        f"## Your role\n\n{overlay(packet.role)}",
        _earlier_section(packet),
        f"## Task\n\n{packet.task.strip()}",
        output_contract(packet.output_schema),
    ]
    return "\n\n".join(section for section in sections if section is not None) + "\n"


def build_packet(packet: Packet) -> str:
    """The session step's task packet, self-contained Markdown (STEP-40..55).

    In order: where the subagent works, the Repository tools section when the run
    has tools, the role's overlay, the earlier attempts (`note`, and for a repair
    on a new subagent `previous_answer` with its `repair_errors`), the task, and
    last the output contract.
    """
    return _compose(packet, tools=True)


def journaled_input(packet: Packet, k: int, attempt: int) -> str:
    """The input an App Server step journals: the marker and role lines, then the
    packet without the Repository tools section, so it does not change with the
    run's environment (STEP-57). The turn text is this with the section after it
    (STEP-56, STEP-61: `app_resume.turn_text`)."""
    return _header(packet, k, attempt) + _compose(packet, tools=False)


def _header(packet: Packet, k: int, attempt: int) -> str:
    return f"{MARKER_PREFIX}{marker(packet.call, k, attempt)}\n{ROLE_PREFIX}{packet.role}\n\n"


def repair_text(
    errors: Sequence[str],
    previous_answer_text: str,
    output_schema: Mapping[str, Any],
    tools: str | None = None,
) -> str:
    """A repair turn's input: the validation errors, the answer that was given and
    the output contract again. `tools` (a `tools_section`) is appended for an App
    Server turn, whose text names the entries on every turn (STEP-61)."""
    parts = [
        "Your final message did not satisfy the output contract:\n"
        + "\n".join(f"- {error}" for error in errors),
        "Your final message was:\n\n" + fenced_answer(previous_answer_text),
        "Reply again with exactly one JSON object that satisfies the output contract, "
        "and nothing else.",
        output_contract(output_schema),
        tools,
    ]
    return "\n\n".join(part for part in parts if part is not None) + "\n"


def fenced_answer(text: str) -> str:
    """An earlier answer as a repair turn's input shows it (`crw.engine.steps.step_input`)."""
    return _fenced(text, "text")


def _fenced(text: str, info: str) -> str:
    """`text` in a code fence longer than any run of backticks in it, so the
    text can never close the fence (CommonMark)."""
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"

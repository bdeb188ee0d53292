"""How a simulated turn behaves: the `sim/script` rules and the plan of one turn.

Pure functions over the turn's text (its `crw-flow-op:` marker, its `CRW-ROLE:`
line, the output contract the shared conventions place in the newest user message
or in the packet file it names) and the scripts; the server acts the plan out.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from crw.host.sim.checks import check_behaviour, rejection
from crw.host.sim.files import NO_FILES, FileEffects, effects_from_wire
from crw.host.sim.instance import example_instance
from crw.host.sim.state import Usage, invalid_request

_MARKER = re.compile(r"^crw-flow-op:\s*(\S+)\s*$", re.MULTILINE)
_ROLE = re.compile(r"^CRW-ROLE:\s*(\S+)\s*$", re.MULTILINE)
# The spawn message's line (STEP-38) goes on after this sentence on the same line.
_PACKET = re.compile(r"^Read the task packet (.+?) in full and follow it exactly\.", re.MULTILINE)
_CONTRACT = "## Output contract"

_FAILURE_MESSAGES = {
    "usageLimitExceeded": "Quota exceeded. Check your plan and billing details.",
    "contextWindowExceeded": "Codex ran out of room in the model's context window.",
}
_TOKEN_KEYS = {
    "input": "input",
    "cachedInput": "cached_input",
    "output": "output",
    "reasoningOutput": "reasoning_output",
}


def marker_of(text: str) -> str | None:
    """The `<call>/t<k>-a<n>` of the turn's `crw-flow-op:` line, if it has one."""
    match = _MARKER.search(text)
    return match.group(1) if match else None


def role_of(text: str) -> str | None:
    match = _ROLE.search(text)
    return match.group(1) if match else None


def call_of(marker: str) -> str:
    """`build.1/t2-a1` → `build.1`: the call every turn of that marker belongs to."""
    return marker.split("/", 1)[0]


def read_text(path: str) -> str:
    """The UTF-8 text of the file at `path`, read with plain descriptor calls: a
    spawned agent's packet is read once a turn, and `Path.read_text`'s text layer
    asks the file whether it is a terminal and where it stands first."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        parts = []
        while chunk := os.read(fd, 1 << 16):
            parts.append(chunk)
    finally:
        os.close(fd)
    return b"".join(parts).decode()


def output_schema(text: str, read: Callable[[str], str] = read_text) -> dict[str, Any] | None:
    """The JSON Schema the turn must answer: the last ```json block after the last
    `## Output contract` line of `text`, else of the packet file `text` names.
    None when there is none, or it cannot be read or parsed."""
    if any(line.strip() == _CONTRACT for line in text.splitlines()):
        return _contract_schema(text)
    packet = _PACKET.search(text)
    if packet is None:
        return None
    try:
        # The name as `Path` would read it (no trailing slash), without making one.
        name = packet.group(1).strip()
        return _contract_schema(read(name.rstrip("/") or name))
    except OSError:
        return None


def _contract_schema(text: str) -> dict[str, Any] | None:
    lines = text.splitlines()
    heads = [i for i, line in enumerate(lines) if line.strip() == _CONTRACT]
    if not heads:
        return None
    after = lines[heads[-1] + 1 :]
    opens = [i for i, line in enumerate(after) if line.strip() == "```json"]
    if not opens:
        return None
    body = after[opens[-1] + 1 :]
    end = next((i for i, line in enumerate(body) if line.strip() == "```"), len(body))
    try:
        schema = json.loads("\n".join(body[:end]))
    except ValueError:
        return None
    return schema if isinstance(schema, dict) else None


def invalid_instance(schema: dict[str, Any] | None) -> Any:
    """A value that breaks `schema` (a missing required field, else a wrong type).
    jsonschema is imported here, by the scripts that ask for an invalid answer: a
    tenth of a second of every host's start otherwise."""
    import jsonschema  # type: ignore[import-untyped]

    candidates: list[Any] = [{"__invalid__": True}, "__invalid__", [], None, 0]
    for value in candidates:
        if schema is None or not jsonschema.Draft202012Validator(schema).is_valid(value):
            return value
    return candidates[0]


@dataclass(frozen=True)
class SlowStop:
    """`slowStop {reads?, seconds?}`: a turn that goes on after `turn/interrupt`
    answered, as a real host's does while it winds down: it streams nothing more,
    but it stays inProgress (its thread active) until its thread has been read
    `reads` times (`thread/read`, any client) and `seconds` of the host's clock
    have passed, both; then it completes interrupted."""

    reads: int = 0
    seconds: float = 0.0

    @classmethod
    def from_wire(cls, value: Any) -> SlowStop:
        if not isinstance(value, dict) or not value or not set(value) <= {"reads", "seconds"}:
            raise invalid_request("sim/script: slowStop takes reads and/or seconds")
        reads, seconds = value.get("reads", 0), value.get("seconds", 0)
        if not isinstance(reads, int) or isinstance(reads, bool) or reads < 0:
            raise invalid_request("sim/script: slowStop.reads must be an integer >= 0")
        if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds < 0:
            raise invalid_request("sim/script: slowStop.seconds must be a number >= 0")
        return cls(reads, float(seconds))


@dataclass(frozen=True)
class Behaviour:
    """One `sim/script` behaviour; the defaults are a plain valid final answer."""

    answer: Any = None
    has_answer: bool = False
    text: str | None = None
    phase: str | None = "final_answer"
    prose: str | None = None
    invalid_first: bool = False
    hang: bool = False
    fail: Any = None
    late_end: float = 0.0
    late_start: float = 0.0
    vanish: str | None = None
    seconds: float = 1.0
    responses: int = 1
    tokens: Usage | None = None
    unreachable: bool = False
    files: FileEffects = NO_FILES
    slow_stop: SlowStop | None = None
    empty_rollout: int = 0

    @classmethod
    def from_wire(cls, value: Any) -> Behaviour:
        """Read `behaviour` of `sim/script`; a malformed one is a -32600 error
        that names the key and what it takes."""
        check_behaviour(value)
        answer = rejection(value["reject"]) if "reject" in value else value.get("answer")
        return cls(
            answer=answer,
            has_answer="answer" in value or "reject" in value,
            text=value.get("text"),
            phase=value.get("phase", "final_answer"),
            prose=value.get("prose"),
            invalid_first=value.get("invalidFirst", False),
            hang=value.get("hang", False),
            fail=value.get("fail"),
            late_end=float(value.get("lateEnd", 0.0)),
            late_start=float(value.get("lateStart", 0.0)),
            vanish=value.get("vanish"),
            seconds=float(value.get("seconds", 1.0)),
            responses=value.get("responses", 1),
            tokens=_tokens(value["tokens"]) if "tokens" in value else None,
            unreachable=value.get("unreachable", False),
            files=effects_from_wire(value),
            slow_stop=SlowStop.from_wire(value["slowStop"]) if "slowStop" in value else None,
            empty_rollout=value.get("emptyRollout", 0),
        )


def _tokens(value: Any) -> Usage:
    if not isinstance(value, dict) or not set(value) <= set(_TOKEN_KEYS):
        raise invalid_request(f"sim/script: tokens takes only {', '.join(_TOKEN_KEYS)}")
    for key, count in value.items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise invalid_request(f"sim/script: tokens.{key} must be an integer >= 0")
    parts = {_TOKEN_KEYS[k]: v for k, v in value.items()}
    return Usage(**parts)


@dataclass(frozen=True)
class Script:
    """`sim/script {match: {marker?, role?}, behaviour}`; an empty match matches all."""

    behaviour: Behaviour
    marker: str | None = None
    role: str | None = None
    wire: dict[str, Any] = field(default_factory=dict, compare=False)
    """`{match, behaviour}` as it was sent: what `sim/scripts` lists."""

    @classmethod
    def from_wire(cls, params: dict[str, Any]) -> Script:
        match = match_of(params)
        behaviour = Behaviour.from_wire(params.get("behaviour", {}))
        wire = {"match": match, "behaviour": params.get("behaviour", {})}
        return cls(behaviour, match.get("marker"), match.get("role"), wire)

    def matches(self, marker: str | None, roles: set[str]) -> bool:
        """`marker` is a glob over the turn's marker; `role` names the header's
        CRW-ROLE or the thread's agentRole."""
        if self.marker is not None and (marker is None or not fnmatchcase(marker, self.marker)):
            return False
        return self.role is None or self.role in roles


def match_of(params: dict[str, Any]) -> dict[str, str]:
    """`match` of a `sim/script` or `sim/unscript` request: {marker?, role?}."""
    match = params.get("match") or {}
    if not isinstance(match, dict) or not set(match) <= {"marker", "role"}:
        raise invalid_request("sim/script: match takes only marker and role")
    if not all(isinstance(v, str) for v in match.values()):
        raise invalid_request("sim/script: match.marker and match.role must be strings")
    return dict(match)


def choose(scripts: list[Script], marker: str | None, roles: set[str]) -> Behaviour:
    """The behaviour of the newest script that matches, else the default one."""
    for script in reversed(scripts):
        if script.matches(marker, roles):
            return script.behaviour
    return Behaviour()


@dataclass(frozen=True)
class TurnPlan:
    """What one turn does: stream `messages` (text, phase) after `seconds`, then
    complete, or hang, fail with `fail` (a codexErrorInfo) or vanish; an
    `unreachable` one retries its model without end, as codex does when the
    model's endpoint refuses connections (`UNREACHABLE`). A turn of `responses`
    more than one works first: every `seconds / responses`, one model response
    that is a reasoning item and its token count (WORK_TOKENS), as a tool-using
    turn streams them, the last response its answer (or its end). `tokens` is
    what its model response counts: None when there was none (a failed or vanished
    turn, a silent hang) and its script counts nothing. `files` is what it does to
    its workspace when its seconds have passed, before its answer (none on an
    unreachable turn: its model never answers). `slow_stop`: how it stops when
    interrupted (None: at once). `late_end`: how long the turn reads interrupted
    with no error before it ends: a failing one after its `error`, a completing
    one after its answer, on an idle thread.
    `late_start`: how long the turn, once started, reads interrupted with no error
    on an idle thread before it runs, as codex shows a turn it has not yet set
    running (`crw.settings.INTERRUPTED_SETTLE_MIN`).
    `empty_rollout`: how many reads of its thread, from its start, the host refuses
    as codex 0.169 refuses a thread whose rollout file is made and not yet
    written (`Turns.refuse_empty`), with its turns or without."""

    messages: list[tuple[str, str | None]] = field(default_factory=list)
    seconds: float = 1.0
    responses: int = 1
    hang: bool = False
    fail: Any = None
    late_end: float = 0.0
    late_start: float = 0.0
    vanish: str | None = None
    tokens: Usage | None = None
    unreachable: bool = False
    files: FileEffects = NO_FILES
    slow_stop: SlowStop | None = None
    empty_rollout: int = 0


WORK_TOKENS = Usage(input=100, output=10)
"""What each working response before a turn's last counts (`responses`)."""

UNREACHABLE = {
    "message": "Reconnecting... waiting for network",
    "codexErrorInfo": {"responseStreamDisconnected": {"httpStatusCode": None}},
    "additionalDetails": "Connection failed: error sending request",
}
"""The error of each `error {willRetry: true}` codex 0.163.0 sends while its
model's endpoint refuses connections (tests/host/test_codex_unreachable.py)."""
RETRY_GAPS = (5.0, 10.0, 20.0, 40.0, 80.0)
"""Seconds between those retries, seen on codex 0.163.0; the last one repeats."""


def plan_turn(
    behaviour: Behaviour, prompt: str, schema: dict[str, Any] | None, *, first_of_call: bool
) -> TurnPlan:
    """The plan of a turn whose newest user message is `prompt`.

    A hanging turn streams a message only when its script gives one (`answer` or
    `text`), so an interrupt can find a final answer in it, as on the real host.
    """
    streams = not behaviour.hang or behaviour.has_answer or behaviour.text is not None
    failing = behaviour.fail is not None or behaviour.vanish is not None
    silent = failing or behaviour.unreachable or not streams
    messages = [] if silent else [(_answer_text(behaviour, schema, first_of_call), behaviour.phase)]
    tokens = behaviour.tokens
    if tokens is None and messages:
        tokens = Usage(
            input=len(prompt) // 4 + 100,
            output=sum(len(text) for text, _ in messages) // 4 + 10,
        )
    return TurnPlan(
        messages=messages,
        seconds=behaviour.seconds,
        responses=1 if behaviour.unreachable else behaviour.responses,
        hang=behaviour.hang,
        fail=behaviour.fail,
        late_end=behaviour.late_end,
        late_start=behaviour.late_start,
        vanish=behaviour.vanish,
        tokens=tokens,
        unreachable=behaviour.unreachable,
        files=NO_FILES if behaviour.unreachable else behaviour.files,
        slow_stop=behaviour.slow_stop,
        empty_rollout=behaviour.empty_rollout,
    )


def _answer_text(behaviour: Behaviour, schema: dict[str, Any] | None, first: bool) -> str:
    if behaviour.text is not None:
        body = behaviour.text
    else:
        if behaviour.invalid_first and first:
            value = invalid_instance(schema)
        elif behaviour.has_answer:
            value = behaviour.answer
        else:
            value = example_instance(schema) if schema is not None else {}
        body = json.dumps(value)
    return f"{behaviour.prose}\n\n{body}" if behaviour.prose else body


def turn_error(info: Any) -> dict[str, Any]:
    """The `error` of a turn that failed with codexErrorInfo `info` (a string, or
    an object of one key such as `{"httpConnectionFailed": {"httpStatusCode": 502}}`)."""
    message = _FAILURE_MESSAGES.get(str(info), f"simulated failure: {json.dumps(info)}")
    return {"message": message, "codexErrorInfo": info, "additionalDetails": None}

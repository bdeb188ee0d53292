"""A step file's and a close step's members, exactly (session-formats: "Step files").

The run process writes them on the file step bus (`crw.bus.steps`), and `crw flow
next` hands them to the owner (`crw.engine.owner.next_view`): plain data, checked member
by member when read back.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal

StepKind = Literal["spawn", "send_input"]

_STRINGS = ("call", "op", "marker", "role", "agent_type", "message", "packet", "workspace")
_OPTIONAL = ("model", "reasoning_effort", "agent_id")


@dataclass(frozen=True)
class StepFile:
    """A step file's members, exactly (session-formats: "Step files")."""

    call: str
    k: int
    attempt: int
    op: str
    marker: str
    role: str
    action: StepKind
    agent_type: str
    model: str | None
    reasoning_effort: str | None
    message: str
    packet: str
    workspace: str
    agent_id: str | None

    def to_json(self) -> dict[str, Any]:
        # Its members are strings, ints and None: a flat dict, not asdict's deep copy
        # (~15x slower; every step file is encoded from it).
        return {name: getattr(self, name) for name in _STEP_MEMBERS}

    @classmethod
    def from_json(cls, data: Any) -> StepFile:
        """The step file `data` holds.

        Raises:
            ValueError: `data` is not an object with exactly the members, well typed.
        """
        _check_members(data, {f.name for f in fields(cls)})
        for name in _STRINGS:
            _check(data, name, str)
        for name in _OPTIONAL:
            _check(data, name, (str, type(None)))
        _check(data, "k", int)
        _check(data, "attempt", int)
        if data["action"] not in ("spawn", "send_input"):
            raise ValueError(f"action {data['action']!r} is neither spawn nor send_input")
        return cls(**data)


_STEP_MEMBERS = tuple(f.name for f in fields(StepFile))


@dataclass(frozen=True)
class CloseStep:
    """A close step's members: the subagent `agent_id` of `call`'s attempt to close."""

    call: str
    attempt: int
    agent_id: str
    action: Literal["close"] = "close"

    def to_json(self) -> dict[str, Any]:
        return {
            "call": self.call,
            "attempt": self.attempt,
            "action": self.action,
            "agent_id": self.agent_id,
        }

    @classmethod
    def from_json(cls, data: Any) -> CloseStep:
        """The close step `data` holds.

        Raises:
            ValueError: `data` is not an object with exactly the members, well typed.
        """
        _check_members(data, {"call", "attempt", "action", "agent_id"})
        _check(data, "call", str)
        _check(data, "attempt", int)
        _check(data, "agent_id", str)
        if data["action"] != "close":
            raise ValueError(f"action {data['action']!r} is not close")
        return cls(call=data["call"], attempt=data["attempt"], agent_id=data["agent_id"])


def _check_members(data: Any, names: set[str]) -> None:
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if set(data) != names:
        raise ValueError(f"members {sorted(data)} are not {sorted(names)}")


def _check(data: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> None:
    value = data[name]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ValueError(f"{name} is {value!r}")

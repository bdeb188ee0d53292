"""The checks of a `sim/script` behaviour: an unknown key or a value of the wrong
kind is a -32600 error naming it and what it takes, before anything is scripted.
`crw host sim script` runs the same checks before it sends anything."""

from __future__ import annotations

import json
from typing import Any

from crw.host.sim.keys import BEHAVIOURS
from crw.host.sim.state import invalid_request

PHASES = ("final_answer", "commentary", "partial_answer", None)
VANISH = ("notLoaded", "systemError")
_FLAGS = ("invalidFirst", "hang", "unreachable")
_STRINGS = ("text", "prose")
REJECTED = "the change does not do what its task asks (a simulated rejection)"
"""The finding of a `reject: true` review."""


def check_behaviour(value: Any) -> None:
    """Refuse a behaviour with a key `sim/script` does not know, or a value of the
    wrong kind (the keys with a value of their own are checked where they are read)."""
    if not isinstance(value, dict):
        raise invalid_request("sim/script: behaviour must be an object of " + _known())
    unknown = sorted(set(value) - set(BEHAVIOURS))
    if unknown:
        raise invalid_request(f"sim/script: unknown behaviour key {unknown[0]!r}; " + _known())
    for key in _FLAGS:
        if not isinstance(value.get(key, False), bool):
            raise invalid_request(f"sim/script: {key} must be true or false, not {value[key]!r}")
    for key in _STRINGS:
        if not isinstance(value.get(key, ""), str):
            raise invalid_request(f"sim/script: {key} must be a string, not {value[key]!r}")
    if value.get("phase", "final_answer") not in PHASES:
        raise invalid_request(
            f"sim/script: phase must be {_one_of(PHASES)}, not {json.dumps(value['phase'])}"
        )
    if value.get("vanish") not in (None, *VANISH):
        raise invalid_request(
            f"sim/script: vanish must be {_one_of(VANISH)}, not {json.dumps(value['vanish'])}"
        )
    fail = value.get("fail")
    if fail is not None and not _failure(fail):
        raise invalid_request(
            "sim/script: fail must be a codexErrorInfo: a name such as "
            f'"usageLimitExceeded" or an object of one key, not {json.dumps(fail)}'
        )
    late = value.get("lateEnd", 0)
    if not isinstance(late, int | float) or isinstance(late, bool) or late < 0:
        raise invalid_request("sim/script: lateEnd must be a number >= 0")
    start = value.get("lateStart", 0)
    if not isinstance(start, int | float) or isinstance(start, bool) or start < 0:
        raise invalid_request("sim/script: lateStart must be a number >= 0")
    seconds = value.get("seconds", 1.0)
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds < 0:
        raise invalid_request("sim/script: seconds must be a number >= 0")
    responses = value.get("responses", 1)
    if not isinstance(responses, int) or isinstance(responses, bool) or responses < 1:
        raise invalid_request("sim/script: responses must be an integer >= 1")
    empty = value.get("emptyRollout", 0)
    if not isinstance(empty, int) or isinstance(empty, bool) or empty < 0:
        raise invalid_request("sim/script: emptyRollout must be an integer >= 0")
    if "reject" in value and ("answer" in value or "text" in value):
        raise invalid_request("sim/script: reject is an answer of its own: drop answer and text")


def _one_of(values: tuple[str | None, ...]) -> str:
    return " or ".join(json.dumps(v) for v in values)


def _known() -> str:
    return "known: " + ", ".join(BEHAVIOURS)


def _failure(value: Any) -> bool:
    if isinstance(value, str):
        return bool(value)
    return isinstance(value, dict) and len(value) == 1


def rejection(value: Any) -> dict[str, Any]:
    """A review's answer that rejects (docs/review.md) with the findings of `reject`."""
    if value is True:
        findings = [REJECTED]
    elif isinstance(value, str) and value:
        findings = [value]
    elif isinstance(value, list) and value and all(isinstance(f, str) for f in value):
        findings = list(value)
    else:
        raise invalid_request(
            "sim/script: reject must be true, a finding or a non-empty list of findings, "
            f"not {json.dumps(value)}"
        )
    return {"verdict": "reject", "findings": findings}

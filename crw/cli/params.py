"""The parameter types the commands share: whole numbers, seconds, ids, --json,
--all and --state, each with the one-line error a wrong value gets.

Only cyclopts and the standard library are imported here, as in every module of
the command tree.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Annotated, Any

from cyclopts import Parameter, Token

from crw.cli.output import one_line

_WHOLE = re.compile(r"[0-9]+")


def _whole_number(type_: Any, tokens: Sequence[Token]) -> int:
    """An integer written as digits: `1.5`, `1e3` and `0x1` are refused, never rounded."""
    text = tokens[0].value
    if _WHOLE.fullmatch(text) is None:
        raise ValueError(f"{text} is not a whole number; copy the step's")
    return int(text)


def _seconds(type_: Any, value: float | None) -> None:
    if value is not None and (not math.isfinite(value) or value < 0):
        raise ValueError(f"{value:g} is not a number of seconds; pass a finite number >= 0")


def one_line_id(type_: Any, value: str | None) -> None:
    if value is not None and one_line(value) != value:
        raise ValueError(
            "It holds a control character (a newline, a NUL, a bidi override, ...); "
            "copy the id as is"
        )


Whole = Annotated[int, Parameter(converter=_whole_number)]
Seconds = Annotated[float, Parameter(validator=_seconds)]
MaybeSeconds = Annotated[float | None, Parameter(validator=_seconds)]
"""Seconds, or None when the option is not given (no limit)."""
Id = Annotated[str, Parameter(validator=one_line_id)]

Json = Annotated[bool, Parameter(name="--json", negative="", help="Print one JSON object.")]
AllCalls = Annotated[
    bool,
    Parameter(
        name="--all",
        negative="",
        help="List every call (a run of many calls is summarised; --json lists every call).",
    ),
]
State = Annotated[
    str | None,
    Parameter(
        name="--state",
        help="The state directory (default: $CRW_STATE, else .crw/ at the repository root).",
    ),
]


def _count(type_: Any, tokens: Sequence[Token]) -> int:
    """A number of things, 1 or more, written as digits."""
    text = tokens[0].value
    if _WHOLE.fullmatch(text) is None or int(text) < 1:
        raise ValueError(f"{text} is no number of runs; pass a whole number, 1 or more")
    return int(text)


Count = Annotated[int, Parameter(converter=_count)]

"""An extracted answer's message as the completed row keeps it: the result once.

A result taken out of prose (HARV-5) was kept twice: as the row's `result` and
inside `raw_text`, the message as it was. `result` is what every reader takes
(the replay, the gate's inputs, review, `status --results`, the results file);
only the shadow replay reads the message, to judge it again. So the row keeps
`result` and `prose`, the message with the object's text cut out, and
`result_at`, where it stood; `message` puts the result's canonical JSON back.
That text may differ from the agent's in spaces and key order, never in what the
harvest makes of it: `split` cuts the message only when the message read back
gives the same result (else the row keeps `raw_text` whole, as a crw before did).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from crw.engine import answer


def message(prose: str, at: int, result: Any) -> str:
    """The message of `prose` with `result`'s canonical JSON back at `at`."""
    return prose[:at] + answer.canonical(result) + prose[at:]


def split(text: str, result: Any, result_digest: str) -> tuple[str, int] | None:
    """`text`, a message `result` was taken out of, without the object's text, and
    where it stood; None when the message read back (`message`) would not give
    the result of `result_digest`, taken out of prose."""
    span = answer.object_span(text)
    if span is None:
        return None
    start, end = span
    prose = text[:start] + text[end:]
    again = answer.extract(message(prose, start, result))
    if not again.extracted or again.result is None:
        return None
    return (prose, start) if answer.digest(again.result) == result_digest else None


def of_row(row: Mapping[str, Any]) -> str:
    """The answer message as a completed row keeps it: `raw_text` (a crw before,
    or a message `split` would not cut), `prose` with its result back, or, for a
    message that is the object itself, its result."""
    raw, prose, at = row.get("raw_text"), row.get("prose"), row.get("result_at")
    if row.get("extracted") and isinstance(raw, str):
        return raw
    if row.get("extracted") and isinstance(prose, str) and isinstance(at, int):
        return message(prose, at, row.get("result"))
    return json.dumps(row.get("result"))

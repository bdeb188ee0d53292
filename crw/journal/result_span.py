"""A completed row whose result was taken out of prose keeps its answer once.

The row keeps the message as it was (`raw_text`, HARV-7) and, rather than a
second copy of the object in `result`, where the object stands in it
(`result_span`: [start, end], in characters, the slice the harvest parsed). The
row's `result` is that slice's JSON, its keys sorted at every level: the
canonical result its result_digest is over (HARV-6), as a row that keeps
`result` holds it. The journal writes no `result` beside a span
(`crw.journal.log.encode_body`) and puts it back when it reads the row
(`with_results`), so every reader (replay, review, status, the shadow) reads
`result` as before. A row without a span keeps its `result` and reads as it did.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

SPAN = "result_span"
"""The field's name in a row."""
SPAN_FIELD = b'"%s":' % SPAN.encode()
"""How the field starts in a journal line: only bytes holding it have a row to fill."""

_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def result_in(raw_text: str, span: Sequence[int]) -> Any:
    """The result `span` stands for in `raw_text`: the JSON of its slice, keys
    sorted at every level.

    Raises:
        ValueError: the span is no [start, end] of the text, or its slice is no JSON.
    """
    start, end = span
    if not (isinstance(start, int) and isinstance(end, int) and 0 <= start <= end):
        raise ValueError(f"result_span {list(span)} is no [start, end]")
    return json.loads(raw_text[start:end], object_pairs_hook=_sorted)


def _sorted(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    object_ = dict(pairs)  # a repeated key: the last one, as json reads it
    return {key: object_[key] for key in sorted(object_)}


def reads_back(raw_text: str) -> bool:
    """Whether the journal reads `raw_text` back as it was, character for
    character, so a span into it still stands where it did: a high surrogate
    directly followed by a low one reads back as one character (`crw.journal.log`)."""
    return raw_text.isascii() or _PAIR.search(raw_text) is None


def with_results(rows: Iterable[dict[str, Any]]) -> None:
    """Give each completed row read with a `result_span` and no `result` its result
    (`result_in`); a span that gives none (a row edited by hand) leaves it without."""
    for row in rows:
        span = row.get(SPAN)
        if span is None or "result" in row or row.get("row") != "completed":
            continue
        raw_text = row.get("raw_text")
        if not isinstance(raw_text, str) or not isinstance(span, list) or len(span) != 2:
            continue
        try:
            row["result"] = result_in(raw_text, span)
        except (ValueError, RecursionError):
            continue

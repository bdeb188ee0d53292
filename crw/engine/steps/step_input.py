"""A repair step's input as the journal keeps it: the answer it repairs, once.

A repair turn's input names the answer it repairs (`packet.repair_text`), and its
step row keeps that answer in `previous_answer` too: a 1 MiB answer was written
twice in one row, and each time near doubled by JSON's escapes. The row keeps the
input without the fenced answer and `input_answer_at`, where it goes; `full` puts
it back, the text the turn was sent (its `input_digest` is over that text). A row
written before has its whole input and no `input_answer_at`: it reads as it did.

A later step of the call that repairs the same answer (the attempt after a lost
repair, a held repair taken again) does not copy it: its row names the step row
that holds it (`previous_answer_in`, that row's marker; `refer`), and `answer_of`
reads it from the call's rows. A row written before holds its own copy: it reads
as it did.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from crw.engine.steps.packet import fenced_answer

if TYPE_CHECKING:  # the models are pydantic's: a reader of plain rows does not load them
    from crw.journal.rows import StepPublished

Row = Mapping[str, Any]


def _get(step: StepPublished | Row, name: str) -> Any:
    return step.get(name) if isinstance(step, Mapping) else getattr(step, name, None)


def fold(step: StepPublished) -> StepPublished:
    """`step` as the journal keeps it: its input without the fenced previous answer
    (the first place it stands), when it holds it; else `step` as it is."""
    if not isinstance(step.input, str) or not isinstance(step.previous_answer, str):
        return step
    hole = fenced_answer(step.previous_answer)
    at = step.input.find(hole)
    if at < 0:
        return step
    rest = step.input[:at] + step.input[at + len(hole) :]
    return step.model_copy(update={"input": rest, "input_answer_at": at})


def full(input_text: str | None, previous_answer: Any, at: int | None) -> str:
    """The input a step's turn was sent: the row's `input` with its previous answer,
    fenced, put back at `input_answer_at` (none: the input is whole)."""
    text = input_text or ""
    if at is None or not isinstance(previous_answer, str):
        return text
    return text[:at] + fenced_answer(previous_answer) + text[at:]


def of(step: StepPublished, rows: Iterable[Row] = ()) -> str:
    """The whole input of a published step's row; `rows`, the call's, hold the
    answer a row that refers to it repairs."""
    return full(step.input, answer_of(step, rows), step.input_answer_at)


def holder(step: StepPublished | Row) -> str | None:
    """The marker of the step row that holds the answer `step` repairs: its own
    when it holds it, else the row it names; None when it repairs none."""
    if _get(step, "previous_answer") is not None:
        marker = _get(step, "marker")
        return marker if isinstance(marker, str) else None
    named = _get(step, "previous_answer_in")
    return named if isinstance(named, str) else None


def answer_in(rows: Iterable[Row], marker: str | None) -> Any:
    """The previous answer the step row of `marker` holds among `rows` (the
    call's), or None."""
    if marker is None:
        return None
    found = None
    for row in rows:
        if (
            row.get("row") == "step_published"
            and row.get("marker") == marker
            and row.get("previous_answer") is not None
        ):
            found = row.get("previous_answer")
    return found


def answer_of(step: StepPublished | Row, rows: Iterable[Row] = ()) -> Any:
    """The answer `step` repairs: its own `previous_answer`, else the one the row
    it names holds among `rows`; None when it repairs none."""
    own = _get(step, "previous_answer")
    if own is not None:
        return own
    named = _get(step, "previous_answer_in")
    return answer_in(rows, named) if isinstance(named, str) else None


def refer(step: StepPublished, marker: str | None) -> StepPublished:
    """`step` as the journal keeps it when the answer it repairs is held already
    by the step row of `marker`: naming that row instead of a copy (fold first:
    its input is cut where the answer goes). `step` as it is when `marker` is
    None or names `step` itself."""
    if marker is None or marker == step.marker or step.previous_answer is None:
        return step
    return step.model_copy(update={"previous_answer": None, "previous_answer_in": marker})

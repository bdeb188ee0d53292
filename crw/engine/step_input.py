"""A repair step's input as the journal keeps it: the answer it repairs, once.

A repair turn's input names the answer it repairs (`packet.repair_text`), and its
step row keeps that answer in `previous_answer` too: a 1 MiB answer was written
twice in one row, and each time near doubled by JSON's escapes. The row keeps the
input without the fenced answer and `input_answer_at`, where it goes; `full` puts
it back, the text the turn was sent (its `input_digest` is over that text). A row
written before has its whole input and no `input_answer_at`: it reads as it did.
"""

from __future__ import annotations

from typing import Any

from crw.engine.packet import fenced_answer
from crw.journal.rows import StepPublished


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


def of(step: StepPublished) -> str:
    """The whole input of a published step's row."""
    return full(step.input, step.previous_answer, step.input_answer_at)

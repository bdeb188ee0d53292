"""A repair step's row keeps the answer it repairs once; its input reads whole."""

from __future__ import annotations

from crw.engine.calls import conversation
from crw.engine.steps import packet, step_input
from crw.journal.rows import StepPublished

ANSWER = '{"summary": 5, "note": "``` fenced"}'
SCHEMA = {"type": "object", "required": ["summary"]}
ERRORS = ["$.summary: 5 is not of type 'string'"]
MESSAGE = packet.send_input_message("build.1/t2-a1", packet.repair_text(ERRORS, ANSWER, SCHEMA))


def repair(input_text: str, previous: object = ANSWER) -> StepPublished:
    return StepPublished(
        call="build.1", k=2, attempt=1, action="send_input", input=input_text,
        previous_answer=previous, repair=True, conversation_turn=2,
    )  # fmt: skip


def test_a_repair_row_keeps_its_input_without_the_answer_and_reads_it_whole() -> None:
    folded = step_input.fold(repair(MESSAGE))
    assert folded.input is not None and ANSWER not in folded.input
    assert folded.input_answer_at == MESSAGE.index("````text")
    assert step_input.of(folded) == MESSAGE
    row = folded.model_dump(exclude_none=True)
    (turn,) = conversation.conversation("build.1", [row, {"row": "turn_started", "call": "build.1",
                                                          "k": 2, "attempt": 1}])  # fmt: skip
    assert turn.input == MESSAGE


def test_a_row_written_before_reads_as_it_did() -> None:
    """A row with its whole input and no input_answer_at; a step whose input does
    not name its answer (a spawn's message) is kept as it is."""
    whole = repair(MESSAGE)
    assert step_input.of(whole) == MESSAGE
    spawn = repair("crw-flow-op: build.1/t2-a2\nRead the task packet …")
    assert step_input.fold(spawn) == spawn
    assert step_input.fold(repair(MESSAGE, previous={"summary": 5})) == repair(
        MESSAGE, previous={"summary": 5}
    )


def test_a_later_step_names_the_row_that_holds_the_answer_and_reads_it_whole() -> None:
    """The step that takes a repair again (a new attempt, or a held repair taken
    again on its thread) names the repair's row instead of copying its answer;
    its input and its answer read back from the call's rows."""
    held = step_input.fold(repair(MESSAGE)).model_copy(update={"marker": "build.1/t2-a1"})
    again_text = packet.send_input_message(
        "build.1/t3-a2", packet.repair_text(ERRORS, ANSWER, SCHEMA)
    )
    again = StepPublished(
        call="build.1", k=3, attempt=2, marker="build.1/t3-a2", action="send_input",
        input=again_text, previous_answer=ANSWER, repair=True, conversation_turn=2,
    )  # fmt: skip
    kept = step_input.refer(step_input.fold(again), step_input.holder(held))
    assert kept.previous_answer is None and kept.previous_answer_in == "build.1/t2-a1"
    assert kept.input is not None and ANSWER not in kept.input
    rows = [held.model_dump(exclude_none=True), kept.model_dump(exclude_none=True)]
    assert step_input.answer_of(kept, rows) == ANSWER
    assert step_input.of(kept, rows) == again_text
    assert step_input.holder(kept) == "build.1/t2-a1"  # a third names the holder, not kept
    turns = conversation.conversation("build.1", [*rows, {"row": "turn_started",
                                      "call": "build.1", "k": 3, "attempt": 2}])  # fmt: skip
    assert [turn.input for turn in turns] == [again_text]


def test_a_later_step_with_its_own_copy_reads_as_it_did() -> None:
    """A row a crw before wrote holds its own copy: it is its answer, whatever
    the rows; a step that repairs nothing names no row."""
    copy = repair(MESSAGE).model_copy(update={"marker": "build.1/t3-a2"})
    assert step_input.answer_of(copy) == ANSWER and step_input.of(copy) == MESSAGE
    assert step_input.holder(copy) == "build.1/t3-a2"
    assert step_input.refer(copy, "build.1/t3-a2") == copy  # itself: nothing to name
    plain = repair("task", previous=None)
    assert step_input.holder(plain) is None and step_input.refer(plain, "x") == plain
    assert step_input.answer_in([], "build.1/t2-a1") is None

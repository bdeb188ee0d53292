"""A repair step's row keeps the answer it repairs once; its input reads whole."""

from __future__ import annotations

from crw.engine import conversation, packet, step_input
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

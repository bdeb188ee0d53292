"""A turn's answer: which message, the JSON object in it, canonical form, judgement."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crw.engine.answers.answer import (
    NO_OBJECT,
    Empty,
    Extracted,
    Invalid,
    Message,
    Valid,
    canonical,
    digest,
    extract,
    judge,
    take_answer,
    validate,
)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["files"],
    "properties": {"files": {"type": "array", "items": {"type": "string"}}},
    "additionalProperties": False,
}

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text(), json_values, max_size=6)


def test_answer_is_the_last_final_answer_message() -> None:
    """spec: HARV-2"""
    messages = [
        Message("looking", "commentary"),
        Message('{"a": 1}', "final_answer"),
        Message("more", "commentary"),
        Message('{"a": 2}', "final_answer"),
        Message("trailing", None),
    ]
    assert take_answer(messages) == '{"a": 2}'


def test_answer_without_phases_is_the_last_message_without_one() -> None:
    """spec: HARV-3"""
    assert take_answer([Message("first", None), Message("second", None)]) == "second"


def test_unphased_message_after_commentary_is_no_answer() -> None:
    """spec: HARV-3"""
    assert take_answer([Message("thinking", "commentary"), Message('{"a": 1}', None)]) is None


def test_commentary_is_never_the_answer() -> None:
    """spec: HARV-4"""
    assert take_answer([Message('{"a": 1}', "commentary")]) is None
    assert take_answer([]) is None


def test_partial_answer_is_no_answer() -> None:
    """spec: HARV-4"""
    assert take_answer([Message('{"a": 1}', "partial_answer")]) is None
    assert take_answer([Message("x", "partial_answer"), Message("y", None)]) == "y"


def test_message_that_is_a_json_object_is_taken_whole_not_extracted() -> None:
    """spec: HARV-5, HARV-7"""
    text = ' {"files": ["a.py"]}\n'
    assert extract(text) == Extracted({"files": ["a.py"]}, extracted=False, raw_text=text)


def test_object_that_ends_prose_is_extracted() -> None:
    """spec: HARV-5, HARV-7"""
    text = 'I looked at {some} things.\nResult: {"files": ["a.py"], "n": {"k": "}"}}\n'
    assert extract(text) == Extracted(
        {"files": ["a.py"], "n": {"k": "}"}}, extracted=True, raw_text=text
    )


def test_object_in_a_closing_code_fence_is_extracted() -> None:
    """spec: HARV-5"""
    text = 'Here:\n```json\n{"files": []}\n```\n'
    assert extract(text) == Extracted({"files": []}, extracted=True, raw_text=text)


def test_object_followed_by_prose_is_not_the_answer() -> None:
    """spec: HARV-5: only the object that ends the message is taken."""
    assert extract('{"files": []} and that is all').result is None


def test_earlier_object_is_passed_over_for_the_one_that_ends_the_message() -> None:
    assert extract('Was {"a": 1}, now {"a": 2}').result == {"a": 2}


def test_text_without_an_object_has_no_result() -> None:
    for text in ("", "no json here", "[1, 2]", '"a string"', "{not json}", '{"a": NaN}'):
        assert extract(text) == Extracted(None, extracted=False, raw_text=text)


@given(
    prose=st.text(alphabet=st.characters(blacklist_characters="{}")),
    value=json_objects,
    indent=st.sampled_from([None, 2]),
)
def test_any_object_after_prose_without_braces_is_extracted_equal(
    prose: str, value: dict[str, Any], indent: int | None
) -> None:
    """spec: HARV-5"""
    text = prose + json.dumps(value, indent=indent)
    found = extract(text)
    assert found.result == value
    assert found.raw_text == text
    assert found.extracted == bool(prose.strip(" \t\n\r"))  # JSON whitespace


@given(value=json_objects)
def test_message_that_is_exactly_an_object_is_not_marked_extracted(value: dict[str, Any]) -> None:
    """spec: HARV-7"""
    assert extract(json.dumps(value)) == Extracted(value, False, json.dumps(value))


@given(value=json_objects)
def test_canonical_and_digest_do_not_depend_on_key_order(value: dict[str, Any]) -> None:
    """spec: HARV-6"""
    reordered = dict(reversed(list(value.items())))
    assert canonical(reordered) == canonical(value)
    assert digest(reordered) == digest(value)
    assert json.loads(canonical(value)) == value


def test_canonical_is_sorted_compact_and_unescaped() -> None:
    """spec: HARV-6"""
    assert canonical({"b": [1, {"d": 2, "c": "é"}], "a": None}) == (
        '{"a":null,"b":[1,{"c":"é","d":2}]}'
    )
    assert digest({}) == ("sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a")


@given(value=json_objects)
def test_canonical_is_json_dumps_sorted_text(value: dict[str, Any]) -> None:
    """spec: HARV-6"""
    assert canonical(value) == json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def test_canonical_builds_no_encoder_a_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call takes three digests and a canonical result: `json.dumps` with its
    arguments built a JSONEncoder and a C encoder for each; the encoder is kept.
    A value JSON cannot hold is refused as `json.dumps` refuses it."""
    built: list[object] = []
    make = vars(json.encoder)["c_make_encoder"]

    def counting(*args: Any) -> Any:
        built.append(args)
        return make(*args)

    monkeypatch.setattr(json.encoder, "c_make_encoder", counting)
    for i in range(3):
        assert canonical({"b": i, "a": [{"y": 1, "x": 2}]}) == (
            f'{{"a":[{{"x":2,"y":1}}],"b":{i}}}'
        )
    assert built == []
    with pytest.raises(ValueError, match="Out of range float values"):
        canonical({"a": math.nan})


def test_validation_errors_are_one_line_each_with_their_path_sorted() -> None:
    errors = validate({"files": [1, "a", 2], "extra": True}, SCHEMA)
    assert errors == sorted(errors)
    assert errors == [
        "$.files[0]: 1 is not of type 'string'",
        "$.files[2]: 2 is not of type 'string'",
        "$: Additional properties are not allowed ('extra' was unexpected)",
    ]
    assert validate({"files": []}, SCHEMA) == []


def test_valid_answer_gives_the_completed_rows_fields() -> None:
    """spec: HARV-6, HARV-7"""
    text = 'Done.\n{"files": ["b.py", "a.py"]}'
    assert judge([Message(text, "final_answer")], SCHEMA) == Valid(
        result={"files": ["b.py", "a.py"]},
        result_digest=digest({"files": ["b.py", "a.py"]}),
        raw_text=text,
        extracted=True,
    )


def test_answer_failing_its_schema_is_invalid_with_errors_and_raw_text() -> None:
    """spec: HARV-9 (the repair names the errors and the answer)"""
    text = '{"files": 3}'
    assert judge([Message(text, "final_answer")], SCHEMA) == Invalid(
        ["$.files: 3 is not of type 'array'"], text
    )


def test_answer_without_an_object_is_invalid() -> None:
    assert judge([Message("I could not finish.", None)], SCHEMA) == Invalid(
        [NO_OBJECT], "I could not finish."
    )


def test_turn_without_an_answer_is_empty() -> None:
    assert judge([Message('{"files": []}', "commentary")], SCHEMA) == Empty()
    assert judge([Message("  \n", "final_answer")], SCHEMA) == Empty()

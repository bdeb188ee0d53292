"""The compact JSON encoder the host wire shares: the text `json.dumps` makes, from
one C encoder built once."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from crw.host.compact import compact_encoder

VALUES: list[Any] = [
    {},
    [],
    "",
    "plain",
    'é ü ✓ 😀 \ud800 \n\t"\\ \x00 \u2028',
    {"method": "item/started", "params": {"item": {"id": "x", "text": "a\nb"}, "n": None}},
    {"b": True, "a": False, "z": [1, -2, 3.5, 1e300, 0.1, -0.0, 10**30], "y": {"": []}},
    {1: "int key", 2.5: "float key", None: "none key", False: "bool key"},
    ("a", ["tuple"], ("nested",)),
    [math.inf, -math.inf],
    [[[[{"deep": [{"er": [1]}]}]]]],
]


@pytest.mark.parametrize("ascii_only", [True, False])
def test_the_text_is_what_json_dumps_makes(ascii_only: bool) -> None:
    """Byte for byte, for strings, numbers, key kinds, nesting and non-ASCII text."""
    encode = compact_encoder(ensure_ascii=ascii_only)
    for value in VALUES:
        assert encode(value) == json.dumps(value, ensure_ascii=ascii_only, separators=(",", ":"))
    nan = encode([math.nan])
    assert nan == json.dumps([math.nan], separators=(",", ":")) == "[NaN]"


def test_sorted_keys_and_nan_refused_are_json_dumps_too() -> None:
    """The digests' canonical JSON: sorted keys, no NaN or infinity."""
    encode = compact_encoder(ensure_ascii=False, sort_keys=True, allow_nan=False)
    for value in VALUES:
        if value in (
            [math.inf, -math.inf],
            {1: "int key", 2.5: "float key", None: "none key", False: "bool key"},
        ):
            continue
        assert encode(value) == json.dumps(
            value, ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False
        )
    for bad in ([math.nan], {"a": math.inf}):
        with pytest.raises(ValueError, match="Out of range float values"):
            encode(bad)


def test_what_json_cannot_encode_is_its_type_error() -> None:
    encode = compact_encoder(ensure_ascii=False)
    with pytest.raises(TypeError) as ours:
        encode({"a": {1, 2}})
    with pytest.raises(TypeError) as theirs:
        json.dumps({"a": {1, 2}})
    assert str(ours.value) == str(theirs.value) == "Object of type set is not JSON serializable"


def test_encoding_builds_no_c_encoder_a_call(c_encoders_built: list[object]) -> None:
    """`JSONEncoder.encode` builds a C encoder for every dict it encodes (3 us of a
    message's 8-11); the compact encoder is built once, when it is made."""
    built = c_encoders_built
    encode = compact_encoder(ensure_ascii=False)
    assert len(built) == 1
    texts = [encode({"method": "n", "params": {"i": i}}) for i in range(3)]
    assert texts[2] == '{"method":"n","params":{"i":2}}'
    assert len(built) == 1

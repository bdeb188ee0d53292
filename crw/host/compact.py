"""Compact JSON text (`separators=(",", ":")`) made by one C encoder kept for every
call, for the messages and rollout records the host wire makes by the thousand,
and the canonical JSON of a call's digests (sorted keys).

`json.JSONEncoder.encode` builds a new C encoder (and a float formatter closure)
on every call it makes for a dict: about 3 microseconds of a 1-2 kB message's
8-11 on this machine (and `json.dumps` with any argument but the value builds a
`JSONEncoder` first: ~10 us of a digest's canonical JSON of a small dict).
`compact_encoder` builds the stdlib's own C encoder once, with the arguments
`JSONEncoder.iterencode` gives it (the same in Python 3.11 to 3.13), so the text
is the one `json.dumps(value, ensure_ascii=..., separators=(",", ":"),
sort_keys=..., allow_nan=...)` makes, byte for byte. It keeps no markers of the
containers it is inside (`check_circular=False`): what it encodes is fresh data,
never a structure that holds itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json import encoder as _stdlib
from typing import Any


def compact_encoder(
    *, ensure_ascii: bool, sort_keys: bool = False, allow_nan: bool = True
) -> Callable[[Any], str]:
    """A function that encodes a value as compact JSON text (as `json.dumps(value,
    ensure_ascii=ensure_ascii, separators=(",", ":"), sort_keys=sort_keys,
    allow_nan=allow_nan)`)."""
    plain = json.JSONEncoder(
        ensure_ascii=ensure_ascii,
        separators=(",", ":"),
        check_circular=False,
        sort_keys=sort_keys,
        allow_nan=allow_nan,
    )
    make = vars(_stdlib).get("c_make_encoder")  # not in typeshed
    if make is None:  # pragma: no cover - an interpreter without the C accelerator
        return plain.encode
    strings = _stdlib.encode_basestring_ascii if ensure_ascii else _stdlib.encode_basestring
    encode = make(None, plain.default, strings, None, ":", ",", sort_keys, False, allow_nan)
    join = "".join

    def compact(value: Any) -> str:
        if isinstance(value, str):
            return strings(value)
        return join(encode(value, 0))

    return compact

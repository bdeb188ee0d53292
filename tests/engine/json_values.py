"""Hypothesis strategies for the JSON values an answer may be, shared by the
schema check's property tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def json_values(*, text: int, items: int, leaves: int) -> st.SearchStrategy[Any]:
    """Any JSON value: null, a boolean, a number (no NaN nor infinity), a string of
    at most `text` characters, or lists and objects of at most `items` members
    nesting them, `leaves` scalars at most in all."""
    scalars = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=text)
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=items)
            | st.dictionaries(st.text(max_size=min(text, 8)), inner, max_size=items)
        ),
        max_leaves=leaves,
    )

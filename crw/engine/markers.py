"""A call's op and marker: `<call>/t<k>` and `<call>/t<k>-a<n>` (the spec's)."""

from __future__ import annotations


def op(call: str, k: int) -> str:
    """The op of turn `k` of `call`: `<call>/t<k>`."""
    return f"{call}/t{k}"


def marker(call: str, k: int, attempt: int) -> str:
    """The marker of attempt `attempt` of turn `k`: `<call>/t<k>-a<n>`."""
    return f"{op(call, k)}-a{attempt}"

"""A call's op and marker: `<call>/t<k>` and `<call>/t<k>-a<n>` (the spec's)."""

from __future__ import annotations


def op(call: str, k: int) -> str:
    """The op of turn `k` of `call`: `<call>/t<k>`."""
    return f"{call}/t{k}"


def marker(call: str, k: int, attempt: int) -> str:
    """The marker of attempt `attempt` of turn `k`: `<call>/t<k>-a<n>`."""
    return f"{op(call, k)}-a{attempt}"


def parse(text: str | None) -> tuple[str, int, int] | None:
    """The call, turn `k` and attempt a marker `<call>/t<k>-a<n>` names (None: not a marker)."""
    op_part, dash, attempt = (text or "").rpartition("-a")
    call, slash, turn = op_part.rpartition("/t")
    if not (dash and slash and call and turn.isdigit() and attempt.isdigit()):
        return None
    return call, int(turn), int(attempt)

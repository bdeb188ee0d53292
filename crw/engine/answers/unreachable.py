"""A model the host cannot reach: when a turn that only retries ends held.

A codex whose model endpoint refuses connections does not fail the turn: it
sends `error {willRetry: true}` notifications (0.163.0: codexErrorInfo
`{"responseStreamDisconnected": {"httpStatusCode": null}}`, message
`Reconnecting... waiting for network`, additionalDetails `Connection failed: error
sending request`) at 0.3, 5, 15, 35, 75 s ... after the turn starts, and keeps
the turn in progress without end (docs/host-testing.md, "A model the host cannot
reach"). Left alone, the call reads "running, tokens 0" for good.

So the run follows those notifications: once the host has been retrying a turn
for `Settings.unreachable_after` with no model response in between (a token
count, which every response brings, starts the count again), the turn is a host
failure (HARV-14): it is interrupted and the call is held `host_failure`, the
held row's error naming what the host said. Pure: the retries seen in, the
decision out; the host reader keeps the retries, the call actor acts.
"""

from __future__ import annotations

from dataclasses import dataclass

from crw.engine.held_fix import UNREACHABLE
from crw.host.protocol import TurnError


@dataclass(frozen=True)
class Retrying:
    """A turn's retries since its last model response: when the first came, how
    many came, and the newest error."""

    first_at: float
    count: int
    error: TurnError


def retried(before: Retrying | None, error: TurnError, now: float) -> Retrying:
    """The retries of a turn after one more `error {willRetry: true}` at `now`."""
    if before is None:
        return Retrying(now, 1, error)
    return Retrying(before.first_at, before.count + 1, error)


def gives_up_at(retrying: Retrying | None, after: float) -> float | None:
    """The time at which a turn retrying since `retrying.first_at` is given up
    (None: it is not retrying)."""
    return None if retrying is None else retrying.first_at + after


def verdict(retrying: Retrying | None, now: float, after: float) -> str | None:
    """The held row's error once the host has retried the turn for `after`
    seconds with no model response, else None (the turn is waited for)."""
    deadline = gives_up_at(retrying, after)
    if retrying is None or deadline is None or now < deadline:
        return None
    return describe(retrying, now)


def describe(retrying: Retrying, now: float) -> str:
    """One line: what the host said, what it was, and for how long it retried."""
    error = retrying.error
    said = " ".join(error.message.split()) or "no message"
    if error.additionalDetails:
        said += f" ({' '.join(error.additionalDetails.split())})"
    kind = f" [{error.kind}]" if error.kind else ""
    tries = "retry" if retrying.count == 1 else "retries"
    return (
        f"{UNREACHABLE}the host said {said}{kind}, "
        f"{retrying.count} {tries} over {now - retrying.first_at:.0f} s; "
        "check the model provider's base_url and the network, then answer retry"
    )

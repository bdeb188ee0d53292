"""The one injectable wall clock that stamps rows.

Waits never use it: every wait goes through Trio's clock, so tests drive them with
`trio.testing.MockClock`. Only the `at` stamps of rows and the times recorded in row
fields (first_at, last_at, …) come from a `WallClock`.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable

WallClock = Callable[[], str]
"""Returns the current time as an RFC 3339 UTC stamp with microseconds."""


def system_clock() -> str:
    """The real wall clock: `2026-11-29T19:35:51.123456Z`."""
    return stamp(_dt.datetime.now(_dt.UTC))


def stamp(now: _dt.datetime) -> str:
    """`now` (UTC) as the clock writes it. `isoformat` writes what
    `strftime("%Y-%m-%dT%H:%M:%S.%fZ")` does, in C and without its format
    parsing: a run stamps a row group and an `at` field or two a call."""
    return now.isoformat(timespec="microseconds")[:-6] + "Z"


def fixed_clock(stamp: str = "2026-01-01T00:00:00.000000Z") -> WallClock:
    """A clock that always answers `stamp` (tests)."""
    return lambda: stamp

"""A number of seconds as a person reads it, rounded: what every human form prints
for a duration (a row's `waiting_seconds`, a call's time). Standard library only."""

from __future__ import annotations


def duration(seconds: float | None) -> str:
    """`0.1s`, `8.2s`, `42s`, `3m05s`, `2h07m`; `-` for none."""
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"

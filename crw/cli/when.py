"""The times the housekeeping commands take: an ISO 8601 date or time, or an age.

`crw flow list --since WHEN` takes either (`2026-11-30`, `2026-11-30T12:00:00Z`,
or `2h`, `7d`, `1h30m`: that long before now); `crw flow gc --older-than AGE` an
age only, `--ended-before DATE` a date only. A time without a zone is UTC. A
value that is neither is refused with one line naming the flag, the value and
what to pass. Pure: the text and `now` in, a time out; standard library only.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

from crw.errors import InputError

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE = re.compile(r"(?:[0-9]+[smhdw])+")
_PART = re.compile(r"([0-9]+)([smhdw])")
AGE_HELP = "an age such as 30m, 2h, 7d or 1h30m (s, m, h, d, w)"
DATE_HELP = "YYYY-MM-DD or an ISO 8601 time such as 2026-11-30T12:00:00Z"


def age(flag: str, text: str) -> timedelta:
    """`text` as an age (`7d`, `1h30m`).

    Raises:
        InputError: not an age, or an age of nothing (`0d`).
    """
    if _AGE.fullmatch(text) is None:
        raise InputError(f"{flag} {_shown(text)} is no age; pass {AGE_HELP}")
    seconds = sum(int(n) * UNITS[unit] for n, unit in _PART.findall(text))
    if seconds == 0:
        raise InputError(f"{flag} {_shown(text)} is no age; pass {AGE_HELP}, more than 0")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise InputError(f"{flag} {_shown(text)} is too long an age; pass {AGE_HELP}") from None


def date(flag: str, text: str) -> datetime:
    """`text` as an ISO 8601 date or time, UTC unless it names a zone.

    Raises:
        InputError: not a date.
    """
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise InputError(f"{flag} {_shown(text)} is no date; pass {DATE_HELP}") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def when(flag: str, text: str, now: datetime) -> datetime:
    """`text` as a date or time, or as an age before `now`.

    Raises:
        InputError: neither.
    """
    if _AGE.fullmatch(text) is not None:
        return ago(flag, text, now)
    try:
        return date(flag, text)
    except InputError:
        raise InputError(
            f"{flag} {_shown(text)} is no time; pass {DATE_HELP}, or {AGE_HELP}"
        ) from None


def ago(flag: str, text: str, now: datetime) -> datetime:
    """The time the age `text` before `now`.

    Raises:
        InputError: not an age, or one before any date.
    """
    try:
        return now - age(flag, text)
    except OverflowError:
        raise InputError(f"{flag} {_shown(text)} is too long an age; pass {AGE_HELP}") from None


def iso(value: datetime) -> str:
    """`value` as the commands print it: `2026-11-30T12:00:00Z` for UTC."""
    return value.isoformat().replace("+00:00", "Z")


def _shown(text: str) -> str:
    return json.dumps(text if len(text) <= 80 else text[:80] + "...")

"""The wall clock's stamps."""

from __future__ import annotations

import datetime as dt
import re

from crw.clock import stamp, system_clock


def test_a_stamp_is_rfc3339_utc_with_microseconds_as_strftime_wrote_it() -> None:
    """The rows' `at` stamps keep their form, byte for byte: the form strftime
    wrote, for every microsecond (0 and 999999 included) and a leap day."""
    times = [
        dt.datetime(2026, 1, 1, 0, 0, 0, 0, tzinfo=dt.UTC),
        dt.datetime(2028, 2, 29, 23, 59, 59, 999999, tzinfo=dt.UTC),
        dt.datetime(2026, 11, 29, 19, 35, 51, 123456, tzinfo=dt.UTC),
        dt.datetime(2026, 7, 4, 9, 5, 3, 7, tzinfo=dt.UTC),
    ]
    for when in times:
        assert stamp(when) == when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", system_clock())

"""The table of `crw flow list` fits 80 columns with realistic long values, and a
narrower terminal cuts the state's reason, then drops columns, never the run id."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crw.cli.read.list_table import HEADER, STATE_KEPT, age, backend, fit

RUN = "fix-issue-20261201-031000-abcd"
"""A run of crw/examples/fix-issue.toml: the longest id a typical row has."""
TYPICAL = [
    (RUN, "sess", "waiting_decision", "12/14", "812.4k", "59m", "yes"),
    (RUN, "app", "ended (completed)", "14/14", "1.2M", "23h", "no"),
    (RUN, "sess", "waiting_session", "3/14", "40.1k", "12s", "no"),
    (RUN, "sess", "running", "1/14", "9999", "4d", "yes"),
]
BIG = (RUN, "sess", "running", "999/1000", "4.1M", "0s", "yes")
LONG_STATE = (RUN, "app", "paused (host_unavailable)", "3/14", "40.1k", "5m", "no")


def test_typical_rows_fit_80_columns_with_every_column() -> None:
    lines = fit(TYPICAL, 80)
    assert max(len(line) for line in lines) <= 80
    assert lines[0].split() == list(HEADER)
    assert lines[2].split() == [RUN, "app", "ended", "(completed)", "14/14", "1.2M", "23h", "no"]
    assert lines[4].split()[3:5] == ["1/14", "9999"]
    big = fit([*TYPICAL, BIG], 80)  # a run of a thousand calls: VIA is left out
    assert max(len(line) for line in big) <= 80
    assert big[0].split() == ["RUN", "STATE", "CALLS", "TOKENS", "LAST", "LIVE"]


def test_a_long_reason_is_cut_before_any_column_is_dropped() -> None:
    lines = fit([*TYPICAL, LONG_STATE], 80)
    assert max(len(line) for line in lines) <= 80
    assert lines[0].split() == list(HEADER)
    assert lines[-1].split()[2:4] == ["paused", "(host_una…"]
    assert len("paused (host_una…") == STATE_KEPT
    assert fit([LONG_STATE], 120)[1].split()[2:4] == ["paused", "(host_unavailable)"]


def test_a_narrow_terminal_drops_columns_in_order_and_keeps_the_run_id() -> None:
    headers = [fit(TYPICAL, width)[0].split() for width in (76, 70, 64, 56, 50)]
    assert headers == [
        ["RUN", "STATE", "CALLS", "TOKENS", "LAST", "LIVE"],
        ["RUN", "STATE", "CALLS", "TOKENS", "LIVE"],
        ["RUN", "STATE", "CALLS", "LIVE"],
        ["RUN", "STATE", "CALLS"],
        ["RUN", "STATE"],
    ]
    assert fit(TYPICAL, 50)[1].split()[1] == "waiting_decision"
    narrowest = fit(TYPICAL, 20)
    assert [line.split()[0] for line in narrowest[1:]] == [RUN] * 4
    assert [line.split()[1] for line in narrowest[1:]] == [
        "waitin…",
        "ended…",
        "waitin…",
        "running",
    ]


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    width=st.integers(min_value=45, max_value=200),
    states=st.lists(st.text(alphabet="abcdefghij_ ()", min_size=1, max_size=40), max_size=5),
)
def test_every_row_fits_any_width_its_run_ids_allow(width: int, states: list[str]) -> None:
    rows = [(RUN, "sess", state.strip() or "x", "1/2", "10", "1s", "no") for state in states]
    lines = fit(rows, width)
    assert max(len(line) for line in lines) <= width
    assert [line.split()[0] for line in lines[1:]] == [RUN] * len(rows)


def test_the_cells_abbreviations() -> None:
    assert [age(s) for s in (None, 0, 59, 60, 3599, 3600, 86400 * 4)] == [
        "-",
        "0s",
        "59s",
        "1m",
        "59m",
        "1h",
        "4d",
    ]
    assert [backend(b) for b in ("session", "app-server", None, "other")] == [
        "sess",
        "app",
        "-",
        "other",
    ]

"""The drills' table (tests/drills/table.py): what it reads of a drill's test id."""

from __future__ import annotations

import pytest

from tests.drills.table import parameters


@pytest.mark.parametrize(
    ("nodeid", "expected"),
    [
        ("tests/drills/test_kill_drills.py::t[running-pause-v2]", ("running", "pause", "v2")),
        ("tests/drills/test_kill_drills.py::t[review-cancel-v1]@g", ("review", "cancel", "v1")),
        (
            "tests/drills/test_s.py::t[v2-shared_owner-unreported]",
            ("shared_owner", "unreported", "v2"),
        ),
        ("tests/drills/test_pause_race_drill.py::t[v1]", ("", "", "v1")),
        ("tests/drills/test_release_drills.py::t[held-abort]", ("held", "abort", "v1")),
        ("tests/drills/test_damage_drills.py::t[ended-at_digit]", ("ended", "at_digit", "v1")),
    ],
)
def test_a_drills_id_names_its_point_stop_and_protocol(
    nodeid: str, expected: tuple[str, str, str]
) -> None:
    """A protocol parameter anywhere in the id is the protocol, not a point or a
    stop; an id with none ran on v1; an id of one parameter names no point (the
    drill names it)."""
    assert parameters(nodeid) == expected

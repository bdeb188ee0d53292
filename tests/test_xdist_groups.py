"""The suite's xdist groups hold: under `--dist loadgroup` a grouped test reaches
the scheduler with its group (tests/xdist_groups.py), so the tests of a grouped
module run on one worker and share its module-scoped set-up."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.xdist_group("test_xdist_groups")


def test_a_grouped_test_carries_its_group_in_its_node_id(request: pytest.FixtureRequest) -> None:
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not on an xdist worker under --dist loadgroup")
    assert request.node.nodeid.endswith("@test_xdist_groups"), request.node.nodeid

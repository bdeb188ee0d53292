"""The suite's grouping holds: `make test` runs on pytest-xdist workers with
`--dist loadgroup`, and a module marked `xdist_group` runs whole on one worker so
its tests share the module's costly set-up (docs/performance.md, "The suite").
Under pytest 9.2 with pytest-xdist 3.8 that grouping silently does nothing
(pytest-dev/pytest-xdist#1386): this test is what notices a version that drops it."""

import pytest

pytestmark = pytest.mark.xdist_group("test_xdist_groups")


def test_a_grouped_module_carries_its_group_on_the_worker(request: pytest.FixtureRequest) -> None:
    """xdist marks a grouped test's node id with `@GROUP`: the load-group scheduler
    hands out one group as one unit only by that suffix."""
    config = request.config
    if not getattr(config.option, "loadgroup", False):
        pytest.skip("runs under make test's pytest-xdist --dist loadgroup")
    assert request.node.nodeid.endswith("@test_xdist_groups"), request.node.nodeid

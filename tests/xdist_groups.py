"""xdist's `--dist loadgroup` on pytest 9.2: each grouped test's group back in its node id.

pytest-xdist (3.8) tells the controller a test's `xdist_group` by appending
`@<group>` to the test's node id as the worker collects it (`item._nodeid`).
pytest 9.2 makes node ids from a structured `item._id` and no longer reads
`_nodeid`, so the groups were lost without a word (pytest-dev/pytest-xdist#1386):
a grouped module's tests were spread over the workers, and its module-scoped
set-up (a reference run, the demo's runs) was made again on each worker that got
one of them. This wrapper, around every other implementation of the hook, puts
the suffixed id in place. Without xdist, without loadgroup, or once xdist sets the
structured id itself, the two ids agree and nothing changes.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest
from _pytest.nodeid import NodeId  # the structured id pytest 9.2 reads


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> Generator[None]:
    yield
    for item in items:
        legacy = getattr(item, "_nodeid", None)
        if isinstance(legacy, str) and legacy != item.nodeid:
            item._id = NodeId.parse(legacy)

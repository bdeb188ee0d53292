"""The six roles and the agent type each pairs with, with nothing heavier than the
standard library: `crw flow next` reads them on its cold start."""

from __future__ import annotations

ROLES = ("architect", "executor", "executor-t1", "reviewer", "explorer", "critic")

_PAIRED_TYPE = {"executor-t1": "executor", "critic": "reviewer"}


def default_agent_type(role: str) -> str:
    """The agent type the spawn hook pairs `role` with: executor-t1 with executor,
    critic with reviewer, every other role with its own name."""
    return _PAIRED_TYPE.get(role, role)


WRITING_ROLES = frozenset({"executor", "executor-t1"})
"""The roles whose calls change their workspace; every other role changes nothing."""

"""The start preview's role_models fact, judged pure: pairs and what the host takes
in, problems out (the facts read off real hosts: tests/cli/test_start_preview.py,
tests/host/test_start_facts_codex.py)."""

from __future__ import annotations

from crw.engine.config.role_names import ROLES, default_agent_type
from crw.engine.owner.facts import CODEX_INSTALL, RoleRead, role_models
from crw.host.probe import HostModel

BUILT_IN = frozenset({"default", "explorer", "worker"})


def _pairs(**agent_types: str) -> dict[str, dict[str, str]]:
    return {
        role: {
            "agent_type": agent_types.get(role.replace("-", "_"), default_agent_type(role)),
            "model": "gpt-5",
            "effort": "high" if role in ("reviewer", "critic", "architect") else "low",
        }
        for role in ROLES
    }


def test_a_host_that_takes_any_agent_type_is_warned_about_none() -> None:
    """spec: FACTS-5: the simulated host made without a catalog refuses no spawn,
    so no role's agent type makes its spawns fail."""
    fact = role_models(RoleRead(_pairs(), None, None))
    assert fact.ok, fact.problems


def test_the_types_a_host_does_not_know_are_one_problem_with_the_hosts_config() -> None:
    """spec: FACTS-5: every unknown type with its roles, in one problem that names
    the config.toml the host reads and the command that writes the tables."""
    read = RoleRead(_pairs(), [HostModel("gpt-5")], BUILT_IN, config="/h/config.toml")
    assert role_models(read).problems == (
        "agent types architect (architect), executor (executor, executor-t1), reviewer "
        "(reviewer, critic) are unknown to the host, which knows default, explorer, worker: "
        "their spawns fail; add [agents.architect], [agents.executor], [agents.reviewer] "
        f"with a description to /h/config.toml ({CODEX_INSTALL} writes them), or give the "
        "roles a type it knows",
    )
    one = RoleRead(_pairs(), None, BUILT_IN | {"executor", "reviewer"}, config="/h/config.toml")
    assert role_models(one).problems == (
        "agent type architect (architect) is unknown to the host, which knows default, "
        "executor, explorer, reviewer, worker: their spawns fail; add [agents.architect] "
        f"with a description to /h/config.toml ({CODEX_INSTALL} writes them), or give the "
        "roles a type it knows",
    )
    known = RoleRead(_pairs(), None, BUILT_IN | {"architect", "executor", "reviewer"})
    assert role_models(known).ok

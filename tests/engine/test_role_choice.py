"""The role store `crw flow init` writes, chosen pure: the host's models in, the
six pairs and the file out; the file passes the start's role_models on that host."""

from __future__ import annotations

from pathlib import Path

import pytest

from crw.engine.config.role_choice import (
    ROLE_EFFORTS,
    choose_pairs,
    nearest_effort,
    store_text,
    unknown_types,
)
from crw.engine.config.role_names import ROLES, default_agent_type
from crw.engine.config.roles import load_roles
from crw.engine.owner.facts import RoleRead, role_models
from crw.errors import InputError, RefusedError
from crw.host.probe import HostModel

EFFORTS = ("low", "medium", "high", "xhigh")
CATALOG = [
    HostModel("gpt-6", EFFORTS),
    HostModel("gpt-5.5", EFFORTS, default=True),
    HostModel("gpt-5-mini", ("minimal", "medium")),
]
KNOWN = frozenset({"default", "explorer", "worker", "architect", "executor", "reviewer"})


def test_every_role_gets_the_hosts_default_model_its_own_type_and_its_effort() -> None:
    choice = choose_pairs(CATALOG, asked=None, any_model=None, host="h")
    assert choice.model == "gpt-5.5"
    assert choice.pairs == {
        role: {"agent_type": default_agent_type(role), "model": "gpt-5.5", "effort": effort}
        for role, effort in ROLE_EFFORTS.items()
    }
    assert [choice.pairs[role]["effort"] for role in ROLES] == [
        "high",
        "medium",
        "low",
        "high",
        "low",
        "high",
    ]


def test_the_users_own_model_comes_first_when_the_host_serves_it() -> None:
    own = choose_pairs(CATALOG, asked=None, any_model=None, host="h", configured="gpt-6")
    other = choose_pairs(CATALOG, asked=None, any_model=None, host="h", configured="gpt-9")
    asked = choose_pairs(CATALOG, asked="gpt-5.5", any_model=None, host="h", configured="gpt-6")
    assert (own.model, other.model, asked.model) == ("gpt-6", "gpt-5.5", "gpt-5.5")
    first = choose_pairs([HostModel("a"), HostModel("b")], asked=None, any_model=None, host="h")
    assert first.model == "a"  # no default listed: the first


def test_an_effort_the_model_does_not_take_becomes_the_nearest_it_takes() -> None:
    choice = choose_pairs(CATALOG, asked="gpt-5-mini", any_model=None, host="h")
    assert {choice.pairs[role]["effort"] for role in ROLES} == {"medium"}
    assert nearest_effort("low", ("minimal", "high")) == "minimal"
    assert nearest_effort("medium", ("low", "high")) == "high"  # the higher of two as near
    assert nearest_effort("high", ()) == "high"  # a model that lists none takes it as is
    assert nearest_effort("high", ("odd",)) == "odd"


def test_a_model_the_host_does_not_serve_is_refused_naming_those_it_does() -> None:
    with pytest.raises(InputError) as refused:
        choose_pairs(CATALOG, asked="gpt-5.4-mini", any_model=None, host="unix:/h.sock")
    assert str(refused.value) == (
        "--model gpt-5.4-mini is not a model the host unix:/h.sock serves (model/list: "
        "gpt-6, gpt-5.5, gpt-5-mini); pass one of them, or leave --model out for the host's "
        "default"
    )


def test_a_host_that_takes_any_model_gets_its_own_or_the_one_asked() -> None:
    """The simulated host made without a catalog lists none and takes any."""
    own = choose_pairs([], asked=None, any_model="sim-model", host="h")
    asked = choose_pairs([], asked="gpt-5", any_model="sim-model", host="h")
    assert (own.model, asked.model) == ("sim-model", "gpt-5")
    assert own.pairs["architect"]["effort"] == "high"
    with pytest.raises(RefusedError, match=r"lists no models \(model/list is empty\)"):
        choose_pairs([], asked=None, any_model=None, host="h")


def test_the_written_store_reads_back_as_its_pairs_and_passes_role_models(
    tmp_path: Path,
) -> None:
    """spec: FACTS-5: no role without a model or an effort, every model served,
    every effort taken, no same-thread review between a writer and its reviewer."""
    choice = choose_pairs(CATALOG, asked=None, any_model=None, host="unix:/h\n.sock")
    path = tmp_path / "roles.toml"
    path.write_text(store_text(choice, "unix:/h\n.sock"))
    assert load_roles(path).role_pairs() == choice.pairs
    reviews = [("build", "executor", "reviewer"), ("quick", "executor-t1", "critic")]
    fact = role_models(RoleRead(choice.pairs, CATALOG, KNOWN, reviews))
    assert fact.ok, fact.problems


def test_the_types_a_host_does_not_know_are_named_once() -> None:
    pairs = choose_pairs(CATALOG, asked=None, any_model=None, host="h").pairs
    builtin = frozenset({"default", "explorer", "worker"})
    assert unknown_types(pairs, builtin) == ["architect", "executor", "reviewer"]
    assert unknown_types(pairs, None) == []
    assert unknown_types(pairs, KNOWN) == []

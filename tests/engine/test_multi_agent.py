"""Which multi-agent protocol a session run speaks (`crw.engine.owner.multi_agent`)."""

from __future__ import annotations

import pytest

from crw.engine.owner.multi_agent import (
    V1,
    V2,
    OwnerTools,
    owner_has,
    problems,
    resumed_protocol,
    run_protocol,
)
from crw.errors import InputError

V2_ON = {"features": {"multi_agent_v2": True}}


def test_the_start_follows_config_toml_unless_a_setting_forces_one() -> None:
    assert run_protocol({}, {}) == V1
    assert run_protocol(V2_ON, {}) == V2
    assert run_protocol(V2_ON, {"CRW_MULTI_AGENT": "v1"}) == V1
    assert run_protocol({}, {"CRW_MULTI_AGENT": "v2"}) == V2
    with pytest.raises(InputError, match="names no multi-agent protocol"):
        run_protocol({}, {"CRW_MULTI_AGENT": "v3"})


def test_a_run_resumes_on_the_protocol_its_journal_recorded() -> None:
    """A run started on v1 resumes on v1 whatever run.json or config.toml say now;
    a journal of started rows that name none ran on v1."""
    assert resumed_protocol(V1, 2, V2) == V1
    assert resumed_protocol(V2, 1, None) == V2
    assert resumed_protocol(None, 3, V2) == V1
    assert resumed_protocol(None, 0, V2) == V2
    assert resumed_protocol(None, 0, None) == V1


def test_the_owner_has_v2_by_its_config_or_its_models_catalog_entry() -> None:
    assert owner_has(OwnerTools(True, False)) == V1
    assert owner_has(OwnerTools(True, True)) == V2
    assert owner_has(OwnerTools(True, False, "gpt-6.1-sol", ["gpt-6.1-sol"])) == V2
    assert owner_has(OwnerTools(False, False)) is None
    assert owner_has(OwnerTools(True, True, said=V1)) == V1


def test_a_warning_only_when_the_owner_cannot_take_the_runs_steps() -> None:
    """spec: FACTS-9"""
    assert problems(V1, OwnerTools(True, False)) == []
    assert problems(V2, OwnerTools(True, True)) == []
    (catalog,) = problems(V1, OwnerTools(True, False, "gpt-6.1-sol", ["gpt-6.1-sol"]))
    assert "its model gpt-6.1-sol is a v2 model in the host's catalog" in catalog
    assert "CRW_MULTI_AGENT=v2" in catalog
    (none,) = problems(V1, OwnerTools(False, False))
    assert none.startswith("the owner has no multi-agent tools")

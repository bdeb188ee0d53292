"""`crw flow start`'s preview and `validate`'s plan of a session run that speaks
multi-agent v2: what the preview says of the roles' pairs holds where v2 has the
same notion (a model the host does not serve, an effort that model does not take,
a same-thread review); v2's spawn takes no agent type, so an agent type is never
warned unknown there, and a type roles.toml gives a role in place of its own is
warned not applied. The spawn formats are v2's host call."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.cli.conftest import EXAMPLES, Crw
from tests.cli.test_start_preview import ROLES, WORKFLOW, _config, _facts, _roles, _sim, _workflow

V2 = "[features]\nmulti_agent_v2 = true\n"
NOT_APPLIED = (
    "agent types default (architect), worker (executor, executor-t1), explorer (reviewer, "
    "critic) are not applied: the run speaks multi_agent_v2, whose spawn_agent takes no agent "
    "type, so no child gets them or their [agents.<type>] settings; start the run with "
    "CRW_MULTI_AGENT=v1 to have them, or leave agent_type out of those roles in roles.toml"
)


def _v2_host(tmp_path: Path) -> None:
    """The simulated host's config.toml gives its owners v2's tools."""
    (tmp_path / "sim-home").mkdir(parents=True, exist_ok=True)
    (tmp_path / "sim-home" / "config.toml").write_text(V2)


def test_role_models_on_v2_checks_models_and_efforts_and_warns_of_types_not_applied(
    crw: Crw, tmp_path: Path
) -> None:
    """spec: FACTS-5 on v2: the same model and effort problems as on v1 (v2's
    spawn_agent takes model and reasoning_effort, and the host refuses a model it
    does not serve); no type is unknown to the host (no v2 spawn names one), but
    each type roles.toml gives a role in place of its own is said not applied."""
    roles = ROLES.replace(
        'model = "gpt-5-mini"\neffort = "low"\n[reviewer]',
        'model = "gpt-5.4-mini"\neffort = "low"\n[reviewer]',
    )
    roles = roles.replace(
        'model = "gpt-5-mini"\neffort = "high"', 'model = "gpt-5-mini"\neffort = "xhigh"'
    )
    _roles(crw, roles)
    _config(crw, V2)
    _v2_host(tmp_path)
    with _sim(tmp_path, models=("gpt-5", "gpt-5-mini")) as (host, owner):
        out = crw.start(WORKFLOW, "--host", host, "--owner", owner).json()
    facts = _facts(out)
    assert facts["multi_agent"]["protocol"] == "multi_agent_v2" and facts["multi_agent"]["ok"]
    assert facts["role_models"]["problems"] == [
        "executor-t1's model gpt-5.4-mini is not served by the host (model/list: gpt-5, "
        "gpt-5-mini): its spawns fail; set [executor-t1] model to one it serves",
        "critic's effort xhigh is not one gpt-5-mini takes (low, medium, high): "
        "set [critic] effort to one of them",
        NOT_APPLIED,
    ]
    formats = {f["role"]: f for f in out["spawn_formats"]}
    assert formats["executor-t1"] == {
        "role": "executor-t1",
        "agent_type": None,
        "model": "gpt-5.4-mini",
        "reasoning_effort": "low",
        "format": "collaboration.spawn_agent(task_name=<the step's task name>, "
        'message=<the step\'s message>, model="gpt-5.4-mini", reasoning_effort="low", '
        'fork_turns="none")',
    }


def test_on_v2_the_roles_own_agent_types_are_no_warning_where_v1_warns_them_unknown(
    crw: Crw, tmp_path: Path
) -> None:
    """spec: FACTS-5: the sample store's types (each role's own: architect,
    executor, reviewer) on a host that knows none of them: v1's spawns would fail,
    and the preview says so; v2's name no type, and no child has one, so nothing is
    said of them."""
    crw.state.mkdir(parents=True)
    shutil.copy(EXAMPLES / "roles.toml", crw.state / "roles.toml")
    models = ("gpt-5", "gpt-5-codex", "gpt-5-mini")
    with _sim(tmp_path / "v1", models=models) as (host, owner):
        v1 = _facts(crw.start(WORKFLOW, "--host", host, "--owner", owner).json())
    assert any("unknown to the host" in p for p in v1["role_models"]["problems"])
    _config(crw, V2)
    _v2_host(tmp_path / "v2")
    with _sim(tmp_path / "v2", models=models) as (host, owner):
        v2 = _facts(crw.start(WORKFLOW, "--host", host, "--owner", owner).json())
    assert v2["multi_agent"]["protocol"] == "multi_agent_v2"
    assert not any("agent type" in p for p in v2["role_models"]["problems"])
    assert v2["role_models"]["problems"]  # the sample leaves critic's model undecided: still said


def test_a_same_thread_review_is_warned_on_v2_too(crw: Crw, tmp_path: Path) -> None:
    """spec: FACTS-6: v2's pair is model and effort, the same notion."""
    reviewer = ROLES[ROLES.index("[reviewer]") : ROLES.index("[explorer]")]
    same = '[reviewer]\nagent_type = "worker"\nmodel = "gpt-5"\neffort = "medium"\n'
    _roles(crw, ROLES.replace(reviewer, same))
    _config(crw, V2)
    out = crw.start(_workflow(tmp_path), "--owner", "o").json()
    assert _facts(out)["multi_agent"]["protocol"] == "multi_agent_v2"
    assert (
        "node build is reviewed by reviewer on the pair that wrote it (executor's): a "
        "same-thread review; give [reviewer] another model or effort"
    ) in _facts(out)["role_models"]["problems"]


def test_validate_shows_v2s_spawn_formats_on_a_v2_owner(crw: Crw) -> None:
    """spec: CMD-START-17: the dry run's spawn formats are the call the owner makes
    on the run's protocol."""
    _roles(crw)
    _config(crw, V2)
    out = crw("flow", "start", WORKFLOW, "--dry-run", "--state", str(crw.state), "--json")
    assert out.code == 0, out.stderr
    formats = {f["role"]: f["format"] for f in out.json()["spawn_formats"]}
    assert formats["architect"] == (
        "collaboration.spawn_agent(task_name=<the step's task name>, message=<the step's "
        'message>, model="gpt-5", reasoning_effort="high", fork_turns="none")'
    )
    v1 = crw(
        "flow", "start", WORKFLOW, "--dry-run", "--state", str(crw.state), "--json",
        env=crw.env | {"CRW_MULTI_AGENT": "v1"},
    )  # fmt: skip
    assert v1.json()["spawn_formats"][0]["format"].startswith('spawn_agent(agent_type="default"')

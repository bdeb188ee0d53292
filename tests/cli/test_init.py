"""`crw flow init`: the role store a user writes in one step, on the models its host
serves, that the start's role_models then takes without a warning."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import trio

from crw.engine.config.roles import load_roles
from crw.engine.owner.facts import CODEX_INSTALL
from crw.host.sim.process import launch_sim, stop_sim
from tests.cli.conftest import EXAMPLES, Crw

WORKFLOW = str(EXAMPLES / "demo.toml")
TABLES = "".join(
    f'[agents.{name}]\ndescription = "The crw flow {name} role."\n'
    for name in ("architect", "executor", "reviewer")
)


@contextmanager
def _sim(tmp_path: Path, models: tuple[str, ...] | None = None) -> Iterator[tuple[str, str]]:
    """A simulated host on a unix socket (its CODEX_HOME `tmp_path/sim-home`) with
    an owner thread: (host URI, owner)."""
    path = tmp_path / "sim.sock"
    host = launch_sim(path, tmp_path / "sim-home", models=models)
    try:
        yield f"unix:{path}", trio.run(_start_owner, path)
    finally:
        stop_sim(host)


async def _start_owner(path: Path) -> str:
    from crw.host.connect import connect_host
    from crw.host.uri import HostUri

    async with connect_host(HostUri("unix", str(path))) as client:
        return str((await client.request("sim/startOwner", {"cwd": "/repo"}))["threadId"])


def _init(crw: Crw, *args: str) -> Any:
    return crw("flow", "init", "--state", str(crw.state), *args)


def _role_models(out: dict[str, Any]) -> dict[str, Any]:
    (fact,) = [fact for fact in out["facts"] if fact["name"] == "role_models"]
    return dict(fact)


def test_on_a_simulated_host_that_takes_any_model_init_writes_a_store_start_takes(
    crw: Crw, tmp_path: Path
) -> None:
    """spec: FACTS-5: the store init writes is judged ok by the start on that host."""
    with _sim(tmp_path) as (host, owner):
        result = _init(crw, "--host", host, "--json")
        assert result.code == 0, result.stderr
        started = crw.start(WORKFLOW, "--host", host, "--owner", owner).json()
        env = crw.env | {"CODEX_THREAD_ID": owner}
        known = crw(
            "flow", "init", "--state", str(crw.state), "--host", host, "--force", "--json", env=env
        )
        assert known.json()["next"] == (
            f"crw flow start WORKFLOW --host {host} --owner {owner} --state {crw.state}"
        )
        assert known.json()["owner_fix"] is None
    out = result.json()
    assert out["path"] == str(crw.state / "roles.toml") and out["replaced"] is False
    assert out["model"] == "sim-model"  # the model the simulated host's threads get
    assert out["pairs"]["architect"] == {
        "agent_type": "architect",
        "model": "sim-model",
        "effort": "high",
    }
    assert (out["agent_types_unknown"], out["install"]) == ([], None)
    assert out["next"] == (
        f"crw flow start WORKFLOW --host {host} --owner THREAD --state {crw.state}"
    )
    assert "$CODEX_THREAD_ID" in out["owner_fix"]
    assert load_roles(crw.state / "roles.toml").role_pairs() == out["pairs"]
    fact = _role_models(started)
    assert (fact["ok"], fact["problems"]) == (True, [])


def test_on_a_host_with_a_catalog_init_takes_its_default_and_names_the_install(
    crw: Crw, tmp_path: Path
) -> None:
    """spec: FACTS-5: the catalog's default model for every role; the agent types
    it does not know are named with the command that installs their tables; with the
    tables in the host's config.toml the start judges the store ok."""
    with _sim(tmp_path, models=("gpt-5", "gpt-5-mini")) as (host, _owner):
        result = _init(crw, "--host", host)
    assert result.code == 0, result.stderr
    config = tmp_path / "sim-home" / "config.toml"
    lines = result.stdout.splitlines()
    assert lines[0] == f"wrote {crw.state / 'roles.toml'}: the six roles on gpt-5, from host {host}"
    assert "  critic       agent_type reviewer   model gpt-5  effort high" in lines
    assert (
        "  the host does not know the agent types architect, executor, reviewer: add "
        "[agents.architect], [agents.executor], [agents.reviewer] with a description to "
        f"{config} with: {CODEX_INSTALL}"
    ) in lines
    config.write_text(TABLES)  # as the install writes them; the host reads them as it starts
    with _sim(tmp_path, models=("gpt-5", "gpt-5-mini")) as (host, owner):
        again = _init(crw, "--host", host, "--force", "--model", "gpt-5-mini", "--json")
        started = crw.start(WORKFLOW, "--host", host, "--owner", owner).json()
        env = crw.env | {"CODEX_THREAD_ID": owner}
        known = crw(
            "flow", "init", "--state", str(crw.state), "--host", host, "--force", "--json", env=env
        )
        assert known.json()["next"] == (
            f"crw flow start WORKFLOW --host {host} --owner {owner} --state {crw.state}"
        )
        assert known.json()["owner_fix"] is None
    assert again.code == 0, again.stderr
    out = again.json()
    assert (out["replaced"], out["model"], out["agent_types_unknown"]) == (True, "gpt-5-mini", [])
    fact = _role_models(started)
    assert (fact["ok"], fact["models_checked"]) == (True, True), fact["problems"]


def test_init_writes_over_no_store_without_force(crw: Crw, tmp_path: Path) -> None:
    """A store there is refused in one line (what, where, the fix) and left as it is."""
    crw.state.mkdir(parents=True)
    store = crw.state / "roles.toml"
    store.write_text("# mine\n")
    with _sim(tmp_path) as (host, _owner):
        refused = _init(crw, "--host", host)
        forced = _init(crw, "--host", host, "--force")
    assert refused.code == 1 and refused.stdout == ""
    assert refused.stderr == (
        f"crw: error: the role store {store} is there already: crw flow init replaces it "
        "only when told; edit it, or pass --force to write it anew\n"
    )
    assert forced.code == 0, forced.stderr
    assert forced.stdout.startswith(f"replaced {store}: ")
    assert store.read_text().startswith("# The role store of crw flow, written by crw flow init")


def test_a_model_the_host_does_not_serve_or_a_host_that_does_not_answer_writes_nothing(
    crw: Crw, tmp_path: Path
) -> None:
    with _sim(tmp_path, models=("gpt-5", "gpt-5-mini")) as (host, _owner):
        unserved = _init(crw, "--host", host, "--model", "gpt-5.4-mini")
    assert unserved.code == 2
    assert unserved.stderr == (
        f"crw: error: --model gpt-5.4-mini is not a model the host {host} serves (model/list: "
        "gpt-5, gpt-5-mini); pass one of them, or leave --model out for the host's default\n"
    )
    gone = _init(crw, "--host", f"unix:{tmp_path / 'none.sock'}")
    assert gone.code == 1
    assert gone.stderr.startswith(f"crw: error: cannot reach the host unix:{tmp_path}/none.sock")
    assert gone.stderr.endswith(
        "crw flow init asks the host which models it serves: start it, or pass --host "
        "unix:PATH (a running app-server) or --host codex\n"
    )
    assert not (crw.state / "roles.toml").exists()

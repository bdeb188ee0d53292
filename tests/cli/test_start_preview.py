"""`crw flow start`'s preview: the spawn formats, the session pool, the facts (each a
warning, never a refusal) and the next command, as a user sees them."""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from crw.binding.install import Config, with_hook
from crw.engine.owner.facts import CODEX_INSTALL, SESSION_FACTS
from crw.engine.run.locks import is_held, run_lock, start_lock
from crw.engine.run.rundir import RunDir
from crw.host.probe import PROBE_TIMEOUT
from crw.host.sim.process import launch_sim, stop_sim
from tests.cli.conftest import EXAMPLES, Crw, start_in_process, wait_for_exit
from tests.workspace.gitrepo import make_repo

WORKFLOW = str(EXAMPLES / "fix-issue.toml")
ROLES = """
[architect]
agent_type = "default"
model = "gpt-5"
effort = "high"
[executor]
agent_type = "worker"
model = "gpt-5"
effort = "medium"
[executor-t1]
agent_type = "worker"
model = "gpt-5-mini"
effort = "low"
[reviewer]
agent_type = "explorer"
model = "gpt-5"
effort = "high"
[explorer]
agent_type = "explorer"
model = "gpt-5-mini"
effort = "low"
[critic]
agent_type = "explorer"
model = "gpt-5-mini"
effort = "high"
"""


def _facts(out: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {fact["name"]: fact for fact in out["facts"]}


def _warned(out: dict[str, Any]) -> dict[str, str]:
    return {fact["name"]: fact["warning"] for fact in out["facts"] if not fact["ok"]}


def _config(crw: Crw, text: str) -> Path:
    home = Path(crw.env["CODEX_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(text)
    return home / "config.toml"


def _roles(crw: Crw, text: str = ROLES) -> None:
    crw.state.mkdir(parents=True, exist_ok=True)
    (crw.state / "roles.toml").write_text(text)


def _workflow(tmp_path: Path, verifier: str | None = None, review: str = "reviewer") -> str:
    path = tmp_path / "w.toml"
    head = f'[verifier]\ngo_root = "{verifier}"\n' if verifier else ""
    path.write_text(
        f'name = "w"\npool = 8\n{head}[[node]]\nid = "build"\nrole = "executor"\n'
        f'task = "t"\nschema = {{ type = "object" }}\nreview = {{ role = "{review}" }}\n'
    )
    return str(path)


@contextmanager
def _sim(tmp_path: Path, models: tuple[str, ...] | None = None) -> Iterator[tuple[str, str]]:
    """A simulated host on a unix socket with an owner thread: (host URI, owner)."""
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


def test_session_start_previews_the_spawn_formats_the_pool_and_the_next_command(
    crw: Crw,
) -> None:
    """spec: CMD-START-17, CMD-START-19, CMD-START-15"""
    _roles(crw)
    _config(crw, "[agents]\nmax_threads = 3\n")
    out = crw.start(WORKFLOW, "--owner", "o").json()
    formats = {f["role"]: f["format"] for f in out["spawn_formats"]}
    assert list(formats) == [
        "architect",
        "executor",
        "executor-t1",
        "reviewer",
        "explorer",
        "critic",
    ]
    assert formats["executor-t1"] == (
        'spawn_agent(agent_type="worker", message=<the step\'s message>, model="gpt-5-mini", '
        'reasoning_effort="low", fork_context=false)'
    )
    assert out["session_pool"] == {"pool": 2, "workflow_pool": 4, "max_threads": 3}
    assert out["next"] == f"crw flow next {out['run']} --wait 30 --state {crw.state}"
    text = crw("flow", "start", WORKFLOW, "--owner", "o2", "--state", str(crw.state))
    assert text.code == 0, text.stderr
    assert "    executor-t1  " + formats["executor-t1"] in text.stdout.splitlines()
    assert "  session pool: 2 = min(pool 4, agents.max_threads 3 - 1)" in text.stdout
    assert "  take its steps with: crw flow next " in text.stdout


def test_session_start_lists_the_facts_and_an_app_server_start_the_verifiers(
    crw: Crw, tmp_path: Path
) -> None:
    """spec: CMD-START-18, FACTS-10: a session run is judged on the six session facts
    and spawn_hook and host_reachable; verifier_prerequisites is judged for every
    run, and an app-server run's host_reachable besides (tests/cli/test_start_host_check.py)."""
    workflow = _workflow(tmp_path, verifier=str(tmp_path / "no-go"))
    session = crw.start(workflow, "--owner", "o").json()
    app = crw.start(workflow, "--backend", "app-server").json()
    assert [fact["name"] for fact in session["facts"]] == list(SESSION_FACTS)
    assert [fact["name"] for fact in app["facts"]] == ["verifier_prerequisites", "host_reachable"]
    for out in (session, app):
        warning = _warned(out)["verifier_prerequisites"]
        assert f"{tmp_path / 'no-go' / 'bin' / 'go'} is not there" in warning
    assert app["next"] is None and app["spawn_formats"] == [] and app["session_pool"] is None


def test_verifier_prerequisites_holds_when_go_is_there(crw: Crw, tmp_path: Path) -> None:
    """spec: FACTS-10"""
    go = tmp_path / "go" / "bin" / "go"
    go.parent.mkdir(parents=True)
    go.write_text("#!/bin/sh\n")
    go.chmod(0o755)
    out = crw.start(_workflow(tmp_path, verifier=str(tmp_path / "go")), "--owner", "o").json()
    assert _facts(out)["verifier_prerequisites"]["ok"] is True


def test_an_unreachable_host_and_an_owner_it_lacks_are_warnings_not_refusals(
    crw: Crw, tmp_path: Path
) -> None:
    """spec: FACTS-1: host_reachable warns; the start exits 0 and the run starts."""
    _roles(crw)
    result = crw.start(WORKFLOW, "--host", "unix:/missing.sock", "--owner", "made-up")
    assert result.code == 0, result.stderr
    out = result.json()
    assert out["started"] is True
    assert "cannot reach the host unix:/missing.sock" in _warned(out)["host_reachable"]
    with _sim(tmp_path) as (host, owner):
        lacking = crw.start(WORKFLOW, "--host", host, "--owner", "made-up").json()
        there = crw.start(WORKFLOW, "--host", host, "--owner", owner).json()
    assert "owner thread made-up is not on the host" in _warned(lacking)["host_reachable"]
    assert _facts(there)["host_reachable"]["ok"] is True
    unchecked = _facts(there)["role_models"]  # this host lists no models
    assert unchecked["models_checked"] is False
    assert not any("is not served" in p for p in unchecked["problems"])


def test_a_host_that_never_answers_costs_the_start_the_probes_timeout(
    crw: Crw, tmp_path: Path
) -> None:
    """A socket that takes the connection and never answers: host_reachable warns
    after PROBE_TIMEOUT and the start goes on."""
    path = tmp_path / "mute.sock"
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mute.bind(str(path))
    mute.listen(4)
    try:
        began = time.monotonic()
        result = crw.start(WORKFLOW, "--host", f"unix:{path}", "--owner", "o")
        took = time.monotonic() - began
    finally:
        mute.close()
    assert result.code == 0, result.stderr
    warning = _warned(result.json())["host_reachable"]
    assert f"did not answer within {PROBE_TIMEOUT:g} s" in warning
    assert took >= PROBE_TIMEOUT  # the probe's wait; the runner's 60 s is the hang guard


def test_role_models_checks_models_and_agent_types_against_the_host(
    crw: Crw, tmp_path: Path
) -> None:
    """spec: FACTS-5: the six pairs, and the fixes for what the host would refuse: a
    model outside its model/list, an effort that model does not take, an agent type
    neither built in nor an [agents.<type>] table of the host's config.toml."""
    roles = ROLES.replace(
        'model = "gpt-5-mini"\neffort = "low"\n[reviewer]',
        'model = "gpt-5.4-mini"\neffort = "low"\n[reviewer]',
    )
    roles = roles.replace('agent_type = "default"', 'agent_type = "architect"')
    roles = roles.replace(
        'model = "gpt-5-mini"\neffort = "high"', 'model = "gpt-5-mini"\neffort = "xhigh"'
    )
    _roles(crw, roles)
    with _sim(tmp_path, models=("gpt-5", "gpt-5-mini")) as (host, owner):
        out = crw.start(WORKFLOW, "--host", host, "--owner", owner).json()
    config = tmp_path / "sim-home" / "config.toml"  # the host's, read as it starts
    config.write_text('[agents.architect]\ndescription = "designs"\n')
    with _sim(tmp_path, models=("gpt-5", "gpt-5-mini")) as (host, owner):
        fixed = crw.start(WORKFLOW, "--host", host, "--owner", owner).json()
    fact = _facts(out)["role_models"]
    assert fact["pairs"]["executor-t1"] == {
        "agent_type": "worker",
        "model": "gpt-5.4-mini",
        "effort": "low",
    }
    assert fact["problems"] == [
        "executor-t1's model gpt-5.4-mini is not served by the host (model/list: gpt-5, "
        "gpt-5-mini): its spawns fail; set [executor-t1] model to one it serves",
        "critic's effort xhigh is not one gpt-5-mini takes (low, medium, high): "
        "set [critic] effort to one of them",
        "agent type architect (architect) is unknown to the host, which knows default, "
        "explorer, worker: their spawns fail; add [agents.architect] with a description "
        f"to {config} (crw flow codex install writes them), or give the roles a type it knows",
    ]
    assert not any("agent type" in p for p in _facts(fixed)["role_models"]["problems"])


def test_the_preview_on_a_simulated_host_without_a_catalog_warns_of_no_agent_type(
    crw: Crw, tmp_path: Path
) -> None:
    """spec: FACTS-5: a simulated host made without --models refuses no spawn: the
    sample store's types (architect, executor, reviewer, none built in) are no
    warning there, and no config.toml is named; on a host made with --models the
    same store is warned about, naming the config.toml that host reads. The
    simulated host runs no hooks: no spawn_hook warning names a config.toml there."""
    crw.state.mkdir(parents=True)
    shutil.copy(EXAMPLES / "roles.toml", crw.state / "roles.toml")
    with _sim(tmp_path) as (host, owner):
        any_type = _facts(crw.start(WORKFLOW, "--host", host, "--owner", owner).json())
    hook = any_type["spawn_hook"]
    assert hook["problems"] == [] and hook["hooks"] == "not run by this host"
    any_type = any_type["role_models"]
    assert not any("agent type" in p or "config.toml" in p for p in any_type["problems"])
    assert any_type["problems"]  # the sample leaves critic's model undecided: still said
    with _sim(tmp_path / "strict", models=("gpt-5", "gpt-5-codex", "gpt-5-mini")) as (h, o):
        strict = _facts(crw.start(WORKFLOW, "--host", h, "--owner", o).json())["role_models"]
    config = tmp_path / "strict" / "sim-home" / "config.toml"
    assert [p for p in strict["problems"] if "agent type" in p] == [
        "agent types architect (architect), executor (executor, executor-t1), reviewer "
        "(reviewer, critic) are unknown to the host, which knows default, explorer, worker: "
        "their spawns fail; add [agents.architect], [agents.executor], [agents.reviewer] "
        f"with a description to {config} ({CODEX_INSTALL} writes them), or give the roles "
        "a type it knows"
    ]


def test_role_models_warns_of_a_role_without_a_pair_or_an_effort(crw: Crw) -> None:
    """spec: FACTS-5"""
    _roles(crw, '[architect]\nagent_type = "default"\nmodel = "gpt-5"\n')
    out = crw.start(WORKFLOW, "--owner", "o").json()
    problems = _facts(out)["role_models"]["problems"]
    assert problems[:2] == [
        "no model for executor, executor-t1, reviewer, explorer, critic: their spawns keep "
        "what the owner sends; set model and effort under [<role>] in roles.toml",
        "no effort for architect: set effort under [<role>] in roles.toml",
    ]


def test_a_same_thread_review_is_a_warning_only(crw: Crw, tmp_path: Path) -> None:
    """spec: FACTS-6: the review runs on the pair that wrote the answer."""
    reviewer = ROLES[ROLES.index("[reviewer]") : ROLES.index("[explorer]")]
    same = '[reviewer]\nagent_type = "worker"\nmodel = "gpt-5"\neffort = "medium"\n'
    _roles(crw, ROLES.replace(reviewer, same))
    result = crw.start(_workflow(tmp_path), "--owner", "o")
    assert result.code == 0, result.stderr
    assert (
        "node build is reviewed by reviewer on the pair that wrote it (executor's): a "
        "same-thread review; give [reviewer] another model or effort"
    ) in _facts(result.json())["role_models"]["problems"]
    _roles(crw)
    other = crw.start(_workflow(tmp_path), "--owner", "o2").json()
    assert not any("same-thread" in p for p in _facts(other)["role_models"]["problems"])


def test_owner_bound_warns_without_an_owner_and_the_run_starts_unbound(crw: Crw) -> None:
    """spec: FACTS-1, FACTS-2"""
    result = crw.start(WORKFLOW)
    assert result.code == 0, result.stderr
    out = result.json()
    assert out["owner"] is None and out["started"] is True
    assert _warned(out)["owner_bound"].startswith("no owner thread id: the run starts unbound")
    assert not (crw.state / "flow-bound").exists()


def test_owner_bound_warns_of_a_binding_it_cannot_read(crw: Crw) -> None:
    """spec: FACTS-3"""
    bound = crw.state / "flow-bound"
    bound.mkdir(parents=True, mode=0o700)
    (bound / "o.jsonl").write_text("not json\n")
    out = crw.start(WORKFLOW, "--owner", "o").json()
    warning = _warned(out)["owner_bound"]
    assert warning.startswith("the binding of owner thread o cannot be read (the last line of")


def test_owner_bound_warns_of_another_live_run_holding_the_owner(crw: Crw) -> None:
    """spec: FACTS-4: live as the binding reads it: its run lock (or start lock) held."""
    first = crw.start(WORKFLOW, "--owner", "shared").json()
    run = RunDir(Path(first["run_dir"]))
    wait_for_exit(run.root)
    ended = crw.start(WORKFLOW, "--owner", "shared").json()
    assert _facts(ended)["owner_bound"]["ok"] is True  # the first run's line is not live
    wait_for_exit(RunDir(Path(ended["run_dir"])).root)
    with run_lock(RunDir(Path(ended["run_dir"]))):
        second = crw.start(WORKFLOW, "--owner", "shared").json()
    assert _warned(second)["owner_bound"].startswith(
        f"owner thread shared holds the line of live run {ended['run']}: this run starts unbound"
    )


def test_a_run_whose_start_holds_only_the_start_lock_keeps_the_owner(crw: Crw) -> None:
    """spec: BIND-LINE-20, BIND-LINE-22, FACTS-4: a run whose start holds its start
    lock, and no process its run lock, is live: a second start on its owner thread
    warns owner_bound and does not bind."""
    first = crw.start(WORKFLOW, "--owner", "shared").json()
    run = RunDir(Path(first["run_dir"]))
    wait_for_exit(run.root)
    bound = crw.state / "flow-bound" / "shared.jsonl"
    before = bound.read_text()
    with start_lock(run):
        assert not is_held(run.run_lock)
        second = crw.start(WORKFLOW, "--owner", "shared").json()
        # Held until the second run's process, which binds after its started row
        # (BIND-LINE-11), has ended: let go before, the first run is not live then.
        wait_for_exit(Path(second["run_dir"]))
    assert _warned(second)["owner_bound"].startswith(
        f"owner thread shared holds the line of live run {first['run']}: this run starts unbound"
    )
    assert [w.split(";")[0] for w in second["warnings"]] == [
        f"owner thread shared is bound to live run {first['run']}"
    ]
    assert bound.read_text() == before  # the second run's line was not appended


def test_owner_state_writable_warns_of_a_flow_bound_directory_it_cannot_use(crw: Crw) -> None:
    """spec: FACTS-7"""
    crw.state.mkdir(parents=True)
    (crw.state / "flow-bound").write_text("a file, not a directory")
    out = crw.start(WORKFLOW, "--owner", "o").json()
    assert _warned(out)["owner_state_writable"] == (
        f"the flow-bound directory is not writable ({crw.state / 'flow-bound'} is not a "
        "directory): the run cannot keep its state there"
    )
    (crw.state / "flow-bound").unlink()
    (crw.state / "flow-bound").mkdir()
    os.chmod(crw.state / "flow-bound", 0o777)
    out = crw.start(WORKFLOW, "--owner", "o2").json()
    assert _warned(out)["owner_state_writable"] == (
        f"the flow-bound directory cannot be trusted ({crw.state / 'flow-bound'} is writable "
        "by group or others (mode 777)): the owner is not bound and the hook reads no "
        "binding; make it a directory of the user's own, mode 700, not a symbolic link"
    )


def test_owner_state_writable_calls_a_linked_flow_bound_directory_a_symbolic_link(
    crw: Crw, tmp_path: Path
) -> None:
    """spec: FACTS-7: a flow-bound directory that is a symbolic link (to a private
    directory, whose link reads mode 777) is named a link, the fix to replace it."""
    crw.state.mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (crw.state / "flow-bound").symlink_to(tmp_path / "elsewhere")
    out = crw.start(WORKFLOW, "--owner", "o").json()
    assert _warned(out)["owner_state_writable"] == (
        f"the flow-bound directory cannot be trusted ({crw.state / 'flow-bound'} is a "
        "symbolic link): the owner is not bound and the hook reads no binding; make it a "
        "directory of the user's own, mode 700, not a symbolic link"
    )


@pytest.mark.parametrize(
    "what", ["run directory", "flow-bound directory", "host socket", "repository"]
)
def test_owner_state_writable_warns_of_each_place_it_cannot_write(
    crw: Crw, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    """spec: FACTS-7: each of the run directory, the flow-bound directory, the host's
    socket and the repository that the user cannot write is named, the others not.
    Tests run as root, whom no mode stops: the access check says no to one place."""
    root = crw.state.parent
    make_repo(root)  # the checkout that holds the state directory: the run's repository
    (crw.state / "flow-bound").mkdir(parents=True, mode=0o700)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(root / "h.sock"))  # nobody listens: host_reachable's, not this fact's
    sock.close()
    places: dict[str, Callable[[Path], bool]] = {
        "run directory": lambda path: path.parent == crw.state / "flow",
        "flow-bound directory": lambda path: path == crw.state / "flow-bound",
        "host socket": lambda path: path == root / "h.sock",
        "repository": lambda path: path == root,
    }
    denied: list[Path] = []
    access = os.access

    def deny(path: Any, mode: int, **kwargs: Any) -> bool:
        if mode & os.W_OK and places[what](Path(path)):
            denied.append(Path(path))
            return False
        return access(path, mode, **kwargs)

    monkeypatch.setattr(os, "access", deny)
    outcome = start_in_process(crw, monkeypatch, "o", host=f"unix:{root / 'h.sock'}")
    (fact,) = [f for f in outcome.preview.facts if f.name == "owner_state_writable"]
    assert denied, f"the start never asked whether the {what} is writable"
    assert fact.warning == (
        f"the {what} is not writable ({denied[0]}: permission denied): the run cannot "
        "keep its state there"
    )


def test_slots_are_warned_about_and_the_multi_agent_protocol_named_from_config_toml(
    crw: Crw,
) -> None:
    """The run speaks the protocol config.toml gives the owner, records it in run.json
    and its started row, and the fact names it; warned only when the owner cannot
    take its steps. spec: FACTS-8, FACTS-9"""
    _config(crw, "[agents]\nmax_threads = 1\n[features]\nmulti_agent_v2 = true\n")
    out = crw.start(WORKFLOW, "--owner", "o").json()
    warned, v2 = _warned(out), _facts(out)["multi_agent"]
    assert warned["subagent_slots"].startswith("agents.max_threads = 1 leaves no slot for a call")
    assert (v2["ok"], v2["protocol"], v2["owner_tools"]) == (
        True,
        "multi_agent_v2",
        "multi_agent_v2",
    )
    run = RunDir(crw.state / "flow" / out["run"])
    assert json.loads(run.run_json.read_text())["multi_agent"] == "multi_agent_v2"
    started = json.loads(run.journal.read_text().splitlines()[0])
    assert (started["row"], started["multi_agent"]) == ("started", "multi_agent_v2")
    _config(crw, "[agents]\nmax_threads = 2\n[features]\nmulti_agent_v2 = false\n")
    ok = _facts(crw.start(WORKFLOW, "--owner", "o2").json())
    assert ok["subagent_slots"]["ok"] is True and ok["multi_agent"]["ok"] is True
    assert ok["multi_agent"]["protocol"] == "multi_agent_v1"


@pytest.mark.parametrize(
    ("config", "forced", "warning"),
    [
        ("[features]\nmulti_agent = false\n", None, "the owner has no multi-agent tools"),
        (
            "[features]\nmulti_agent_v2 = true\n",
            "v1",
            "the run speaks multi_agent_v1 but the owner cannot take its steps: it has "
            "multi_agent_v2's tools; start the run again with CRW_MULTI_AGENT=v2",
        ),
    ],
)
def test_multi_agent_warns_only_when_the_owner_cannot_take_the_runs_steps(
    crw: Crw, config: str, forced: str | None, warning: str
) -> None:
    """spec: FACTS-9"""
    _config(crw, config)
    env = crw.env | ({"CRW_MULTI_AGENT": forced} if forced else {})
    out = crw.start(WORKFLOW, "--owner", "o", env=env).json()
    assert _warned(out)["multi_agent"].startswith(warning)


def test_a_multi_agent_setting_that_names_no_protocol_is_refused(crw: Crw) -> None:
    result = crw.start(WORKFLOW, "--owner", "o", env=crw.env | {"CRW_MULTI_AGENT": "v3"})
    assert result.code == 2
    assert "$CRW_MULTI_AGENT='v3' names no multi-agent protocol: set it to v1 or v2" in (
        result.error()
    )
    assert not (crw.state / "flow").exists() or not list((crw.state / "flow").iterdir())


def test_spawn_hook_warns_until_the_hook_is_installed_and_trusted(crw: Crw) -> None:
    """The spawn_hook fact: the hook in $CODEX_HOME/config.toml, then its trust as
    config.toml records it when the host does not tell (the host's own word:
    tests/host/test_start_facts_codex.py)."""
    config = _config(crw, "")
    missing = _warned(crw.start(WORKFLOW, "--owner", "o").json())["spawn_hook"]
    assert missing.startswith(f"crw flow hook spawn is not in {config}")
    config.write_text(with_hook(Config(config, "", {}), "crw flow hook spawn"))
    untrusted = _warned(crw.start(WORKFLOW, "--owner", "o2").json())["spawn_hook"]
    assert untrusted.startswith(f"the spawn hook in {config} is not trusted (no trusted_hash)")
    key = json.dumps(f"{config}:pre_tool_use:0:0")
    config.write_text(config.read_text() + f'\n[hooks.state.{key}]\ntrusted_hash = "sha256:x"\n')
    trusted = _facts(crw.start(WORKFLOW, "--owner", "o3").json())["spawn_hook"]
    assert (trusted["ok"], trusted["trust"]) == (True, "recorded")


def test_a_host_socket_the_start_cannot_look_at_is_a_warning_not_a_crash(crw: Crw) -> None:
    """spec: FACTS-1 (a socket path that cannot be stat'ed, as a sandboxed owner's
    shell sees the app-server's: host_reachable warns, the start exits 0)"""
    _roles(crw)
    unseen = "/" + "s" * 300  # stat fails (name too long), as EACCES does in a sandbox
    result = crw.start(WORKFLOW, "--host", f"unix:{unseen}", "--owner", "made-up")
    assert result.code == 0, result.stderr
    out = result.json()
    assert "cannot reach the host" in _warned(out)["host_reachable"]
    assert _facts(out)["owner_state_writable"]["ok"] is True


def test_the_start_asks_the_host_once_the_runs_process_is_launched(
    crw: Crw, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host's part of the preview is asked after the launch, while the process
    imports (it asks its host nothing before its started row); the owner's binding
    is judged as it was before the start bound it (no line of another run)."""
    from crw.cli.run import preview
    from crw.host.probe import HostProbe

    events: list[str] = []

    def probe(*args: Any) -> HostProbe:
        events.append("probe")
        return HostProbe(error="not asked")

    monkeypatch.setattr(preview, "probe_host", probe)
    outcome = start_in_process(crw, monkeypatch, "owner-1", lambda run: events.append("launch"))
    assert events == ["launch", "probe"]
    facts = {fact.name: fact for fact in outcome.preview.facts}
    assert [fact.name for fact in outcome.preview.facts] == list(SESSION_FACTS)
    assert facts["owner_bound"].ok and not facts["host_reachable"].ok

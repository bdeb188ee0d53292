"""`crw flow start --backend app-server` checks its host as a session start does.

A shared host (`unix:PATH`, `ws://…`) that does not answer is the `host_reachable`
fact's warning, as on the session backend (FACTS-1): the run starts, the start
says it pauses until the host answers, and its process waits for it. A private
`codex` host whose binary cannot be found is refused before the run exists (exit
2): nothing would ever start that host, and the fix is the user's.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from crw.host.sim.process import launch_sim, stop_sim
from crw.journal.log import read_journal
from tests.cli.conftest import Crw, Result, wait_for_exit, waiting_for_no_host
from tests.deadlines import LOADED

NO_CODEX = (
    "crw: error: the host codex cannot be started: no codex binary found: "
    "pip install openai-codex-cli-bin==0.163.0, or pass --codex-bin PATH\n"
)


def _facts(out: dict[str, object]) -> dict[str, dict[str, object]]:
    facts = out["facts"]
    assert isinstance(facts, list)
    return {fact["name"]: fact for fact in facts}


def _without_codex(crw: Crw, tmp_path: Path) -> dict[str, str]:
    """The runner's environment with no codex binary to find: the bundled package's
    module hidden behind one that cannot be imported, and PATH without a codex."""
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "codex_cli_bin.py").write_text('raise ImportError("hidden by the test")\n')
    path = [d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "codex").exists()]
    return crw.env | {"PYTHONPATH": str(hidden), "PATH": os.pathsep.join(path)}


def _nothing_written(crw: Crw) -> None:
    flow = crw.state / "flow"
    assert not flow.exists() or os.listdir(flow) == [], os.listdir(flow)


def _refused(result: Result, line: str) -> None:
    assert (result.code, result.error()) == (2, line)


def test_an_app_server_start_with_no_codex_binary_is_refused_before_a_run_exists(
    crw: Crw, tmp_path: Path
) -> None:
    """spec: CMD-START-4 (the private host it would start cannot be: one line, exit 2,
    nothing written, no process; with --json the same line as its error object)"""
    workflow = str(waiting_for_no_host(tmp_path))
    env = _without_codex(crw, tmp_path)
    _refused(crw.start(workflow, "--backend", "app-server", env=env), NO_CODEX)
    text = crw(
        "flow", "start", workflow, "--backend", "app-server", "--host", "codex",
        "--state", str(crw.state), env=env,
    )  # fmt: skip
    _refused(text, NO_CODEX)
    _nothing_written(crw)
    assert crw.pids == []


def test_an_app_server_start_whose_codex_bin_is_no_executable_is_refused(
    crw: Crw, tmp_path: Path
) -> None:
    """spec: CMD-START-4 (--codex-bin names the binary; one that exec cannot run is
    refused before the run exists)"""
    workflow = str(waiting_for_no_host(tmp_path))
    plain = tmp_path / "codex"
    plain.write_text("not a program\n")
    for missing in (str(tmp_path / "nope" / "codex"), str(plain)):
        out = crw.start(workflow, "--backend", "app-server", "--codex-bin", missing)
        _refused(
            out,
            f"crw: error: the host codex cannot be started: the codex binary {missing} is "
            "not an executable file: pip install openai-codex-cli-bin==0.163.0, "
            "or pass --codex-bin PATH\n",
        )
    _nothing_written(crw)


def test_an_app_server_start_on_a_socket_nobody_serves_warns_host_reachable(
    crw: Crw, tmp_path: Path
) -> None:
    """spec: FACTS-1 (host_reachable warns on the app-server backend as on the
    session one: the run starts, and the start says it pauses until the host
    answers), FACTS-10"""
    workflow = str(waiting_for_no_host(tmp_path))
    result = crw.start(workflow, "--backend", "app-server", "--host", "unix:/nope.sock")
    assert result.code == 0, result.stderr
    out = result.json()
    assert out["started"] is True
    fact = _facts(out)["host_reachable"]
    assert (fact["ok"], fact["host"]) == (False, "unix:/nope.sock")
    assert fact["warning"] == (
        "cannot reach the host unix:/nope.sock: [Errno 2] No such file or directory; is an "
        "app-server listening there (codex app-server --listen unix:///nope.sock)? "
        "(until it answers, the run pauses)"
    )
    assert [f["name"] for f in out["facts"]] == ["verifier_prerequisites", "host_reachable"]
    run = Path(out["run_dir"])
    wait_for_exit(run)
    rows = read_journal(run / "journal.jsonl").rows
    assert [(r["row"], r.get("reason")) for r in rows] == [
        ("started", None),
        ("paused", "host_unavailable"),
    ]
    text = crw(
        "flow", "start", workflow, "--backend", "app-server", "--host", "unix:/nope.sock",
        "--state", str(crw.state),
    )  # fmt: skip
    assert text.code == 0, text.stderr
    assert "    host_reachable: warning" in text.stdout.splitlines()
    assert f"      - {fact['warning']}" in text.stdout.splitlines()


def test_an_app_server_start_on_a_served_host_or_a_found_codex_holds_host_reachable(
    crw: Crw, tmp_path: Path
) -> None:
    """spec: CMD-START-4, FACTS-10 (a host that answers its handshake: the run starts
    and runs on it, no pause; a private codex host: the binary the run will start)"""
    workflow = str(waiting_for_no_host(tmp_path))
    socket = tmp_path / "sim.sock"
    host = launch_sim(socket, tmp_path / "sim-home")
    try:
        out = crw.start(workflow, "--backend", "app-server", "--host", f"unix:{socket}").json()
        fact = _facts(out)["host_reachable"]
        assert (fact["ok"], fact["host"], out["started"]) == (True, f"unix:{socket}", True)
        journal = Path(out["run_dir"]) / "journal.jsonl"
        deadline = time.monotonic() + LOADED
        while len(rows := read_journal(journal).rows) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert rows[0]["row"] == "started" and rows[1]["row"] != "paused", rows[:2]
    finally:
        stop_sim(host)
    fake = tmp_path / "bin" / "codex"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    found = crw.start(workflow, "--backend", "app-server", "--codex-bin", str(fake)).json()
    fact = _facts(found)["host_reachable"]
    assert (fact["ok"], fact["host"], fact["codex_bin"]) == (True, "codex", str(fake))

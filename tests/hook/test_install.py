"""`crw flow hook install` and the hook's command line as codex runs it: the config
entry host-protocol.md shows, the user's config kept, trust from hooks/list, and
`hook spawn` without the command tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crw.binding.install import Config, with_trust
from crw.host.mock_model import MockModel, write_codex_home
from tests.hook.spawn_helpers import OWNER, bind, ledger_lines, spawn_input

USER_CONFIG = '# mine\nmodel = "gpt-5.5"\n\n[features]\nplugins = false\napps = false\n'


def crw(*args: str, home: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRW_", "CODEX_"))}
    return subprocess.run(
        [sys.executable, "-m", "crw", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=env | {"CODEX_HOME": str(home)},
        cwd=home.parent,
    )


def entry_text(command: str) -> str:
    return (
        "\n# The crw flow spawn hook (crw flow hook install).\n[[hooks.PreToolUse]]\n\n"
        f'[[hooks.PreToolUse.hooks]]\ntype = "command"\ncommand = "{command}"\ntimeout = 30\n'
    )


def test_install_without_a_host_writes_the_hook_once_keeps_the_config_and_warns(
    tmp_path: Path,
) -> None:
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(USER_CONFIG)
    first = crw("flow", "hook", "install", "--json", home=home)
    assert first.returncode == 1, first.stderr
    command = f"{Path(sys.executable).parent / 'crw'} flow hook spawn"
    assert json.loads(first.stdout) == {
        "config": str(home / "config.toml"),
        "command": command,
        "added": True,
        "key": None,
        "trusted": False,
        "warnings": [
            "not trusted: no app-server answers on "
            f"unix:{home}/app-server-control/app-server-control.sock; start codex on {home} "
            "and install again, or pass --host unix:PATH (a running app-server) or --host codex"
        ],
    }
    assert (home / "config.toml").read_text() == USER_CONFIG + entry_text(command)
    again = crw("flow", "hook", "install", "--codex-home", str(home), "--json", home=home)
    assert json.loads(again.stdout)["added"] is False
    assert (home / "config.toml").read_text() == USER_CONFIG + entry_text(command)


def test_install_refuses_a_config_that_is_not_toml_and_changes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text("model = \n")
    result = crw("flow", "hook", "install", home=home)
    assert result.returncode == 2
    assert result.stderr.startswith(f"crw: error: {home / 'config.toml'} is not TOML (")
    assert (home / "config.toml").read_text() == "model = \n"


def test_trust_replaces_a_stale_hash_and_keeps_the_rest() -> None:
    key = "/h/config.toml:pre_tool_use:0:0"
    text = f'a = 1\n[hooks.state."{key}"]\ntrusted_hash = "sha256:old"\n[b]\nc = 2\n'
    new = with_trust(Config(Path("/h/config.toml"), text, {}), key, "sha256:new")
    assert new == text.replace("sha256:old", "sha256:new")


@pytest.mark.codex
def test_install_against_the_real_host_records_the_trust_hooks_list_shows(tmp_path: Path) -> None:
    with MockModel() as model:
        home = write_codex_home(tmp_path / "codex-home", model.url)
        before = (home / "config.toml").read_text()
        result = crw("flow", "hook", "install", "--host", "codex", "--json", home=home)
        assert result.returncode == 0, result.stderr
        installed = json.loads(result.stdout)
        key = f"{home / 'config.toml'}:pre_tool_use:0:0"
        assert (installed["key"], installed["trusted"], installed["warnings"]) == (key, True, [])
        text = (home / "config.toml").read_text()
        assert text.startswith(before + entry_text(installed["command"]))
        assert text.count(f'[hooks.state."{key}"]\ntrusted_hash = "sha256:') == 1
        again = crw("flow", "hook", "install", "--host", "codex", "--json", home=home)
        assert json.loads(again.stdout) | {"added": True} == installed
        assert (home / "config.toml").read_text() == text


def test_hook_spawn_runs_without_the_command_tree(tmp_path: Path) -> None:
    """spec: HOOK-1"""
    state = tmp_path / "state"
    bind(state)
    call = spawn_input("crw-flow-op: a.1/t1-a1\nCRW-ROLE: explorer\n\nGo.")
    probe = (
        "import sys, atexit; from crw.cli import main; "
        "atexit.register(lambda: print('cyclopts' in sys.modules, file=sys.stderr)); "
        f"sys.argv = ['crw', 'flow', 'hook', 'spawn', '--state', {str(state)!r}]; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        input=json.dumps(call),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (0, "False\n")
    reply = json.loads(done.stdout)["hookSpecificOutput"]
    assert reply["updatedInput"]["model"] == "gpt-explore"
    assert [line["op"] for line in ledger_lines(state, OWNER)] == ["a.1/t1"]


def test_install_writes_the_state_directory_into_the_hooks_command(tmp_path: Path) -> None:
    home = tmp_path / "codex-home"
    result = crw("flow", "hook", "install", "--state", "st", "--json", home=home)
    command = json.loads(result.stdout)["command"]
    assert (
        command
        == f"{Path(sys.executable).parent / 'crw'} flow hook spawn --state {tmp_path / 'st'}"
    )
    assert (home / "config.toml").read_text() == entry_text(command).lstrip("\n")

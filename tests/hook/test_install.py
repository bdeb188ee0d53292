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
import tomli

from crw.binding.install import Config, spawn_hooks, with_command, with_trust
from crw.errors import RefusedError
from crw.host.connect import CODEX_BIN_VARIABLE
from crw.host.mock_model import MockModel, write_codex_home
from tests.hook.spawn_helpers import OWNER, bind, ledger_lines, spawn_input

USER_CONFIG = '# mine\nmodel = "gpt-5.5"\n\n[features]\nplugins = false\napps = false\n'


def crw(*args: str, home: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """`crw ARGS` without the caller's CRW_ and CODEX_ variables, but the codex binary
    of the test (`--host codex` runs it: tests/codex_bins.py)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CRW_", "CODEX_")) or k == CODEX_BIN_VARIABLE
    }
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
        "replaced": [],
        "target": None,
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


def _no_host(home: Path) -> str:
    return (
        "not trusted: no app-server answers on "
        f"unix:{home}/app-server-control/app-server-control.sock; start codex on {home} "
        "and install again, or pass --host unix:PATH (a running app-server) or --host codex"
    )


def test_install_writes_through_a_linked_config_and_keeps_the_link(tmp_path: Path) -> None:
    """A config.toml that is a symbolic link (a dotfiles copy) is written onto its
    target, atomically beside it; the link stays a link and both read the hook."""
    home = tmp_path / "codex-home"
    home.mkdir()
    (tmp_path / "dotfiles").mkdir()
    target = tmp_path / "dotfiles" / "codex.toml"
    target.write_text(USER_CONFIG)
    target.chmod(0o640)
    (home / "config.toml").symlink_to(target)
    result = crw("flow", "hook", "install", "--json", home=home)
    assert result.returncode == 1, result.stderr
    out = json.loads(result.stdout)
    assert (home / "config.toml").is_symlink()
    assert os.readlink(home / "config.toml") == str(target)
    assert target.read_text() == USER_CONFIG + entry_text(out["command"])
    assert (out["added"], out["target"]) == (True, str(target))
    assert target.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in (tmp_path / "dotfiles").iterdir()) == ["codex.toml"]
    updated = crw("flow", "hook", "install", "--state", "st", home=home)
    assert f"  written through the link to {target}" in updated.stdout.splitlines()
    assert (home / "config.toml").is_symlink() and "--state" in target.read_text()


def test_install_refuses_in_one_line_a_link_whose_target_cannot_be_written(
    tmp_path: Path,
) -> None:
    home = tmp_path / "codex-home"
    home.mkdir()
    missing = tmp_path / "gone" / "config.toml"
    (home / "config.toml").symlink_to(missing)
    result = crw("flow", "hook", "install", home=home)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"crw: error: cannot write {home / 'config.toml'} (a link to {missing}): No such file "
        f"or directory; make {missing.parent} a directory you can write, then install again\n"
    )
    assert os.readlink(home / "config.toml") == str(missing)


def test_install_updates_an_entry_with_another_command_showing_old_and_new(
    tmp_path: Path,
) -> None:
    """An entry whose command runs `flow hook spawn` from another venv or with
    another --state is updated to this install's command, the rest kept."""
    home = tmp_path / "codex-home"
    home.mkdir()
    stale = "/old/venv/bin/crw flow hook spawn --state /old/state"
    (home / "config.toml").write_text(USER_CONFIG + entry_text(stale))
    result = crw("flow", "hook", "install", "--state", "st", "--json", home=home)
    assert result.returncode == 1, result.stderr
    out = json.loads(result.stdout)
    command = f"{Path(sys.executable).parent / 'crw'} flow hook spawn --state {tmp_path / 'st'}"
    assert (home / "config.toml").read_text() == USER_CONFIG + entry_text(command)
    assert (out["command"], out["added"], out["replaced"]) == (command, False, [stale])
    again = crw("flow", "hook", "install", "--state", "st", home=home)
    assert again.stdout.splitlines()[0] == (
        f"the spawn hook is already in {home / 'config.toml'}: {command}"
    )
    other = crw("flow", "hook", "install", home=home)
    assert other.stdout.splitlines()[:2] == [
        f"the spawn hook is updated in {home / 'config.toml'}: "
        f"{Path(sys.executable).parent / 'crw'} flow hook spawn",
        f"  was: {command}",
    ]


def test_install_into_inline_hooks_prints_toml_to_paste_and_exits_1(tmp_path: Path) -> None:
    home = tmp_path / "codex-home"
    home.mkdir()
    inline = "hooks = { PreToolUse = [] }\n"
    (home / "config.toml").write_text(inline)
    result = crw("flow", "hook", "install", home=home)
    assert result.returncode == 1
    assert result.stderr.startswith(
        f"crw: error: cannot append the spawn hook to {home / 'config.toml'}: its hooks are "
        "not written as [[hooks.PreToolUse]] tables; add the entry printed on stdout by hand"
    )
    assert len(result.stderr.splitlines()) == 1
    command = f"{Path(sys.executable).parent / 'crw'} flow hook spawn"
    assert spawn_hooks(tomli.loads(result.stdout)) == [command]
    assert (home / "config.toml").read_text() == inline
    refused = crw("flow", "hook", "install", "--json", home=home)
    as_json = json.loads(refused.stdout)  # one object: the error with the entry
    assert refused.returncode == 1 and refused.stderr == ""
    assert as_json["error"].startswith(f"cannot append the spawn hook to {home / 'config.toml'}")
    assert as_json["fix"].startswith("add the entry printed on stdout by hand")
    assert spawn_hooks(tomli.loads(as_json["entry"])) == [command]


def test_install_exit_codes_as_the_docs_say(tmp_path: Path) -> None:
    """0 trusted, 1 not trusted or not written, 2 config.toml unreadable or not TOML."""
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").mkdir()
    unreadable = crw("flow", "hook", "install", home=home)
    assert unreadable.returncode == 2
    assert unreadable.stderr.startswith(f"crw: error: cannot read {home / 'config.toml'}: ")
    (home / "config.toml").rmdir()
    untrusted = crw("flow", "hook", "install", "--json", home=home)
    assert (untrusted.returncode, json.loads(untrusted.stdout)["warnings"]) == (1, [_no_host(home)])


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_install_into_a_directory_it_cannot_write_fails_in_one_line(tmp_path: Path) -> None:
    """No traceback: a file system that refuses the write (here /proc, even to root)
    is one line and exit 1."""
    result = crw("flow", "hook", "install", "--codex-home", "/proc/self", home=tmp_path / "h")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.startswith("crw: error: cannot write /proc/self/config.toml: ")
    assert len(result.stderr.splitlines()) == 1


def test_an_entry_whose_command_is_not_a_plain_string_is_not_updated_but_refused() -> None:
    old = "/old/crw flow hook spawn"
    text = entry_text(old).replace(f'"{old}"', f'"""{old}"""')
    config = Config(Path("/h/config.toml"), text, tomli.loads(text))
    with pytest.raises(RefusedError) as refused:
        with_command(config, [old], "/new/crw flow hook spawn")
    assert str(refused.value) == (
        'cannot update the spawn hook in /h/config.toml: write command = "/new/crw flow hook '
        'spawn" in place of "/old/crw flow hook spawn" by hand'
    )

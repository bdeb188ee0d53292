"""`crw flow codex install`: the hook, the agent types of the role store and the
skill written once, shown before they are written, and a config it cannot read
refused with nothing changed. The trust and the host's reload of the skills are
tests/hook/test_codex_skill.py's (the real app-server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import tomli

from crw.binding.codex_setup import skill_text

USER_CONFIG = '# mine\nmodel = "gpt-5.5"\n\n[agents]\nmax_threads = 4\n'
ROLES = '[executor]\nagent_type = "builder"\nmodel = "gpt-5.5"\neffort = "high"\n'


def install(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`crw flow codex install` on `tmp/codex-home` with the state `tmp/state`, no
    host there to answer (its daemon socket is absent)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRW_", "CODEX_"))}
    return subprocess.run(
        [sys.executable, "-m", "crw", "flow", "codex", "install", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env=env | {"CODEX_HOME": str(tmp / "codex-home"), "CRW_STATE": str(tmp / "state")},
        cwd=tmp,
    )


def setup(tmp: Path, config: str = USER_CONFIG) -> Path:
    home = tmp / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(config)
    (tmp / "state").mkdir()
    (tmp / "state" / "roles.toml").write_text(ROLES)
    return home


def test_without_yes_it_shows_what_it_would_write_and_writes_nothing(tmp_path: Path) -> None:
    home = setup(tmp_path)
    shown = install(tmp_path)
    assert shown.returncode == 1, shown.stderr
    assert shown.stdout.startswith("crw flow codex install writes:\n")
    assert shown.stdout.endswith("nothing written: run again with --yes\n")
    assert "    + [agents.architect]\n" in shown.stdout
    assert "    + [agents.builder]\n" in shown.stdout
    assert "    + [agents.reviewer]\n" in shown.stdout
    assert f"{home / 'skills/crw-flow/SKILL.md'}: the crw-flow skill (new)" in shown.stdout
    assert (home / "config.toml").read_text() == USER_CONFIG
    assert not (home / "skills").exists()
    as_json = json.loads(install(tmp_path, "--json").stdout)
    assert as_json["written"] is False
    assert as_json["agent_types"] == ["architect", "builder", "executor", "reviewer"]
    assert (home / "config.toml").read_text() == USER_CONFIG


def test_yes_writes_what_was_shown_once_and_a_second_install_writes_nothing(
    tmp_path: Path,
) -> None:
    """The appended text is the dry view's; the user's config stays byte for byte."""
    home = setup(tmp_path)
    shown = json.loads(install(tmp_path, "--json").stdout)
    done = install(tmp_path, "--yes", "--json")
    assert done.returncode == 1, done.stderr  # written, but no host to trust it
    written = json.loads(done.stdout)
    assert written["written"] is True
    assert written["appended"] == shown["appended"]
    text = (home / "config.toml").read_text()
    assert text == USER_CONFIG + shown["appended"]
    config = tomli.loads(text)
    assert config["agents"]["max_threads"] == 4
    assert sorted(config["agents"]) == [
        "architect",
        "builder",
        "executor",
        "max_threads",
        "reviewer",
    ]
    assert config["agents"]["reviewer"]["description"] == (
        "A subagent of a crw flow run (reviewer and critic): it does the step its message names."
    )
    assert all(config["agents"][kind]["description"] for kind in ("architect", "builder"))
    assert config["hooks"]["PreToolUse"][0]["hooks"][0]["command"] == written["hook"]["command"]
    skill = home / "skills" / "crw-flow" / "SKILL.md"
    assert skill.read_text() == skill_text()
    again = install(tmp_path, "--yes")
    assert again.stdout.startswith(
        f"nothing to write: the spawn hook, the agent types and the crw-flow skill are in "
        f"{home} already\n"
    )
    assert (home / "config.toml").read_text() == text
    assert json.loads(install(tmp_path, "--json").stdout)["written"] is False


def test_an_older_skill_is_replaced_and_an_agent_table_there_is_kept(tmp_path: Path) -> None:
    home = setup(tmp_path, USER_CONFIG + '[agents.reviewer]\ndescription = "mine"\n')
    skill = home / "skills" / "crw-flow" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: crw-flow\ndescription: old\n---\n")
    shown = install(tmp_path)
    assert f"{skill}: the crw-flow skill (replacing the one there)" in shown.stdout
    assert "[agents.reviewer]" not in shown.stdout
    install(tmp_path, "--yes")
    assert skill.read_text() == skill_text()
    assert tomli.loads((home / "config.toml").read_text())["agents"]["reviewer"] == {
        "description": "mine"
    }


def test_a_config_that_is_not_toml_is_refused_in_one_line_changing_nothing(
    tmp_path: Path,
) -> None:
    home = setup(tmp_path, "model = \n")
    refused = install(tmp_path, "--yes")
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"crw: error: {home / 'config.toml'} is not TOML (")
    assert refused.stderr.count("\n") == 1
    assert (home / "config.toml").read_text() == "model = \n"
    assert not (home / "skills").exists()


def test_a_role_store_that_does_not_read_is_refused_changing_nothing(tmp_path: Path) -> None:
    home = setup(tmp_path)
    (tmp_path / "state" / "roles.toml").write_text("[executor]\nmodle = 1\n")
    refused = install(tmp_path, "--yes")
    assert refused.returncode == 2
    assert refused.stderr.startswith("crw: error: ")
    assert refused.stderr.count("\n") == 1
    assert (home / "config.toml").read_text() == USER_CONFIG
    assert not (home / "skills").exists()


def test_inline_agents_are_refused_with_the_tables_to_add_by_hand(tmp_path: Path) -> None:
    config = "agents = { max_threads = 4 }\n"
    home = setup(tmp_path, config)
    refused = install(tmp_path, "--yes")
    assert refused.returncode == 1
    assert refused.stderr.startswith("crw: error: cannot append [agents.<type>] tables to ")
    assert "[agents.builder]\n" in refused.stdout
    assert (home / "config.toml").read_text() == config
    assert not (home / "skills").exists()


def test_at_a_terminal_it_asks_after_the_view_and_writes_on_yes_only(tmp_path: Path) -> None:
    """stdin a terminal: the view, then the question; `n` writes nothing, `y` writes."""
    home = setup(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRW_", "CODEX_"))}
    env |= {"CODEX_HOME": str(home), "CRW_STATE": str(tmp_path / "state")}
    said: dict[str, subprocess.CompletedProcess[str]] = {}
    for answer in ("n", "y"):
        main, terminal = os.openpty()
        try:
            os.write(main, f"{answer}\n".encode())
            done = subprocess.run(
                [sys.executable, "-m", "crw", "flow", "codex", "install"],
                stdin=terminal,
                capture_output=True,
                text=True,
                timeout=60,
                env=env,
                cwd=tmp_path,
            )
        finally:
            os.close(main)
            os.close(terminal)
        said[answer] = done
        view, _, rest = done.stdout.partition("write them? [y/N] ")
        assert view.startswith("crw flow codex install writes:\n"), done.stdout
        if answer == "n":
            assert (done.returncode, rest) == (1, "nothing written\n")
            assert (home / "config.toml").read_text() == USER_CONFIG
            assert not (home / "skills").exists()
    assert (
        said["y"].stdout.split("write them? [y/N] ")[1].startswith("crw flow codex install wrote:")
    )
    assert (home / "skills" / "crw-flow" / "SKILL.md").read_text() == skill_text()

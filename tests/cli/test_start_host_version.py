"""`crw flow start`'s preview names the host its run talks to: the codex version
its `initialize` answer gives (or, for a private `codex` host, its binary's
`--version`), or the simulated host (docs/host.md, "codex versions")."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

from crw.host.version import binary_version, host_version
from tests.cli.conftest import Crw
from tests.cli.test_start_preview import WORKFLOW, _roles, _sim

SIM = "the simulated host (crw host sim, as codex 0.163.0)"


def test_a_session_start_on_the_simulated_host_names_it(crw: Crw, tmp_path: Path) -> None:
    _roles(crw)
    with _sim(tmp_path) as (host, owner):
        out = crw.start(WORKFLOW, "--host", host, "--owner", owner).json()
        text = crw("flow", "start", WORKFLOW, "--host", host, "--state", str(crw.state))
    assert out["host_version"] == SIM
    assert text.code == 0, text.stderr
    assert f"  host: {SIM}" in text.stdout.splitlines()


def test_an_app_server_start_names_its_shared_host(crw: Crw, tmp_path: Path) -> None:
    with _sim(tmp_path) as (host, _owner):
        out = crw.start(WORKFLOW, "--backend", "app-server", "--host", host).json()
    assert out["host_version"] == SIM


def test_an_app_server_start_names_its_private_codex_by_its_binary(crw: Crw) -> None:
    """The default binary is the wheel's (the test's environment has no CRW_CODEX_BIN)."""
    out = crw.start(WORKFLOW, "--backend", "app-server").json()
    assert out["host_version"] == f"codex {metadata.version('openai-codex-cli-bin')}"


def test_a_private_codex_named_by_codex_bin_or_crw_codex_bin_is_the_one_named(
    crw: Crw, tmp_path: Path
) -> None:
    fake = tmp_path / "codex"
    fake.write_text('#!/bin/sh\n[ "$1" = --version ] && echo "codex-cli 9.9.9" && exit 0\nexit 1\n')
    fake.chmod(0o755)
    by_flag = crw.start(WORKFLOW, "--backend", "app-server", "--codex-bin", str(fake)).json()
    by_env = crw.start(
        WORKFLOW, "--backend", "app-server", env=crw.env | {"CRW_CODEX_BIN": str(fake)}
    ).json()
    assert by_flag["host_version"] == by_env["host_version"] == "codex 9.9.9"


def test_a_host_not_reached_leaves_the_version_unknown(crw: Crw) -> None:
    _roles(crw)
    out = crw.start(WORKFLOW, "--host", "unix:/missing.sock", "--owner", "o").json()
    text = crw("flow", "start", WORKFLOW, "--host", "unix:/missing.sock", "--state", str(crw.state))
    assert out["host_version"] is None
    assert "  host: not reached, its version unknown" in text.stdout.splitlines()


@pytest.mark.parametrize(
    ("agent", "named"),
    [
        ("crw/0.169.0 (Debian 12.0.0; x86_64) xterm (crw; 0.1.0)", "codex 0.169.0"),
        ("crw-sim/0.163.0", SIM),
        ("some host", "some host"),
        ("", None),
        (None, None),
        (7, None),
    ],
)
def test_host_version_reads_the_user_agent(agent: object, named: str | None) -> None:
    assert host_version(agent) == named


def test_binary_version_is_none_for_a_binary_that_is_not_codex(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.write_text("#!/bin/sh\necho 'something 1.0 else'\n")
    other.chmod(0o755)
    assert binary_version(str(other)) is None
    assert binary_version(str(tmp_path / "missing")) is None

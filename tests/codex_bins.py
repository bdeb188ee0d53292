"""The codex binaries the real-host tests run against, each test once per binary.

Every test marked `codex` (tests/host, tests/hook, tests/codex_owner) is
parametrized over:

- the wheel's: codex 0.163.0 from PyPI's `openai-codex-cli-bin` (always there:
  requirements.lock pins it);
- the npm one: `@openai/codex` as `.codex-npm/package.json` pins it, installed
  whole by `make codex-next` (`npm ci` into `.codex-npm/node_modules/`, which git
  ignores) and run as a user runs it, through npm's `codex` launcher. Without it
  its tests are skipped; with CI set they fail (`.ci/run` installs it).

The `codex_bin` fixture sets `CRW_CODEX_BIN` to the binary for the test, so the
test's own codex children (tests/host/codex_env.py), crw's private `codex` hosts
and every `crw` process the test starts run that one. See docs/host.md, "codex
versions", for what differs between them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import codex_cli_bin
import pytest

from crw.host.connect import CODEX_BIN_VARIABLE

NPM_DIR = Path(__file__).resolve().parent.parent / ".codex-npm"
"""Where `make codex-next` installs the npm codex (its package.json is committed)."""


@dataclass(frozen=True)
class CodexBin:
    """One codex a test runs against."""

    source: str
    """`wheel` or `npm`."""
    version: str
    """The version its package pins (the npm one: package.json's)."""

    @property
    def id(self) -> str:
        return f"codex-{self.version}"

    def path(self) -> Path:
        """The binary to run; the npm one missing skips the test (fails it under CI)."""
        if self.source == "wheel":
            return Path(codex_cli_bin.bundled_codex_path())
        launcher = NPM_DIR / "node_modules" / ".bin" / "codex"
        installed = _installed_npm_version()
        if installed == self.version and launcher.exists():
            return launcher
        found = f"version {installed} is" if installed else "it is not"
        why = f"codex {self.version} from npm: {found} installed in {NPM_DIR}; run make codex-next"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and {why} (.ci/run does)")
        pytest.skip(why)


def _installed_npm_version() -> str | None:
    package = NPM_DIR / "node_modules" / "@openai" / "codex" / "package.json"
    try:
        version: str = json.loads(package.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None
    return version


def binaries() -> list[CodexBin]:
    """The wheel's codex, then the one `.codex-npm/package.json` pins."""
    pinned = json.loads((NPM_DIR / "package.json").read_text())["dependencies"]["@openai/codex"]
    return [
        CodexBin("wheel", metadata.version("openai-codex-cli-bin")),
        CodexBin("npm", pinned),
    ]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("codex") is not None:
        found = binaries()
        metafunc.parametrize("codex_bin", found, ids=[b.id for b in found], indirect=True)


@pytest.fixture(autouse=True)
def codex_bin(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> CodexBin | None:
    """A `codex` test's binary, named by `CRW_CODEX_BIN` for the test; None for
    every other test (it changes nothing)."""
    binary: CodexBin | None = getattr(request, "param", None)
    if binary is not None:
        monkeypatch.setenv(CODEX_BIN_VARIABLE, str(binary.path()))
    return binary

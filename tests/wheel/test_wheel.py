"""crw as a user installs it: the wheel built from this checkout, installed into a
fresh virtual environment outside it, run from an empty directory.

The wheel is built offline with the setuptools `.[test]` pins (the one the build
system names). Its dependencies install offline too, from a wheelhouse kept in
.venv (`.venv/wheels`): the first run fills it from the package index with the
versions requirements.lock pins (`pip download`), every later run
finds them there. The install compiles nothing: the demo's processes compile
what they import, in about half the time a full compile takes. Every process a
demo starts is reaped at teardown: each one's command line names the test's
temporary directory, where the demo keeps its state.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock
from packaging.metadata import Metadata
from trove_classifiers import classifiers

import crw
from tests.deadlines import LOADED
from tests.processes import processes_under

pytestmark = pytest.mark.xdist_group("test_wheel")

REPO = Path(__file__).resolve().parents[2]
WHEELHOUSE = Path(sys.prefix) / "wheels"
"""The dependencies' wheels, kept between runs (in .venv: `make clean` drops it)."""
PIP = (sys.executable, "-m", "pip", "--disable-pip-version-check")


@dataclass(frozen=True)
class Installed:
    """The wheel and the venv it is installed in."""

    wheel: Path
    venv: Path


@dataclass(frozen=True)
class User:
    """Runs the installed `crw` as a user does: its own TMPDIR and CODEX_HOME, no
    CRW_ or PYTHON variable, the venv's bin first on PATH."""

    installed: Installed
    tmp: Path
    env: dict[str, str]

    def crw(self, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.installed.venv / "bin" / "crw"), *args],
            env=self.env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=LOADED,
        )


def _run(*argv: str | Path, cwd: Path | None = None, timeout: float = LOADED) -> None:
    done = subprocess.run(
        [str(arg) for arg in argv],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"


def _build(tmp: Path) -> Path:
    """crw's wheel, built from a copy of the checkout's sources (the build leaves
    its build/ and egg-info there, not in the checkout)."""
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "crw", source / "crw", ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp / "dist"
    _run(*PIP, "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "-w", dist, source)  # fmt: skip
    (wheel,) = dist.glob("*.whl")
    return wheel


def _install(wheel: Path, venv: Path) -> None:
    """`wheel` and its dependencies into `venv`, from the wheelhouse; what it lacks
    is downloaded first (the versions requirements.lock pins)."""
    WHEELHOUSE.mkdir(exist_ok=True)
    offline = (*PIP, "--python", venv / "bin" / "python", "install", "--quiet", "--no-compile",
               "--no-index", "--find-links", WHEELHOUSE, wheel)  # fmt: skip
    with FileLock(WHEELHOUSE / ".lock"):
        if subprocess.run([str(arg) for arg in offline], capture_output=True).returncode == 0:
            return
        # the pinned wheels from the registry, once a checkout: minutes on a loaded machine
        _run(*PIP, "download", "--quiet", "--only-binary", ":all:", "-c",
             REPO / "requirements.lock", "-d", WHEELHOUSE, wheel, timeout=5 * LOADED)  # fmt: skip
        for own in WHEELHOUSE.glob("crw_flow-*.whl"):
            own.unlink()
        _run(*offline)


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Installed:
    """Built and installed once a session, under the session's temporary directory:
    the xdist workers that run this module's tests share it."""
    base = tmp_path_factory.getbasetemp()
    root = (base if worker_id == "master" else base.parent) / "crw-wheel"
    with FileLock(f"{root}.lock"):
        ready = root / "installed"
        if not ready.exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            wheel = _build(root)
            _run(sys.executable, "-m", "venv", "--without-pip", root / "venv")
            _install(wheel, root / "venv")
            ready.write_text(str(wheel), encoding="utf-8")
        return Installed(Path(ready.read_text(encoding="utf-8")), root / "venv")


@pytest.fixture
def user(installed: Installed, tmp_path: Path) -> Iterator[User]:
    """The installed crw; every process it leaves (a demo's host or run process:
    their command lines name `tmp_path`, the demo's TMPDIR) is killed after."""
    (tmp_path / "tmp").mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CRW_", "CODEX_", "PYTHON", "VIRTUAL_ENV"))
    }
    env |= {"TMPDIR": str(tmp_path / "tmp"), "CODEX_HOME": str(tmp_path / "codex-home")}
    env["PATH"] = f"{installed.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    yield User(installed, tmp_path, env)
    for pid in processes_under(tmp_path):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_the_wheel_carries_metadata_an_index_accepts_and_the_examples(
    installed: Installed,
) -> None:
    """The core metadata validates as a package index reads it (packaging, the
    classifiers PyPI knows); the codex extra pins the host the suite runs against;
    every file of the package that is no module (the examples, the role
    overlays) is package data."""
    with zipfile.ZipFile(installed.wheel) as archive:
        names = set(archive.namelist())
        info = f"crw_flow-{crw.__version__}.dist-info"
        metadata = Metadata.from_email(archive.read(f"{info}/METADATA"), validate=True)
    assert metadata.name == "crw-flow" and str(metadata.version) == crw.__version__
    assert metadata.license_expression is None  # none chosen yet (pyproject.toml)
    assert metadata.description_content_type == "text/markdown"
    assert metadata.description and "## Install it" in metadata.description
    assert metadata.author and metadata.keywords and metadata.classifiers
    assert set(metadata.classifiers) <= classifiers
    codex = {
        (r.name, str(r.specifier))
        for r in metadata.requires_dist or []
        if r.marker and r.marker.evaluate({"extra": "codex"})
    }
    assert codex == {("openai-codex-cli-bin", "==0.163.0")}
    data = {
        str(path.relative_to(REPO))
        for path in (REPO / "crw").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".py"
    }
    assert "crw/examples/demo.toml" in data and data - names == set()  # every data file ships
    assert not [name for name in names if name.startswith(("examples/", "tests/"))]


def test_crw_version_prints_the_installed_version(user: User) -> None:
    """`crw --version` and `crw flow --version`: crw-flow's version as installed,
    the one crw.__version__ writes once."""
    for args in (("--version",), ("flow", "--version")):
        done = user.crw(*args, cwd=user.tmp)
        assert (done.returncode, done.stdout.strip()) == (0, crw.__version__), done.stderr


@pytest.mark.parametrize("variant", [(), ("--git",), ("--backend", "app-server")])
def test_the_demo_runs_from_an_empty_directory(user: User, variant: tuple[str, ...]) -> None:
    """The installed crw, not the checkout's, runs the demo (each variant) and finds
    its examples in the installed package; nothing is written where it runs."""
    empty = user.tmp / "empty"
    empty.mkdir()
    venv = user.installed.venv
    module = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import crw; print(crw.__file__)"],
        env=user.env,
        cwd=empty,
        capture_output=True,
        text=True,
        timeout=LOADED,
    )
    assert Path(module.stdout.strip()).is_relative_to(venv), module.stderr
    done = user.crw("flow", "demo", *variant, cwd=empty)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    assert "run ended: completed" in done.stdout
    assert not list(empty.iterdir())  # the demo kept its state in a temporary directory

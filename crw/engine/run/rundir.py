"""The state directory and a run's directory `<state>/flow/<run>/`.

Every command reads the run through its directory: run.json, the journal (which only
the run's process writes), the step bus's steps/, inbox/, replies/ and outbox/, and
the lock files. Paths are named here once, so no other module spells a file name.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from crw.errors import InputError, RefusedError
from crw.private import PRIVATE_DIR as PRIVATE_DIR
from crw.private import PRIVATE_FILE as PRIVATE_FILE
from crw.private import loose, make_dirs

if TYPE_CHECKING:
    from datetime import datetime

STATE_DIR_NAME = ".crw"
FLOW = "flow"


def resolve_state(state: str | None, environ: Mapping[str, str], cwd: Path) -> Path:
    """The state directory: `--state`, else `$CRW_STATE`, else `.crw/` at the root of
    the git repository containing `cwd`, else `cwd/.crw`.

    A relative `--state` or `$CRW_STATE` is taken from `cwd`.
    """
    chosen = state or environ.get("CRW_STATE")
    if chosen:
        return cwd / chosen
    root = _repository_root(cwd)
    return (root if root is not None else cwd) / STATE_DIR_NAME


def _repository_root(cwd: Path) -> Path | None:
    # Imported here: a command given --state or $CRW_STATE, or run outside every
    # repository, never pays for pygit2.
    from crw.engine.config.repo import may_hold_repository

    if not may_hold_repository(cwd):
        return None
    import pygit2

    try:
        git_dir = pygit2.discover_repository(str(cwd))
    except pygit2.GitError:
        return None
    if git_dir is None:
        return None
    workdir = pygit2.Repository(git_dir).workdir
    return Path(workdir) if workdir else None


@dataclass(frozen=True)
class RunDir:
    """A run's directory and the paths in it (each made once: a session run's
    actors ask for them at every step, reply and sweep)."""

    root: Path

    @classmethod
    def of(cls, state: Path, run_id: str) -> RunDir:
        """The directory of run `run_id` under `state` (whether or not it exists)."""
        return cls(state / FLOW / run_id)

    @property
    def id(self) -> str:
        return self.root.name

    @cached_property
    def run_json(self) -> Path:
        return self.root / "run.json"

    @cached_property
    def journal(self) -> Path:
        return self.root / "journal.jsonl"

    @cached_property
    def inputs(self) -> Path:
        """The run's copies of its file inputs, one file per input name."""
        return self.root / "inputs"

    @cached_property
    def reused(self) -> Path:
        """A rerun's reused rows (`crw.engine.run.rerun`), written before run.json."""
        return self.root / "reused.json"

    @cached_property
    def steps(self) -> Path:
        return self.root / "steps"

    @cached_property
    def inbox(self) -> Path:
        return self.root / "inbox"

    @cached_property
    def replies(self) -> Path:
        return self.root / "replies"

    @cached_property
    def outbox(self) -> Path:
        return self.root / "outbox"

    @cached_property
    def calls(self) -> Path:
        """The calls' own directories (P), `calls/<call>`."""
        return self.root / "calls"

    @property
    def run_lock(self) -> Path:
        return self.root / "run.lock"

    @property
    def start_lock(self) -> Path:
        return self.root / "start.lock"

    @property
    def log(self) -> Path:
        """The detached run process's stdout and stderr."""
        return self.root / "run.log"

    @property
    def launch_failed(self) -> Path:
        """The last launch of the run's process that stopped before its started
        row: written by the command that launched it, removed by the next process
        that records its started row (`crw.engine.run.launch_record`)."""
        return self.root / "launch-failed.json"

    def process_lock(self, token: str) -> Path:
        return self.root / f"process.{token}.lock"

    def exists(self) -> bool:
        return self.root.is_dir()

    def create(self) -> None:
        """Make the run's directory and its subdirectories (0700), the state
        directory and its flow/ where missing (0700, whatever the umask, as
        `crw.private.make_dirs`), and its journal and log (0600, empty): private
        to the user whatever the umask, so every file the run writes there later
        is the user's alone. The run's directory, steps/ and calls/ spread their
        subdirectories over the file system's block groups where it can
        (`crw.topdir`).

        Raises:
            RefusedError: the directory exists already, or cannot be made.
        """
        from crw.topdir import spread_subdirectories  # only a run's start makes one

        try:
            make_dirs(self.root.parent)
            for directory in (
                self.root,
                self.steps,
                self.inbox,
                self.replies,
                self.outbox,
                self.calls,
            ):
                directory.mkdir(mode=PRIVATE_DIR)
                os.chmod(directory, PRIVATE_DIR)
                if directory in (self.root, self.steps, self.calls):  # a dir a call each
                    spread_subdirectories(directory)
            for file in (self.journal, self.log):
                os.close(os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))
                os.chmod(file, PRIVATE_FILE)
        except FileExistsError:
            raise RefusedError(
                f"run directory {self.root} exists already; start the run under a new id"
            ) from None
        except OSError as err:
            raise RefusedError(
                f"cannot make run directory {self.root}: {err.strerror or err}; "
                "make the state directory writable or pass another --state"
            ) from err


def loose_state(state: Path) -> list[str]:
    """A warning for each of the state directory and its flow/ that group or
    others may write (`crw.private.loose`): what a run keeps there is private, but
    another user could remove or replace a run's directory. crw makes both 0700;
    one made by hand, or by a crw that took the umask's mode, may be looser."""
    places = (("the state directory", state), ("the runs' directory", state / FLOW))
    return [why for what, path in places if (why := loose(what, path)) is not None]


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def new_run_id(name: str, now: datetime) -> str:
    """A fresh run id, one path segment: `<name>-20261129-193551-<4 hex>`.

    Characters of `name` that do not belong in a path segment become `-`.
    """
    safe = _UNSAFE.sub("-", name).strip(".-") or "run"
    return f"{safe}-{now:%Y%m%d-%H%M%S}-{os.urandom(2).hex()}"


MAX_RUN_ID = 255
"""A run id is one path segment: at most 255 characters (NAME_MAX)."""


def find_run(state: Path, run: str) -> RunDir:
    """The run named by `run`: a run id under `<state>/flow`, or a path to a run directory.

    Raises:
        InputError: no such run, or `run` is no run id nor path: empty, a control
            character (a newline, a NUL), or too long for the file system.
    """
    flow = state / FLOW
    shown = json.dumps(run if len(run) <= 80 else run[:80] + "...")
    if not run or any(ord(char) < 32 or char == "\x7f" for char in run):
        raise InputError(
            f"run {shown} is no run id: it is empty or holds a control character; "
            f"list the runs with: {list_command(state)}"
        )
    try:
        if run not in (".", "..") and os.sep not in run and len(run) <= MAX_RUN_ID:
            by_id = RunDir.of(state, run)
            if by_id.exists():
                return by_id
        as_path = RunDir(Path(run).absolute())
        if as_path.run_json.is_file():
            return as_path
    except (OSError, ValueError):
        pass
    raise InputError(
        f"run {shown} not found under {flow}; list the runs with: {list_command(state)}"
    )


def list_command(state: Path) -> str:
    """`crw flow list --state STATE`: the command that lists the runs under `state`."""
    return f"crw flow list --state {shlex.quote(str(state))}"


def list_runs(state: Path) -> list[str]:
    """The ids of the runs under `state`, sorted (a directory set aside, `.NAME`, is none)."""
    try:
        entries = list((state / FLOW).iterdir())
    except FileNotFoundError:
        return []
    return sorted(e.name for e in entries if e.is_dir() and not e.name.startswith("."))

"""The owner claim: the orchestrator line that binds an owner thread to one live run.

`<state>/flow-bound/<owner>.jsonl` holds JSON lines; the owner's binding is its last
line. An open line (`kind: "orchestrator"`, `run_id`) binds the thread to that run
until a `{"kind": "closed", "run_id": …}` line follows it. A thread holds the line
of one live run: a second start while the first lives (or is still starting) warns
and does not bind; the open line of a run that is not live is closed before the new
line is written (BIND-LINE-21, -22).

The read of the last line and the append are one step under the lock of the
flow-bound directory (`flow-bound.lock`), so two near-simultaneous starts of one
thread, or their run processes, cannot both bind (BIND-LINE-23). A binding that
cannot be written is a warning and the run starts all the same (BIND-LINE-24).

The decision itself is `plan_bind`, a pure function of the last line; the line
itself is `orchestrator_line` (BindOrchestrator), from the pairs a started row pins.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISDIR
from typing import Any

from filelock import Timeout, UnixFileLock

from crw.binding.lines import CLOSED as CLOSED
from crw.binding.lines import FLOW_BOUND as FLOW_BOUND
from crw.binding.lines import ORCHESTRATOR as ORCHESTRATOR
from crw.binding.lines import LastLine as LastLine
from crw.binding.lines import append_lines, is_segment, untrusted, validate_line
from crw.binding.lines import flow_bound_dir as flow_bound_dir
from crw.binding.lines import owner_file as owner_file
from crw.binding.lines import read_last_line as read_last_line
from crw.engine.config.role_names import ROLES, default_agent_type
from crw.private import PRIVATE_FILE, make_dirs

LOCK_NAME = "flow-bound.lock"
LOCK_TIMEOUT = 10.0
"""Seconds a bind waits for the flow-bound directory's lock before it warns."""

_TRUST_FIX = "make it the user's own, not writable by others and no link, then resume to bind"


@dataclass(frozen=True)
class BindResult:
    """Whether the owner's line now binds the run, and the warning to show if any."""

    bound: bool
    warning: str | None = None


@dataclass(frozen=True)
class BindPlan:
    """What a bind appends, and the warning when it does not bind."""

    append: list[dict[str, Any]]
    refused: str | None = None


def orchestrator_line(
    run_id: str, role_pairs: Mapping[str, Mapping[str, str]], policy_digest: str
) -> dict[str, Any]:
    """BindOrchestrator: the line that binds the owner to `run_id` with the pairs of
    the six roles (BIND-LINE-1, -2), from the table a run pins (`role_pairs`, its
    `policy_digest`)."""
    pairs = {role: helper_pair(role, role_pairs.get(role, {})) for role in ROLES}
    return {
        "kind": ORCHESTRATOR,
        "run_id": run_id,
        "policyDigest": policy_digest,
        "helperPairs": pairs,
    }


def helper_pair(role: str, pinned: Mapping[str, str]) -> dict[str, str]:
    """The decided parts of `role`'s pinned pair (BIND-LINE-6..8): its model, and its
    effort when the model is decided too (an effort without a model is no role's
    pair); its agent_type only when it is another than the one the spawn hook pairs
    the role with (the store's default). An undecided role has the empty pair."""
    pair: dict[str, str] = {}
    if "model" in pinned:
        pair["model"] = pinned["model"]
        if "effort" in pinned:
            pair["effort"] = pinned["effort"]
    agent_type = pinned.get("agent_type", default_agent_type(role))
    if agent_type != default_agent_type(role):
        pair["agent_type"] = agent_type
    return pair


def plan_bind(
    owner: str, last: LastLine, line: dict[str, Any], is_live: Callable[[str], bool]
) -> BindPlan:
    """Decide a bind from the owner's last line (pure but for `is_live`).

    - no open line: append `line`;
    - the open line of this run: append `line` unless it is the last line already;
    - the open line of a live run: append nothing, refused;
    - the open line of a run that is not live: close it, then append `line`.
    """
    run_id = line["run_id"]
    other = last.open_run
    if other is None:
        return BindPlan([line])
    if other == run_id:
        return BindPlan([] if last.line == line else [line])
    if is_live(other):
        return BindPlan(
            [],
            refused=(
                f"owner thread {owner} is bound to live run {other}; run {run_id} starts "
                f"unbound: wait for {other} to end, then resume {run_id} to bind it"
            ),
        )
    return BindPlan([{"kind": CLOSED, "run_id": other}, line])


def bind_owner(
    state: Path, owner: str, line: dict[str, Any], is_live: Callable[[str], bool]
) -> BindResult:
    """Bind the owner thread `owner` to the run of `line`, an orchestrator line.

    `is_live(run_id)` answers whether a run is live (its run lock or start lock is
    held). Never raises for the file system: a binding that cannot be read or
    written is a warning, and the caller starts the run all the same.

    Raises:
        ValueError: `line` is no orchestrator line Line.Validate takes.
    """
    invalid = validate_line(line) if line.get("kind") == ORCHESTRATOR else "another kind"
    if invalid is not None:
        raise ValueError(f"bind_owner takes a valid orchestrator line, not {invalid}")
    run_id = line["run_id"]
    cannot = f"cannot bind owner thread {owner} to run {run_id}"
    if not is_segment(owner):
        return BindResult(False, f"{cannot}: the thread id is not a file name; check the owner id")
    path = owner_file(state, owner)
    try:
        with _flow_bound_lock(state):
            last = read_last_line(path)
            if last.untrusted is not None:
                return BindResult(
                    False, f"{cannot}: {last.untrusted}; the run starts unbound, {_TRUST_FIX}"
                )
            try:
                plan = plan_bind(owner, last, line, is_live)
            except Exception as err:  # is_live is the caller's: a failure there only warns
                return BindResult(False, f"{cannot}: cannot tell whether its run is live ({err})")
            if plan.refused is not None:
                return BindResult(False, plan.refused)
            append_lines(path, plan.append)
    except Timeout:
        return BindResult(
            False,
            f"{cannot}: {flow_bound_dir(state) / LOCK_NAME} stayed held for {LOCK_TIMEOUT:g} s; "
            "the run starts unbound, resume it to bind",
        )
    except UntrustedError as err:
        return BindResult(False, f"{cannot}: {err.strerror}; the run starts unbound, {_TRUST_FIX}")
    except OSError as err:
        return BindResult(
            False,
            f"{cannot}: {err.filename or path}: {err.strerror or err}; the run starts unbound, "
            f"make {flow_bound_dir(state)} writable and resume it to bind",
        )
    if last.unreadable is not None:
        return BindResult(True, f"{last.unreadable}; it was read as no binding")
    return BindResult(True)


def close_owner(state: Path, owner: str, run_id: str) -> str | None:
    """Close the owner's line when its last line is the open line of `run_id`.

    Returns a warning when the close cannot be written, else None.
    """
    return close_open_line(state, owner, run_id)[1]


def close_open_line(state: Path, owner: str, run_id: str) -> tuple[bool, str | None]:
    """`close_owner`, and whether it appended the closed line (False: the owner's
    last line was not the open line of `run_id`, or the close failed)."""
    if not is_segment(owner):
        return False, None
    path = owner_file(state, owner)
    try:
        with _flow_bound_lock(state):
            if read_last_line(path).open_run != run_id:
                return False, None
            append_lines(path, [{"kind": CLOSED, "run_id": run_id}])
            return True, None
    except Timeout:
        return False, (
            f"cannot close the line of owner thread {owner} for run {run_id}: "
            f"{flow_bound_dir(state) / LOCK_NAME} stayed held for {LOCK_TIMEOUT:g} s; "
            "the next start closes it"
        )
    except OSError as err:
        return False, (
            f"cannot close the line of owner thread {owner} for run {run_id}: "
            f"{err.filename or path}: {err.strerror or err}; the next start closes it"
        )


class UntrustedError(OSError):
    """The flow-bound directory cannot be trusted; nothing is read or written there."""


def _trusted_dir(directory: Path) -> None:
    """Make the flow-bound directory (private to the user) or check the one there.

    Raises:
        UntrustedError: it is a symbolic link, another user's, or writable by others.
    """
    make_dirs(directory)
    stat = os.lstat(directory)
    if not S_ISDIR(stat.st_mode):
        raise UntrustedError(errno.ENOTDIR, f"{directory} is not a directory (a symbolic link?)")
    distrust = untrusted(directory, stat)
    if distrust is not None:
        raise UntrustedError(errno.EPERM, distrust)


@contextmanager
def _flow_bound_lock(state: Path) -> Iterator[None]:
    directory = flow_bound_dir(state)
    _trusted_dir(directory)
    lock = UnixFileLock(
        directory / LOCK_NAME,
        thread_local=False,
        timeout=LOCK_TIMEOUT,
        fallback_to_soft=False,
        mode=PRIVATE_FILE,  # without it, 0o666 less the umask; with it, fchmodded once made
    )
    with lock:
        yield

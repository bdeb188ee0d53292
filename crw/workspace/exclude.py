"""Keep a run's state directory out of `git status`: its path in `info/exclude`.

`crw flow start` in a checkout keeps its state in `.crw/` at the checkout's root,
which git would show as untracked (and `git add -A` would take). At every start,
once the run's directory exists, the state directory is added to the
repository's `info/exclude` as one anchored line (`/.crw/`, or the state
directory's path from the checkout's root: `/build/state/`), unless git ignores
it already (a `.gitignore` line, or the line an earlier start wrote): idempotent,
under a lock on the file, so two starts at once write it once. A linked
worktree's `info/exclude` is its common repository's (git reads no other), so
the line holds in every worktree of the repository, the calls' own included
(where crw's evidence records under `.crw/` are ignored already). A state
directory outside the checkout, or the checkout's root itself, adds nothing.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from crw.engine.config.repo import checkout_root


def exclude_state(state_dir: Path) -> str | None:
    """Add `state_dir` to `info/exclude` of the checkout that holds it, once; None,
    or a warning when it cannot be written (the start goes on)."""
    root = checkout_root(state_dir)
    if root is None:
        return None
    try:
        inside = state_dir.resolve().relative_to(root)
    except ValueError:
        return None  # the state is outside the checkout
    if not inside.parts or inside.parts[0] == ".git":
        return None
    import pygit2  # here: a start outside every checkout never loads git

    repo = pygit2.Repository(str(root))
    if repo.path_is_ignored(f"{inside.as_posix()}/"):
        return None
    line = f"/{inside.as_posix()}/"
    exclude = _common_dir(Path(repo.path)) / "info" / "exclude"
    try:
        exclude.parent.mkdir(exist_ok=True)
        _append_once(exclude, line)
    except OSError as err:
        return (
            f"cannot add {line} to {exclude} ({err.strerror or err}): git status shows "
            f"{inside.as_posix()}/ untracked; add that line to the file yourself"
        )
    return None


def _common_dir(git_dir: Path) -> Path:
    """The repository's common git directory: a linked worktree's points to it."""
    pointer = git_dir / "commondir"
    if not pointer.is_file():
        return git_dir
    return (git_dir / pointer.read_text(encoding="utf-8").strip()).resolve()


def _append_once(exclude: Path, line: str) -> None:
    """Append `line` to `exclude` unless it holds it, under an exclusive lock."""
    fd = os.open(exclude, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    with os.fdopen(fd, "r+b") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        file.seek(0)
        text = file.read().decode("utf-8", errors="replace")
        if line in text.splitlines():
            return
        head = "" if not text or text.endswith("\n") else "\n"
        file.write(f"{head}{line}\n".encode())
        file.flush()

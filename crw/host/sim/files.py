"""What a simulated subagent does to files: the `writes` and `commit` behaviours.

A scripted turn edits its workspace as a real subagent does before it answers:
`writes` puts text in files (or removes them) by paths relative to the turn's
workspace, `commit` then commits everything in the workspace's git worktree on
its HEAD (every file added, as `git add -A && git commit --allow-empty`), with
pygit2 and a fixed author. The workspace is the directory the thread's newest
spawn message or packet names (`Your workspace is P: …`: a subagent's host cwd is
its parent's, so that line is where a real one learns P), else the thread's cwd
(an app-server call's thread is started in P).

`check_writes` reads the script (a path that is absolute, leaves the workspace or
enters git's directory, `.git` in any case, is refused before anything changes);
`apply` acts, and a file it cannot write or a workspace that is no git worktree
is a `FileEffectError` the turn fails with.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from crw.host.sim.state import invalid_request

SIM_NAME = "crw sim"
SIM_EMAIL = "sim@crw.invalid"
"""The author and committer of every commit a simulated subagent makes."""

_WORKSPACE = (
    re.compile(r"^Your workspace is the absolute path `([^`]+)`\.", re.MULTILINE),
    re.compile(r"Your workspace is (\S.*?): run every command", re.MULTILINE),
)

Writes = tuple[tuple[str, str | None], ...]
"""(path relative to the workspace, its new text, or None to remove it), in order."""


class FileEffectError(Exception):
    """A scripted file effect that cannot be done; its message says what and where."""


@dataclass(frozen=True)
class FileEffects:
    """What a turn does to its workspace before it answers."""

    writes: Writes = ()
    commit: str | None = None

    def __bool__(self) -> bool:
        return bool(self.writes) or self.commit is not None


NO_FILES = FileEffects()
"""A turn that touches no file (the default)."""


def check_writes(value: Any) -> Writes:
    """`writes` of a `sim/script` behaviour: `{path: text | null}`, every path
    relative and inside the workspace; anything else is a -32600 error."""
    if not isinstance(value, dict):
        raise invalid_request("sim/script: writes must be an object {relative path: text or null}")
    checked: list[tuple[str, str | None]] = []
    for path, text in value.items():
        _check_path(path)
        if text is not None and not isinstance(text, str):
            raise invalid_request(f"sim/script: writes[{path!r}] must be a string, or null")
        checked.append((path, text))
    return tuple(checked)


def check_commit(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise invalid_request("sim/script: commit must be a non-empty commit message")
    return value


def _check_path(path: Any) -> None:
    if not isinstance(path, str) or not path or "\x00" in path:
        raise invalid_request(f"sim/script: writes path {path!r} must be a non-empty string")
    pure = PurePosixPath(path)
    if pure.is_absolute():
        raise invalid_request(
            f"sim/script: writes path {path!r} is absolute; name it relative to the workspace"
        )
    depth = 0
    for part in pure.parts:
        depth += -1 if part == ".." else 0 if part == "." else 1
        if depth < 0:
            raise invalid_request(
                f"sim/script: writes path {path!r} leaves the workspace; "
                "name a path under it without climbing out with '..'"
            )
        if names_git(part):
            raise invalid_request(
                f"sim/script: writes path {path!r} is inside .git; write work files only"
            )
    if depth == 0:
        raise invalid_request(f"sim/script: writes path {path!r} names the workspace itself")


_IGNORED_BY_HFS = dict.fromkeys([*range(0x200C, 0x2010), *range(0x202A, 0x202F)])
_IGNORED_BY_HFS |= dict.fromkeys([*range(0x206A, 0x2070), 0xFEFF])


def names_git(part: str) -> bool:
    """A path component some file system opens as git's directory: `.git` in any
    case (case-insensitive file systems), with trailing dots or spaces or an
    alternate data stream (NTFS), its short name `git~1` (NTFS), or with the
    code points HFS+ ignores."""
    name = part.translate(_IGNORED_BY_HFS).split(":", 1)[0].rstrip(" .").casefold()
    return name in (".git", "git~1")


def workspace_of(texts: Iterable[str], cwd: str) -> Path:
    """The workspace of a thread whose user messages are `texts` (oldest first):
    the one its newest message that names one names, else `cwd`."""
    for text in reversed(list(texts)):
        for pattern in _WORKSPACE:
            found = pattern.search(text)
            if found:
                return Path(found.group(1).strip())
    return Path(cwd)


def apply(workspace: Path, effects: FileEffects, when: float) -> str | None:
    """Do `effects` in `workspace`: the writes in order, then the commit (at
    `when`, seconds since the epoch). Returns the new commit's hex, if one was made.

    Raises:
        FileEffectError: the workspace is missing, a path resolves outside it or
            into git's directory (a symlink), a file cannot be written, or a
            commit's workspace is in no git repository.
    """
    if not effects:
        return None
    root = workspace.resolve()
    if not root.is_dir():
        raise FileEffectError(f"simulated host: the workspace {workspace} is no directory")
    for path, text in effects.writes:
        _write(root, path, text)
    return _commit(root, effects.commit, when) if effects.commit is not None else None


def _write(root: Path, path: str, text: str | None) -> None:
    target = root / path
    resolved = target.resolve()
    if not resolved.is_relative_to(root):
        raise FileEffectError(
            f"simulated host: writes path {path!r} resolves outside the workspace {root}"
        )
    if any(names_git(part) for part in resolved.relative_to(root).parts):
        raise FileEffectError(f"simulated host: writes path {path!r} resolves into .git")
    try:
        if text is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
    except OSError as err:
        raise FileEffectError(f"simulated host: cannot write {target}: {err}") from None


def _commit(root: Path, message: str, when: float) -> str:
    import pygit2  # only a script that commits needs it: not every host's start

    found = pygit2.discover_repository(str(root))
    if found is None:
        raise FileEffectError(
            f"simulated host: commit: the workspace {root} is in no git repository; "
            "make one there or drop `commit` from the script"
        )
    repo = pygit2.Repository(found)
    try:
        repo.index.add_all()
        repo.index.write()
        tree = repo.index.write_tree()
        parents = [] if repo.head_is_unborn else [repo.head.target]
        author = pygit2.Signature(SIM_NAME, SIM_EMAIL, int(when), 0)
        oid = repo.create_commit("HEAD", author, author, message, tree, parents)
    except (pygit2.GitError, OSError) as err:
        raise FileEffectError(f"simulated host: commit in {root} failed: {err}") from None
    return str(oid)


def effects_from_wire(value: Mapping[str, Any]) -> FileEffects:
    """The file effects of a `sim/script` behaviour object (checked)."""
    writes = check_writes(value["writes"]) if "writes" in value else ()
    commit = check_commit(value["commit"]) if "commit" in value else None
    return FileEffects(writes, commit)

"""The write-isolation trace: SessionConfig.Trace's digests and the warnings they make.

With `Settings.trace` a session call takes three digests when it binds a turn and
again when it harvests it, and writes a flow warning for each that differs (the
spec's session-calls.md, "Write isolation is recorded, never enforced"):

- workspace (TRACE-1): P's `git status --porcelain` and HEAD. Each status entry
  also carries the blob id of the file as it is on disk, so a second edit of a file
  already modified changes the digest too. P that is no git checkout of its own (a
  plain directory, kind "directory") reads as a checkout where every file is
  untracked.
- outside (TRACE-2): the owner's working directory's, the same digest, taken only
  when it lies in a git checkout other than P. The owner's working directory is the
  cwd the host gives the owner's subagents (the bound subagent's `host_cwd`: the
  directory a subagent that ignores P writes in), else the run's repository. What
  crw writes there is left out: the state directory, P, and any `.crw/` directory.
- shared (TRACE-3..5): the refs under `refs/crw/` of the run's repository but the
  run's own `refs/crw/flow/<run>/` (the run moves those itself), and the binding
  files of the flow-bound directory, `<state>/flow-bound/<owner>.jsonl`: the
  orchestrator lines. The hook's ledger (`decisions/`) and claims are left out: the
  owner's spawns write them while a subagent works.

A digest is `"sha256:" + hex` of its lines. The functions that read a repository or
a directory block (pygit2, the file system): an actor runs them in a thread. The
comparison (`warnings`) is pure.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pygit2
from pygit2.enums import FileStatus

from crw.engine.run.rundir import STATE_DIR_NAME
from crw.journal.rows import (
    ExecutorWroteOutside,
    ReadRoleWrote,
    RowModel,
    SharedStateChanged,
    TraceDigests,
)

SHARED_REFS = "refs/crw/"
FLOW_BOUND = "flow-bound"
BINDING_SUFFIX = ".jsonl"
LEFT_OUT = ("decisions", "claims")
"""What of the flow-bound directory the shared digest leaves out (TRACE-5): the
hook's ledger and its claims. Only the directory's own `*.jsonl` files count."""
EXECUTORS = frozenset({"executor", "executor-t1"})
"""The roles whose calls change P; every other role changes nothing."""

_INDEX = (
    (FileStatus.INDEX_NEW, "A"),
    (FileStatus.INDEX_MODIFIED, "M"),
    (FileStatus.INDEX_DELETED, "D"),
    (FileStatus.INDEX_RENAMED, "R"),
    (FileStatus.INDEX_TYPECHANGE, "T"),
)
_WORKTREE = (
    (FileStatus.WT_MODIFIED, "M"),
    (FileStatus.WT_DELETED, "D"),
    (FileStatus.WT_RENAMED, "R"),
    (FileStatus.WT_TYPECHANGE, "T"),
    (FileStatus.WT_UNREADABLE, "!"),
)


@dataclass(frozen=True)
class Site:
    """Where one call's digests are taken.

    Args:
        workspace: P, the call's directory.
        state: the state directory (`<state>`, holding `flow/` and `flow-bound/`).
        run_id: the run, whose own refs are left out.
        repository: the run's repository (run.json's), None when it has none.
        host_cwd: the bound subagent's cwd as the host reports it.
    """

    workspace: Path
    state: Path
    run_id: str
    repository: Path | None = None
    host_cwd: Path | None = None


def digest(lines: Iterable[str]) -> str:
    """`"sha256:" + hex` of the lines, each ended by a newline."""
    body = "".join(f"{line}\n" for line in lines)
    return "sha256:" + hashlib.sha256(body.encode("utf-8", "surrogateescape")).hexdigest()


def status_code(flags: int) -> str:
    """The two-letter XY code `git status --porcelain` prints for `flags`."""
    if flags & FileStatus.CONFLICTED:
        return "UU"
    if flags & FileStatus.WT_NEW and not flags & ~int(FileStatus.WT_NEW):
        return "??"
    index = next((code for flag, code in _INDEX if flags & flag), " ")
    worktree = next((code for flag, code in _WORKTREE if flags & flag), " ")
    return index + worktree


def status_lines(status: Mapping[str, int], content: Mapping[str, str]) -> list[str]:
    """The porcelain lines of `status` (path → FileStatus flags), sorted by path, each
    with the blob id of the file on disk from `content` ("-" when there is none)."""
    return [
        f"{status_code(flags)} {path} {content.get(path, '-')}"
        for path, flags in sorted(status.items())
        if not flags & FileStatus.IGNORED
    ]


def head_line(repo: pygit2.Repository) -> str:
    """HEAD: the branch it names (or "detached") and the commit (or "unborn")."""
    head = repo.references.get("HEAD")
    name = head.target if head is not None and isinstance(head.target, str) else "detached"
    commit = "unborn" if repo.head_is_unborn else str(repo.head.target)
    return f"HEAD {name} {commit}"


def workspace_digest(workspace: Path) -> str:
    """TRACE-1: P's porcelain status and HEAD; a P that is no checkout of its own
    reads as one whose every file is untracked."""
    repo = _checkout_at(workspace)
    if repo is None:
        return digest(["HEAD none none", *_untracked_lines(workspace)])
    return digest([head_line(repo), *_status(repo, workspace, leave_out=())])


def owner_checkout(site: Site) -> Path | None:
    """TRACE-2: the workdir of the git checkout the owner works in (the host's cwd
    for the bound subagent, else the run's repository), or None when there is none
    or it is P itself."""
    where = site.host_cwd or site.repository
    if where is None:
        return None
    workdir = _workdir_of(where)
    if workdir is None or workdir == site.workspace.resolve():
        return None
    return workdir


def outside_digest(checkout: Path, site: Site) -> str:
    """TRACE-2: the checkout's porcelain status and HEAD, leaving out what crw
    writes there itself: the state directory, P, and every `.crw/` directory in it
    (the default state directory; the flow evidence records, under the evidence
    cwd's `.crw/`)."""
    repo = pygit2.Repository(str(checkout))
    leave_out = tuple(
        rel
        for inner in (site.state, site.workspace)
        if (rel := _relative(inner.resolve(), checkout)) is not None
    )
    return digest([head_line(repo), *_status(repo, checkout, leave_out, crw_dirs=True)])


def shared_lines(refs: Mapping[str, str], bindings: Mapping[str, str], run_id: str) -> list[str]:
    """TRACE-3, -4: the refs under refs/crw/ but the run's own (name → target), and
    the flow-bound binding files (name → content digest), as sorted lines."""
    own = f"{SHARED_REFS}flow/{run_id}/"
    taken = [
        f"ref {name} {target}"
        for name, target in sorted(refs.items())
        if name.startswith(SHARED_REFS) and not name.startswith(own)
    ]
    return taken + [f"bound {name} {content}" for name, content in sorted(bindings.items())]


def shared_digest(site: Site) -> str:
    """TRACE-3..5: the shared refs of the run's repository and the binding files."""
    return digest(shared_lines(_crw_refs(site.repository), _binding_files(site.state), site.run_id))


def take(site: Site, checkout: Path | None) -> TraceDigests:
    """The three digests of `site` now; the outside one of `checkout` when given.
    A digest that cannot be read (a repository gone or damaged, a file that
    cannot be opened) is left out, and so never compared: the trace never stops
    a call."""
    return TraceDigests(
        workspace=_readable(workspace_digest, site.workspace),
        outside=_readable(outside_digest, checkout, site) if checkout is not None else None,
        checkout=str(checkout) if checkout is not None else None,
        shared=_readable(shared_digest, site),
    )


def _readable(read: Callable[..., str], *args: object) -> str | None:
    try:
        return read(*args)
    except (OSError, pygit2.GitError):
        return None


def at_bind(site: Site) -> TraceDigests:
    """The digests a bind records: the outside one of the owner's checkout, if any."""
    return take(site, owner_checkout(site))


def at_harvest(site: Site, before: TraceDigests) -> TraceDigests:
    """The digests at the harvest, of the same checkout the bind digested."""
    return take(site, Path(before.checkout) if before.checkout else None)


def bind_digests(rows: Iterable[Mapping[str, object]], k: int, attempt: int) -> TraceDigests | None:
    """The digests the bind of turn `k` of `attempt` recorded on its turn_started row
    (a restart keeps them: they are in the journal), or None when it recorded none."""
    found = None
    for row in rows:
        if row.get("row") == "turn_started" and (row.get("k"), row.get("attempt")) == (k, attempt):
            found = row.get("trace")
    return TraceDigests.model_validate(found) if isinstance(found, Mapping) else None


def warnings(
    call: str, role: str, before: TraceDigests, after: TraceDigests, site: Site
) -> list[RowModel]:
    """The flow warnings of a turn whose digests went from `before` (its bind) to
    `after` (its harvest): read_role_wrote (HARV-45) when P changed in the call of a
    role that changes nothing, executor_wrote_outside (HARV-46) when an executor's
    call changed the outside digest, shared_state_changed (HARV-47) when the shared
    digest differs. A digest either side lacks is not compared."""
    found: list[RowModel] = []
    if role not in EXECUTORS and _differs(before.workspace, after.workspace):
        found.append(
            ReadRoleWrote(
                call=call,
                before=before.workspace,
                after=after.workspace,
                where=str(site.workspace),
            )
        )
    if role in EXECUTORS and _differs(before.outside, after.outside):
        found.append(
            ExecutorWroteOutside(
                call=call, before=before.outside, after=after.outside, where=before.checkout
            )
        )
    if _differs(before.shared, after.shared):
        where = f"{SHARED_REFS} of {site.repository or 'no repository'}; "
        where += str(site.state / FLOW_BOUND)
        found.append(
            SharedStateChanged(call=call, before=before.shared, after=after.shared, where=where)
        )
    return found


def _differs(before: str | None, after: str | None) -> bool:
    return before is not None and after is not None and before != after


def _workdir_of(path: Path) -> Path | None:
    """The workdir of the git checkout `path` lies in, resolved; None outside one."""
    try:
        found = pygit2.discover_repository(str(path))
    except pygit2.GitError:
        return None
    if found is None:
        return None
    workdir = pygit2.Repository(found).workdir
    return Path(workdir).resolve() if workdir else None


def _checkout_at(path: Path) -> pygit2.Repository | None:
    """The repository whose workdir is `path` itself, else None."""
    workdir = _workdir_of(path)
    if workdir is None or workdir != path.resolve():
        return None
    return pygit2.Repository(str(path))


def _relative(inner: Path, outer: Path) -> str | None:
    """`inner` as a path of `outer`'s ("" is `outer` itself), else None."""
    try:
        return inner.relative_to(outer.resolve()).as_posix()
    except ValueError:
        return None


def _status(
    repo: pygit2.Repository, workdir: Path, leave_out: tuple[str, ...], *, crw_dirs: bool = False
) -> list[str]:
    """The porcelain lines of `repo`, paths under any of `leave_out` left out, and
    with `crw_dirs` those in a `.crw/` directory too."""
    status = {
        path: int(flags)
        for path, flags in repo.status().items()
        if not any(path == rel or path.startswith(rel.rstrip("/") + "/") for rel in leave_out)
        and not (crw_dirs and STATE_DIR_NAME in path.split("/")[:-1])
    }
    content = {path: _blob_id(workdir / path) for path in status}
    return status_lines(status, {path: oid for path, oid in content.items() if oid is not None})


def _blob_id(path: Path) -> str | None:
    """The blob id of the file at `path` as it is on disk (a link: of its target)."""
    try:
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            return str(pygit2.hash(os.fsencode(os.readlink(path))))
        if stat.S_ISREG(mode):
            return str(pygit2.hashfile(str(path)))
    except OSError:
        return None
    return None


def _untracked_lines(directory: Path) -> list[str]:
    """Every file under `directory` as an untracked porcelain line with its blob id."""
    lines: list[str] = []
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        for name in files:
            path = Path(root) / name
            rel = path.relative_to(directory).as_posix()
            lines.append(f"?? {rel} {_blob_id(path) or '-'}")
    return sorted(lines)


def _crw_refs(repository: Path | None) -> dict[str, str]:
    """Every ref under refs/crw/ of `repository` and what it points at."""
    if repository is None:
        return {}
    try:
        repo = pygit2.Repository(str(repository))
    except pygit2.GitError:
        return {}
    return {
        ref.name: str(ref.target)
        for ref in repo.references.iterator()
        if ref.name.startswith(SHARED_REFS)
    }


def _binding_files(state: Path) -> dict[str, str]:
    """The flow-bound directory's own `*.jsonl` files (the orchestrator lines) and
    the sha256 of each; what lies in its subdirectories (LEFT_OUT) is not read."""
    directory = state / FLOW_BOUND
    try:
        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
    except OSError:
        return {}
    found: dict[str, str] = {}
    for entry in entries:
        if entry.name.endswith(BINDING_SUFFIX) and entry.is_file(follow_symlinks=False):
            try:
                data = Path(entry.path).read_bytes()
            except OSError:
                continue
            found[entry.name] = "sha256:" + hashlib.sha256(data).hexdigest()
    return found

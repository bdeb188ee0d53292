"""`crw flow demo --git`: the demo on a git repository.

It makes a small sample repository with pygit2 in the demo's state directory
(one commit on `main`), starts a copy of `crw/examples/git-demo.toml` that names it
(`repo = "sample"`: the run's repository) and scripts the simulated subagents to edit files in
their workspace (`writes`, docs/host.md): build.1, the executor, changes
`src/greet.py`; build.2, the reviewer, rejects once for a missing test; build.3,
the fix, adds `tests/test_greet.py`; build.4 accepts. At the end it reads the
sample repository back: the node's branch `refs/crw/flow/<run>/nodes/build`, the
commit it holds and the files that commit changed since the run's start, and
`main`, which the run leaves where it was, and where each call worked (its
allocation). Where the node branch is missing it says so, and shows the files the
executor left in its workspace instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2

from crw.cli.examples import example
from crw.errors import InputError

NODE = "build"
BUILD_CALL, REVIEW_CALL, FIX_CALL = "build.1", "build.2", "build.3"
SAMPLE_BRANCH = "main"
SAMPLE_DIR = "sample"
"""The sample repository's directory in the demo's state directory."""
AUTHOR = pygit2.Signature("crw demo", "demo@crw.invalid", 1_767_225_600, 0)
"""The sample's first commit's author (a fixed time: the same commit every time)."""

SAMPLE: dict[str, str] = {
    "README.md": "# greet\n\nA sample repository made by `crw flow demo --git`.\n",
    "src/greet.py": 'def greet(name: str) -> str:\n    return "Hello, " + name\n',
}
BUILD_WRITES: dict[str, str] = {
    "src/greet.py": (
        "def greet(name: str) -> str:\n"
        "    if not name.strip():\n"
        '        raise ValueError("greet: name is empty")\n'
        '    return "Hello, " + name\n'
    ),
}
FIX_WRITES: dict[str, str] = {
    "tests/test_greet.py": (
        "import pytest\n\nfrom src.greet import greet\n\n\n"
        "def test_an_empty_name_is_refused() -> None:\n"
        "    with pytest.raises(ValueError):\n"
        '        greet(" ")\n'
    ),
}
REJECTION = {"verdict": "reject", "findings": ["no test shows that an empty name is refused"]}


@dataclass(frozen=True)
class Sample:
    """The sample repository: its work tree and the commit it was made at."""

    path: Path
    start: str


def git_workflow(state_dir: Path) -> Path:
    """crw's examples/git-demo.toml (package data), copied to `state_dir` with
    `repo = "sample"` put first: the sample is the run's repository, whatever
    directory the demo runs from."""
    path = example("git-demo.toml")
    copy = state_dir / path.name
    text = path.read_text(encoding="utf-8")
    copy.write_text(f'repo = "{SAMPLE_DIR}"  # added by crw flow demo --git\n{text}', "utf-8")
    return copy


def make_sample(path: Path) -> Sample:
    """A new repository at `path` on `main` with one commit of SAMPLE."""
    if path.exists():
        raise InputError(
            f"the demo's sample repository {path} exists already; "
            "give the demo a fresh --state directory"
        )
    repo = pygit2.init_repository(str(path), initial_head=SAMPLE_BRANCH)
    for name, text in SAMPLE.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    repo.index.add_all()
    repo.index.write()
    tree = repo.index.write_tree()
    start = repo.create_commit("HEAD", AUTHOR, AUTHOR, "greet: the sample", tree, [])
    return Sample(path.resolve(), str(start))


async def script(client: Any, seconds: float) -> None:
    """Every turn takes `seconds`; the executor and its fix write their files, the
    first review rejects (the later one accepts: the simulator's first verdict)."""
    scripts: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({}, {}),
        ({"marker": f"{BUILD_CALL}/*"}, {"writes": BUILD_WRITES, "answer": _answer(BUILD_WRITES)}),
        ({"marker": f"{REVIEW_CALL}/*"}, {"answer": REJECTION}),
        ({"marker": f"{FIX_CALL}/*"}, {"writes": FIX_WRITES, "answer": _answer(FIX_WRITES)}),
    ]
    for match, behaviour in scripts:
        timed = {"seconds": seconds} | behaviour
        await client.request("sim/script", {"match": match, "behaviour": timed})


def _answer(writes: Mapping[str, str]) -> dict[str, Any]:
    return {"summary": "greet() refuses an empty name", "files_changed": sorted(writes)}


def report(sample: Sample, run_id: str, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the run left in the sample repository: the node branch (its commit,
    the commits from the sample's start to it, and the files it changed since
    that start), `main`, the run's refs, and each call's workspace as its
    prepared row allocated it."""
    repo = pygit2.Repository(str(sample.path))
    ref = f"refs/crw/flow/{run_id}/nodes/{NODE}"
    found = repo.references.get(ref)
    branch: dict[str, Any] | None = None
    if found is not None:
        commit = repo[found.target].peel(pygit2.Commit)
        branch = {
            "ref": ref,
            "commit": str(commit.id),
            "message": _title(commit),
            "history": _history(commit, sample.start),
            "files": _changes(repo, sample.start, commit),
        }
    return {
        "repository": str(sample.path),
        "start": sample.start,
        "main": str(repo.references[f"refs/heads/{SAMPLE_BRANCH}"].target),
        "node_ref": ref,
        "branch": branch,
        "refs": sorted(r for r in repo.references if r.startswith(f"refs/crw/flow/{run_id}/")),
        "workspaces": _workspaces(rows),
    }


def _title(commit: pygit2.Commit) -> str:
    lines = commit.message.strip().splitlines()
    return lines[0] if lines else ""


def _history(tip: pygit2.Commit, start: str) -> list[dict[str, str]]:
    """The first-parent commits from `tip` back to `start` (not included), oldest
    first."""
    shown: list[dict[str, str]] = []
    commit: pygit2.Commit | None = tip
    while commit is not None and str(commit.id) != start:
        shown.append({"commit": str(commit.id), "message": _title(commit)})
        commit = commit.parents[0] if commit.parents else None
    return shown[::-1]


def _changes(repo: pygit2.Repository, start: str, commit: pygit2.Commit) -> list[dict[str, str]]:
    diff = repo.diff(repo[start].peel(pygit2.Commit), commit)
    return [
        {"path": delta.new_file.path, "status": delta.status_char()}
        for delta in sorted(diff.deltas, key=lambda d: d.new_file.path)
    ]


def _workspaces(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each call of the node: its P and kind (the prepared row's allocation), and
    what is in P: every file of a plain directory, the changed files of a git
    worktree or checkout (its status)."""
    shown = []
    for row in rows:
        if row.get("row") != "prepared" or row.get("node") != NODE:
            continue
        allocation = row.get("allocation") or {}
        where = allocation.get("workspace")
        item = {"call": row["call"], "role": row.get("role"), "workspace": where}
        item |= {"kind": allocation.get("kind"), "start_commit": allocation.get("start_commit")}
        item["exists"] = isinstance(where, str) and Path(where).is_dir()
        if isinstance(where, str) and item["exists"]:
            item["files"] = _files_in(Path(where), allocation.get("kind"))
        shown.append(item)
    return shown


def _files_in(root: Path, kind: str | None) -> list[str]:
    if kind == "directory":
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    found = pygit2.discover_repository(str(root))
    if found is None:
        return []
    status = pygit2.Repository(found).status()
    return sorted(path for path, flags in status.items() if not flags & _IGNORED)


_IGNORED = pygit2.enums.FileStatus.IGNORED


def report_lines(git: Mapping[str, Any]) -> list[str]:
    """The report as the demo prints it after its summary."""
    lines = ["", f"sample repository {git['repository']} (main at {git['start'][:12]})"]
    branch = git["branch"]
    if branch is not None:
        lines.append(f"node branch {branch['ref']} at {branch['commit']}")
        lines += [f"  {c['commit'][:12]} {c['message']}" for c in branch["history"]]
        lines.append(f"  files it changed since {git['start'][:12]}:")
        lines += [f"    {f['status']} {f['path']}" for f in branch["files"]]
        lines.append("where the calls worked:")
    else:
        lines.append(f"node branch {git['node_ref']}: none. {_why_no_branch(git)}")
    for item in git["workspaces"]:
        gone = "" if item["exists"] else " (released)"
        lines.append(f"  {item['call']} {item['role']}: {item['kind']} {item['workspace']}{gone}")
        if branch is None and item["exists"]:
            files = ", ".join(item.get("files") or []) or "-"
            lines.append(f"    {'files' if item['kind'] == 'directory' else 'changed'}: {files}")
    moved = "unchanged" if git["main"] == git["start"] else f"moved to {git['main'][:12]}"
    lines.append(f"main {moved}")
    return lines


def _why_no_branch(git: Mapping[str, Any]) -> str:
    kinds = {item["kind"] for item in git["workspaces"]}
    if kinds <= {"directory", None}:
        return (
            "The calls ran in plain directories (allocation kind directory), not in "
            "worktrees of the sample, so nothing was committed. The executor's files "
            "are in its directory:"
        )
    return "No crw.commit advanced it. The executor's changes are left in its worktree:"

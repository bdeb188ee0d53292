"""`crw flow gc --older-than AGE` and `crw flow gc --refs`: the runs that ended longer
ago than an age are removed as `--ended-before` removes them; the refs
`refs/crw/flow/<run>/…` of runs that no longer exist are listed, and deleted only
with `--yes`, never a ref of a run that exists. Real repositories (pygit2), each
gc a real `crw` process."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pygit2

from crw.journal.rows import Ended, RowModel, Started
from crw.workspace.prune import RunRef, delete, open_checkout
from crw.workspace.refs import node_ref, stray_ref
from tests.cli.conftest import Crw, Result
from tests.cli.test_housekeeping import _run
from tests.workspace.gitrepo import attempt_worktree, make_repo


def _ago(days: float) -> str:
    return (datetime.now(UTC) - timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%S.000000Z")


def _ended(crw: Crw, run_id: str, days: float) -> None:
    """Run `run_id`, ended completed `days` ago."""
    started: tuple[str, list[RowModel]] = (_ago(days + 0.1), [Started(backend="session")])
    _run(crw, run_id, started, (_ago(days), [Ended(status="completed")]))


def _gc(crw: Crw, *args: str) -> Result:
    return crw("flow", "gc", "--state", str(crw.state), *args)


def test_gc_older_than_removes_the_runs_that_ended_longer_ago(crw: Crw) -> None:
    """--older-than 7d is --ended-before a week ago: the run that ended 10 days ago
    goes (--dry-run first lists it), the one that ended 2 days ago stays."""
    _ended(crw, "old", 10)
    _ended(crw, "recent", 2)
    dry = _gc(crw, "--older-than", "7d", "--dry-run", "--json")
    assert dry.code == 0, dry.stderr
    assert [r["run"] for r in dry.json()["removed"]] == ["old"]
    assert dry.json()["older_than"] == "7d"
    before = datetime.fromisoformat(dry.json()["ended_before"])
    assert abs(before - (datetime.now(UTC) - timedelta(days=7))) < timedelta(minutes=5)
    assert sorted(p.name for p in (crw.state / "flow").iterdir()) == ["old", "recent"]
    done = _gc(crw, "--older-than", "1w")
    assert done.code == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith("removed run old (ended completed at ")
    assert done.stdout.splitlines()[-1].endswith(", 1w ago)")
    assert sorted(p.name for p in (crw.state / "flow").iterdir()) == ["recent"]


def _refs(root: Path, *runs: str) -> dict[str, str]:
    """A node branch and a stray ref for each of `runs`, at HEAD; {ref: commit}."""
    repo = pygit2.Repository(str(root))
    head = repo.head.target
    made = {}
    for run in runs:
        for name in (node_ref(run, "build"), stray_ref(run, "build", 1, "build.1")):
            repo.references.create(name, head)
            made[name] = str(head)
    return made


def _crw_refs(root: Path) -> list[str]:
    return sorted(r for r in pygit2.Repository(str(root)).references if r.startswith("refs/crw/"))


def _in_checkout(crw: Crw, root: Path) -> Crw:
    """The runner with its state directory at `root/.crw`, as a start in the checkout."""
    inside = Crw(root / ".crw", Path(crw.env["TMPDIR"]))
    inside.env = crw.env
    return inside


def test_gc_refs_lists_then_deletes_only_the_refs_of_runs_that_are_gone(
    crw: Crw, tmp_path: Path
) -> None:
    """The state in the checkout (.crw/): the refs of a run that exists stay, those
    of a run whose directory is gone are listed by `gc --refs` and deleted only by
    `gc --refs --yes`; `--older-than 7d --refs --yes` removes an old run, then its
    refs. A ref that moved since it was listed is left."""
    root = tmp_path / "repo"
    make_repo(root)
    inside = _in_checkout(crw, root)
    _ended(inside, "alive", 1)
    _ended(inside, "old", 10)
    refs = _refs(root, "alive", "gone", "old")
    head = refs[node_ref("gone", "build")]

    listed = _gc(inside, "--refs")
    assert listed.code == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines == [
        f"would delete refs/crw/flow/gone/nodes/build (run gone, at {head[:12]})",
        f"would delete refs/crw/flow/gone/stray/build/a1-build.1 (run gone, at {head[:12]})",
        f"gc --refs: 2 ref(s) of 1 run(s) that no longer exist would be deleted from "
        f"{root.resolve()}; "
        f"4 ref(s) of runs that exist kept; delete them with: crw flow gc --refs --yes "
        f"--state {inside.state}",
    ]
    assert _crw_refs(root) == sorted(refs)

    dry = _gc(inside, "--older-than", "7d", "--refs", "--dry-run", "--json")
    assert dry.code == 0, dry.stderr
    assert [r["run"] for r in dry.json()["removed"]] == ["old"]
    assert {r["run"] for r in dry.json()["refs"]["deleted"]} == {"gone", "old"}
    assert _crw_refs(root) == sorted(refs) and (inside.state / "flow" / "old").is_dir()

    pruned = _gc(inside, "--older-than", "7d", "--refs", "--yes", "--json")
    assert pruned.code == 0, pruned.stderr
    view = pruned.json()
    assert [r["run"] for r in view["removed"]] == ["old"]
    assert view["refs"] | {"deleted": None} == {
        "repository": str(root.resolve()),
        "dry_run": False,
        "deleted": None,
        "skipped": [],
        "kept": 2,
    }
    assert sorted(r["ref"] for r in view["refs"]["deleted"]) == sorted(
        name for name in refs if "/alive/" not in name
    )
    assert _crw_refs(root) == sorted(name for name in refs if "/alive/" in name)
    assert sorted(p.name for p in (inside.state / "flow").iterdir()) == ["alive"]

    again = _gc(inside, "--refs", "--yes")
    assert again.stdout.splitlines() == [
        f"gc --refs: 0 ref(s) of 0 run(s) that no longer exist deleted from "
        f"{root.resolve()}; "
        "2 ref(s) of runs that exist kept"
    ]

    repo = open_checkout(root)  # a ref moved by another process after it was listed
    name = node_ref("alive", "build")
    moved = delete(repo, RunRef("alive", name, "0" * 40))
    assert moved == f"{name} moved since it was listed (it holds {head}); left"
    assert name in _crw_refs(root)


def test_gc_refs_of_a_linked_worktree_prunes_the_shared_refs(crw: Crw, tmp_path: Path) -> None:
    """The state in a linked worktree of the repository: the refs live in the
    common repository, and --repo names a checkout explicitly."""
    root = tmp_path / "repo"
    repo = make_repo(root)
    linked = attempt_worktree(repo, tmp_path / "linked", "side", str(repo.head.target))
    inside = _in_checkout(crw, linked)
    _ended(inside, "alive", 1)
    refs = _refs(root, "alive", "gone")
    pruned = _gc(inside, "--refs", "--yes", "--json")
    assert pruned.code == 0, pruned.stderr
    assert pruned.json()["refs"]["repository"] == str(linked.resolve())
    assert _crw_refs(root) == sorted(name for name in refs if "/alive/" in name)
    _refs(root, "gone")
    elsewhere = crw  # a state outside every checkout: --repo names the repository
    by_repo = _gc(elsewhere, "--refs", "--repo", str(root), "--json")
    assert by_repo.code == 0, by_repo.stderr
    assert {r["run"] for r in by_repo.json()["refs"]["deleted"]} == {"alive", "gone"}
    assert by_repo.json()["refs"]["dry_run"] is True


def test_gc_refusals_are_one_line_and_change_nothing(crw: Crw, tmp_path: Path) -> None:
    _ended(crw, "old", 10)
    plain = tmp_path / "plain"
    plain.mkdir()
    cases = {
        (): "gc needs what to remove; pass --ended-before DATE or --older-than AGE (runs "
        "that ended before), or --refs (the refs of runs that no longer exist)",
        ("--older-than", "7"): '--older-than "7" is no age; pass an age such as 30m, 2h, 7d '
        "or 1h30m (s, m, h, d, w)",
        ("--older-than", "7d", "--ended-before", "2026-11-10"): "--ended-before and "
        "--older-than both say which runs to remove; give one",
        ("--older-than", "7d", "--yes"): "--yes confirms deleting the refs --refs lists; add "
        "--refs, or leave --yes out",
        ("--refs", "--yes", "--dry-run"): "--yes deletes and --dry-run deletes nothing; leave "
        "one out",
        ("--older-than", "7d", "--refs"): f"the state directory {crw.state} is in no git "
        "checkout, so gc --refs has no repository to prune; name it with --repo PATH",
        ("--refs", "--repo", str(plain)): f"--repo {plain} is no git checkout; give the path "
        "of one",
    }
    for args, said in cases.items():
        result = _gc(crw, *args)
        assert (result.code, result.stdout, result.stderr) == (2, "", f"crw: error: {said}\n")
    assert (crw.state / "flow" / "old").is_dir()

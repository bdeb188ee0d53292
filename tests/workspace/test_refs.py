"""Stray refs and node branches, moved only by compare-and-swap, on real repos."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pygit2
import pytest

from crw.workspace import refs
from tests.workspace.gitrepo import attempt_worktree, commit_files, make_repo


def _repo(tmp_path: Path) -> tuple[pygit2.Repository, str]:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    return repo, str(repo.head.target)


def test_stray_ref_names_run_node_attempt_and_call() -> None:
    """spec: HARV-49, HARV-50"""
    assert refs.stray_ref("r1", "build", 2, "build.3") == "refs/crw/flow/r1/stray/build/a2-build.3"
    assert refs.stray_ref("r1", "build", 1, "build.1") != refs.stray_ref(
        "r1", "build", 1, "build.3"
    )
    assert refs.node_ref("r1", "build") == "refs/crw/flow/r1/nodes/build"


def test_stray_ref_is_created_against_no_ref(tmp_path: Path) -> None:
    """spec: HARV-51"""
    repo, start = _repo(tmp_path)
    head = commit_files(tmp_path / "repo", {"b.txt": "b\n"}, "subagent")
    name = refs.stray_ref("r1", "build", 1, "build.1")
    kept = refs.keep_stray(repo, name, head)
    assert (kept.action, kept.old, refs.read(repo, name)) == ("created", None, head)
    with pytest.raises(refs.SwapFailed) as failed:
        refs.swap(repo, name, None, start)
    assert (failed.value.expected, failed.value.found) == (None, head)
    assert refs.read(repo, name) == head


def test_stray_ref_moves_only_by_fast_forward_from_the_held_commit(tmp_path: Path) -> None:
    """spec: HARV-52"""
    repo, start = _repo(tmp_path)
    first = commit_files(tmp_path / "repo", {"b.txt": "b\n"}, "one")
    later = commit_files(tmp_path / "repo", {"c.txt": "c\n"}, "two")
    name = refs.stray_ref("r1", "build", 1, "build.1")
    refs.keep_stray(repo, name, first)
    kept = refs.keep_stray(repo, name, later)
    assert (kept.action, kept.old, refs.read(repo, name)) == ("moved", first, later)
    assert refs.keep_stray(repo, name, later).action == "already"
    base = repo[start].peel(pygit2.Commit)
    other = repo.create_commit(None, base.author, base.author, "side", base.tree_id, [base.id])
    with pytest.raises(refs.NotFastForward):
        refs.keep_stray(repo, name, str(other))
    assert refs.read(repo, name) == later
    with pytest.raises(refs.SwapFailed):  # a move with a stale old value changes nothing
        refs.swap(repo, name, first, start)
    assert refs.read(repo, name) == later


def _race(tmp_path: Path, name: str, old: str | None, targets: list[str]) -> list[object]:
    """Each target swapped in from its own thread and Repository (as two processes
    would), all released at once; each thread's outcome."""
    gate = threading.Barrier(len(targets))
    outcomes: list[object] = [None] * len(targets)

    def racer(i: int) -> None:
        mine = pygit2.Repository(str(tmp_path / "repo"))
        gate.wait()
        try:
            refs.swap(mine, name, old, targets[i])
            outcomes[i] = "won"
        except refs.SwapFailed as failed:
            outcomes[i] = failed

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(len(targets))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


@pytest.mark.parametrize("rounds", [20])
def test_two_racers_on_one_ref_one_wins_the_other_rereads(tmp_path: Path, rounds: int) -> None:
    """spec: HARV-51, HARV-52"""
    repo, start = _repo(tmp_path)
    a = commit_files(tmp_path / "repo", {"b.txt": "b\n"}, "a")
    b = commit_files(tmp_path / "repo", {"c.txt": "c\n"}, "b")
    for n in range(rounds):
        name = refs.stray_ref("r1", "build", 1, f"build.{n}")
        created = _race(tmp_path, name, None, [a, b])
        assert sorted(map(str, created)).count("won") == 1
        winner = [a, b][created.index("won")]
        loser = created[1 - created.index("won")]
        assert isinstance(loser, refs.SwapFailed) and loser.found == winner
        assert refs.read(repo, name) == winner
        moved = _race(tmp_path, name, winner, [start, start if winner == a else a])
        assert moved.count("won") == 1
        assert all(o == "won" or isinstance(o, refs.SwapFailed) for o in moved)


def test_keep_stray_rereads_after_a_lost_swap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: HARV-51, HARV-52"""
    repo, _start = _repo(tmp_path)
    a = commit_files(tmp_path / "repo", {"b.txt": "b\n"}, "a")
    b = commit_files(tmp_path / "repo", {"c.txt": "c\n"}, "b")
    name = refs.stray_ref("r1", "build", 1, "build.1")
    real = refs.swap
    calls: list[str | None] = []

    def swap_after_other(
        repo_: pygit2.Repository, name_: str, old: str | None, new: str, **kw: str
    ) -> None:
        calls.append(old)
        if len(calls) == 1:  # another process creates the ref first
            real(pygit2.Repository(str(tmp_path / "repo")), name_, None, a)
        real(repo_, name_, old, new, **kw)

    monkeypatch.setattr(refs, "swap", swap_after_other)
    kept = refs.keep_stray(repo, name, b)
    assert calls == [None, a]
    assert (kept.action, kept.old, refs.read(repo, name)) == ("moved", a, b)


def test_worktree_shares_the_run_refs(tmp_path: Path) -> None:
    """spec: HARV-49"""
    repo, start = _repo(tmp_path)
    wt = attempt_worktree(repo, tmp_path / "wt", "crw-r1-build", start)
    tree = pygit2.Repository(str(wt))
    head = commit_files(wt, {"new.txt": "n\n"}, "subagent commit")
    name = refs.stray_ref("r1", "build", 1, "build.1")
    refs.keep_stray(tree, name, head)
    assert refs.read(repo, name) == head


def test_a_create_from_a_worktree_fails_on_a_ref_that_exists(tmp_path: Path) -> None:
    """spec: HARV-51"""
    repo, start = _repo(tmp_path)
    other = commit_files(tmp_path / "repo", {"b.txt": "b\n"}, "other")
    wt = attempt_worktree(repo, tmp_path / "wt", "crw-r1-build", start)
    name = refs.stray_ref("r1", "build", 1, "build.1")
    refs.swap(repo, name, None, other)
    with pytest.raises(refs.SwapFailed) as failed:
        refs.swap(pygit2.Repository(str(wt)), name, None, start)
    assert failed.value.found == other and refs.read(repo, name) == other


def _process_racer(path: str, names: list[str], target: str, gate: Any, out: Any) -> None:
    """One racing process: swap `target` into each ref against no ref, after the gate."""
    repo = pygit2.Repository(path)
    for name in names:
        gate.wait()
        try:
            refs.swap(repo, name, None, target)
            out.put((name, target, "won", None))
        except refs.SwapFailed as failed:
            out.put((name, target, "lost", failed.found))


def test_two_processes_racing_on_one_ref_one_wins_the_other_rereads(tmp_path: Path) -> None:
    """spec: HARV-51"""
    repo, _start = _repo(tmp_path)
    a = commit_files(tmp_path / "repo", {"b.txt": "b\n"}, "a")
    b = commit_files(tmp_path / "repo", {"c.txt": "c\n"}, "b")
    names = [refs.stray_ref("r1", "build", 1, f"build.{n}") for n in range(10)]
    spawn = multiprocessing.get_context("spawn")
    gate, out = spawn.Barrier(2), spawn.Queue()
    racers = [
        spawn.Process(target=_process_racer, args=(str(tmp_path / "repo"), names, t, gate, out))
        for t in (a, b)
    ]
    try:
        for racer in racers:
            racer.start()
        results = [out.get(timeout=60) for _ in range(2 * len(names))]
    finally:
        for racer in racers:  # reaped by pid, whatever happened
            racer.join(timeout=10)
            if racer.is_alive() and racer.pid is not None:
                os.kill(racer.pid, signal.SIGKILL)
                racer.join()
    for name in names:
        mine = [r for r in results if r[0] == name]
        (won,) = [r for r in mine if r[2] == "won"]
        (lost,) = [r for r in mine if r[2] == "lost"]
        assert lost[3] == won[1] == refs.read(repo, name)  # the loser read the winner's value


def test_a_lock_left_by_a_dead_process_is_named_and_nothing_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: HARV-51, HARV-52"""
    repo, start = _repo(tmp_path)
    name = refs.stray_ref("r1", "build", 1, "build.1")
    lock = Path(repo.path) / f"{name}.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("")
    monkeypatch.setattr(refs, "LOCK_TRIES", 3)
    with pytest.raises(refs.RefLocked) as locked:
        refs.swap(repo, name, None, start)
    assert str(lock) in str(locked.value) and "remove that file" in str(locked.value)
    assert "\n" not in str(locked.value)
    assert refs.read(repo, name) is None
    lock.unlink()
    refs.swap(repo, name, None, start)
    assert refs.read(repo, name) == start

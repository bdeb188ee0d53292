"""The write-isolation trace's digests, on real git repositories made with pygit2."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest
from pygit2.enums import FileStatus

from crw.journal.rows import TraceDigests
from crw.workspace import trace
from crw.workspace.trace import Site
from tests.workspace.gitrepo import commit_files, make_repo

RUN = "run-1"


def site(tmp_path: Path, **given: object) -> Site:
    fields: dict[str, object] = {
        "workspace": tmp_path / "p",
        "state": tmp_path / "owner" / ".crw",
        "run_id": RUN,
        "repository": tmp_path / "owner",
    }
    return Site(**(fields | given))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("flags", "code"),
    [
        (FileStatus.WT_NEW, "??"),
        (FileStatus.WT_MODIFIED, " M"),
        (FileStatus.WT_DELETED, " D"),
        (FileStatus.INDEX_NEW, "A "),
        (FileStatus.INDEX_NEW | FileStatus.WT_MODIFIED, "AM"),
        (FileStatus.INDEX_MODIFIED | FileStatus.WT_DELETED, "MD"),
        (FileStatus.INDEX_DELETED, "D "),
        (FileStatus.CONFLICTED, "UU"),
    ],
)
def test_status_codes_are_the_porcelains(flags: FileStatus, code: str) -> None:
    """spec: TRACE-1"""
    assert trace.status_code(int(flags)) == code


def test_workspace_digest_is_ps_status_and_head(tmp_path: Path) -> None:
    """spec: TRACE-1"""
    p = tmp_path / "p"
    repo = make_repo(p, {"a.txt": "a\n", "src/b.py": "b = 1\n"})
    clean = trace.workspace_digest(p)
    assert clean == trace.workspace_digest(p)  # nothing changed, the same digest
    assert clean == trace.digest([f"HEAD refs/heads/main {repo.head.target}"])
    (p / "new.txt").write_text("n\n")
    untracked = trace.workspace_digest(p)
    (p / "a.txt").write_text("changed\n")
    modified = trace.workspace_digest(p)
    (p / "a.txt").write_text("changed again\n")  # the same porcelain line, other content
    again = trace.workspace_digest(p)
    assert len({clean, untracked, modified, again}) == 4
    (p / "a.txt").write_text("a\n")
    (p / "new.txt").unlink()
    assert trace.workspace_digest(p) == clean


def test_a_commit_or_a_branch_switch_changes_the_workspace_digest(tmp_path: Path) -> None:
    """spec: TRACE-1"""
    p = tmp_path / "p"
    repo = make_repo(p, {"a.txt": "a\n"})
    before = trace.workspace_digest(p)
    commit_files(p, {"a.txt": "b\n"}, "second")  # the subagent committed: a clean P, HEAD moved
    moved = trace.workspace_digest(p)
    assert moved != before
    repo.branches.local.create("other", repo.head.peel(pygit2.Commit))
    repo.set_head("refs/heads/other")  # the same commit on another branch
    assert trace.workspace_digest(p) not in (before, moved)


def test_a_plain_directory_p_reads_as_every_file_untracked(tmp_path: Path) -> None:
    """spec: TRACE-1. P of kind "directory" lies inside the owner's checkout (under
    its state directory) but is no checkout of its own: its files are its digest."""
    make_repo(tmp_path / "owner", {"a.txt": "a\n"})
    p = tmp_path / "owner" / ".crw" / "flow" / RUN / "calls" / "look.1"
    p.mkdir(parents=True)
    empty = trace.workspace_digest(p)
    assert empty == trace.digest(["HEAD none none"])
    (p / "notes.md").write_text("x\n")
    written = trace.workspace_digest(p)
    (p / "notes.md").write_text("y\n")
    assert len({empty, written, trace.workspace_digest(p)}) == 3
    (tmp_path / "owner" / "a.txt").write_text("outside P\n")
    (p / "notes.md").write_text("x\n")
    assert trace.workspace_digest(p) == written  # the checkout around P is not P


def test_outside_digest_is_the_owners_checkout_other_than_p(tmp_path: Path) -> None:
    """spec: TRACE-2"""
    owner = tmp_path / "owner"
    make_repo(owner, {"a.txt": "a\n"})
    p = tmp_path / "p"
    make_repo(p, {"x": "x\n"})
    (owner / "sub").mkdir()
    here = site(tmp_path, host_cwd=owner / "sub")
    assert trace.owner_checkout(here) == owner.resolve()
    # No host cwd: the run's repository; no checkout at all, or P itself: none.
    assert trace.owner_checkout(site(tmp_path)) == owner.resolve()
    assert trace.owner_checkout(site(tmp_path, host_cwd=p)) is None
    assert trace.owner_checkout(site(tmp_path, host_cwd=p / "x", repository=None)) is None
    elsewhere = tmp_path / "plain"
    elsewhere.mkdir()
    assert trace.owner_checkout(site(tmp_path, host_cwd=elsewhere, repository=None)) is None
    assert trace.at_bind(site(tmp_path, host_cwd=elsewhere, repository=None)).outside is None


def test_outside_digest_leaves_out_the_state_directory_and_p(tmp_path: Path) -> None:
    """spec: TRACE-2"""
    owner = tmp_path / "owner"
    make_repo(owner, {"a.txt": "a\n"})
    p = owner / ".crw" / "flow" / RUN / "calls" / "build.1"
    p.mkdir(parents=True)
    here = site(tmp_path, workspace=p, host_cwd=owner)
    checkout = trace.owner_checkout(here)
    assert checkout == owner.resolve()
    before = trace.outside_digest(checkout, here)
    (owner / ".crw" / "flow" / RUN / "journal.jsonl").write_text("{}\n")  # the run writes
    (p / "made.txt").write_text("in P\n")  # the call writes its own P
    assert trace.outside_digest(checkout, here) == before
    # A state directory elsewhere (--state): the checkout's .crw/ holds crw's own
    # files all the same (the flow evidence records).
    elsewhere = site(tmp_path, workspace=p, host_cwd=owner, state=tmp_path / "state")
    before = trace.outside_digest(checkout, elsewhere)
    for cwd in (owner, owner / "sub"):  # an evidence cwd below the checkout's root
        (cwd / ".crw" / "evidence" / RUN).mkdir(parents=True)
        (cwd / ".crw" / "evidence" / RUN / "build.1.json").write_text("{}\n")
    assert trace.outside_digest(checkout, elsewhere) == before
    (owner / "sub" / "crw.txt").write_text("a file of the checkout\n")
    assert trace.outside_digest(checkout, elsewhere) != before
    (owner / "a.txt").write_text("written outside P\n")
    assert trace.outside_digest(checkout, here) != before


def test_shared_digest_takes_refs_under_refs_crw_but_the_runs_own(tmp_path: Path) -> None:
    """spec: TRACE-3"""
    repo = make_repo(tmp_path / "owner", {"a.txt": "a\n"})
    head = repo.head.target
    here = site(tmp_path)
    before = trace.shared_digest(here)
    repo.references.create(f"refs/crw/flow/{RUN}/nodes/build", head)
    repo.references.create(f"refs/crw/flow/{RUN}/stray/build/a1-build.1", head)
    repo.references.create("refs/heads/feature", head)
    assert trace.shared_digest(here) == before  # the run's own refs, and no crw ref
    repo.references.create("refs/crw/flow/run-2/nodes/build", head)
    other_run = trace.shared_digest(here)
    assert other_run != before
    repo.references.create("refs/crw/notes", head)
    assert trace.shared_digest(here) not in (before, other_run)


def test_shared_digest_takes_the_binding_files(tmp_path: Path) -> None:
    """spec: TRACE-4"""
    state = tmp_path / "state"
    (state / "flow-bound").mkdir(parents=True)
    here = site(tmp_path, state=state, repository=None)
    before = trace.shared_digest(here)
    line = '{"kind": "orchestrator", "run_id": "run-2"}\n'
    (state / "flow-bound" / "owner-2.jsonl").write_text(line)
    bound = trace.shared_digest(here)
    assert bound != before
    (state / "flow-bound" / "owner-2.jsonl").write_text(line + '{"kind": "closed"}\n')
    assert trace.shared_digest(here) not in (before, bound)


def test_shared_digest_leaves_out_the_hooks_ledger_and_claims(tmp_path: Path) -> None:
    """spec: TRACE-5"""
    state = tmp_path / "state"
    bound = state / "flow-bound"
    (bound / "decisions").mkdir(parents=True)
    (bound / "owner.jsonl").write_text('{"kind": "orchestrator", "run_id": "run-1"}\n')
    here = site(tmp_path, state=state, repository=None)
    before = trace.shared_digest(here)
    (bound / "decisions" / "owner.jsonl").write_text('{"role": "executor"}\n')
    (bound / "claims").mkdir()
    (bound / "claims" / "owner.jsonl").write_text("{}\n")
    (bound / "flow-bound.lock").write_text("")
    assert trace.shared_digest(here) == before


def digests(**given: str | None) -> TraceDigests:
    return TraceDigests(**({"workspace": "w", "outside": "o", "shared": "s"} | given))


@pytest.mark.parametrize("role", ["reviewer", "explorer", "architect", "critic"])
def test_a_role_that_changes_nothing_and_changed_p_is_read_role_wrote(
    tmp_path: Path, role: str
) -> None:
    """spec: HARV-45"""
    here = site(tmp_path)
    found = trace.warnings("look.1", role, digests(), digests(workspace="w2"), here)
    assert [row.model_dump(exclude_none=True) for row in found] == [
        {
            "row": "read_role_wrote",
            "call": "look.1",
            "before": "w",
            "after": "w2",
            "where": str(here.workspace),
        }
    ]
    assert trace.warnings("look.1", role, digests(), digests(outside="o2"), here) == []


@pytest.mark.parametrize("role", ["executor", "executor-t1"])
def test_an_executor_that_changed_the_outside_is_executor_wrote_outside(
    tmp_path: Path, role: str
) -> None:
    """spec: HARV-46"""
    here = site(tmp_path)
    assert trace.warnings("build.1", role, digests(), digests(workspace="w2"), here) == []
    before, after = digests(checkout="/owner"), digests(outside="o2")
    (found,) = trace.warnings("build.1", role, before, after, here)
    assert found.model_dump(exclude_none=True) == {
        "row": "executor_wrote_outside",
        "call": "build.1",
        "before": "o",
        "after": "o2",
        "where": "/owner",
    }
    # No outside digest taken (no checkout other than P): nothing to compare.
    assert trace.warnings("build.1", role, digests(outside=None), digests(outside=None), here) == []


@pytest.mark.parametrize("role", ["executor", "reviewer"])
def test_a_changed_shared_digest_is_shared_state_changed(tmp_path: Path, role: str) -> None:
    """spec: HARV-47"""
    here = site(tmp_path)
    (found,) = trace.warnings("c.1", role, digests(), digests(shared="s2"), here)
    body = found.model_dump()
    assert (body["row"], body["before"], body["after"]) == ("shared_state_changed", "s", "s2")
    assert "refs/crw/" in body["where"] and "flow-bound" in body["where"]


def test_the_bind_digests_are_the_turns_own(tmp_path: Path) -> None:
    """spec: HARV-44. The harvest of a turn compares with its turn_started row's."""
    first = digests(workspace="a1").model_dump()
    repair = digests(workspace="a1k2").model_dump()
    rows = [
        {"row": "turn_started", "k": 1, "attempt": 1, "trace": first},
        {"row": "turn_started", "k": 2, "attempt": 1, "trace": repair},
        {"row": "turn_started", "k": 1, "attempt": 2},
    ]
    assert trace.bind_digests(rows, 1, 1) == digests(workspace="a1")
    assert trace.bind_digests(rows, 2, 1) == digests(workspace="a1k2")
    assert trace.bind_digests(rows, 1, 2) is None  # bound without the trace
    assert trace.bind_digests(rows, 3, 1) is None


def test_the_harvest_digests_the_checkout_the_bind_digested(tmp_path: Path) -> None:
    """spec: HARV-44, TRACE-2"""
    owner = tmp_path / "owner"
    make_repo(owner, {"a.txt": "a\n"})
    p = tmp_path / "p"
    p.mkdir()
    here = site(tmp_path, host_cwd=owner)
    before = trace.at_bind(here)
    assert before.checkout == str(owner.resolve())
    assert trace.at_harvest(site(tmp_path, host_cwd=None), before) == before
    (owner / "b.txt").write_text("b\n")
    (p / "c.txt").write_text("c\n")
    after = trace.at_harvest(here, before)
    assert after.outside != before.outside and after.workspace != before.workspace
    assert after.shared == before.shared


def test_a_digest_that_cannot_be_read_is_left_out_and_not_compared(tmp_path: Path) -> None:
    """spec: HARV-43. The owner's checkout broke between the bind and the harvest:
    no outside digest, no warning, and nothing raised into the call."""
    owner = tmp_path / "owner"
    make_repo(owner, {"a.txt": "a\n"})
    (tmp_path / "p").mkdir()
    here = site(tmp_path, host_cwd=owner)
    before = trace.at_bind(here)
    assert before.outside is not None
    (owner / ".git" / "HEAD").write_text("not a ref\n")
    after = trace.at_harvest(here, before)
    assert after.outside is None and after.workspace == before.workspace
    assert trace.warnings("build.1", "executor", before, after, here) == []

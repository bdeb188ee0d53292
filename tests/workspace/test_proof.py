"""Effect proofs: derived from rows and a snapshot of the refs (pure)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crw.workspace import proof
from crw.workspace.proof import Proof, Snapshot

NODE_REF = "refs/crw/flow/r1/nodes/build"
STRAY = "refs/crw/flow/r1/stray/build/a1-build.1"


def rows(*, moved: bool = False, fix: bool = False) -> list[dict[str, Any]]:
    head = {"start": "s0", "head": "h1", "ref": STRAY} if moved else None
    taken: list[dict[str, Any]] = [
        {"row": "prepared", "call": "build.1", "node": "build"},
        {"row": "completed", "call": "build.1", "pending_tree": "t1", "executor_head_moved": head},
        {
            "row": "crw_commit",
            "call": "build.1",
            "node": "build",
            "commit": "c1",
            "node_ref": NODE_REF,
            "tree": "t1",
        },
    ]
    if fix:
        taken += [
            {"row": "prepared", "call": "build.3", "node": "build"},
            {"row": "completed", "call": "build.3", "pending_tree": "t3"},
            {
                "row": "crw_commit",
                "call": "build.3",
                "node": "build",
                "commit": "c3",
                "node_ref": NODE_REF,
                "node_old": "c1",
            },
        ]
    return taken


def test_the_proof_takes_the_crw_commit_as_the_calls_state() -> None:
    """spec: GEN-7"""
    snap = Snapshot(refs={NODE_REF: "c1"}, trees={"c1": "t1"})
    assert proof.derive(rows(), snap) == [Proof("build.1", "build", "c1")]
    assert proof.held_rows(proof.derive(rows(), snap)) == []


def test_the_proof_takes_the_stray_head_whose_tree_is_the_pending_tree() -> None:
    """spec: HARV-55"""
    snap = Snapshot(refs={NODE_REF: "c1", STRAY: "h1"}, trees={"c1": "t1", "h1": "t1"})
    assert proof.derive(rows(moved=True), snap) == [Proof("build.1", "build", "h1")]
    # a stray HEAD whose tree is not the pending tree (files left uncommitted): the crw.commit
    partial = Snapshot(refs={NODE_REF: "c1", STRAY: "h1"}, trees={"c1": "t1", "h1": "t0"})
    assert proof.derive(rows(moved=True), partial) == [Proof("build.1", "build", "c1")]


def test_a_tree_that_no_longer_matches_holds_the_call() -> None:
    """spec: GEN-7, HARV-55"""
    snap = Snapshot(refs={NODE_REF: "c1"}, trees={"c1": "t9"})
    (held,) = proof.held_rows(proof.derive(rows(), snap))
    assert (held.call, held.reason) == ("build.1", "effect_proof_mismatch")
    assert "not the pending tree t1" in (held.error or "")
    gone = Snapshot(refs={NODE_REF: "c1"}, trees={"c1": None})
    assert not proof.derive(rows(), gone)[0].holds


def test_a_stray_ref_that_lost_the_recorded_head_holds_the_call() -> None:
    """spec: HARV-49, HARV-55"""
    for held in (None, "other"):
        snap = Snapshot(refs={NODE_REF: "c1", STRAY: held}, trees={"c1": "t1", "h1": "t1"})
        (verdict,) = proof.derive(rows(moved=True), snap)
        assert verdict.state is None and STRAY in (verdict.detail or "")


def test_the_node_branch_must_hold_the_nodes_last_crw_commit() -> None:
    """spec: GEN-7, HARV-54"""
    trees = {"c1": "t1", "c3": "t3"}
    good = proof.derive(rows(fix=True), Snapshot(refs={NODE_REF: "c3"}, trees=trees))
    assert [p.state for p in good] == ["c1", "c3"] and all(p.holds for p in good)
    bad = proof.derive(rows(fix=True), Snapshot(refs={NODE_REF: "c1"}, trees=trees))
    assert [p.holds for p in bad] == [True, False]  # only the tip's proof names the branch
    assert proof.held_rows(bad)[0].call == "build.3"


def test_a_call_held_already_is_not_proved_again_and_a_missing_row_is_named() -> None:
    """spec: GEN-7"""
    taken = [*rows(), {"row": "held", "call": "build.1", "reason": "effect_proof_mismatch"}]
    assert proof.derive(taken, Snapshot()) == []
    torn = rows()[:2]
    assert proof.unrecorded(torn) == ["build.1"]
    assert proof.unrecorded(rows()) == []
    names, commits = proof.wanted(rows(moved=True))
    assert names == {NODE_REF, STRAY} and commits == {"c1", "h1"}


Refs = dict[str, str | None]


def _chain(moved: list[bool]) -> tuple[list[dict[str, Any]], Refs, Refs]:
    """Rows of one node's executor calls build.1, build.3, ... (the ones in
    `moved` committed on their own), and the honest refs and trees."""
    taken: list[dict[str, Any]] = []
    names: Refs = {}
    trees: Refs = {}
    old = None
    for i, committed in enumerate(moved):
        call = f"build.{2 * i + 1}"
        stray = f"refs/crw/flow/r1/stray/build/a1-{call}"
        head = {"start": old or "s0", "head": f"h{i}", "ref": stray} if committed else None
        taken += [
            {"row": "prepared", "call": call, "node": "build"},
            {
                "row": "completed",
                "call": call,
                "pending_tree": f"t{i}",
                "executor_head_moved": head,
            },
            {
                "row": "crw_commit",
                "call": call,
                "node": "build",
                "commit": f"c{i}",
                "node_ref": NODE_REF,
                "node_old": old,
            },
        ]
        trees[f"c{i}"] = f"t{i}"
        if committed:
            names[stray], trees[f"h{i}"] = f"h{i}", f"t{i}"
        old = f"c{i}"
    names[NODE_REF] = old
    return taken, names, trees


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(moved=st.lists(st.booleans(), min_size=1, max_size=4), data=st.data())
def test_exactly_the_tampered_calls_proof_fails(moved: list[bool], data: st.DataObject) -> None:
    """spec: GEN-7, HARV-55"""
    taken, names, trees = _chain(moved)
    honest = proof.derive(taken, Snapshot(refs=names, trees=trees))
    assert [p.state for p in honest] == [f"h{i}" if m else f"c{i}" for i, m in enumerate(moved)]
    assert proof.held_rows(honest) == []
    i = data.draw(st.integers(0, len(moved) - 1))
    what = data.draw(st.sampled_from(["tree", "node", "stray", "missing"]))
    call = f"build.{2 * i + 1}"
    if what == "tree":
        trees = {**trees, f"c{i}": "other"}
    elif what == "missing":
        trees = {**trees, f"c{i}": None}
    elif what == "node":
        names = {**names, NODE_REF: f"c{i}" if i < len(moved) - 1 else "other"}
        call = f"build.{2 * len(moved) - 1}"  # only the tip's proof names the branch
    elif moved[i]:
        names = {**names, f"refs/crw/flow/r1/stray/build/a1-{call}": None}
    else:
        return  # no stray ref to tamper with
    failed = [p.call for p in proof.derive(taken, Snapshot(refs=names, trees=trees)) if not p.holds]
    assert failed == [call]

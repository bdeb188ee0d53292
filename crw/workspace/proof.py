"""Effect proofs: what an executor call left in git, re-derived from rows and refs.

The rows say what each executor call did: its completed row the pending tree and,
when the subagent committed, executor_head_moved (start, head, ref); its crw_commit
row the commit of that tree on start and the node branch it advanced. The proof
checks that the refs still say it:

- the crw.commit's commit holds the pending tree;
- a call whose HEAD moved has its stray ref at the recorded HEAD;
- the node branch holds the node's last crw.commit;

and takes as the call's state the recorded stray HEAD when its tree is the pending
tree (HARV-55), else the crw.commit. A resumed run derives every proof (`derive`,
pure: rows and a `Snapshot` of the refs and trees in, proofs out) and holds a call
whose proof fails, reason `effect_proof_mismatch` (`held_rows`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pygit2

from crw.journal.replay import TERMINAL_ROWS
from crw.journal.rows import Held
from crw.workspace import refs

Row = Mapping[str, Any]

MISMATCH = "effect_proof_mismatch"
"""The held reason of a call whose effect proof no longer matches its refs."""


@dataclass(frozen=True)
class Snapshot:
    """The run's repository as the proofs need it: each ref's commit (None: no such
    ref) and each commit's tree (None: no such commit)."""

    refs: Mapping[str, str | None] = field(default_factory=dict)
    trees: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Proof:
    """One executor call's effect proof: the commit taken as its state, or the
    mismatch (`detail`) that holds the call."""

    call: str
    node: str | None
    state: str | None
    detail: str | None = None

    @property
    def holds(self) -> bool:
        return self.detail is None


@dataclass
class _Effect:
    completed: Row
    commit: Row | None = None


def _effects(rows: Iterable[Row]) -> dict[str, _Effect]:
    """Each call whose newest terminal row is a completed row with a pending tree,
    and the crw_commit row after it."""
    effects: dict[str, _Effect] = {}
    for row in rows:
        call, kind = row.get("call"), row.get("row")
        if not isinstance(call, str):
            continue
        if kind == "completed" and row.get("pending_tree"):
            effects[call] = _Effect(row)
        elif kind in TERMINAL_ROWS:
            effects.pop(call, None)
        elif kind == "crw_commit" and call in effects:
            effects[call].commit = row
    return effects


def unrecorded(rows: Iterable[Row]) -> list[str]:
    """Calls completed with a pending tree whose crw_commit row is missing (a
    process that died inside the batch): their crw.commit is to be recorded."""
    return [call for call, effect in _effects(rows).items() if effect.commit is None]


def wanted(rows: Iterable[Row]) -> tuple[set[str], set[str]]:
    """The refs and the commits a `Snapshot` must hold for `derive`."""
    names: set[str] = set()
    commits: set[str] = set()
    for effect in _effects(rows).values():
        moved = effect.completed.get("executor_head_moved") or {}
        if moved.get("ref"):
            names.add(moved["ref"])
        if moved.get("head"):
            commits.add(moved["head"])
        if effect.commit is not None:
            names.add(effect.commit.get("node_ref") or "")
            commits.add(effect.commit.get("commit") or "")
    names.discard("")
    commits.discard("")
    return names, commits


def derive(rows: Iterable[Row], snapshot: Snapshot) -> list[Proof]:
    """Every executor call's proof, in the order the calls completed."""
    seq = list(rows)
    effects = _effects(seq)
    tips: dict[str, str] = {}  # node branch -> the call whose crw.commit is its last
    for call, effect in effects.items():
        if effect.commit is not None and effect.commit.get("node_ref"):
            tips[effect.commit["node_ref"]] = call
    return [
        _prove(
            call,
            effect,
            snapshot,
            tip=tips.get((effect.commit or {}).get("node_ref") or "") == call,
        )
        for call, effect in effects.items()
    ]


def _prove(call: str, effect: _Effect, snapshot: Snapshot, *, tip: bool) -> Proof:
    completed, made = effect.completed, effect.commit
    node = (made or {}).get("node")
    tree = completed.get("pending_tree")
    if made is None or not made.get("commit"):
        return Proof(call, node, None, "no crw_commit row records its crw.commit")
    commit = str(made["commit"])
    if snapshot.trees.get(commit) != tree:
        found = snapshot.trees.get(commit) or "no such commit"
        return Proof(
            call, node, None, f"crw.commit {commit} holds {found}, not the pending tree {tree}"
        )
    state = commit
    moved = completed.get("executor_head_moved") or {}
    if moved.get("ref"):
        held = snapshot.refs.get(moved["ref"])
        if held != moved.get("head"):
            recorded = moved.get("head")
            detail = f"{moved['ref']} holds {held or 'no ref'}, not the recorded HEAD {recorded}"
            return Proof(call, node, None, detail)
        if snapshot.trees.get(str(moved["head"])) == tree:
            state = str(moved["head"])  # HARV-55: the subagent's own commit is the state
    node_ref = made.get("node_ref")
    if tip and node_ref and snapshot.refs.get(node_ref) != commit:
        held = snapshot.refs.get(node_ref) or "no ref"
        return Proof(call, node, None, f"{node_ref} holds {held}, not its last crw.commit {commit}")
    return Proof(call, node, state)


def held_rows(proofs: Iterable[Proof]) -> list[Held]:
    """The held row of each call whose proof failed (reason effect_proof_mismatch)."""
    return [Held(call=p.call, reason=MISMATCH, error=p.detail) for p in proofs if not p.holds]


def snapshot(repo: pygit2.Repository, rows: Iterable[Row]) -> Snapshot:
    """Read the refs and trees `derive` needs from `repo` (the one reader here)."""
    names, commits = wanted(rows)
    trees: dict[str, str | None] = {}
    for sha in commits:
        try:
            trees[sha] = str(repo[sha].peel(pygit2.Commit).tree_id)
        except (KeyError, ValueError, pygit2.GitError):
            trees[sha] = None
    return Snapshot(refs={name: refs.read(repo, name) for name in names}, trees=trees)

"""The needs between a workflow's nodes: `Graph` (their order, each node's
dependents) and `check_graph`, which refuses duplicate ids, unknown or repeated
needs, a cycle, and a task template that names a node outside its needs. Each
need and placeholder is looked at a bounded number of times. It never reads a
file: the nodes come checked (`crw.engine.config.workflow_nodes`), and the workflow's
text only words a refusal.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from typing import NoReturn

from crw.engine.config._tomlsource import TomlSource, one_line
from crw.engine.config.inputs import INPUTS
from crw.engine.config.template import Placeholder
from crw.engine.config.workflow_nodes import Node


@dataclass(frozen=True)
class Graph:
    """The needs of a workflow's nodes, each computed once: `index` is a node's
    place in the file, `position` its place in `order`, `dependents` the ids of
    the nodes that need it, in file order."""

    order: tuple[Node, ...]
    index: dict[str, int]
    position: dict[str, int]
    dependents: dict[str, tuple[str, ...]]

    @classmethod
    def of(cls, nodes: tuple[Node, ...]) -> Graph:
        """Kahn's algorithm with the ready nodes kept by file index: O(E log N).

        Raises:
            ValueError: the needs name an unknown node or form a cycle
                (`load_workflow` refuses both first).
        """
        index = {node.id: i for i, node in enumerate(nodes)}
        dependents: dict[str, list[str]] = {node.id: [] for node in nodes}
        missing = [len(node.needs) for node in nodes]
        for node in nodes:
            for need in node.needs:
                dependents[need].append(node.id)
        ready = [i for i, count in enumerate(missing) if count == 0]
        order: list[Node] = []
        while ready:
            placed = nodes[heapq.heappop(ready)]
            order.append(placed)
            for dependent in dependents[placed.id]:
                missing[index[dependent]] -= 1
                if missing[index[dependent]] == 0:
                    heapq.heappush(ready, index[dependent])
        if len(order) < len(nodes):
            raise ValueError("the needs of the workflow's nodes form a cycle")
        return cls(
            order=tuple(order),
            index=index,
            position={node.id: i for i, node in enumerate(order)},
            dependents={node: tuple(ids) for node, ids in dependents.items()},
        )


def check_graph(
    file: str, text: str, nodes: tuple[Node, ...], inputs: Collection[str] = ()
) -> Graph:
    """Ids unique, needs known and acyclic, templates within each node's needs and
    the declared `inputs` (`{inputs.NAME}`); returns the graph. Each need and
    placeholder is looked at a bounded number of times; the file's lines are
    mapped (`TomlSource`) only to tell a refusal."""

    def refuse(index: int, key: str, what: str, fix: str) -> NoReturn:
        source = TomlSource(text)
        raise one_line(
            file, source.line_of(("node", index, key)), f"node '{nodes[index].id}': {what}", fix
        )

    first_at: dict[str, int] = {}
    for index, node in enumerate(nodes):
        if node.id in first_at:
            line = TomlSource(text).line_of(("node", first_at[node.id]))
            refuse(
                index, "id", f"id used twice (first at line {line})", "give each node its own id"
            )
        first_at[node.id] = index
    for index, node in enumerate(nodes):
        counts = Counter(node.needs) if len(set(node.needs)) < len(node.needs) else None
        for need in node.needs:
            if need not in first_at:
                known = ", ".join(first_at)
                refuse(
                    index,
                    "needs",
                    f"needs '{need}', but there is no node '{need}'",
                    f"use one of: {known}",
                )
            if counts is not None and counts[need] > 1:
                refuse(index, "needs", f"needs '{need}' twice", "list it once")
    try:
        graph = Graph.of(nodes)  # the needs are known and once each: it fails on a cycle
    except ValueError:
        cycle = _find_cycle(nodes)  # the first in file order, to name it
        if not cycle:
            raise
        start = first_at[cycle[0]]
        refuse(
            start, "needs", f"needs form a cycle: {' -> '.join(cycle)}", "remove one of these needs"
        )
    within = _Ancestors(nodes, graph)
    for index, node in enumerate(nodes):
        direct = set(node.needs)
        for placeholder in node.placeholders():
            if placeholder.node == INPUTS:
                if placeholder.path[0] in inputs and len(placeholder.path) == 1:
                    continue
                what, fix = _input_refusal(placeholder, inputs)
            elif placeholder.node == node.id:
                what, fix = (
                    f"task {placeholder} refers to its own result",
                    "refer to a node it needs",
                )
            elif placeholder.node not in first_at:
                what, fix = (
                    f"task {placeholder} refers to no node",
                    f"use one of: {', '.join(first_at)}",
                )
            elif placeholder.node not in direct and not within.has(node, placeholder.node):
                what = f"task {placeholder} refers to '{placeholder.node}', which it does not need"
                fix = f"add '{placeholder.node}' to needs"
            else:
                continue
            refuse(index, "task", what, fix)
    return graph


def _input_refusal(placeholder: Placeholder, inputs: Collection[str]) -> tuple[str, str]:
    name = placeholder.path[0]
    if name in inputs:
        return (
            f"task {placeholder} names a field of input '{name}', which has none",
            f"write {{inputs.{name}}}",
        )
    known = ", ".join(f"{{inputs.{known}}}" for known in inputs)
    declare = f"declare [inputs.{name}] in the workflow"
    return (
        f"task {placeholder} names no declared input",
        f"{declare}, or use one of: {known}" if known else declare,
    )


def levels(graph: Graph, nodes: tuple[Node, ...]) -> list[list[str]]:
    """The nodes by level: a node with no needs is on level 0, any other one level
    below its deepest need; each level in file order. The nodes of one level can
    run at once."""
    depth: dict[str, int] = {}
    for node in graph.order:
        depth[node.id] = 1 + max((depth[need] for need in node.needs), default=-1)
    out: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for node in nodes:
        out[depth[node.id]].append(node.id)
    return out


def _find_cycle(nodes: tuple[Node, ...]) -> list[str]:
    """A cycle of needs as `[a, b, a]` (a needs b needs a), the first in file order; else []."""
    needs = {node.id: node.needs for node in nodes}
    finished: set[str] = set()
    for root in needs:
        if root in finished:
            continue
        path = [root]
        on_path = {root}
        pending = [iter(needs[root])]
        while pending:
            need = next(pending[-1], None)
            if need is None:
                finished.add(path[-1])
                on_path.discard(path.pop())
                pending.pop()
            elif need in on_path:
                return [*path[path.index(need) :], need]
            elif need not in finished:
                path.append(need)
                on_path.add(need)
                pending.append(iter(needs[need]))
    return []


class _Ancestors:
    """Whether a node needs another through its needs. The first question computes
    every node's ancestors once, as bit sets in topological order (one OR of
    machine words per need); a workflow whose templates name only direct needs
    never asks."""

    def __init__(self, nodes: tuple[Node, ...], graph: Graph) -> None:
        self._nodes, self._graph = nodes, graph
        self._bits: dict[str, int] | None = None

    def has(self, node: Node, other: str) -> bool:
        if self._bits is None:
            self._bits = {}
            for placed in self._graph.order:
                bits = 0
                for need in placed.needs:
                    bits |= self._bits[need] | (1 << self._graph.index[need])
                self._bits[placed.id] = bits
        return bool(self._bits[node.id] >> self._graph.index[other] & 1)

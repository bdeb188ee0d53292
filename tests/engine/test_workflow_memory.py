"""What a loaded workflow's nodes share, so a 100,000-node workflow stays small,
and that sharing changes no node's value."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

from crw.engine.config.workflow import load_workflow

SCHEMA = {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}


def many(directory: Path, count: int, *, task: str = "Answer ok.", schema: str = "s.json") -> Path:
    (directory / "s.json").write_text(json.dumps(SCHEMA), encoding="utf-8")
    (directory / "t.json").write_text(json.dumps({"type": "object"}), encoding="utf-8")
    nodes = "".join(
        f'\n[[node]]\nid = "n{i}"\nrole = "explorer"\ntask = "{task}"\nschema = "{schema}"\n'
        for i in range(count)
    )
    path = directory / "w.toml"
    path.write_text(
        'name = "w"\n' + nodes + '\n[[node]]\nid = "other"\nrole = "explorer"\n'
        'task = "Else."\nschema = "t.json"\ntimeout = 60\n',
        encoding="utf-8",
    )
    return path


def test_nodes_that_name_one_schema_hold_the_one_object_loaded(tmp_path: Path) -> None:
    """The field's type check copies the dict; a node keeps the loaded one, and a
    node with another schema keeps its own."""
    nodes = load_workflow(many(tmp_path, 3)).nodes
    assert all(n.output_schema is nodes[0].output_schema for n in nodes[:3])
    assert nodes[0].output_schema == SCHEMA
    assert nodes[3].output_schema == {"type": "object"}
    assert nodes[3].output_schema is not nodes[0].output_schema


def test_equal_tasks_and_field_sets_are_shared_without_changing_any_node(tmp_path: Path) -> None:
    nodes = load_workflow(many(tmp_path, 3)).nodes
    assert nodes[0].task is nodes[2].task == "Answer ok."
    assert nodes[0].model_fields_set is nodes[1].model_fields_set
    assert nodes[0].model_fields_set == {"id", "role", "task", "output_schema"}
    assert nodes[3].model_fields_set == {"id", "role", "task", "output_schema", "timeout"}
    assert [n.model_dump(exclude_unset=True)["id"] for n in nodes] == ["n0", "n1", "n2", "other"]


def test_a_copy_with_an_update_leaves_the_shared_field_set_as_it_was(tmp_path: Path) -> None:
    """A fix round's node is `model_copy(update=...)` of the node (`rounds.fix_node`
    does it): pydantic copies the set before it adds the updated names."""
    nodes = load_workflow(many(tmp_path, 2)).nodes
    copy = nodes[0].model_copy(update={"review": None, "timeout": 5.0})
    assert "timeout" in copy.model_fields_set
    assert nodes[0].model_fields_set == nodes[1].model_fields_set
    assert "timeout" not in nodes[1].model_fields_set


def test_the_load_holds_its_table_bytes_and_nodes_not_all_at_once(tmp_path: Path) -> None:
    """A process's memory keeps the high-water mark of its load for the whole run
    (a 100,000-node workflow's load peaked at 166 MB traced, for 56 MB kept). The
    file's bytes go once hashed, the TOML table once the nodes are made of it,
    the nodes' equal parts are shared before the graph is built: the peak stays
    under 2.5 times what the workflow keeps (3 times with all held at once)."""
    path = many(tmp_path, 12_000)
    load_workflow(path)  # what loads once a process (modules, the schema's validator)
    tracemalloc.start()
    try:
        workflow = load_workflow(path)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(workflow.nodes) == 12_001
    assert peak < 2.5 * kept, (peak, kept)

"""Run inputs: the `[inputs.NAME]` tables a workflow declares, the values a start
fills them with, the task text they render into, and the nodes by level."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from crw.engine.config.inputs import fill_inputs, parse_pairs
from crw.engine.config.template import render_task
from crw.engine.config.workflow import load_workflow
from crw.engine.config.workflow_graph import levels
from crw.engine.run.run_inputs import task_inputs, write_inputs
from crw.engine.run.rundir import RunDir
from crw.engine.run.runspec import RunSpec, WorkflowRef
from crw.errors import InputError

HEAD = """\
name = "inputs"

[inputs.issue]
type = "file"
description = "the issue to fix"

[inputs.attempts]
type = "int"
default = 2

[inputs.strict]
type = "bool"
required = false

[inputs.title]
"""
NODES = """
[[node]]
id = "explore"
role = "explorer"
task = "Fix {inputs.issue} in {inputs.attempts} tries (strict: {inputs.strict}) {inputs.title}"
schema = { type = "object" }

[[node]]
id = "build"
role = "executor"
needs = ["explore"]
task = "Build {explore.files}."
schema = { type = "object" }

[[node]]
id = "check"
role = "reviewer"
task = "Check."
schema = { type = "object" }

[[node]]
id = "ship"
role = "executor"
needs = ["build", "check"]
task = "Ship."
schema = { type = "object" }
"""


def _workflow(tmp_path: Path, head: str = HEAD, nodes: str = NODES) -> Path:
    path = tmp_path / "w.toml"
    path.write_text(head + nodes)
    return path


def _refused(path: Path) -> str:
    with pytest.raises(InputError) as err:
        load_workflow(path)
    return str(err.value)


def test_inputs_load_in_file_order_with_their_lines(tmp_path: Path) -> None:
    workflow = load_workflow(_workflow(tmp_path))
    assert list(workflow.inputs) == ["issue", "attempts", "strict", "title"]
    assert workflow.input_lines == {"issue": 3, "attempts": 7, "strict": 11, "title": 15}
    assert [(d.type, d.needed) for d in workflow.inputs.values()] == [
        ("file", True),
        ("int", False),
        ("bool", False),
        ("string", True),
    ]


@pytest.mark.parametrize(
    ("head", "nodes", "line", "message"),
    [
        (HEAD.replace("default = 2", 'default = "2"'), NODES, 7, "[inputs.attempts]: default"),
        (HEAD.replace('type = "int"', 'type = "float"'), NODES, 8, 'type = "float" is unknown'),
        (HEAD + "color = 1\n", NODES, 16, "unknown key 'color'"),
        (HEAD.replace("required = false", "required = true\ndefault = true"), NODES, 11, "beside"),
        (HEAD, NODES.replace("{inputs.title}", "{inputs.nope}"), 20, "names no declared input"),
        (HEAD, NODES.replace("{inputs.title}", "{inputs.title.x}"), 20, "has none"),
        (HEAD, NODES.replace('id = "check"', 'id = "inputs"'), 31, "is reserved"),
    ],
)
def test_a_bad_declaration_or_reference_is_refused_at_its_line(
    tmp_path: Path, head: str, nodes: str, line: int, message: str
) -> None:
    """`inputs` is a reserved node id; a task names only declared inputs."""
    refused = _refused(_workflow(tmp_path, head, nodes))
    assert refused.startswith(f"{tmp_path / 'w.toml'}:{line}: "), refused
    assert message in refused and "\n" not in refused


def test_values_are_filled_from_flags_files_and_defaults(tmp_path: Path) -> None:
    workflow = load_workflow(_workflow(tmp_path))
    (tmp_path / "issue.md").write_text("the parser drops {braces}\n")
    filled = fill_inputs(
        "w.toml",
        workflow.inputs,
        workflow.input_lines,
        {"strict": "true", "title": "x"},
        {"issue": "issue.md"},
        tmp_path,
    )
    digest = "sha256:" + hashlib.sha256(b"the parser drops {braces}\n").hexdigest()
    assert {name: given.recorded() for name, given in filled.items()} == {
        "issue": {"path": str(tmp_path / "issue.md"), "digest": digest},
        "attempts": 2,
        "strict": True,
        "title": "x",
    }
    assert filled["issue"].text == "the parser drops {braces}\n"


@pytest.mark.parametrize(
    ("values", "files", "expected"),
    [
        ({"title": "x"}, {}, "w.toml:3: input 'issue': is required and has no value (the issue"),
        ({"title": "x", "attempts": "two"}, {"issue": "i"}, "w.toml:7: input 'attempts': \"two\""),
        ({"title": "x", "strict": "yes"}, {"issue": "i"}, "w.toml:11: input 'strict': \"yes\""),
        ({"title": "x", "colour": "red"}, {"issue": "i"}, "w.toml: no input 'colour' is declared"),
        ({"title": "x", "issue": "text"}, {}, "w.toml:3: input 'issue': is a file"),
        ({}, {"issue": "i", "title": "t"}, "w.toml:15: input 'title': is a string, not a file"),
        ({"title": "x"}, {"issue": "missing.md"}, "w.toml:3: input 'issue': no file"),
    ],
)
def test_a_missing_unknown_or_ill_typed_value_is_refused_naming_the_input(
    tmp_path: Path, values: dict[str, str], files: dict[str, str], expected: str
) -> None:
    workflow = load_workflow(_workflow(tmp_path))
    (tmp_path / "i").write_text("issue")
    with pytest.raises(InputError) as err:
        fill_inputs("w.toml", workflow.inputs, workflow.input_lines, values, files, tmp_path)
    assert str(err.value).startswith(expected), str(err.value)


def test_a_pair_without_an_equals_sign_is_refused() -> None:
    assert parse_pairs(["a=1", "b=x=y"], "--input") == {"a": "1", "b": "x=y"}
    with pytest.raises(InputError, match='--input "a" is not NAME=VALUE'):
        parse_pairs(["a"], "--input")


def test_a_name_given_twice_is_refused_naming_it() -> None:
    with pytest.raises(InputError) as given:
        parse_pairs(["a=1", "b=x", "a=2"], "--input")
    assert str(given.value) == '--input a is given twice ("1" and "2"); give each input once'


def test_a_task_renders_the_recorded_values_and_the_run_copy_of_a_file(tmp_path: Path) -> None:
    """The run reads its inputs from run.json and its own copy of a file input, so a
    change of the file the start read changes no task; a copy that is not the
    recorded file is refused."""
    workflow = load_workflow(_workflow(tmp_path))
    (tmp_path / "issue.md").write_text("Bug: {x}")
    filled = fill_inputs(
        "w.toml",
        workflow.inputs,
        workflow.input_lines,
        {"title": "T"},
        {"issue": "issue.md"},
        tmp_path,
    )
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    spec = RunSpec(
        id="r",
        workflow=WorkflowRef(path="w.toml", digest="d"),
        backend="session",
        pool=1,
        inputs=write_inputs(run, filled),
    )
    (tmp_path / "issue.md").write_text("changed")
    values = task_inputs(spec, run)
    task = render_task(workflow.node("explore").task, {"inputs": values})
    assert task == "Fix Bug: {x} in 2 tries (strict: null) T"
    (run.inputs / "issue").write_text("tampered")
    with pytest.raises(InputError, match="is not the file it was started with"):
        task_inputs(spec, run)


def test_nodes_by_level() -> None:
    workflow = load_workflow(Path(__file__).parents[2] / "crw" / "examples" / "fix-issue.toml")
    assert levels(workflow.graph(), workflow.nodes)[0] == [
        n.id for n in workflow.nodes if not n.needs
    ]


def test_levels_of_a_diamond(tmp_path: Path) -> None:
    workflow = load_workflow(_workflow(tmp_path))
    assert levels(workflow.graph(), workflow.nodes) == [["explore", "check"], ["build"], ["ship"]]

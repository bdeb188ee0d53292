"""The workflow file: what loads, what is refused, and the line each refusal names."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

import crw.engine.config.workflow as workflow_module
import crw.engine.config.workflow_graph as workflow_graph_module
import crw.engine.config.workflow_nodes as workflow_nodes_module
from crw.engine.config._tomlsource import TomlSource
from crw.engine.config.template import Placeholder
from crw.engine.config.workflow import Workflow, load_workflow
from crw.engine.config.workflow_graph import Graph
from crw.errors import InputError
from tests.steps import count_lines

EXAMPLES = Path(__file__).parents[2] / "crw" / "examples"

NODE_A = """\
[[node]]
id = "a"
role = "explorer"
task = "Look around."
schema = { type = "object" }
"""


def write(directory: Path, text: str, **schemas: str) -> Path:
    """The workflow `text` as w.toml in `directory`, with schema files beside it."""
    for name, body in schemas.items():
        (directory / name).write_text(body, encoding="utf-8")
    path = directory / "w.toml"
    path.write_text(text, encoding="utf-8")
    return path


def tree(directory: Path) -> list[tuple[str, bytes]]:
    return sorted((str(p), p.read_bytes()) for p in directory.rglob("*") if p.is_file())


def refusal(path: Path) -> str:
    """The one line `load_workflow` refuses `path` with; the directory stays as it was."""
    before = tree(path.parent)
    with pytest.raises(InputError) as info:
        load_workflow(path)
    assert tree(path.parent) == before
    message = str(info.value)
    assert "\n" not in message
    return message


def node(node_id: str, role: str = "executor", *extra: str, task: str = "Do it.") -> str:
    lines = [
        "[[node]]",
        f'id = "{node_id}"',
        f'role = "{role}"',
        f"task = {json.dumps(task)}",
        'schema = { type = "object" }',
        *extra,
    ]
    return "\n".join(lines) + "\n"


# --- what loads -------------------------------------------------------------------


def test_architecture_example_loads_with_its_schema_file_resolved() -> None:
    workflow = load_workflow(EXAMPLES / "fix-issue.toml")
    assert workflow.name == "fix-issue"
    assert workflow.pool == 4
    build = workflow.node("build")
    assert build.needs == ("explore",)
    assert build.review is not None
    assert (build.review.role, build.review.rounds) == ("reviewer", 2)
    assert build.output_schema["required"] == ["summary", "files_changed"]
    assert workflow.node("explore").output_schema["required"] == ["files"]


@pytest.mark.parametrize("name", ["fix-issue.toml", "demo.toml"])
def test_example_names_only_files_that_exist_and_a_go_root_that_is_there(name: str) -> None:
    """An example a user copies cites no missing file, and sets no verifier whose
    go is not there (its start would warn verifier_prerequisites on this machine)."""
    text = (EXAMPLES / name).read_text()
    cited = re.findall(r"[\w./-]+\.(?:md|json|toml)\b", text)
    missing = [
        c for c in cited if not (EXAMPLES.parents[1] / c).exists() and not (EXAMPLES / c).exists()
    ]
    assert missing == []
    workflow = load_workflow(EXAMPLES / name)
    if workflow.verifier is not None and workflow.verifier.go_root is not None:
        assert (Path(workflow.verifier.go_root) / "bin" / "go").is_file()


def test_demo_workflow_loads_with_a_chain_three_roles_and_a_review() -> None:
    workflow = load_workflow(EXAMPLES / "demo.toml")
    assert len(workflow.nodes) >= 4
    assert len({n.role for n in workflow.nodes}) >= 3
    assert any(n.review is not None for n in workflow.nodes)
    assert [n.id for n in workflow.order()] == ["explore", "plan", "build", "critique"]


def test_path_is_absolute_and_digest_is_the_file_bytes_sha256(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib

    path = write(tmp_path, 'name = "w"\n' + NODE_A)
    monkeypatch.chdir(tmp_path)
    workflow = load_workflow(Path("w.toml"))
    assert workflow.path == path.resolve()
    assert workflow.digest == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    assert workflow.pool == 4
    assert workflow.verifier is None
    assert workflow.token_ceiling is None


def test_token_ceiling_is_read_as_an_integer(tmp_path: Path) -> None:
    """spec: HARV-27 (the ceiling a run's gate enforces)"""
    workflow = load_workflow(write(tmp_path, 'name = "w"\ntoken_ceiling = 50000\n' + NODE_A))
    assert workflow.token_ceiling == 50000


def test_order_puts_needs_first_and_keeps_file_order_otherwise(tmp_path: Path) -> None:
    text = 'name = "w"\n' + "".join(
        [
            node("d", "executor", 'needs = ["b", "c"]'),
            node("b", "executor", 'needs = ["a"]'),
            node("c"),
            node("a"),
        ]
    )
    workflow = load_workflow(write(tmp_path, text))
    assert [n.id for n in workflow.nodes] == ["d", "b", "c", "a"]
    assert [n.id for n in workflow.order()] == ["c", "a", "b", "d"]


def test_schema_file_is_relative_to_the_workflow_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "s.json").write_text('{"type": "object", "required": ["x"]}')
    text = (
        'name = "w"\n[[node]]\nid = "a"\nrole = "critic"\ntask = "t"\nschema = "schemas/s.json"\n'
    )
    write(tmp_path, text)
    monkeypatch.chdir("/")
    workflow = load_workflow(tmp_path / "w.toml")
    assert workflow.nodes[0].output_schema == {"type": "object", "required": ["x"]}


def test_review_defaults_to_one_reviewer_round(tmp_path: Path) -> None:
    workflow = load_workflow(write(tmp_path, 'name = "w"\n' + node("a", "executor", "review = {}")))
    review = workflow.nodes[0].review
    assert review is not None
    assert (review.role, review.rounds) == ("reviewer", 1)
    assert review.fix_effort is None  # the fix rounds ask for the role's effort


def test_a_review_names_the_effort_of_its_fix_rounds(tmp_path: Path) -> None:
    """spec: DISP-24 (an explicit effort on a continuation)"""
    text = 'name = "w"\n' + node("a", "executor", 'review = { rounds = 2, fix_effort = "high" }')
    review = load_workflow(write(tmp_path, text)).nodes[0].review
    assert review is not None and review.fix_effort == "high"


def test_transitive_need_may_be_referenced(tmp_path: Path) -> None:
    text = 'name = "w"\n' + "".join(
        [
            node("a"),
            node("b", "executor", 'needs = ["a"]'),
            node("c", "critic", 'needs = ["b"]', task="Check {a.files} against {b.summary.text}."),
        ]
    )
    workflow = load_workflow(write(tmp_path, text))
    assert workflow.node("c").placeholders() == [
        Placeholder("a", ("files",)),
        Placeholder("b", ("summary", "text")),
    ]


def test_a_workflow_may_write_toml_1_1(tmp_path: Path) -> None:
    """Workflow files are TOML 1.1 (the parser is tomli's): an inline schema written
    over several lines with a trailing comma loads, and a refusal inside it still
    names the line of the key that opens it."""
    schema = '{\n  type = "object",\n  required = ["ok"],\n}'
    text = 'name = "w"\npool = 1\n' + NODE_A.replace('{ type = "object" }', schema)
    wf = load_workflow(write(tmp_path, text))
    assert wf.nodes[0].output_schema == {"type": "object", "required": ["ok"]}
    bad = text.replace('type = "object"', 'type = "objekt"')
    assert refusal(write(tmp_path, bad)).startswith(f"{tmp_path / 'w.toml'}:7: ")


# --- refusals, each one line naming file, line, what and fix ----------------------


def test_toml_syntax_error_keeps_tomllib_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, 'name = "w"\npool = = 3\n')
    message = refusal(path)
    assert message.startswith(f"{path}:2: invalid TOML: ")
    assert message.endswith("; fix the TOML syntax at line 2, column 8")


def test_missing_file_is_refused(tmp_path: Path) -> None:
    assert (
        refusal(tmp_path / "nope.toml")
        == f"{tmp_path / 'nope.toml'}: no workflow file here; check the path"
    )


def test_not_utf8_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "w.toml"
    path.write_bytes(b'name = "w"\ntask = "\xff"\n')
    assert refusal(path) == f"{path}:2: not UTF-8 text (byte 19); save it as UTF-8"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            'name = "w"\npool = 0\n' + NODE_A,
            "2: pool = 0 is below 1; use 1 or more",
        ),
        (
            'name = "w"\ntoken_ceiling = 0\n' + NODE_A,
            "2: token_ceiling = 0 is below 1; use 1 or more",
        ),
        (
            'name = "w"\ntoken_ceiling = 1.5\n' + NODE_A,
            "2: token_ceiling = 1.5 is not an integer; write token_ceiling as an integer",
        ),
        (
            'name = "w"\npool = "4"\n' + NODE_A,
            '2: pool = "4" is not an integer; write pool as an integer',
        ),
        (
            'name = "Fix Issue"\n' + NODE_A,
            '1: name = "Fix Issue" is not a slug; use 1-64 lowercase letters, digits,'
            " '-' and '_', starting with a letter or digit",
        ),
        (
            'name = "w"\ncolour = "red"\n' + NODE_A,
            "2: unknown key 'colour'; remove it or use one of: name, pool, token_ceiling,"
            " repo, head, verifier, settings, evidence_cwd, inputs, node",
        ),
        (
            'name = "w"\n',
            ": no [[node]] table; add a [[node]] with id, role, task and schema",
        ),
        (
            NODE_A,
            ": no name; add name = ...",
        ),
        (
            'name = "w"\nnode = []\n',
            "2: no [[node]] table; add a [[node]] with id, role, task and schema",
        ),
        (
            'name = "w"\n[verifier]\ngo_root = "go"\n' + NODE_A,
            '3: [verifier]: go_root = "go" is not absolute; give its full path',
        ),
        (
            'name = "w"\n[verifier]\ngoroot = "/go"\n' + NODE_A,
            "3: [verifier]: unknown key 'goroot'; remove it or use one of: go_root",
        ),
        (
            'name = "w"\n' + NODE_A + "colour = 1\n",
            "7: node 'a': unknown key 'colour'; remove it or use one of:"
            " id, role, task, schema, needs, review, timeout, qa",
        ),
        (
            'name = "w"\n' + NODE_A + node("b", "boss"),
            "9: node 'b': role = \"boss\" is unknown; use one of 'architect', 'executor',"
            " 'executor-t1', 'reviewer', 'explorer' or 'critic'",
        ),
        (
            'name = "w"\n' + NODE_A + node("b.1"),
            "8: node 'b.1': id = \"b.1\" is not a slug; use 1-64 lowercase letters, digits,"
            " '-' and '_', starting with a letter or digit",
        ),
        (
            'name = "w"\n' + NODE_A + '[[node]]\nid = "b"\nrole = "executor"\ntask = "t"\n',
            "7: node 'b': no schema; add schema = ...",
        ),
        (
            'name = "w"\n' + NODE_A + node("a"),
            "8: node 'a': id used twice (first at line 2); give each node its own id",
        ),
        (
            'name = "w"\n' + NODE_A + node("b", "executor", 'needs = ["zz"]'),
            "12: node 'b': needs 'zz', but there is no node 'zz'; use one of: a, b",
        ),
        (
            'name = "w"\n' + NODE_A + node("b", "executor", 'needs = ["a", "a"]'),
            "12: node 'b': needs 'a' twice; list it once",
        ),
        (
            'name = "w"\n'
            + node("a", "executor", 'needs = ["c"]')
            + node("b", "executor", 'needs = ["a"]')
            + node("c", "executor", 'needs = ["b"]'),
            "7: node 'a': needs form a cycle: a -> c -> b -> a; remove one of these needs",
        ),
        (
            'name = "w"\n' + node("a", "executor", 'needs = ["a"]'),
            "7: node 'a': needs form a cycle: a -> a; remove one of these needs",
        ),
        (
            'name = "w"\n' + NODE_A + node("b", task="Use {a.files}."),
            "10: node 'b': task {a.files} refers to 'a', which it does not need; add 'a' to needs",
        ),
        (
            'name = "w"\n' + NODE_A + node("b", task="Use {zz.files}."),
            "10: node 'b': task {zz.files} refers to no node; use one of: a, b",
        ),
        (
            'name = "w"\n' + NODE_A + node("b", task="Use {b.files}."),
            "10: node 'b': task {b.files} refers to its own result; refer to a node it needs",
        ),
        (
            'name = "w"\n' + NODE_A + node("b", task="Use {files}."),
            "10: node 'b': task placeholder {files} at character 5 is not {node.field};"
            " write {node.field}, or '{{' and '}}' for literal braces",
        ),
        (
            'name = "w"\n' + NODE_A + node("b", task="Use } here."),
            "10: node 'b': task has a lone '}' at character 5; write '}}' for a literal brace",
        ),
        (
            'name = "w"\n' + NODE_A.replace('{ type = "object" }', "{ type = 12 }"),
            "6: node 'a': schema is not a valid JSON Schema at $.type:"
            " 12 is not valid under any of the given schemas; fix the schema",
        ),
        (
            'name = "w"\n' + NODE_A.replace('{ type = "object" }', "{ default = 1979-05-27 }"),
            "6: node 'a': schema holds a TOML date or time, which JSON has no form for;"
            " write it as a string",
        ),
        (
            'name = "w"\n' + NODE_A.replace('{ type = "object" }', "5"),
            "6: node 'a': schema = 5 is not a table; write schema as a table",
        ),
        (
            'name = "w"\n' + node("a", "executor", 'review = { role = "executor" }'),
            "7: node 'a' review: role = \"executor\" is unknown; use one of 'reviewer' or 'critic'",
        ),
        (
            'name = "w"\n' + node("a", "executor", "[node.review]", "rounds = 0"),
            "8: node 'a' review: rounds = 0 is below 1; use 1 or more",
        ),
        (
            'name = "w"\n' + node("a", "executor", "[node.review]", 'fix_effort = "a..b"'),
            "8: node 'a' review: fix_effort = \"a..b\" holds '..'; write the name without '..'",
        ),
        (
            'name = "w"\n' + node("a", "executor", 'review = { fix_effort = "" }'),
            "7: node 'a' review: an empty name; write a name or leave the key out (undecided)",
        ),
        (
            'name = "w"\n' + node("a", "executor", 'review = { fix_effort = "hi\\nhigh" }'),
            "7: node 'a' review: fix_effort = \"hi\\nhigh\" holds a control character"
            " (a newline, a NUL, ...); write the name on one line",
        ),
        (
            'name = "w"\n' + node("a", "executor", "review = { fix_effort = 3 }"),
            "7: node 'a' review: fix_effort = 3 is not a string; write fix_effort as a string",
        ),
        (
            'name = "w"\n' + node("a", "executor", 'review = { effort = "high" }'),
            "7: node 'a' review: unknown key 'effort'; remove it or use one of:"
            " role, rounds, fix_effort",
        ),
    ],
)
def test_refusal_names_file_line_what_and_fix(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    line_and_message = f":{expected}" if expected[0].isdigit() else expected
    assert refusal(path) == f"{path}{line_and_message}"


def test_missing_schema_file_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, 'name = "w"\n' + NODE_A.replace('{ type = "object" }', '"s.json"'))
    assert refusal(path) == (
        f"{path}:6: node 'a': schema file \"s.json\" does not exist"
        f" (looked at {tmp_path / 's.json'}); fix the path; it is relative to the workflow file"
    )


def test_schema_file_not_json_is_refused(tmp_path: Path) -> None:
    text = 'name = "w"\n' + NODE_A.replace('{ type = "object" }', '"s.json"')
    path = write(tmp_path, text, **{"s.json": '{"type": \n'})
    assert refusal(path) == (
        f"{path}:6: node 'a': schema file \"s.json\" is not JSON"
        " (Expecting value at line 2); fix the JSON"
    )


def test_schema_file_with_invalid_schema_is_refused(tmp_path: Path) -> None:
    text = 'name = "w"\n' + NODE_A.replace('{ type = "object" }', '"s.json"')
    path = write(tmp_path, text, **{"s.json": '{"required": "x"}'})
    message = refusal(path)
    assert message.startswith(
        f"{path}:6: node 'a': schema is not a valid JSON Schema at $.required: "
    )


def test_error_on_the_earliest_line_is_told_first(tmp_path: Path) -> None:
    path = write(tmp_path, 'name = "w"\npool = 0\n' + NODE_A.replace("explorer", "boss"))
    assert refusal(path).startswith(f"{path}:2: pool = 0")


# --- the line finder --------------------------------------------------------------


def test_line_finder_skips_brackets_inside_strings_and_multiline_values() -> None:
    text = "\n".join(
        [
            'name = "w"',  # 1
            'task = """',  # 2
            "[[node]]",  # 3: inside a string
            '"""',  # 4
            "list = [",  # 5
            '  ["node"],',  # 6: inside an array
            "]",  # 7
            "[[node]]  # first",  # 8
            "'id' = 'a'",  # 9
            "[node.review]",  # 10
            "rounds = 1",  # 11
            "[[ node ]]",  # 12
            "x.y = 2",  # 13
        ]
    )
    source = TomlSource(text)
    assert source.line_of(("task",)) == 2
    assert source.line_of(("list",)) == 5
    assert source.line_of(("node", 0)) == 8
    assert source.line_of(("node", 0, "id")) == 9
    assert source.line_of(("node", 0, "review", "rounds")) == 11
    assert source.line_of(("node", 1)) == 12
    assert source.line_of(("node", 1, "x", "y")) == 13
    assert source.line_of(("node", 1, "missing")) == 12
    assert source.line_of(("nothing",)) is None


# --- generated workflows ----------------------------------------------------------

IDS = st.lists(
    st.from_regex(r"[a-z][a-z0-9_-]{0,8}", fullmatch=True).filter(lambda id_: id_ != "inputs"),
    min_size=1,
    max_size=7,
    unique=True,
)  # `inputs` is reserved: it names the run's inputs
ROLE_NAMES = ["architect", "executor", "executor-t1", "reviewer", "explorer", "critic"]


@st.composite
def workflows(draw: st.DrawFn) -> dict[str, object]:
    """A valid workflow as data: a random DAG of needs, shuffled into file order,
    each task referring to some of the node's transitive needs."""
    ids = draw(IDS)
    needs: dict[str, list[str]] = {}
    for i, node_id in enumerate(ids):
        needs[node_id] = draw(st.lists(st.sampled_from(ids[:i]), unique=True)) if i else []
    closure: dict[str, set[str]] = {}
    for node_id in ids:
        closure[node_id] = set(needs[node_id]).union(*(closure[n] for n in needs[node_id]))
    nodes = []
    for node_id in draw(st.permutations(ids)):
        refs = (
            draw(st.lists(st.sampled_from(sorted(closure[node_id])), max_size=3))
            if closure[node_id]
            else []
        )
        task = "Go {{now}}. " + " ".join(f"{{{ref}.field}}" for ref in refs)
        nodes.append(
            {
                "id": node_id,
                "role": draw(st.sampled_from(ROLE_NAMES)),
                "needs": needs[node_id],
                "task": task,
            }
        )
    return {"name": "gen", "pool": draw(st.integers(1, 8)), "nodes": nodes}


def to_toml(spec: dict[str, object], schema: str = '{ type = "object" }') -> str:
    lines = [f"name = {json.dumps(spec['name'])}", f"pool = {spec['pool']}"]
    nodes = spec["nodes"]
    assert isinstance(nodes, list)
    for item in nodes:
        lines += [
            "",
            "[[node]]",
            f"id = {json.dumps(item['id'])}",
            f"role = {json.dumps(item['role'])}",
            f"needs = {json.dumps(item['needs'])}",
            f"task = {json.dumps(item['task'])}",
            f"schema = {item.get('schema', schema)}",
        ]
    return "\n".join(lines) + "\n"


def load_text(text: str) -> tuple[Path, Workflow | InputError]:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "w.toml"
        path.write_text(text, encoding="utf-8")
        try:
            return path, load_workflow(path)
        except InputError as err:
            return path, err


@settings(max_examples=100, deadline=None)
@given(workflows())
def test_generated_workflow_loads_and_order_respects_needs(spec: dict[str, object]) -> None:
    _, loaded = load_text(to_toml(spec))
    assert isinstance(loaded, Workflow), loaded
    position = {n.id: i for i, n in enumerate(loaded.order())}
    assert sorted(position) == sorted(n.id for n in loaded.nodes)
    for item in loaded.nodes:
        assert all(position[need] < position[item.id] for need in item.needs)


BREAKS = ["cycle", "unknown_need", "unknown_role", "bad_reference", "invalid_schema"]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workflows(), st.sampled_from(BREAKS), st.data())
def test_broken_workflow_is_refused_naming_the_problem(
    spec: dict[str, object], kind: str, data: st.DataObject
) -> None:
    nodes = spec["nodes"]
    assert isinstance(nodes, list)
    target = data.draw(st.sampled_from(nodes))
    if kind == "cycle":
        with_needs = [n for n in nodes if n["needs"]]
        if with_needs:
            target = data.draw(st.sampled_from(with_needs))
            need = next(n for n in nodes if n["id"] == target["needs"][0])
            need["needs"] = [*need["needs"], target["id"]]
        else:
            target["needs"] = [target["id"]]
        expected = "needs form a cycle: "
    elif kind == "unknown_need":
        target["needs"] = [*target["needs"], "no-such-node"]
        expected = "needs 'no-such-node', but there is no node"
    elif kind == "unknown_role":
        target["role"] = "boss"
        expected = 'role = "boss" is unknown'
    elif kind == "bad_reference":
        target["task"] += " {zz-not-a-node.field}"
        expected = "task {zz-not-a-node.field} refers to no node"
    else:
        target["schema"] = "{ type = 12 }"
        expected = "schema is not a valid JSON Schema"
    path, loaded = load_text(to_toml(spec))
    assert isinstance(loaded, InputError)
    message = str(loaded)
    assert message.startswith(f"{path}:")
    assert expected in message
    assert "\n" not in message


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300))
def test_byte_garbage_raises_nothing_but_input_error(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "w.toml"
        path.write_bytes(data)
        with pytest.raises(InputError) as info:
            load_workflow(path)
        assert str(info.value).startswith(str(path))


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet="[]{}\"'=.,#\n abn12-_", max_size=120))
def test_toml_like_garbage_raises_nothing_but_input_error(text: str) -> None:
    path, loaded = load_text('name = "w"\n' + text)
    if isinstance(loaded, InputError):
        assert str(loaded).startswith(str(path))
        assert "\n" not in str(loaded)


@pytest.mark.parametrize("device", ["/dev/null"])
def test_workflow_that_is_a_device_is_refused_unread(device: str) -> None:
    # Not `refusal`: its look at the directory before and after would read all of
    # /dev, which other processes change (a database's shared memory in /dev/shm).
    with pytest.raises(InputError) as info:
        load_workflow(Path(device))
    assert str(info.value) == f"{device}: the workflow is not a regular file; give a file's path"


def test_workflow_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    assert (
        refusal(tmp_path) == f"{tmp_path}: the workflow is not a regular file; give a file's path"
    )


def test_workflow_over_a_mebibyte_is_refused_with_how_to_raise_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CRW_MAX_FILE_BYTES", raising=False)
    path = write(tmp_path, 'name = "w"\n' + "# padding\n" * 110_000 + NODE_A)
    size = path.stat().st_size
    assert refusal(path) == (
        f"{path}: the workflow is larger than 1048576 bytes; make it smaller, "
        f"or set CRW_MAX_FILE_BYTES={size} (bytes) or more"
    )


def test_crw_max_file_bytes_lets_a_larger_workflow_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The limit is a guard a user raises: the refusal's own fix loads the file."""
    path = write(tmp_path, 'name = "w"\n' + "# padding\n" * 110_000 + NODE_A)
    monkeypatch.setenv("CRW_MAX_FILE_BYTES", str(path.stat().st_size))
    assert [node.id for node in load_workflow(path).nodes] == ["a"]
    monkeypatch.setenv("CRW_MAX_FILE_BYTES", str(path.stat().st_size - 1))
    assert "is larger than" in refusal(path)


def test_crw_max_file_bytes_can_lower_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, 'name = "w"\n' + NODE_A)
    monkeypatch.setenv("CRW_MAX_FILE_BYTES", "10")
    assert refusal(path).startswith(f"{path}: the workflow is larger than 10 bytes;")


@pytest.mark.parametrize("value", ["lots", "0", "-5", "1.5"])
def test_crw_max_file_bytes_that_is_not_a_size_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    path = write(tmp_path, 'name = "w"\n' + NODE_A)
    monkeypatch.setenv("CRW_MAX_FILE_BYTES", value)
    assert refusal(path) == (
        f"CRW_MAX_FILE_BYTES={value!r} is not a number of bytes; "
        "set it to a whole number such as 8388608, or unset it"
    )


def test_a_runs_recorded_limit_wins_over_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A started run's processes read with the limit its start recorded, whatever
    the shell they run in says (`RunSpec.file_limit`)."""
    from crw.settings import file_limit

    path = write(tmp_path, 'name = "w"\n' + "# padding\n" * 110_000 + NODE_A)
    monkeypatch.delenv("CRW_MAX_FILE_BYTES", raising=False)
    with file_limit(2 << 20):
        assert [node.id for node in load_workflow(path).nodes] == ["a"]
    assert "is larger than 1048576 bytes" in refusal(path)


def test_workflow_path_with_a_newline_is_named_on_one_line(tmp_path: Path) -> None:
    path = tmp_path / "w\n.toml"
    assert refusal(path) == f"{json.dumps(str(path))}: no workflow file here; check the path"


def test_schema_file_that_is_a_fifo_is_refused_unread(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "s.json")
    path = write(tmp_path, 'name = "w"\n' + NODE_A.replace('{ type = "object" }', '"s.json"'))
    assert refusal(path) == (
        f"{path}:6: node 'a': the schema file \"s.json\" is not a regular file; give a file's path"
    )


def test_node_id_with_a_newline_is_refused_on_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, 'name = "w"\n' + NODE_A.replace('id = "a"', 'id = "a\\n"'))
    assert refusal(path) == (
        f"{path}:3: node 'a\\n': id = \"a\\n\" is not a slug; use 1-64 lowercase letters,"
        " digits, '-' and '_', starting with a letter or digit"
    )


def big_workflow(n: int, refer_to_first: bool = False) -> str:
    """A chain of `n` nodes, each task naming its need's result (and the first's)."""
    nodes = [
        f'[[node]]\nid="n{i}"\nrole="explorer"\nschema={{type="object"}}\n'
        + (f'needs=["n{i - 1}"]\ntask="{{n{i - 1}.x}}' if i else 'task="go')
        + (" {n0.x}" if refer_to_first and i > 1 else "")
        + '"\n'
        for i in range(n)
    ]
    return 'name="big"\n' + "".join(nodes)


def test_a_10000_node_workflow_checks_each_schema_and_its_graph_once(tmp_path: Path) -> None:
    """The order is computed at load and kept; a schema shared by every node is
    checked once."""
    path = write(tmp_path, big_workflow(10_000, refer_to_first=True))
    with (
        patch.object(Graph, "of", wraps=Graph.of) as graphs,
        patch.object(
            Draft202012Validator, "check_schema", wraps=Draft202012Validator.check_schema
        ) as checks,
    ):
        workflow = load_workflow(path)
        assert [n.id for n in workflow.order()][-1] == "n9999"
        assert workflow.node("n9999").needs == ("n9998",)
    assert graphs.call_count == 1
    assert checks.call_count == 1


def test_loading_a_workflow_grows_in_proportion_to_its_nodes(tmp_path: Path) -> None:
    """The graph checks (ids, needs, cycles, the needs a template may name) touch
    each node and need a bounded number of times: 4x the nodes, at most ~4x the lines."""
    counted = {}
    for n in (500, 2000):
        path = write(tmp_path, big_workflow(n, refer_to_first=True))
        with count_lines(workflow_module, workflow_graph_module, workflow_nodes_module) as lines:
            load_workflow(path).order()
        counted[n] = lines.n
    assert counted[2000] <= 4.4 * counted[500], counted


def test_an_acyclic_workflow_is_ordered_once_and_its_plain_tasks_parsed_at_once(
    tmp_path: Path,
) -> None:
    """A load walks the needs once (the order, `Graph.of`); the walk that names a
    cycle runs only when there is one. A task with no brace is one piece of text,
    parsed without a step per character run: what keeps a 100,000-node load near
    a second of CPU (docs/performance.md)."""
    path = write(tmp_path, big_workflow(300, refer_to_first=False))
    with patch.object(
        workflow_graph_module, "_find_cycle", side_effect=AssertionError("walked twice")
    ):
        load_workflow(path)
    template_module = __import__("crw.engine.config.template", fromlist=["_BRACE"])
    with patch.object(template_module, "_BRACE") as brace:
        assert template_module.parse_template("Answer ok.") == ["Answer ok."]
        assert template_module.parse_template("") == []
    assert brace.search.call_count == 0


def test_a_schema_file_every_node_names_is_read_once_a_load(tmp_path: Path) -> None:
    """Nodes that share a schema file share its one read: loading grows with the
    nodes, not with nodes times the file's size."""
    nodes = "".join(
        f'[[node]]\nid = "n{i}"\nrole = "explorer"\ntask = "t"\nschema = "s.json"\n'
        for i in range(200)
    )
    path = write(tmp_path, f'name = "w"\n{nodes}', **{"s.json": '{"type": "object"}'})
    import crw.engine.config.schema_refs as schema_refs

    with patch.object(
        workflow_nodes_module, "read_schema_file", wraps=schema_refs.read_schema_file
    ) as reads:
        workflow = load_workflow(path)
    assert reads.call_count == 1
    assert workflow.node("n199").output_schema == workflow.node("n0").output_schema


def test_an_evidence_cwd_is_resolved_at_load_and_a_nul_in_it_is_refused(tmp_path: Path) -> None:
    """spec: STEP-19"""
    (tmp_path / "link").symlink_to(tmp_path / "flows", target_is_directory=True)
    path = write(tmp_path, 'name = "w"\nevidence_cwd = "link/../link"\n' + node("a"))
    assert load_workflow(path).evidence_cwd == str((tmp_path / "flows").resolve())
    path = write(tmp_path, 'name = "w"\nevidence_cwd = "a\\u0000b"\n' + node("a"))
    assert refusal(path) == (
        f"{path}:2: evidence_cwd holds a NUL character; give a directory's path"
    )

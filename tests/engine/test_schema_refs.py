"""A node schema's refs: within the schema or to files beside the workflow, checked
at load, bundled, and never retrieved when an answer is checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crw.engine.answers import answer
from crw.engine.config.workflow import load_workflow
from crw.errors import InputError

FIX = "refer within the schema (#/...) or to a JSON file in the workflow's directory"


def workflow(directory: Path, schema: str) -> Path:
    path = directory / "w.toml"
    path.write_text(
        f'name = "w"\n[[node]]\nid = "a"\nrole = "explorer"\ntask = "t"\nschema = {schema}\n'
    )
    return path


def inline_ref(ref: str) -> str:
    return f'{{ type = "object", properties = {{ x = {{ "$ref" = "{ref}" }} }} }}'


def refusal(path: Path) -> str:
    with pytest.raises(InputError) as caught:
        load_workflow(path)
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("ref", "what"),
    [
        ("http://127.0.0.1:9/item.json", "is a URL, which crw never fetches"),
        ("https://example.com/s.json#/$defs/x", "is a URL, which crw never fetches"),
        ("file:///etc/passwd", "is a URL, which crw never fetches"),
        ("urn:example:item", "is a URL, which crw never fetches"),
        ("//example.com/item.json", "is a URL, which crw never fetches"),
        ("/etc/item.json", "is an absolute path"),
        ("../item.json", "is outside the workflow's directory"),
        ("sub/../../item.json", "is outside the workflow's directory"),
    ],
)
def test_ref_that_reaches_out_is_refused_at_load(tmp_path: Path, ref: str, what: str) -> None:
    directory = tmp_path / "wf"
    directory.mkdir()
    (tmp_path / "item.json").write_text('{"type": "string"}')
    path = workflow(directory, inline_ref(ref))
    assert refusal(path) == (
        f"{path}:6: node 'a': schema $ref {json.dumps(ref)} in w.toml {what}; {FIX}"
    )


def test_ref_that_escapes_through_a_symlink_is_refused(tmp_path: Path) -> None:
    (tmp_path / "outside.json").write_text('{"type": "string"}')
    directory = tmp_path / "wf"
    directory.mkdir()
    (directory / "item.json").symlink_to(tmp_path / "outside.json")
    message = refusal(workflow(directory, inline_ref("item.json")))
    assert "is outside the workflow's directory" in message


def test_relative_ref_against_a_url_id_is_refused(tmp_path: Path) -> None:
    (tmp_path / "item.json").write_text('{"type": "string"}')
    schema = (
        '{ "$id" = "https://example.com/s.json", properties = { x = { "$ref" = "item.json" } } }'
    )
    message = refusal(workflow(tmp_path, schema))
    assert "resolves to https://example.com/item.json against the schema's $id" in message


def test_ref_to_nothing_is_refused(tmp_path: Path) -> None:
    (tmp_path / "defs.json").write_text('{"$defs": {}}')
    for ref in ("#/$defs/missing", "defs.json#/$defs/missing"):
        message = refusal(workflow(tmp_path, inline_ref(ref)))
        assert f'$ref "{ref}" points to nothing; fix the ref' in message


def test_ref_in_a_referenced_file_is_checked_too(tmp_path: Path) -> None:
    (tmp_path / "defs.json").write_text('{"$defs": {"x": {"$ref": "http://127.0.0.1:9/y"}}}')
    message = refusal(workflow(tmp_path, inline_ref("defs.json#/$defs/x")))
    assert 'schema $ref "http://127.0.0.1:9/y" in defs.json is a URL' in message


def test_missing_referenced_file_is_refused_relative_to_the_file_that_names_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "s.json").write_text('{"$ref": "defs.json"}')
    message = refusal(workflow(tmp_path, '"schemas/s.json"'))
    assert message == (
        f"{tmp_path / 'w.toml'}:6: node 'a': schema file \"defs.json\" does not exist "
        f"(looked at {tmp_path / 'schemas' / 'defs.json'}); "
        "fix the path; it is relative to schemas/s.json"
    )


def write_local_refs(directory: Path) -> Path:
    """A schema file in schemas/ naming a file beside it and one a level up."""
    (directory / "schemas").mkdir()
    (directory / "common.json").write_text('{"type": "integer", "minimum": 0}')
    (directory / "schemas" / "defs.json").write_text(
        json.dumps(
            {
                "$defs": {
                    "name": {"type": "string", "minLength": 1},
                    "names": {"type": "array", "items": {"$ref": "#/$defs/name"}},
                }
            }
        )
    )
    (directory / "schemas" / "build.json").write_text(
        json.dumps(
            {
                "type": "object",
                "required": ["files", "count"],
                "properties": {
                    "files": {"$ref": "defs.json#/$defs/names"},
                    "count": {"$ref": "../common.json"},
                },
            }
        )
    )
    return workflow(directory, '"schemas/build.json"')


def test_ref_to_files_beside_the_workflow_is_bundled_and_checked(tmp_path: Path) -> None:
    schema = load_workflow(write_local_refs(tmp_path)).nodes[0].output_schema
    assert schema["$id"] == (tmp_path / "schemas" / "build.json").as_uri()
    bundled = {key for key in schema["$defs"]}
    assert bundled == {
        "crw:" + (tmp_path / "schemas" / "defs.json").as_uri(),
        "crw:" + (tmp_path / "common.json").as_uri(),
    }
    assert answer.validate({"files": ["a.py"], "count": 2}, schema) == []
    assert answer.validate({"files": [""], "count": -1}, schema) == [
        "$.count: -1 is less than the minimum of 0",
        "$.files[0]: '' should be non-empty",
    ]


def test_checking_an_answer_reads_no_file(tmp_path: Path) -> None:
    schema = load_workflow(write_local_refs(tmp_path)).nodes[0].output_schema
    for path in tmp_path.rglob("*.json"):
        path.unlink()
    assert answer.validate({"files": [""], "count": 1}, schema) == [
        "$.files[0]: '' should be non-empty"
    ]


def test_schema_without_file_refs_is_kept_as_written(tmp_path: Path) -> None:
    schema = (
        '{ type = "object", "$defs" = { s = { type = "string" } },'
        ' properties = { x = { "$ref" = "#/$defs/s" } } }'
    )
    loaded = load_workflow(workflow(tmp_path, schema)).nodes[0].output_schema
    assert loaded == {
        "type": "object",
        "$defs": {"s": {"type": "string"}},
        "properties": {"x": {"$ref": "#/$defs/s"}},
    }
    assert answer.validate({"x": 1}, loaded) == ["$.x: 1 is not of type 'string'"]

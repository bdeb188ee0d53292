"""`crw flow start` refuses a schema that reaches out, before anything is made."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from tests.cli.conftest import Crw

WORKFLOW = """\
name = "w"

[[node]]
id = "explore"
role = "explorer"
task = "Look."
schema = {schema}
"""


def write(directory: Path, schema: str) -> Path:
    path = directory / "w.toml"
    path.write_text(WORKFLOW.format(schema=schema))
    return path


def test_schema_ref_to_a_url_is_refused_at_start_and_never_fetched(
    crw: Crw, tmp_path: Path
) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        url = f"http://127.0.0.1:{server.getsockname()[1]}/item.json"
        path = write(tmp_path, f'{{ properties = {{ x = {{ "$ref" = "{url}" }} }} }}')
        result = crw.start(str(path), "--owner", "o")
        assert result.code == 2, result.stderr
        assert result.error() == (
            f"crw: error: {path}:7: node 'explore': schema $ref {json.dumps(url)} in w.toml"
            " is a URL, which crw never fetches; refer within the schema (#/...)"
            " or to a JSON file in the workflow's directory\n"
        )
        assert not crw.state.exists()
        try:
            server.accept()
        except BlockingIOError:
            pass
        else:
            raise AssertionError("crw connected to the URL a schema names")


def test_schema_ref_to_a_file_beside_the_workflow_starts(crw: Crw, tmp_path: Path) -> None:
    (tmp_path / "defs.json").write_text('{"$defs": {"files": {"type": "array"}}}')
    path = write(tmp_path, '{ properties = { files = { "$ref" = "defs.json#/$defs/files" } } }')
    result = crw.start(str(path), "--owner", "o")
    assert result.code == 0, result.stderr
    assert result.json()["run"].startswith("w-")

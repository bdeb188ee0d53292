"""The mock Responses API's parts the owned-run tests lean on: a subagent's answer
from the packet its spawn message names, and a request whose client went away."""

from __future__ import annotations

import json
import socket
import struct
import threading
from pathlib import Path

import jsonschema  # type: ignore[import-untyped]
import pytest

from crw.engine.steps.packet import output_contract, spawn_message
from crw.host.mock_model import MockModel
from crw.host.mock_replies import ModelRequest, Reply, valid

SCHEMA = {"type": "object", "required": ["files"], "properties": {"files": {"type": "array"}}}


def user(text: str) -> dict[str, object]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


@pytest.mark.parametrize("where", ["state", "my state"])
def test_a_spawn_message_is_answered_from_the_contract_of_the_packet_it_names(
    tmp_path: Path, where: str
) -> None:
    """The packet's path may hold a space (a state directory under `my state/`)."""
    (tmp_path / where).mkdir()
    packet = tmp_path / where / "packet.md"
    packet.write_text(f"# Task packet\n\n## Task\n\nLook.\n\n{output_contract(SCHEMA)}\n")
    message = spawn_message("explore.1", 1, 1, "explorer", str(tmp_path), str(packet))
    body = {"input": [user("<environment_context>…</environment_context>"), user(message)]}
    events = MockModel().handle("/v1/responses", body)
    answer = json.loads(events[1]["item"]["content"][0]["text"])
    jsonschema.validate(answer, SCHEMA)
    assert "files" in answer


def v2_task(text: str, header: str = "NEW_TASK") -> dict[str, object]:
    """A multi-agent v2 task as codex sends it to a child (docs/host.md)."""
    head = f"Message Type: {header}\nTask name: /root/crw_x\nSender: /root\nPayload:\n"
    return {
        "type": "agent_message",
        "author": "/root",
        "recipient": "/root/crw_x",
        "content": [
            {"type": "input_text", "text": head},
            {"type": "encrypted_content", "encrypted_content": text},
        ],
    }


def test_a_v2_task_is_read_as_the_newest_user_message(tmp_path: Path) -> None:
    """A v2 child's task is no user message: the mock reads it alike, so a script
    keyed on its marker, and the contract of the packet it names, answer it; a
    MESSAGE (send_message) is not a task."""
    packet = tmp_path / "packet.md"
    packet.write_text(f"# Task packet\n\n## Task\n\nLook.\n\n{output_contract(SCHEMA)}\n")
    message = spawn_message("explore.1", 1, 1, "explorer", str(tmp_path), str(packet))
    body = {"input": [user("<environment_context>…</environment_context>"), v2_task(message)]}
    events = MockModel().handle("/v1/responses", body)
    jsonschema.validate(json.loads(events[1]["item"]["content"][0]["text"]), SCHEMA)
    model = MockModel()
    model.script("crw-flow-op: explore.1/t1-a1", Reply("text", text="scripted"))
    assert model.handle("/v1/responses", body)[1]["item"]["content"][0]["text"] == "scripted"
    noted = {"input": [*body["input"], v2_task("A NOTE", header="MESSAGE")]}
    assert model.requests[-1].user_text.endswith(message)
    model.handle("/v1/responses", noted)
    assert model.requests[-1].user_text.endswith(message)


def test_a_client_that_goes_away_before_the_answer_leaves_no_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An interrupted turn drops its request: the mock writes nothing to stderr."""
    asked, answer = threading.Event(), threading.Event()

    def held(_: ModelRequest) -> Reply:
        asked.set()
        answer.wait(10)
        return valid()

    with MockModel(held) as model:
        port = int(model.url.split(":")[2].split("/")[0])
        client = socket.create_connection(("127.0.0.1", port))
        body = b"{}"
        head = f"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
        client.sendall(head.encode() + body)
        assert asked.wait(10)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # a reset, as codex's interrupt drops the stream
        answer.set()
    assert "Traceback" not in capsys.readouterr().err
    assert len(model.requests) == 1

"""The step files of the file step bus: names, members, atomic writes, retraction."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest

from crw.bus.steps import (
    list_closes,
    list_steps,
    packet_whole,
    read_bus,
    remove_close,
    retract_step,
    retract_torn,
    step_paths,
    write_close,
    write_step,
)
from crw.engine.answers.answer import digest
from crw.engine.run.rundir import RunDir
from crw.engine.steps.packet import marker, op, send_input_message, spawn_message
from crw.engine.steps.step_file import CloseStep, StepFile
from tests.oscalls import os_calls

STEP_MEMBERS = {
    "call",
    "k",
    "attempt",
    "op",
    "marker",
    "role",
    "action",
    "agent_type",
    "model",
    "reasoning_effort",
    "message",
    "packet",
    "workspace",
    "agent_id",
}
PACKET = "# Task\n\nFix the parser.\n"


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    run = RunDir.of(tmp_path / "state", "r1")
    run.create()
    return run


def spawn_step(run: RunDir, call: str = "build.1", k: int = 1, attempt: int = 1) -> StepFile:
    packet_path, _ = step_paths(run, call, k, attempt)
    return StepFile(
        call=call,
        k=k,
        attempt=attempt,
        op=op(call, k),
        marker=marker(call, k, attempt),
        role="executor",
        action="spawn",
        agent_type="executor",
        model="gpt-5.1-codex",
        reasoning_effort=None,
        message=spawn_message(call, k, attempt, "executor", "/work/P", str(packet_path)),
        packet=str(packet_path),
        workspace="/work/P",
        agent_id=None,
    )


def _files(run: RunDir) -> list[str]:
    return sorted(str(p.relative_to(run.root)) for p in run.steps.rglob("*") if p.is_file())


def test_step_writes_packet_and_step_file_under_the_run_directory(run: RunDir) -> None:
    """spec: STEP-21, STEP-22"""
    step = spawn_step(run)
    write_step(run, step, PACKET)
    assert _files(run) == ["steps/build.1/packet-t1-a1.md", "steps/build.1/t1-a1.json"]
    assert (run.steps / "build.1" / "packet-t1-a1.md").read_text() == PACKET
    assert Path(step.packet) == run.root / "steps/build.1/packet-t1-a1.md"


def test_step_file_holds_exactly_the_members(run: RunDir) -> None:
    """spec: STEP-21"""
    step = spawn_step(run, "review.2", k=2, attempt=3)
    write_step(run, step, PACKET)
    data = json.loads((run.steps / "review.2" / "t2-a3.json").read_text())
    assert set(data) == STEP_MEMBERS
    assert data["op"] == "review.2/t2" and data["marker"] == "review.2/t2-a3"
    assert data["action"] == "spawn" and data["agent_id"] is None
    assert data["reasoning_effort"] is None and data["model"] == "gpt-5.1-codex"
    assert StepFile.from_json(data) == step


def test_send_input_step_names_the_subagent(run: RunDir) -> None:
    """spec: STEP-12, STEP-27"""
    base = spawn_step(run, k=2)
    step = StepFile(
        **(
            base.to_json()
            | {
                "action": "send_input",
                "agent_id": "thread-7",
                "message": send_input_message(base.marker, "repair"),
            }
        )
    )
    write_step(run, step, PACKET)
    assert list_steps(run) == [step]
    assert list_steps(run)[0].agent_id == "thread-7"


def test_step_whose_marker_is_not_its_own_is_refused(run: RunDir) -> None:
    step = StepFile(**(spawn_step(run).to_json() | {"marker": "build.1/t1-a2"}))
    with pytest.raises(ValueError, match="marker"):
        write_step(run, step, PACKET)
    assert _files(run) == []


def test_close_step_is_one_file_naming_one_subagent(run: RunDir) -> None:
    """spec: STEP-28"""
    write_close(run, "build.1", 2, "thread-a")
    path = run.steps / "build.1" / "close-a2-thread-a.json"
    assert json.loads(path.read_text()) == {
        "call": "build.1",
        "attempt": 2,
        "action": "close",
        "agent_id": "thread-a",
    }


def test_two_closes_in_one_attempt_write_two_files(run: RunDir) -> None:
    """spec: STEP-29"""
    write_close(run, "build.1", 1, "thread-b")
    write_close(run, "build.1", 1, "thread-a")
    assert _files(run) == [
        "steps/build.1/close-a1-thread-a.json",
        "steps/build.1/close-a1-thread-b.json",
    ]
    assert list_closes(run) == [
        CloseStep("build.1", 1, "thread-a"),
        CloseStep("build.1", 1, "thread-b"),
    ]


def test_remove_close_removes_only_that_close(run: RunDir) -> None:
    write_close(run, "build.1", 1, "thread-a")
    write_close(run, "build.1", 1, "thread-b")
    remove_close(run, "build.1", 1, "thread-a")
    remove_close(run, "build.1", 1, "thread-a")
    assert list_closes(run) == [CloseStep("build.1", 1, "thread-b")]


def test_remove_close_unlinks_the_file_by_its_joined_name_without_a_path_object(
    run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`next` removes every close step it hands out (one a call): the path is
    joined as a string and unlinked, no Path made for it; an absent one is no error."""
    import crw.bus.steps as steps_module

    write_close(run, "build.1", 1, "thread-a")
    made: list[Any] = []

    def counted(*parts: Any) -> Path:
        made.append(parts)
        return Path(*parts)

    monkeypatch.setattr(steps_module, "Path", counted)
    unlinked = os_calls(monkeypatch, "unlink")
    remove_close(run, "build.1", 1, "thread-a")
    remove_close(run, "build.1", 1, "thread-a")
    assert made == [] and unlinked == ["unlink", "unlink"]
    assert list_closes(run) == []
    with pytest.raises(ValueError, match="path segment"):
        remove_close(run, "build.1", 1, "../escape")


def test_close_of_an_agent_id_that_is_no_path_segment_is_refused(run: RunDir) -> None:
    with pytest.raises(ValueError, match="path segment"):
        write_close(run, "build.1", 1, "../escape")


def test_retract_removes_the_step_file_and_keeps_the_packet(run: RunDir) -> None:
    """spec: session-formats "Retract"."""
    write_step(run, spawn_step(run), PACKET)
    retract_step(run, "build.1", 1, 1)
    assert _files(run) == ["steps/build.1/packet-t1-a1.md"]
    assert list_steps(run) == []
    retract_step(run, "build.1", 1, 1)  # a second retraction finds nothing to do


def test_writes_leave_no_temporary_file(run: RunDir) -> None:
    write_step(run, spawn_step(run), PACKET)
    write_step(run, spawn_step(run), PACKET)  # written again at the next poll
    write_close(run, "build.1", 1, "thread-a")
    assert not [p for p in run.steps.rglob("*") if p.name.startswith(".")]


def test_full_disk_leaves_no_partial_step_file(
    run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-30: a step that cannot be written is absent, not half there."""
    real_write = os.write

    def full_after_packet(fd: int, data: Any) -> int:
        if b'"marker"' in bytes(data):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr("crw.bus.steps.os.write", full_after_packet)
    with pytest.raises(OSError) as caught:
        write_step(run, spawn_step(run), PACKET)
    monkeypatch.undo()
    assert caught.value.errno == errno.ENOSPC
    assert _files(run) == ["steps/build.1/packet-t1-a1.md"]
    assert list_steps(run) == []


def test_failed_rewrite_keeps_the_step_file_written_before(
    run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    step = spawn_step(run)
    write_step(run, step, PACKET)

    def full(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("crw.bus.steps.os.write", full)
    with pytest.raises(OSError):
        write_step(run, step, "a new packet")
    monkeypatch.undo()
    assert list_steps(run) == [step]
    assert (run.steps / "build.1" / "packet-t1-a1.md").read_text() == PACKET
    assert _files(run) == ["steps/build.1/packet-t1-a1.md", "steps/build.1/t1-a1.json"]


def test_failed_fsync_leaves_no_file(run: RunDir, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr("crw.bus.steps.os.fsync", failing_fsync)
    with pytest.raises(OSError):
        write_close(run, "build.1", 1, "thread-a")
    monkeypatch.undo()
    assert _files(run) == []


def test_listing_is_sorted_and_skips_unreadable_files(run: RunDir) -> None:
    later = spawn_step(run, "build.1", k=2, attempt=1)
    first = spawn_step(run, "build.1", k=1, attempt=2)
    other = spawn_step(run, "architect.1")
    for step in (later, other, first):
        write_step(run, step, PACKET)
    call_dir = run.steps / "build.1"
    (call_dir / "t9-a1.json").write_text('{"call": "build.1", "k": 9')  # partial
    (call_dir / "t8-a1.json").write_text(json.dumps(later.to_json()))  # names another file
    (call_dir / ".t1-a2.json.tmp").write_text("{}")
    (call_dir / "close-a1-x.json").write_text('{"call": "build.1"}')
    missing = {key: value for key, value in first.to_json().items() if key != "role"}
    (call_dir / "t7-a1.json").write_text(json.dumps(missing))
    assert list_steps(run) == [other, first, later]
    assert list_closes(run) == []


def test_listing_a_run_without_steps_is_empty(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "nowhere")
    assert list_steps(run) == [] and list_closes(run) == []


@pytest.mark.parametrize(
    ("member", "value"),
    [("k", "1"), ("k", True), ("action", "close"), ("model", 5), ("extra", 1)],
)
def test_step_file_with_a_bad_member_is_not_read(member: str, value: Any) -> None:
    data = spawn_step(RunDir(Path("/r"))).to_json() | {member: value}
    with pytest.raises(ValueError):
        StepFile.from_json(data)


def _synced_paths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The path behind every fd the bus fsyncs, in order."""
    synced: list[str] = []

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))

    monkeypatch.setattr("crw.bus.steps.os.fsync", fsync)
    return synced


def test_a_spawn_step_makes_no_fsync(run: RunDir, monkeypatch: pytest.MonkeyPatch) -> None:
    """spec: STEP-21, ATT-21: the step_published row is durable before the files,
    and a resumed process writes an unbound step's files again from it (a packet
    that is not whole first): neither file nor directory is synced (3 fsyncs a
    first spawn before)."""
    synced = _synced_paths(monkeypatch)
    write_step(run, spawn_step(run), PACKET)
    assert synced == []
    assert _files(run) == ["steps/build.1/packet-t1-a1.md", "steps/build.1/t1-a1.json"]


def test_a_durable_spawn_step_syncs_its_packet_and_directories_not_its_step_file(
    run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-21, STEP-54: a packet a later packet names (a reviewed node's,
    which its fix calls continue) is durable: its data, its name in the call's
    directory and that directory in steps/; the step file is not synced."""
    synced = _synced_paths(monkeypatch)
    write_step(run, spawn_step(run), PACKET, durable=True)
    call_dir = run.steps / "build.1"
    tmp_packet = str(call_dir / ".packet-t1-a1.md.tmp")
    assert synced == [str(run.steps), tmp_packet, str(call_dir)]
    assert _files(run) == ["steps/build.1/packet-t1-a1.md", "steps/build.1/t1-a1.json"]


def test_a_close_step_of_a_call_without_a_step_makes_its_directory(run: RunDir) -> None:
    """spec: STEP-28"""
    write_close(run, "review.1", 1, "thread-b", durable=False)
    assert [(c.call, c.agent_id) for c in list_closes(run)] == [("review.1", "thread-b")]


def test_a_packet_is_whole_only_with_the_text_its_row_names(run: RunDir) -> None:
    """spec: ATT-21: what a resumed process checks before it goes on with a step
    no subagent was bound to: a packet missing, torn or other is not whole."""
    step = spawn_step(run)
    whole = digest(PACKET)
    assert not packet_whole(run, "build.1", 1, 1, whole)  # missing
    write_step(run, step, PACKET)
    assert packet_whole(run, "build.1", 1, 1, whole)
    packet, _ = step_paths(run, "build.1", 1, 1)
    packet.write_bytes(PACKET.encode()[: len(PACKET) // 2])  # torn
    assert not packet_whole(run, "build.1", 1, 1, whole)
    packet.write_bytes(b"\xff\xfe")  # not text
    assert not packet_whole(run, "build.1", 1, 1, whole)


def test_a_send_input_step_makes_no_fsync(run: RunDir, monkeypatch: pytest.MonkeyPatch) -> None:
    """spec: STEP-27, ATT-21: a send_input step has no packet, and its step file is
    written again by a resumed process: no fsync (2 before)."""
    write_step(run, spawn_step(run), PACKET)
    base = spawn_step(run, k=2)
    message = send_input_message(base.marker, "repair")
    step = StepFile(
        **(base.to_json() | {"action": "send_input", "agent_id": "t-7", "message": message})
    )
    synced = _synced_paths(monkeypatch)
    write_step(run, step, None)
    assert synced == []
    assert (
        StepFile.from_json(json.loads((run.steps / "build.1" / "t2-a1.json").read_text())) == step
    )


def test_a_step_files_members_are_its_fields_in_their_order(tmp_path: Path) -> None:
    """spec: session-formats "Step files": the file holds exactly the step's members,
    in the dataclass's order (what asdict gave; to_json builds the flat dict itself)."""
    import dataclasses

    step = spawn_step(RunDir(tmp_path))
    assert list(step.to_json().items()) == list(dataclasses.asdict(step).items())
    assert StepFile.from_json(step.to_json()) == step


def test_a_read_of_the_bus_opens_each_file_once_and_reads_it_in_one_read(
    run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-22. Each step or close file is read from one descriptor: its open,
    its fstat (the step's time), one read and its close; no buffered reader (whose
    open adds two fstats, an ioctl, two lseeks and a read that finds the end)."""
    write_step(run, spawn_step(run, "a.1"), "# Task\n")
    write_step(run, spawn_step(run, "b.1"), "# Task\n")
    write_close(run, "c.1", 1, "thread-c")
    calls: list[str] = []
    files: set[int] = set()  # the descriptors of step and close files
    for name in ("open", "fstat", "read", "close"):
        original = getattr(os, name)

        def counted(*args: Any, _name: str = name, _original: Any = original) -> Any:
            result = _original(*args)
            if _name == "open" and str(args[0]).endswith(".json"):
                files.add(result)
            if (result if _name == "open" else args[0]) in files:
                calls.append(_name)
                if _name == "close":
                    files.discard(args[0])
            return result

        monkeypatch.setattr(os, name, counted)
    bus = read_bus(run)
    assert [s.call for s in bus.steps] == ["a.1", "b.1"]
    assert [c.agent_id for c in bus.closes] == ["thread-c"]
    assert calls == ["open", "fstat", "read", "close"] * 3


def test_a_calls_bus_writes_build_no_path_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session call's step, its retraction, its reply and its close step are
    written through string paths: no path object is built (each was a dozen of
    pathlib's parses and joins, the run's largest pure-Python cost after Trio's)."""
    import pathlib

    from crw.bus import live
    from crw.bus.inbox import write_reply

    run = RunDir.of(tmp_path / "state", "r1")
    run.create()
    live.open_index(run, "t0")
    built: list[str] = []
    for name in ("_from_parts", "_from_parsed_parts"):
        made = getattr(pathlib.PurePath, name).__func__

        def counted(cls: Any, *args: Any, _made: Any = made, _name: str = name) -> Any:
            built.append(_name)
            return _made(cls, *args)

        monkeypatch.setattr(pathlib.PurePath, name, classmethod(counted))
    try:
        step = spawn_step(run, "build.1")
        built.clear()
        write_step(run, step, PACKET)
        retract_step(run, "build.1", 1, 1)
        write_reply(run, {"id": "aa11", "call": "build.1", "reply": "bound"})
        write_close(run, "build.1", 1, "thread-1", durable=False)
        assert built == []
    finally:
        live.close_index(run)
    assert sorted(os.listdir(run.steps / "build.1")) == [
        "close-a1-thread-1.json",
        "packet-t1-a1.md",
    ]


def test_a_new_calls_step_makes_its_directory_with_one_mkdir_and_no_stat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: STEP-21: the call's directory is made (its entry synced) by one
    `mkdir`, with no stat of it or of steps/ before; a later write finds it there."""
    run = RunDir.of(tmp_path / "state", "r1")
    run.create()
    made: list[str] = []
    statted: list[str] = []
    mkdir, stat = os.mkdir, os.stat

    def count_mkdir(path: Any, *args: Any, **kwargs: Any) -> None:
        made.append(os.path.basename(path))
        mkdir(path, *args, **kwargs)

    def count_stat(path: Any, *args: Any, **kwargs: Any) -> Any:
        statted.append(os.path.basename(path))
        return stat(path, *args, **kwargs)

    step = spawn_step(run, "build.1")
    monkeypatch.setattr(os, "mkdir", count_mkdir)
    monkeypatch.setattr(os, "stat", count_stat)
    write_step(run, step, PACKET)
    assert made == ["build.1"] and statted == []
    write_close(run, "build.1", 1, "thread-1")
    assert made == ["build.1"] and statted == []  # its step's directory holds it: no mkdir
    assert stat(run.steps / "build.1").st_mode & 0o777 == 0o700


def test_step_and_close_files_are_the_bytes_indented_json_wrote_without_its_python_encoder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """spec: STEP-21, STEP-28: a step file and a close file are
    `json.dumps(..., ensure_ascii=False, indent=2)` and a newline, byte for byte
    (text that is not ASCII, quotes, backslashes, control characters, nulls,
    numbers), written without json's pure-Python indenting encoder."""
    from crw.bus import steps

    step = StepFile(
        call="build.1",
        k=2,
        attempt=3,
        op=op("build.1", 2),
        marker=marker("build.1", 2, 3),
        role="executor",
        action="send_input",
        agent_type="executor",
        model=None,
        reasoning_effort="high",
        message='fix "this" \\ then\n\ttab \u00e9\u4e2d \U0001f600 \x01',
        packet="",
        workspace="/tmp/w",
        agent_id="thread-1",
    )
    values: list[dict[str, Any]] = [
        step.to_json(),
        CloseStep("build.1", 1, "thread-1").to_json(),
        {"n": 1.5, "b": True},
        {"nested": {"a": [1, None]}},
        {},
    ]
    expected = [(json.dumps(v, ensure_ascii=False, indent=2) + "\n").encode() for v in values]
    indenting: list[int] = []
    make = json.encoder._make_iterencode  # type: ignore[attr-defined]

    def counted(*args: Any, **kwargs: Any) -> Any:
        indenting.append(1)
        return make(*args, **kwargs)

    monkeypatch.setattr(json.encoder, "_make_iterencode", counted)
    assert [steps._encode(v) for v in values] == expected
    assert len(indenting) == 2  # the float and bool members, and the nested value, alone


def test_a_step_whose_packet_is_not_whole_is_retracted_before_a_resume_hands_it_out(
    run: RunDir,
) -> None:
    """spec: ATT-21, STEP-21: a power loss kept a step file and tore or took its
    unsynced packet: the file is retracted, so no subagent is spawned on that
    packet (its call writes both again from its row); a step whose packet is whole
    keeps its file."""
    torn, gone, whole = (spawn_step(run, call) for call in ("a.1", "b.1", "c.1"))
    for step in (torn, gone, whole):
        write_step(run, step, PACKET)
    step_paths(run, "a.1", 1, 1)[0].write_text(PACKET[:5])
    step_paths(run, "b.1", 1, 1)[0].unlink()
    rows = [
        {"call": s.call, "k": 1, "attempt": 1, "marker": s.marker, "packet_digest": digest(PACKET)}
        for s in (torn, gone, whole)
    ]
    assert retract_torn(run, rows) == ["a.1/t1-a1", "b.1/t1-a1"]
    assert list_steps(run) == [whole]

"""`crw flow next`'s reader: each journal row decoded and replayed once, however
many times --wait reads the run again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from crw.cli.owner import next as next_module
from crw.cli.owner.store_pairs import store_pairs
from crw.engine.run.rundir import RunDir
from crw.journal import snapshot
from crw.journal.log import encode_batch, encode_body
from crw.journal.replay import replay
from crw.journal.rows import Completed, Ended, Prepared, Started, StepPublished
from tests.journal.decoding import count_decoded_lines
from tests.journal.test_snapshot_ended import calls_alive
from tests.oscalls import os_calls


def _append(run: RunDir, seq: int, rows: list[Any]) -> int:
    with run.journal.open("ab") as journal:
        journal.write(encode_batch(seq, "2026-11-30T00:00:00Z", [encode_body(r) for r in rows]))
    return seq + len(rows)


def test_reads_again_decode_and_replay_only_the_rows_appended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-NEXT-1. A --wait loop's reads touch each row once: what the journal
    appended since the last read is decoded and folded on, nothing before it."""
    run = RunDir(tmp_path / "run")
    run.create()
    decoded = count_decoded_lines(monkeypatch)
    folded: list[int] = []

    def count_rows(rows: Any, into: Any = None) -> Any:
        rows = list(rows)
        folded.append(len(rows))
        return replay(rows) if into is None else replay(rows, into)

    monkeypatch.setattr(next_module, "replay", count_rows)
    monkeypatch.setattr(snapshot, "replay", count_rows)
    seq = _append(run, 1, [Started(backend="session", process="p", pid=1)])
    reader = next_module._Reader(run, tmp_path, ("r", ""))
    for n in range(20):
        call = f"n{n}.1"
        seq = _append(run, seq, [Prepared(call=call, node=f"n{n}", role="executor")])
        step = StepPublished(call=call, k=1, attempt=1, op=f"{call}/t1", action="spawn")
        seq = _append(run, seq, [step])
        read = reader.read()
        assert read.run_state.calls[call].state == "waiting_session"
        assert reader.read().run_state is read.run_state  # unchanged: nothing read again
    assert read.run_state.last_seq == seq - 1 == 41
    assert len(decoded) == 41
    assert sum(folded) == 41


def test_a_state_without_a_role_store_answers_undecided_pairs_without_pydantic(
    tmp_path: Path,
) -> None:
    """spec: CMD-NEXT-35. The store's pairs of a state directory with no roles.toml
    are every role undecided, read without importing the role store's models."""
    from crw.engine.config.roles import RoleTable

    assert store_pairs(tmp_path) == RoleTable.undecided().role_pairs()
    probe = (
        "import sys; from pathlib import Path; from crw.cli.owner.store_pairs import store_pairs; "
        f"store_pairs(Path({str(tmp_path)!r})); print('pydantic' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


def test_a_read_lists_each_call_directory_of_the_bus_once_without_a_stat_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-NEXT-1. A run keeps a steps/ directory per call it ever ran, and a
    --wait loop reads the bus every poll: one read lists steps/ and each call's
    directory once for both its steps and its close steps, and stats none of them."""
    import os

    from crw.bus import steps as bus

    run = RunDir(tmp_path / "run")
    run.create()
    _append(run, 1, [Started(backend="session", process="p", pid=1)])
    for n in range(30):
        (run.steps / f"n{n}.1").mkdir(parents=True)
        (run.steps / f"n{n}.1" / "packet-t1-a1.md").write_text("# Task\n")
    bus.write_close(run, "n3.1", 1, "thread-3")
    listed: list[str] = []
    stats: list[str] = []
    listdir, scandir, stat = os.listdir, os.scandir, os.stat

    def count_listdir(path: Any = ".") -> Any:
        listed.append(str(path))
        return listdir(path)

    def count_scandir(path: Any = ".") -> Any:
        listed.append(str(path))
        return scandir(path)

    def count_stat(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(run.steps) in str(path):
            stats.append(str(path))
        return stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "listdir", count_listdir)
    monkeypatch.setattr(os, "scandir", count_scandir)
    monkeypatch.setattr(os, "stat", count_stat)
    read = next_module._Reader(run, tmp_path, ("r", "")).read()
    assert [c.agent_id for c in read.closes] == ["thread-3"]
    assert read.steps == []
    on_bus = [path for path in listed if str(run.steps) in path]
    assert len(on_bus) == 1 + 30
    assert len(set(on_bus)) == len(on_bus)
    assert stats == []


def test_next_of_an_ended_run_answers_from_its_snapshot_without_building_a_call(
    tmp_path: Path,
) -> None:
    """spec: CMD-NEXT-1. The answer about a finished run (its state, ended_state,
    slots, hint) names no call: `next` reads it from the snapshot without building
    one of the run's calls (10,000 in a run of 10,000 calls)."""
    from crw.engine.owner.next_view import next_view

    run = RunDir(tmp_path / "run")
    run.create()
    rows: list[Any] = [Started(backend="app-server", process="p", pid=1)]
    for n in range(30):
        rows += [Prepared(call=f"n{n}.1", node=f"n{n}", role="executor")]
        rows += [Completed(call=f"n{n}.1", result={"n": n})]
    _append(run, 1, [*rows, Ended(status="completed", state={"n0": "completed"})])
    snapshot.replay_journal(run.journal)
    before = calls_alive()
    read = next_module._Reader(run, tmp_path, ("r", "")).read()
    view = next_view(read)
    assert view.state == "ended" and view.ended_state == {"n0": "completed"}
    assert calls_alive() == before


def test_a_store_that_reads_the_holders_pins_is_compared_without_pydantic(
    tmp_path: Path,
) -> None:
    """spec: CMD-NEXT-37. A holder's pins are compared with the store on every read;
    a plain store that reads the pins is read without the role store's models, and
    one that reads other pairs by the role store itself."""
    from crw.engine.config.roles import load_roles

    (tmp_path / "roles.toml").write_text('[executor]\nmodel = "m1"\neffort = "high"\n')
    pins = load_roles(tmp_path / "roles.toml").role_pairs()
    assert store_pairs(tmp_path, pins) == pins
    other = {**pins, "executor": {"agent_type": "executor"}}
    assert store_pairs(tmp_path, other) == pins
    probe = (
        "import sys, json; from pathlib import Path; "
        "from crw.cli.owner.store_pairs import store_pairs; "
        f"store_pairs(Path({str(tmp_path)!r}), json.loads({json.dumps(json.dumps(pins))})); "
        "print('pydantic' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


def test_a_read_takes_each_step_files_time_from_the_file_it_read_without_a_stat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-NEXT-1. The owner reads the bus at every poll of --wait: each step
    file is opened once, and its mtime (the step's age, for steps a new holder
    publishes again) is the open file's, not a stat of its path per step."""
    import os

    from crw.bus import steps as bus
    from tests.bus.test_steps import spawn_step

    run = RunDir(tmp_path / "run")
    run.create()
    _append(run, 1, [Started(backend="session", process="p", pid=1)])
    written = [spawn_step(run, f"n{n}.1") for n in range(3)]
    for step in written:
        bus.write_step(run, step, "# Task\n")
    stats: list[str] = []
    stat = os.stat

    def count_stat(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(run.steps) in str(path):
            stats.append(str(path))
        return stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", count_stat)
    read = next_module._Reader(run, tmp_path, ("r", "")).read()
    assert read.steps == written
    assert stats == []
    monkeypatch.setattr(os, "stat", stat)
    assert read.step_times == {
        (s.call, s.k, s.attempt): bus.step_paths(run, s.call, s.k, s.attempt)[1].stat().st_mtime_ns
        for s in written
    }


def test_next_again_in_one_process_decodes_only_the_rows_appended_since_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-NEXT-1. An owner that calls `next` again and again in one process
    folds on the journal its last `next` read: no snapshot loaded, no row decoded
    twice; a journal replaced since (another inode) is read cold."""
    run = RunDir(tmp_path / "run")
    run.create()
    monkeypatch.setattr(next_module, "_folds", {})
    seq = _append(run, 1, [Started(backend="session", process="p", pid=1)])
    cold: list[int] = []
    read_fold = snapshot.read_fold

    def count_cold(*args: Any, **kwargs: Any) -> Any:
        cold.append(1)
        return read_fold(*args, **kwargs)

    monkeypatch.setattr(next_module, "read_fold", count_cold)
    decoded = count_decoded_lines(monkeypatch)
    for n in range(5):
        call = f"n{n}.1"
        seq = _append(run, seq, [Prepared(call=call, node=f"n{n}", role="executor")])
        reader = next_module._Reader(run, tmp_path, ("r", ""))
        assert reader.read().run_state.calls[call].state == "prepared"
        reader.keep_fold()
    assert (len(cold), len(decoded)) == (1, 6)
    copy = run.journal.with_name("copy")
    copy.write_bytes(run.journal.read_bytes())
    copy.replace(run.journal)  # the same rows under another inode
    reader = next_module._Reader(run, tmp_path, ("r", ""))
    assert list(reader.read().run_state.calls) == [f"n{n}.1" for n in range(5)]
    assert len(cold) == 2


def test_the_runs_owner_is_read_from_run_json_with_one_open_and_its_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-NEXT-1. run.json's owner is read raw (an open, the reads, a close)
    at each `next`, not through a buffered reader."""
    run = RunDir(tmp_path / "run")
    run.create()
    run.run_json.write_text(json.dumps({"owner": "thread-o"}), encoding="utf-8")
    calls = os_calls(monkeypatch, "open", "read", "close")
    assert next_module._owner(run) == "thread-o"
    assert calls == ["open", "read", "read", "close"]


def test_next_again_reads_the_journals_new_bytes_raw(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec: CMD-NEXT-1. A `next` that folds on the journal its last `next` read
    reads the bytes appended with one open, a pread and the pread that finds the
    end (no buffered reader's fstats, ioctl and lseeks)."""
    import os

    run = RunDir(tmp_path / "run")
    run.create()
    monkeypatch.setattr(next_module, "_folds", {})
    seq = _append(run, 1, [Started(backend="session", process="p", pid=1)])
    reader = next_module._Reader(run, tmp_path, ("r", ""))
    reader.read()
    reader.keep_fold()
    _append(run, seq, [Prepared(call="n0.1", node="n0", role="executor")])
    opened: list[str] = []
    preads: list[int] = []
    real_open, real_pread = os.open, os.pread

    def counted_open(path: Any, *args: Any) -> Any:
        if str(path) == str(run.journal):
            opened.append(str(path))
        return real_open(path, *args)

    def counted_pread(fd: int, n: int, offset: int) -> bytes:
        preads.append(offset)
        return real_pread(fd, n, offset)

    monkeypatch.setattr(os, "open", counted_open)
    monkeypatch.setattr(os, "pread", counted_pread)
    read = next_module._Reader(run, tmp_path, ("r", "")).read()
    assert list(read.run_state.calls) == ["n0.1"]
    assert len(opened) == 1 and len(preads) == 2

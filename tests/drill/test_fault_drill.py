"""The fault drill: real processes, a host that goes away mid-run and comes back.

A `crw host sim serve` process is the host and the owner process
(`tests.drill.owner`) talks to it directly, as Codex's owner thread shares its
own host. The run process reaches the host through a proxy on another unix
socket that the drill controls: the host "goes away" when the proxy stops (its
socket is removed and every connection through it is cut) and "comes back" when
it listens again on the same path. A sim restart would lose every thread it
holds (it keeps its state in memory), which no real host does to a live owner;
the proxy takes away exactly what a host that goes away takes: the run's
connection, while the turns on the host go on.

The run must pause (paused host_unavailable, its locks let go, no call held),
its process waiting for the host; `status` and `next` must say so and start
nothing, and once the host is back the run must go on by itself, as `crw flow
resume --detach` goes on, with the calls in place: the run completes with no
turn started twice for one marker, and no `resume` typed.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crw.engine.run.host_wait import waiting
from crw.engine.run.locks import held_process_tokens
from crw.engine.run.rundir import RunDir
from tests.drill.test_crash_drill import CALL, Drill, alive, drill_at, served, wait_until

SLOW_BUILD = {"match": {"marker": f"{CALL}/*"}, "behaviour": {"seconds": 2.0}}


class Proxy:
    """Forwards every connection on `listen` to the unix socket `target`."""

    def __init__(self, listen: Path, target: Path) -> None:
        self.listen, self.target = listen, target
        self.server: socket.socket | None = None
        self.open: list[socket.socket] = []
        self.lock = threading.Lock()

    def start(self) -> None:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(self.listen))
        server.listen(16)
        server.settimeout(0.05)
        self.server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def stop(self) -> None:
        """The host goes away: no more connections, and every one open is cut."""
        self.server = None  # its accept loop closes it
        self.listen.unlink(missing_ok=True)
        with self.lock:
            for sock in self.open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self.open.clear()

    def _accept(self, server: socket.socket) -> None:
        while self.server is server:
            try:
                client, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(str(self.target))
            with self.lock:
                self.open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()
        server.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    for sock in (source, sink):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    source.close()  # each pump closes the socket it reads; the other pump, its peer


class FaultDrill(Drill):
    """A drill whose run reaches the host through `proxy`."""

    proxy: Proxy

    def start_through_proxy(self) -> None:
        self.proxy = Proxy(self.root / "proxy.sock", self.socket)
        self.proxy.start()
        self.host("sim/script", SLOW_BUILD)
        self.start_run(self.proxy.listen)
        self.start_owner()

    def reap(self) -> None:
        """The drill's processes by pid, then the proxy if it started."""
        super().reap()
        if hasattr(self, "proxy"):
            self.proxy.stop()

    def start_run(self, host: Path) -> RunDir:
        out = self.crw.start(
            str(self.workflow), "--owner", self.owner_thread, "--host", f"unix:{host}"
        )
        assert out.code == 0, out.stderr
        self.run = RunDir(Path(out.json()["run_dir"]))
        return self.run

    def start_owner(self) -> None:
        assert self.run is not None
        self.owner = self.spawn(
            "tests.drill.owner", self.run.id, "--state", str(self.crw.state),
            "--socket", str(self.socket), "--owner", self.owner_thread,
            "--control", str(self.control),
        )  # fmt: skip

    def flow(self, *args: str) -> Any:
        assert self.run is not None
        out = self.crw("flow", *args, self.run.id, "--state", str(self.crw.state), "--json")
        assert out.code == 0, out.stderr
        return out.json()


@pytest.fixture
def drill(tmp_path: Path) -> Iterator[FaultDrill]:
    with served(drill_at(FaultDrill, tmp_path)) as made:
        yield made


def test_a_host_that_goes_away_mid_run_pauses_it_and_it_goes_on_in_place_when_back(
    drill: FaultDrill,
) -> None:
    """spec: CMD-NEXT-2, CMD-NEXT-20 (a session run: the same wait as the App
    Server drill's, tests/drill/test_host_back_drill.py)"""
    drill.start_through_proxy()
    run = drill.run
    assert run is not None
    wait_until(
        f"{CALL}'s turn starts",
        lambda: any(r["row"] == "turn_started" and r.get("call") == CALL for r in drill.rows()),
    )
    drill.proxy.stop()
    first = next(r for r in drill.rows() if r["row"] == "started")
    wait_until("the run process waits for its host", lambda: waiting(run) is not None)
    wait_until("its process lock is let go", lambda: held_process_tokens(run) == [])
    paused = drill.rows()
    assert paused[-1]["row"] == "paused" and paused[-1]["reason"] == "host_unavailable"
    assert "held" not in {r["row"] for r in paused}
    assert [r["row"] for r in paused if r.get("call") == CALL][-1] == "turn_started"

    status = drill.flow("status")
    assert status["state"] == "paused" and status["holder_pid"] is None
    assert status["paused"]["reason"] == "host_unavailable"
    assert status["host_wait"]["pid"] == first["pid"] and alive(first["pid"])
    answer = drill.flow("next")
    assert answer["state"] == "paused" and "resumed_pid" not in answer
    assert "host_unavailable" in answer["hint"] and "crw flow resume" in answer["hint"]
    assert drill.rows() == paused  # neither next nor the owner's started a process

    drill.proxy.start()  # no resume: the waiting process launches it
    rows = drill.finish()
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    pids = [r["pid"] for r in rows if r["row"] == "started"]
    assert pids[0] == first["pid"] and len(pids) == 2 and pids[1] != pids[0]
    assert rows[len(paused)]["row"] == "started"  # what a resume writes first
    wait_until("the waiting process is gone", lambda: not alive(first["pid"]))
    after = rows[len(paused) :]
    assert [r["row"] for r in after if r.get("call") == CALL] == ["completed"]  # in place
    assert "held" not in {r["row"] for r in rows}
    turns, _ = drill.subagent_turns()
    twice = {marker: n for marker, n in turns.items() if n > 1}
    assert twice == {}, f"turns started twice for one marker: {twice}"


def test_a_reply_that_cannot_be_written_pauses_the_run_with_one_line(drill: FaultDrill) -> None:
    """The run process stops with one line in run.log (no traceback, no group),
    the run is paused write_failed in status and next, nothing relaunches it, and
    once the directory is back a resume finishes the run. spec: CMD-NEXT-20"""
    run = drill.start_run(drill.socket)
    run.replies.rmdir()
    run.replies.write_text("")  # replies/ is a file: no reply can be written under it
    drill.start_owner()
    wait_until("the run pauses", lambda: drill.rows()[-1]["row"] == "paused")
    first = next(r for r in drill.rows() if r["row"] == "started")
    wait_until("the run process is gone", lambda: not alive(first["pid"]))
    paused = drill.rows()
    assert paused[-1]["reason"] == "write_failed" and "(EEXIST)" in paused[-1]["error"]
    assert paused[-1]["file"] == str(run.replies)
    log = run.log.read_text()
    assert "Traceback" not in log and "ExceptionGroup" not in log
    [line] = log.splitlines()
    assert line.startswith(f"crw: error: run {run.id} paused (write_failed): {run.replies}: ")
    assert "put back the directory" in line
    assert line.endswith(f"then go on with: crw flow resume {run.id} --detach")
    status = drill.flow("status")
    assert status["state"] == "paused" and status["paused"]["reason"] == "write_failed"
    assert "write_failed" in drill.flow("next")["hint"]
    assert drill.rows() == paused  # nothing relaunched it

    run.replies.unlink()
    run.replies.mkdir(mode=0o700)
    drill.flow("resume", "--detach")
    rows = drill.finish()
    assert rows[-1]["row"] == "ended" and rows[-1]["status"] == "completed"
    assert rows[: len(paused)] == paused
    assert "held" not in {r["row"] for r in rows}
    turns, _ = drill.subagent_turns()
    assert {marker: n for marker, n in turns.items() if n > 1} == {}

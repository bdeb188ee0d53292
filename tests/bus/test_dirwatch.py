"""A watch waited on by a thread keeps its inotify descriptor when it is closed:
closing a descriptor that held a watch waits for the kernel (~10 ms), so
`crw flow dispatched`'s reply would come that much later at each report."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from crw.bus import dirwatch
from crw.bus.dirwatch import DirWatch


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """The inotify descriptors made from now on (none kept from earlier tests);
    those kept are closed after the test."""
    idle: list[Any] = []
    monkeypatch.setattr(dirwatch, "_idle", idle)
    monkeypatch.setattr(dirwatch, "_kept", {}, raising=False)
    found = dirwatch._inotify()
    assert found is not None, "inotify is needed here"
    made: list[Any] = []

    def counted(**kwargs: Any) -> Any:
        made.append(found[0](**kwargs))
        return made[-1]

    monkeypatch.setattr(dirwatch, "_inotify", lambda: (counted, *found[1:]))
    yield made
    for inotify in idle:
        inotify.close()


def _arrive(directory: Path, name: str) -> None:
    (directory / f".{name}.tmp").write_text("{}")
    (directory / f".{name}.tmp").rename(directory / name)


def test_a_closed_watch_keeps_its_descriptor_for_the_next_one(
    tmp_path: Path, made: list[Any]
) -> None:
    """One descriptor for watches one after another, never closed; a file that
    arrived under the earlier watch is not the later one's."""
    first = DirWatch.open(tmp_path)
    assert first is not None
    _arrive(tmp_path, "a.json")
    first.close()
    second = DirWatch.open(tmp_path)
    assert second is not None
    assert second.arrivals(0) == frozenset()
    _arrive(tmp_path, "b.json")
    assert second.arrivals(5.0) == frozenset({"b.json"})
    second.close()
    assert len(made) == 1 and not made[0].closed


def test_watches_at_once_have_a_descriptor_each(tmp_path: Path, made: list[Any]) -> None:
    """Waits at the same time (the owner's reports of one answer) each see every
    arrival on their own descriptor."""
    watches = [DirWatch.open(tmp_path) for _ in range(3)]
    _arrive(tmp_path, "a.json")
    assert [w.arrivals(5.0) for w in watches if w is not None] == [frozenset({"a.json"})] * 3
    for watch in watches:
        assert watch is not None
        watch.close()
    again = DirWatch.open(tmp_path)
    assert again is not None
    again.close()
    assert len(made) == 3  # the next one takes a kept descriptor


async def test_a_watch_a_trio_task_waited_on_is_closed(tmp_path: Path, made: list[Any]) -> None:
    """The run's inbox waits in Trio, which registered the descriptor: it is
    closed, not kept."""
    watch = DirWatch.open(tmp_path)
    assert watch is not None
    _arrive(tmp_path, "a.json")
    with trio.fail_after(5):
        await watch.wait(5.0)
    watch.close()
    assert made[0].closed and dirwatch._idle == []


def test_watches_one_after_another_of_one_directory_set_one_watch(
    tmp_path: Path, made: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An owner reports one step after another: the watch of replies/ is set once
    and kept with its descriptor, not set and removed at each report; a wake
    costs a poll and a read. A directory that went and came again is watched
    anew."""
    import os
    import select

    counted: list[str] = []
    real_read, real_poll = os.read, select.poll

    def read(fd: int, n: int) -> bytes:
        counted.append("read")
        return real_read(fd, n)

    class Poll:
        def __init__(self) -> None:
            self._poll = real_poll()

        def register(self, *args: Any) -> None:
            self._poll.register(*args)

        def poll(self, timeout: int) -> Any:
            counted.append("poll")
            return self._poll.poll(timeout)

    monkeypatch.setattr(os, "read", read)
    monkeypatch.setattr(select, "poll", Poll)
    for n in range(3):
        watch = DirWatch.open(tmp_path)
        assert watch is not None
        _arrive(tmp_path, f"{n}.json")
        assert watch.arrivals(5.0) == frozenset({f"{n}.json"})
        watch.close()
    inotify = made[0]
    watches: list[int] = []
    add_watch, rm_watch = inotify.add_watch, inotify.rm_watch

    def add(*args: Any) -> Any:
        watches.append(1)
        return add_watch(*args)

    def rm(*args: Any) -> Any:
        watches.append(-1)
        return rm_watch(*args)

    inotify.add_watch, inotify.rm_watch = add, rm
    counted.clear()
    watch = DirWatch.open(tmp_path)
    assert watch is not None
    _arrive(tmp_path, "a.json")
    assert watch.arrivals(5.0) == frozenset({"a.json"})
    watch.close()
    assert (watches, counted, len(made)) == ([], ["read", "poll", "read"], 1)
    for name in os.listdir(tmp_path):
        (tmp_path / name).unlink()
    tmp_path.rmdir()
    tmp_path.mkdir()
    watch = DirWatch.open(tmp_path)
    assert watch is not None
    _arrive(tmp_path, "b.json")
    assert watch.arrivals(5.0) == frozenset({"b.json"})
    watch.close()
    assert watches == [-1, 1]


def test_a_kept_watch_takes_the_files_that_arrived_while_idle_without_decoding_their_names(
    tmp_path: Path, made: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kept descriptor queues every file that arrives while it is idle (every
    other report's reply): the next `open` takes them without decoding an event
    (only a removal of the watch matters then), and the reused watch reports only
    what arrives after it."""
    import inotify_simple

    first = DirWatch.open(tmp_path)
    assert first is not None
    first.close()
    for n in range(5):
        _arrive(tmp_path, f"{n}.json")
    decoded: list[bytes] = []
    parse = inotify_simple.parse_events

    def counted(data: bytes) -> Any:
        decoded.append(data)
        return parse(data)

    monkeypatch.setattr(inotify_simple, "parse_events", counted)
    again = DirWatch.open(tmp_path)
    assert again is not None
    assert decoded == []
    _arrive(tmp_path, "mine.json")
    assert again.arrivals(5.0) == frozenset({"mine.json"})
    again.close()
    assert len(made) == 1


def test_a_kept_watch_moved_to_another_directory_leaves_no_event_of_the_old_one(
    tmp_path: Path, made: list[Any]
) -> None:
    """A kept descriptor that now watches another directory (the reply of another
    run) holds no event of its old watch: its removal's IN_IGNORED would wake the
    new watch's first wait for nothing, and dispatched would look once more."""
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    watch = DirWatch.open(first)
    assert watch is not None
    watch.close()
    moved = DirWatch.open(second)
    assert moved is not None
    assert len(made) == 1
    assert dirwatch._drain(made[0]) == []
    _arrive(second, "reply.json")
    assert moved.arrivals(5.0) == frozenset({"reply.json"})
    moved.close()


_NO_FIND_LIBRARY = """
import ctypes.util, os, sys
from pathlib import Path

def refused(name):
    raise AssertionError(f"find_library({name!r}) ran (ldconfig -p in a child process)")

ctypes.util.find_library = refused
directory, mode = Path(sys.argv[1]), sys.argv[2]
if mode == "follow":  # `crw flow show --follow`'s wake, the web view's
    from crw.cli.read.follow import RunWake
    from crw.engine.run.rundir import RunDir

    with RunWake(RunDir(directory)):
        print("['watched']")
    sys.exit(0)
from crw.bus.dirwatch import DirWatch

watch = DirWatch.open(directory)
assert watch is not None
(directory / ".r.json.tmp").write_text("{}")
os.rename(directory / ".r.json.tmp", directory / "r.json")
print(sorted(watch.arrivals(5.0)))
"""


@pytest.mark.parametrize(("mode", "shown"), [("dirwatch", "['r.json']"), ("follow", "['watched']")])
def test_a_watch_loads_inotify_without_find_library(tmp_path: Path, mode: str, shown: str) -> None:
    """inotify_simple's own first watch loads libc with `find_library("c")`, which
    runs `/sbin/ldconfig -p` in a child process (at the first watch of every
    `crw flow dispatched`, and of the run process): a fresh process whose
    find_library fails still watches (a directory's arrivals, and a run's wake)."""
    done = subprocess.run(
        [sys.executable, "-c", _NO_FIND_LIBRARY, str(tmp_path), mode],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == shown

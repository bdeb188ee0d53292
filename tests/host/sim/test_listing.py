"""thread/list on a host with many threads: a page of the newest costs its own
length, not the host's every thread (a run looks at the newest page each call)."""

from __future__ import annotations

import pytest

from crw.host.sim import state as state_module
from crw.host.sim.items import user_message
from crw.host.sim.state import SimState, Thread, Turn, list_threads


def host_with(threads: int) -> SimState:
    state = SimState()
    for i in range(threads):
        state.new_thread(f"t{i:04d}", {"cwd": "/w"}, path=f"/r/{i}", wall=0.0)
    return state


def test_a_page_of_the_newest_reads_the_page_and_one_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = host_with(500)
    read: list[str] = []

    def counting(thread: Thread) -> str:
        read.append(thread.id)
        return "subAgentThreadSpawn" if thread.is_subagent else "vscode"

    monkeypatch.setattr(Thread, "source_kind", property(counting))
    first = list_threads(state, {"limit": 10})
    assert [t["id"] for t in first["data"]] == [f"t{i:04d}" for i in range(499, 489, -1)]
    assert first["nextCursor"] == "10"
    assert len(read) == 11


def test_pages_cover_every_thread_newest_first_and_the_last_has_no_cursor() -> None:
    state = host_with(25)
    seen: list[str] = []
    cursor = None
    while True:
        answer = list_threads(state, {"limit": 10} | ({"cursor": cursor} if cursor else {}))
        seen += [t["id"] for t in answer["data"]]
        cursor = answer["nextCursor"]
        if cursor is None:
            break
    assert seen == [f"t{i:04d}" for i in range(24, -1, -1)]
    assert list_threads(state, {"limit": 25})["nextCursor"] is None
    assert len(list_threads(state, {"cursor": "20"})["data"]) == 5


def test_a_thread_s_preview_reads_each_turn_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The preview is the text of the first turn that has one: a turn without text
    and the turn with it are each read once (each thread of a page shows it)."""
    state = host_with(1)
    thread = state.threads["t0000"]
    silent, spoken, later = (Turn(id=name, started_at=0) for name in ("a", "b", "c"))
    spoken.items.append(user_message("first words"))
    later.items.append(user_message("later words"))
    thread.turns = [silent, spoken, later]
    read: list[str] = []

    def counting(turn: Turn) -> str:
        read.append(turn.id)
        return real(turn)

    real = state_module.turn_text
    monkeypatch.setattr(state_module, "turn_text", counting)
    assert thread.preview() == "first words"
    assert read == ["a", "b"]


def test_a_thread_s_preview_is_found_once_for_every_page_that_shows_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run lists the newest subagents again at each look: a thread's preview is
    read from its turns once, not once a page (the turns before its text ended
    without one, and a turn's first message never changes); a thread whose turns
    are replaced (a fork's) is read again, and one with no text yet each time."""
    state = host_with(3)
    first, silent = state.threads["t0000"], state.threads["t0001"]
    spoken = Turn(id="s", started_at=0)
    spoken.items.append(user_message("crw-flow-op: a.1/t1-a1"))
    first.turns = [spoken]
    silent.turns = [Turn(id="q", started_at=0)]
    read: list[str] = []

    def counting(turn: Turn) -> str:
        read.append(turn.id)
        return real(turn)

    real = state_module.turn_text
    monkeypatch.setattr(state_module, "turn_text", counting)
    for _ in range(3):
        page = list_threads(state, {"limit": 10})["data"]
        assert [t["preview"] for t in page] == ["", "", "crw-flow-op: a.1/t1-a1"]
    assert read == ["q", "s", "q", "q"]
    later = Turn(id="l", started_at=0)
    later.items.append(user_message("a fork's own"))
    first.turns = [later]
    assert first.preview() == "a fork's own"

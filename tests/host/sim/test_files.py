"""The `writes` and `commit` behaviours: a simulated subagent edits and commits
files in its workspace before it answers, on real git repositories in tmp dirs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pygit2
import pytest
import trio
import trio.testing

from crw.engine.steps.packet import spawn_message
from crw.host.sim.behaviour import Behaviour
from crw.host.sim.files import (
    SIM_EMAIL,
    SIM_NAME,
    FileEffectError,
    FileEffects,
    apply,
    workspace_of,
)
from crw.host.sim.state import RpcError
from tests.host.sim.support import SCHEMA, RawClient, RpcFailure, connected, task_text, text_input
from tests.workspace.gitrepo import commit_at, files_at, head_of, make_repo, open_repo, status_of

MARKER = "build.1/t1-a1"

# -- reading the script


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("/etc/passwd", "is absolute"),
        ("../outside.txt", "leaves the workspace"),
        ("src/../../outside.txt", "leaves the workspace"),
        (".git/config", "inside .git"),
        ("src/.git/x", "inside .git"),
        (".GIT/config", "inside .git"),
        ("src/.Git/hooks/pre-commit", "inside .git"),
        (".git./config", "inside .git"),
        (".git /config", "inside .git"),
        (".git::$INDEX_ALLOCATION/config", "inside .git"),
        ("GIT~1/config", "inside .git"),
        (".g\u200cit/config", "inside .git"),
        (".", "names the workspace itself"),
        ("", "non-empty"),
    ],
)
def test_a_path_outside_the_workspace_is_refused_when_scripted(path: str, words: str) -> None:
    with pytest.raises(RpcError) as raised:
        Behaviour.from_wire({"writes": {path: "x"}})
    assert raised.value.code == -32600
    assert words in raised.value.message
    assert repr(path) in raised.value.message


def test_writes_and_commit_are_read_in_order_and_checked() -> None:
    behaviour = Behaviour.from_wire(
        {"writes": {"a.txt": "a", "src/../b.txt": None}, "commit": "msg"}
    )
    assert behaviour.files == FileEffects((("a.txt", "a"), ("src/../b.txt", None)), "msg")
    for bad in ({"writes": ["a"]}, {"writes": {"a": 1}}, {"commit": ""}, {"commit": 3}):
        with pytest.raises(RpcError):
            Behaviour.from_wire(bad)


def test_the_workspace_is_the_one_the_newest_message_names_else_the_cwd() -> None:
    spawn = spawn_message("build.1", 1, 1, "executor", "/runs/p one", "/runs/packet.md")
    packet = "## Where you work\n\nYour workspace is the absolute path `/runs/q`. Work only"
    assert workspace_of([spawn], "/owner") == Path("/runs/p one")
    assert workspace_of([spawn, "crw-flow-op: build.1/t2-a1\nfix it"], "/owner") == Path(
        "/runs/p one"
    )
    assert workspace_of([spawn, packet], "/owner") == Path("/runs/q")
    assert workspace_of(["no workspace named"], "/owner") == Path("/owner")


# -- acting in a real repository


def test_writes_then_commit_on_head_with_the_sim_author(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"README.md": "old\n", "gone.txt": "x\n"})
    start = head_of(tmp_path / "repo")
    effects = FileEffects(
        (("README.md", "new\n"), ("src/app.py", "print(1)\n"), ("gone.txt", None)), "sim edit"
    )
    made = apply(tmp_path / "repo", effects, 1_800_000_000)
    commit = commit_at(repo, "HEAD")
    assert made == str(commit.id)
    assert [str(p) for p in commit.parent_ids] == [start]
    assert commit.message == "sim edit"
    assert (commit.author.name, commit.author.email, commit.author.time) == (
        SIM_NAME,
        SIM_EMAIL,
        1_800_000_000,
    )
    assert files_at(repo, "HEAD") == {"README.md": "new\n", "src/app.py": "print(1)\n"}
    assert status_of(tmp_path / "repo") == {}


def test_commit_in_a_linked_worktree_moves_that_worktree_head_only(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    start = head_of(tmp_path / "repo")
    branch = repo.branches.local.create("work", repo[start])  # type: ignore[arg-type]
    repo.add_worktree("wt", str(tmp_path / "wt"), branch)
    apply(tmp_path / "wt", FileEffects((("new.txt", "n\n"),), "in the worktree"), 0)
    assert head_of(tmp_path / "repo") == start
    assert open_repo(tmp_path / "wt").head.shorthand == "work"
    assert files_at(repo, "refs/heads/work")["new.txt"] == "n\n"
    assert "new.txt" not in files_at(repo, "refs/heads/main")


def test_a_symlink_out_of_the_workspace_is_refused_and_nothing_lands_outside(
    tmp_path: Path,
) -> None:
    from crw.host.sim.files import FileEffectError

    (tmp_path / "p").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "p" / "link").symlink_to(tmp_path / "out")
    with pytest.raises(FileEffectError, match="resolves outside the workspace"):
        apply(tmp_path / "p", FileEffects((("link/x.txt", "x"),)), 0)
    assert list((tmp_path / "out").iterdir()) == []


def test_a_symlink_into_git_s_directory_is_refused_and_git_is_untouched(tmp_path: Path) -> None:
    make_repo(tmp_path / "repo")
    config = (tmp_path / "repo" / ".git" / "config").read_bytes()
    (tmp_path / "repo" / "meta").symlink_to(tmp_path / "repo" / ".git")
    with pytest.raises(FileEffectError, match=r"resolves into \.git"):
        apply(tmp_path / "repo", FileEffects((("meta/config", "x"),)), 0)
    assert (tmp_path / "repo" / ".git" / "config").read_bytes() == config


# -- on the wire


async def _script(client: RawClient, behaviour: dict[str, Any]) -> None:
    await client.request("sim/script", {"match": {"marker": MARKER}, "behaviour": behaviour})


async def _run_turn(client: RawClient, cwd: Path) -> tuple[str, dict[str, Any]]:
    thread = (await client.request("thread/start", {"cwd": str(cwd)}))["thread"]["id"]
    text = task_text(MARKER, "executor", SCHEMA)
    turn = await client.request("turn/start", {"threadId": thread, "input": text_input(text)})
    return str(thread), await client.turn_completed(turn["turn"]["id"])


async def test_a_turn_with_writes_and_commit_leaves_them_in_the_thread_cwd(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    repo = make_repo(tmp_path / "repo", {"README.md": "old\n"})
    start = head_of(tmp_path / "repo")
    async with connected(tmp_path) as (_, client):
        await _script(
            client, {"writes": {"README.md": "new\n", "src/a.py": "a = 1\n"}, "commit": "edit"}
        )
        _, turn = await _run_turn(client, tmp_path / "repo")
    head = commit_at(repo, "HEAD")
    assert turn["status"] == "completed"
    assert ([str(p) for p in head.parent_ids], head.message) == ([start], "edit")
    assert files_at(repo, "HEAD") == {"README.md": "new\n", "src/a.py": "a = 1\n"}
    assert status_of(tmp_path / "repo") == {}


async def test_writes_without_commit_stay_uncommitted_in_the_worktree(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    make_repo(tmp_path / "repo", {"README.md": "old\n"})
    start = head_of(tmp_path / "repo")
    async with connected(tmp_path) as (_, client):
        await _script(client, {"writes": {"README.md": "new\n", "b.txt": "b\n"}})
        await _run_turn(client, tmp_path / "repo")
    assert head_of(tmp_path / "repo") == start
    assert sorted(status_of(tmp_path / "repo")) == ["README.md", "b.txt"]


async def test_the_files_are_written_before_the_answer(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A turn that answers and then hangs has its files written while it is in
    progress: the writes come when its seconds have passed, before anything else."""
    (tmp_path / "p").mkdir()
    async with connected(tmp_path) as (_, client):
        await _script(client, {"writes": {"out.txt": "done\n"}, "hang": True, "answer": {}})
        thread = (await client.request("thread/start", {"cwd": str(tmp_path / "p")}))["thread"]
        text = task_text(MARKER, "executor", None)
        await client.request("turn/start", {"threadId": thread["id"], "input": text_input(text)})
        answered = await client.wait_for(
            "item/completed", lambda p: p["item"]["type"] == "agentMessage"
        )
        read = await client.request("thread/read", {"threadId": thread["id"], "includeTurns": True})
        written = (tmp_path / "p" / "out.txt").read_text()
    assert answered["item"]["text"] == "{}"
    assert read["thread"]["turns"][-1]["status"] == "inProgress"
    assert written == "done\n"


async def test_a_subagent_writes_in_the_workspace_its_spawn_message_names(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Its host cwd is its owner's; it works where the spawn message says, and its
    repair turn (a send_input naming no workspace) goes on working there."""
    (tmp_path / "owner").mkdir()
    repo = make_repo(tmp_path / "p")
    message = spawn_message("build.1", 1, 1, "executor", str(tmp_path / "p"), "/nowhere.md")
    async with connected(tmp_path) as (_, client):
        await _script(client, {"writes": {"first.txt": "1\n"}, "commit": "first"})
        await client.request(
            "sim/script",
            {"match": {"marker": "build.1/t2-*"}, "behaviour": {"writes": {"second.txt": "2\n"}}},
        )
        owner = await client.request("sim/startOwner", {"cwd": str(tmp_path / "owner")})
        spawn = {"parentThreadId": owner["threadId"], "agentType": "worker", "message": message}
        agent = (await client.request("sim/spawnAgent", spawn))["agentId"]
        first = await client.wait_for("turn/completed", lambda p: p["threadId"] == agent)
        repair = {"target": agent, "message": "crw-flow-op: build.1/t2-a1\nrepair it"}
        turn_id = (await client.request("sim/sendInput", repair))["turnId"]
        second = await client.turn_completed(turn_id)
    assert (first["turn"]["status"], second["status"]) == ("completed", "completed")
    assert list((tmp_path / "owner").iterdir()) == []
    assert files_at(repo, "HEAD")["first.txt"] == "1\n"
    assert status_of(tmp_path / "p") == {"second.txt": pygit2.enums.FileStatus.WT_NEW}


async def test_a_commit_outside_any_repository_fails_the_turn_saying_where(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    (tmp_path / "plain").mkdir()
    async with connected(tmp_path) as (_, client):
        await _script(client, {"writes": {"a.txt": "a"}, "commit": "nope"})
        thread, turn = await _run_turn(client, tmp_path / "plain")
        error = await client.wait_for("error", lambda p: p["threadId"] == thread)
        read = await client.request("thread/read", {"threadId": thread, "includeTurns": True})
    assert turn["status"] == "failed"
    assert [i["type"] for i in read["thread"]["turns"][-1]["items"]] == ["userMessage"]
    assert "is in no git repository" in error["error"]["message"]
    assert str(tmp_path / "plain") in error["error"]["message"]
    assert (tmp_path / "plain" / "a.txt").read_text() == "a"


async def test_a_path_escaping_the_workspace_is_refused_by_sim_script(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (host, client):
        with pytest.raises(RpcFailure) as raised:
            await _script(client, {"writes": {"../x.txt": "x"}})
    assert raised.value.code == -32600
    assert "leaves the workspace" in raised.value.message
    assert host.turns.scripts == []


async def test_git_s_directory_in_any_case_is_refused_by_sim_script(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with connected(tmp_path) as (host, client):
        with pytest.raises(RpcFailure) as raised:
            await _script(client, {"writes": {".GIT/config": "x"}})
    assert raised.value.code == -32600
    assert raised.value.message == (
        "sim/script: writes path '.GIT/config' is inside .git; write work files only"
    )
    assert host.turns.scripts == []

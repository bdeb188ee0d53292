"""The orchestrator line: what BindOrchestrator writes (the start's line, from the
role store) and what Line.Validate takes, as the spawn hook reads it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crw.binding.lines import ORCHESTRATOR, owner_file
from crw.binding.owner import bind_owner
from crw.cli.run.start import _bind_owner
from crw.engine.config.roles import load_roles
from crw.errors import InputError
from tests.hook.spawn_helpers import OWNER, PAIRS, RUN, allow, entry, run_hook, spawn_input

FIVE = ("architect", "executor", "executor-t1", "reviewer", "explorer")


def write_line(state: Path, line: dict[str, Any]) -> None:
    """The owner's file with `line` last, as an earlier crw (or a hand) left it."""
    path = owner_file(state, OWNER)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_text(json.dumps(line) + "\n")
    path.chmod(0o600)


def orchestrator(pairs: dict[str, Any]) -> dict[str, Any]:
    return {"kind": ORCHESTRATOR, "run_id": RUN, "policyDigest": "sha256:d", "helperPairs": pairs}


def spawned(state: Path, role: str, agent_type: str) -> dict[str, Any]:
    """The hook's ledger line of one owner's spawn with a `CRW-ROLE: role` header."""
    message = f"crw-flow-op: build.1/t1-a1\nCRW-ROLE: {role}\n\nDo it."
    hooked = run_hook(state, spawn_input(message, agent_type=agent_type))
    return hooked.ledger[-1]


def test_the_start_binds_the_owner_with_kind_run_digest_and_the_six_pairs(tmp_path: Path) -> None:
    """spec: BIND-LINE-1, BIND-LINE-2: the owner's flow-bound file gets one line:
    kind orchestrator, run_id, the policyDigest of the role table and helperPairs
    of the six roles."""
    store = tmp_path / "roles.toml"
    store.write_text('[architect]\nmodel = "m-arch"\neffort = "high"\n')
    roles = load_roles(store)
    assert _bind_owner(tmp_path, OWNER, RUN, roles) == []
    text = owner_file(tmp_path, OWNER).read_text()
    assert text.count("\n") == 1
    line = json.loads(text)
    assert line == {
        "kind": "orchestrator",
        "run_id": RUN,
        "policyDigest": roles.policy_digest(),
        "helperPairs": {
            "architect": {"model": "m-arch", "effort": "high"},
            "executor": {},
            "executor-t1": {},
            "reviewer": {},
            "explorer": {},
            "critic": {},
        },
    }
    assert list(line["helperPairs"]) == [*FIVE, "critic"]


def test_a_pair_carries_only_the_decided_parts_of_its_role(tmp_path: Path) -> None:
    """spec: BIND-LINE-6, BIND-LINE-7: a model with an undecided effort has the empty
    effort (none), an undecided role the empty pair; an agent_type the store names
    other than the hook's own is kept (the hook pairs the role with it)."""
    store = tmp_path / "roles.toml"
    store.write_text(
        '[executor]\nmodel = "m-exec"\n'
        '[reviewer]\nagent_type = "my-reviewer"\n'
        '[explorer]\nagent_type = "explorer"\nmodel = "m-x"\neffort = "low"\n'
    )
    assert _bind_owner(tmp_path, OWNER, RUN, load_roles(store)) == []
    pairs = json.loads(owner_file(tmp_path, OWNER).read_text())["helperPairs"]
    assert pairs == {
        "architect": {},
        "executor": {"model": "m-exec"},
        "executor-t1": {},
        "reviewer": {"agent_type": "my-reviewer"},
        "explorer": {"model": "m-x", "effort": "low"},
        "critic": {},
    }
    ledger = spawned(tmp_path, "executor", "executor")
    assert (ledger["model"], ledger["reasoning_effort"]) == ("m-exec", "minimal")  # as sent
    assert spawned(tmp_path, "reviewer", "my-reviewer")["warnings"] == ["role_undecided"]


def test_an_effort_without_a_model_is_no_roles_pair(tmp_path: Path) -> None:
    """spec: BIND-LINE-8: the role store refuses it, and a line that holds one (an
    earlier crw's) leaves the role undecided: the spawn keeps what it was sent."""
    store = tmp_path / "roles.toml"
    store.write_text('[critic]\neffort = "high"\n')
    with pytest.raises(InputError, match="without a model is no role's pair"):
        load_roles(store)
    write_line(tmp_path, orchestrator(PAIRS | {"critic": {"effort": "high"}}))
    message = "crw-flow-op: build.1/t1-a1\nCRW-ROLE: critic\n\nDo it."
    hooked = run_hook(tmp_path, spawn_input(message, agent_type="reviewer"))
    assert hooked.reply == allow(spawn_input(message, agent_type="reviewer")["tool_input"])
    assert hooked.ledger[0]["warnings"] == ["role_undecided"]


@pytest.mark.parametrize("missing", FIVE)
def test_a_line_without_one_of_the_first_five_binds_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], missing: str
) -> None:
    """spec: BIND-LINE-3: Line.Validate refuses it; the hook reads no binding (its
    spawns go ahead undecided, none is refused, none recorded) and says why."""
    pairs = {role: pair for role, pair in PAIRS.items() if role != missing}
    write_line(tmp_path, orchestrator(pairs))
    leaf = spawn_input("crw-flow-op: a.1/t1-a1\n\nx") | {"agent_id": "019a-child"}
    hooked = run_hook(tmp_path, leaf)
    assert (hooked.stdout, hooked.ledger) == ("", [])
    err = capsys.readouterr().err
    assert err == (
        f"crw: warning: the last line of {owner_file(tmp_path, OWNER)} is an orchestrator "
        f"line without the pairs of {missing}; read as no binding: the owner's spawns go "
        "ahead undecided\n"
    )
    with pytest.raises(ValueError, match=f"without the pairs of {missing}"):
        bind_owner(tmp_path, OWNER, orchestrator(pairs), lambda _run: False)


def test_a_line_without_critic_is_read_and_its_critic_spawns_are_undecided(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """spec: BIND-LINE-4: the open line an earlier crw bound (no critic) stays
    readable: the other roles' spawns get their pairs, a critic's keeps its own."""
    write_line(tmp_path, orchestrator({role: PAIRS[role] for role in FIVE}))
    assert spawned(tmp_path, "architect", "architect") == entry(
        role="architect",
        op="build.1/t1",
        agent_type="architect",
        model="gpt-arch",
        reasoning_effort="high",
    )
    critic = spawned(tmp_path, "critic", "reviewer")
    assert (critic["model"], critic["reasoning_effort"]) == ("gpt-sent", "minimal")
    assert critic["warnings"] == ["role_undecided"]
    assert capsys.readouterr().err == ""


def test_a_pair_of_the_retired_role_key_is_read_and_never_applied(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """spec: BIND-LINE-5: an earlier crw wrote a pair for the role key of the
    crw.reviewerFinal op, since retired: the line is valid, and no spawn, not even
    one that names the key, is given its pair."""
    retired = {"agent_type": "reviewer", "model": "gpt-final", "effort": "xhigh"}
    write_line(tmp_path, orchestrator(PAIRS | {"reviewerFinal": retired}))
    for role, agent_type in [("reviewerFinal", "reviewer"), ("reviewerFinal", "reviewerFinal")]:
        ledger = spawned(tmp_path, role, agent_type)
        expected = PAIRS["reviewer"] if agent_type == "reviewer" else PAIRS["explorer"]
        assert ledger["model"] == expected.get("model", "gpt-sent")
        assert ledger["role"] == ("reviewer" if agent_type == "reviewer" else "explorer")
    assert capsys.readouterr().err == ""

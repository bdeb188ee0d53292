"""The role store: pairs, undecided parts, the policy digest and the refusals."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crw.engine.config.roles import ROLES, RolePair, RoleTable, default_agent_type, load_roles
from crw.errors import InputError

EXAMPLES = Path(__file__).parents[2] / "crw" / "examples"


def write(directory: Path, text: str) -> Path:
    path = directory / "roles.toml"
    path.write_text(text, encoding="utf-8")
    return path


def refusal(path: Path) -> str:
    before = sorted(path.parent.iterdir())
    with pytest.raises(InputError) as info:
        load_roles(path)
    assert sorted(path.parent.iterdir()) == before
    assert "\n" not in str(info.value)
    return str(info.value)


def test_spawn_hook_pairs_executor_t1_with_executor_and_critic_with_reviewer() -> None:
    assert {role: default_agent_type(role) for role in ROLES} == {
        "architect": "architect",
        "executor": "executor",
        "executor-t1": "executor",
        "reviewer": "reviewer",
        "explorer": "explorer",
        "critic": "reviewer",
    }


def test_missing_file_leaves_every_role_undecided(tmp_path: Path) -> None:
    table = load_roles(tmp_path / "roles.toml")
    assert table == RoleTable.undecided()
    assert table.role_pairs() == {role: {"agent_type": default_agent_type(role)} for role in ROLES}
    assert list(tmp_path.iterdir()) == []


def test_role_or_part_left_out_is_undecided(tmp_path: Path) -> None:
    table = load_roles(write(tmp_path, '[executor]\nmodel = "m"\n[critic]\nagent_type = "judge"\n'))
    assert sorted(table.roles) == sorted(ROLES)
    assert table.roles["executor"] == RolePair(agent_type="executor", model="m")
    assert table.roles["critic"] == RolePair(agent_type="judge")
    assert table.roles["architect"] == RolePair(agent_type="architect")


def test_role_pairs_hold_the_decided_parts_only(tmp_path: Path) -> None:
    text = '[architect]\nmodel = "gpt-5"\neffort = "high"\n[executor-t1]\nmodel = "mini"\n'
    assert load_roles(write(tmp_path, text)).role_pairs() == {
        "architect": {"agent_type": "architect", "model": "gpt-5", "effort": "high"},
        "executor": {"agent_type": "executor"},
        "executor-t1": {"agent_type": "executor", "model": "mini"},
        "reviewer": {"agent_type": "reviewer"},
        "explorer": {"agent_type": "explorer"},
        "critic": {"agent_type": "reviewer"},
    }


def test_policy_digest_is_sha256_of_the_canonical_json() -> None:
    table = RoleTable.undecided()
    canonical = json.dumps(
        table.role_pairs(), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    assert canonical.startswith('{"architect":{"agent_type":"architect"},"critic":')
    expected = "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    assert table.policy_digest() == expected


def test_example_role_store_loads() -> None:
    table = load_roles(EXAMPLES / "roles.toml")
    assert table.roles["executor-t1"] == RolePair(agent_type="executor", model="gpt-5-codex")
    assert table.roles["critic"] == RolePair(agent_type="reviewer")


PAIRS = st.fixed_dictionaries(
    {},
    optional={
        "agent_type": st.sampled_from(["architect", "executor", "reviewer", "worker"]),
        "model": st.sampled_from(["gpt-5", "gpt-5-mini", "modèle"]),
    },
).flatmap(
    lambda pair: (
        st.fixed_dictionaries(
            {}, optional={"effort": st.sampled_from(["low", "medium", "high"])}
        ).map(lambda effort: {**pair, **effort})
        if "model" in pair
        else st.just(pair)
    )
)
STORES = st.dictionaries(st.sampled_from(ROLES), PAIRS)


PARTS = ("agent_type", "model", "effort")


def to_toml(
    store: dict[str, dict[str, str]], key_order: tuple[str, ...] = PARTS, spacing: str = " "
) -> str:
    lines = []
    for role, pair in store.items():
        lines.append(f"[{role}]{spacing}# the {role}")
        lines += [
            f"{key}{spacing}={spacing}{json.dumps(pair[key], ensure_ascii=False)}"
            for key in key_order
            if key in pair
        ]
        lines.append("")
    return "\n".join(lines)


def load_text(text: str) -> RoleTable:
    with tempfile.TemporaryDirectory() as directory:
        return load_roles(write(Path(directory), text))


@settings(max_examples=100, deadline=None)
@given(STORES, st.permutations(PARTS), st.sampled_from([" ", "  ", "\t"]))
def test_digest_is_stable_under_key_order_and_whitespace(
    store: dict[str, dict[str, str]], key_order: list[str], spacing: str
) -> None:
    plain = load_text(to_toml(store))
    reordered = dict(reversed(list(store.items())))
    shuffled = load_text(to_toml(reordered, tuple(key_order), spacing))
    assert shuffled == plain
    assert shuffled.policy_digest() == plain.policy_digest()


@settings(max_examples=100, deadline=None)
@given(STORES, st.sampled_from(ROLES), st.sampled_from(["agent_type", "model", "effort"]))
def test_digest_changes_when_a_pair_changes(
    store: dict[str, dict[str, str]], role: str, part: str
) -> None:
    before = load_text(to_toml(store))
    changed = {r: dict(p) for r, p in store.items()}
    pair = changed.setdefault(role, {})
    pair[part] = pair.get(part, "x") + "-changed"
    if part == "effort":
        pair.setdefault("model", "m")
    after = load_text(to_toml(changed))
    assert after.policy_digest() != before.policy_digest()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '[executor]\nmodel = "m"\n[boss]\nmodel = "m"\n',
            "3: unknown role 'boss'; use one of: architect, executor, executor-t1, reviewer,"
            " explorer, critic",
        ),
        (
            '[critic]\neffort = "high"\n',
            '2: [critic]: effort = "high" without a model is no role\'s pair;'
            " add model = ... or leave effort out",
        ),
        (
            '[executor]\nmodel = "m"\nspeed = "fast"\n',
            "3: [executor]: unknown key 'speed'; remove it or use one of:"
            " agent_type, model, effort",
        ),
        (
            "[executor]\nmodel = 5\n",
            "2: [executor]: model = 5 is not a string; write model as a string",
        ),
        (
            '[executor]\nagent_type = ""\n',
            "2: [executor]: an empty name; write a name or leave the key out (undecided)",
        ),
        (
            'explorer = "gpt-5"\n',
            '1: explorer = "gpt-5" is not a table; write [explorer] with agent_type, model'
            " and effort",
        ),
        (
            '[explorer]\nmodel = "gpt\\u0000-5"\n',
            '2: [explorer]: model = "gpt\\u0000-5" holds a control character (a newline,'
            " a NUL, ...); write the name on one line",
        ),
        (
            '[explorer]\nmodel = "m"\neffort = "hi\\ngh"\n',
            '3: [explorer]: effort = "hi\\ngh" holds a control character (a newline,'
            " a NUL, ...); write the name on one line",
        ),
        (
            '[explorer]\nagent_type = "x\\ty"\n',
            '2: [explorer]: agent_type = "x\\ty" holds a control character (a newline,'
            " a NUL, ...); write the name on one line",
        ),
        (
            '[explorer]\nmodel = "../gpt-5"\n',
            "2: [explorer]: model = \"../gpt-5\" holds '..'; write the name without '..'",
        ),
        (
            '[explorer]\nagent_type = ".."\n',
            "2: [explorer]: agent_type = \"..\" holds '..'; write the name without '..'",
        ),
        (
            '[explorer]\nagent_type = "agents/explorer"\n',
            '2: [explorer]: agent_type = "agents/explorer" holds a path separator;'
            " write the agent type's name, not a path",
        ),
        (
            '[explorer]\nagent_type = "a\\\\b"\n',
            '2: [explorer]: agent_type = "a\\\\b" holds a path separator;'
            " write the agent type's name, not a path",
        ),
        (
            "[explorer]\nmodel = \n",
            "2: invalid TOML: Invalid value; fix the TOML syntax at line 2, column 9",
        ),
    ],
)
def test_refusal_names_file_line_what_and_fix(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    assert refusal(path) == f"{path}:{expected}"


def test_model_name_may_hold_a_provider_path(tmp_path: Path) -> None:
    table = load_roles(write(tmp_path, '[explorer]\nmodel = "openai/gpt-5"\n'))
    assert table.roles["explorer"].model == "openai/gpt-5"


def test_role_store_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "roles.toml"
    os.mkfifo(path)
    assert refusal(path) == f"{path}: the role store is not a regular file; give a file's path"


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_byte_garbage_raises_nothing_but_input_error(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "roles.toml"
        path.write_bytes(data)
        try:
            load_roles(path)
        except InputError as err:
            assert str(err).startswith(str(path))

"""`--help` says what a user gets, in the user's words: every group of commands has
its summary, `list` names the columns it shows, `--trace` says what it does.
Real `crw` processes."""

from __future__ import annotations

import re

import pytest

from tests.cli.conftest import Crw

_COMMAND_ROW = re.compile(r"^│ (?P<name>[a-z_-]+) +(?P<summary>.*?) *│$")


@pytest.mark.parametrize("group", [("flow",), ("host",), ("host", "sim"), ("flow", "schema")])
def test_every_command_of_a_group_has_its_summary(crw: Crw, group: tuple[str, ...]) -> None:
    shown = crw(*group, "--help")
    assert shown.code == 0, shown.stderr
    rows = [found for line in shown.stdout.splitlines() if (found := _COMMAND_ROW.match(line))]
    assert rows, shown.stdout
    bare = [row["name"] for row in rows if not row["summary"]]
    assert bare == [], f"no summary in crw {' '.join(group)} --help: {bare}"


def test_flow_help_summarises_hook_and_codex(crw: Crw) -> None:
    shown = crw("flow", "--help").stdout
    assert "│ hook        The spawn hook Codex runs before the owner's tool calls:" in shown
    assert "│ codex       Set up Codex to own crw flow runs." in shown


def test_list_help_promises_only_the_columns_it_shows(crw: Crw) -> None:
    """The table has no start column (the run id carries the start time)."""
    helped = " ".join(crw("flow", "list", "--help").stdout.split())
    assert "tokens, start," not in helped
    assert "each one's id (which carries its start time)" in helped


def test_trace_help_says_what_it_does_for_a_user(crw: Crw) -> None:
    helped = " ".join(crw("flow", "start", "--help").stdout.split())
    assert "SessionConfig" not in helped and "digest P" not in helped
    assert "Record where each call writes" in helped

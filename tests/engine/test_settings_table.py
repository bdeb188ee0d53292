"""The workflow file's `[settings]`: every timer and limit of a run, validated."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from crw.engine.config.settings_table import KEYS
from crw.engine.config.workflow import load_workflow
from crw.errors import InputError
from crw.settings import Settings

NODE = '[[node]]\nid = "a"\nrole = "explorer"\ntask = "t"\nschema = { type = "object" }\n'


def workflow(tmp_path: Path, settings: str) -> Path:
    path = tmp_path / "wf.toml"
    path.write_text(f'name = "x"\n\n[settings]\n{settings}\n\n{NODE}')
    return path


def test_every_duration_and_limit_of_the_settings_can_be_set(tmp_path: Path) -> None:
    """A user can make LostAfter 30 s; a key left out keeps its default."""
    assert tuple(asdict(Settings())) == KEYS
    numbers = [key for key in KEYS if key != "trace"]
    lines = "\n".join(f"{key} = {n + 1}" for n, key in enumerate(numbers))
    loaded = load_workflow(workflow(tmp_path, lines)).settings
    assert asdict(loaded) == {key: n + 1 for n, key in enumerate(numbers)} | {"trace": False}
    short = load_workflow(workflow(tmp_path, "lost_after = 30\npoll_interval = 0.5")).settings
    assert short == Settings(lost_after=30.0, poll_interval=0.5)


def test_a_workflow_without_settings_runs_on_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "wf.toml"
    path.write_text(f'name = "x"\n\n{NODE}')
    assert load_workflow(path).settings == Settings()


def test_trace_is_a_run_option_of_the_settings(tmp_path: Path) -> None:
    """spec: HARV-44. SessionConfig.Trace is `[settings] trace = true`; off by default."""
    assert Settings().trace is False
    assert load_workflow(workflow(tmp_path, "trace = true")).settings == Settings(trace=True)
    assert load_workflow(workflow(tmp_path, "trace = false")).settings == Settings()


def test_an_answers_size_is_capped_at_one_mebibyte_unless_the_workflow_says(
    tmp_path: Path,
) -> None:
    assert Settings().answer_max_bytes == 1024 * 1024
    loaded = load_workflow(workflow(tmp_path, "answer_max_bytes = 1024")).settings
    assert loaded == Settings(answer_max_bytes=1024)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            'trace = "yes"',
            '[settings]: trace = "yes" is not true or false; write it as trace = true',
        ),
        (
            "trace = 1",
            "[settings]: trace = 1 is not true or false; write it as trace = true",
        ),
        (
            "lost_afer = 30",
            "[settings]: unknown key 'lost_afer'; remove it or use one of: " + ", ".join(KEYS),
        ),
        (
            'lost_after = "30s"',
            '[settings]: lost_after = "30s" is not a number of seconds; '
            "write it as lost_after = 30",
        ),
        (
            "wake_after = true",
            "[settings]: wake_after = true is not a number of seconds; write it as wake_after = 30",
        ),
        (
            "max_attempts = 2.5",
            "[settings]: max_attempts = 2.5 is not a whole number; write it as max_attempts = 3",
        ),
        (
            "answer_max_bytes = 1.5",
            "[settings]: answer_max_bytes = 1.5 is not a whole number; "
            "write it as answer_max_bytes = 1048576",
        ),
        (
            "answer_max_bytes = 0",
            "[settings]: answer_max_bytes = 0 is not positive; "
            "give it above 0, as answer_max_bytes = 1048576",
        ),
        (
            "lost_after = 0",
            "[settings]: lost_after = 0 is not positive; give it above 0, as lost_after = 30",
        ),
        (
            "host_timeout = -1.5",
            "[settings]: host_timeout = -1.5 is not positive; "
            "give it above 0, as host_timeout = 30",
        ),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_file_the_key_and_the_fix(
    tmp_path: Path, line: str, message: str
) -> None:
    path = workflow(tmp_path, line)
    with pytest.raises(InputError) as refused:
        load_workflow(path)
    assert str(refused.value) == f"{path}:4: {message}"


def test_host_wait_is_an_hour_unless_set_and_0_turns_it_off(tmp_path: Path) -> None:
    """A run paused host_unavailable waits for its host (docs/timers.md)."""
    assert Settings().host_wait == 3600
    assert load_workflow(workflow(tmp_path, "host_wait = 0")).settings.host_wait == 0
    with pytest.raises(InputError) as refused:
        load_workflow(workflow(tmp_path, "host_wait = -1"))
    assert str(refused.value).endswith(
        "[settings]: host_wait = -1 is negative; give it 0 (no wait) or above, as host_wait = 3600"
    )

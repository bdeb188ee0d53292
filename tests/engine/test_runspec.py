"""run.json, crw-flow-run/1 (CMD-START-5, -6, -7, -11)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from crw.engine.run.runspec import (
    RunEnv,
    RunSpec,
    WorkflowRef,
    read_run_spec,
    recorded_settings,
    write_run_spec,
)
from crw.errors import InputError
from crw.settings import Settings


def _spec(**extra: object) -> RunSpec:
    return RunSpec.model_validate(
        {
            "id": "fix-20261129-193551-ab12",
            "workflow": {"path": "/repo/fix.toml", "digest": "sha256:00"},
            "backend": "session",
            "pool": 3,
            "repository": "/repo",
            "host": "unix:/codex/app-server-control.sock",
            "owner": "thread-1",
            **extra,
        }
    )


def test_spec_round_trips_with_its_env(tmp_path: Path) -> None:
    spec = _spec(env={"TMPDIR": "/var/tmp/x/"})
    path = tmp_path / "run.json"
    write_run_spec(path, spec)
    assert read_run_spec(path) == spec
    on_disk = json.loads(path.read_text())
    assert on_disk["format"] == "crw-flow-run/1"
    assert on_disk["backend"] == "session"
    assert on_disk["env"] == {"TMPDIR": "/var/tmp/x/"}


def test_spec_records_the_backend(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    write_run_spec(path, _spec(backend="app-server"))
    assert read_run_spec(path).backend == "app-server"


def test_spec_without_env_reads_as_before(tmp_path: Path) -> None:
    """spec: CMD-START-7"""
    path = tmp_path / "run.json"
    data = _spec().to_json()
    assert "env" not in data
    path.write_text(json.dumps(data))
    spec = read_run_spec(path)
    assert spec.env is None
    assert spec.env_overrides() == {}


def test_spec_without_env_is_written_without_the_member(tmp_path: Path) -> None:
    """spec: CMD-START-7"""
    path = tmp_path / "run.json"
    write_run_spec(path, _spec())
    assert "env" not in json.loads(path.read_text())


def test_only_tmpdir_is_recorded() -> None:
    spec = _spec(env=RunEnv(TMPDIR="/tmp"))
    assert spec.env_overrides() == {"TMPDIR": "/tmp"}
    assert spec.to_json()["env"] == {"TMPDIR": "/tmp"}
    assert set(RunEnv.model_fields) == {"TMPDIR"}


def test_unknown_members_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    data = _spec().to_json()
    data["later"] = {"a": 1}
    data["workflow"]["signed"] = True
    data["env"] = {"TMPDIR": "/tmp", "LATER": "x"}
    path.write_text(json.dumps(data))
    spec = read_run_spec(path)
    write_run_spec(path, spec)
    assert json.loads(path.read_text()) == data


def test_write_replaces_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text("old")
    write_run_spec(path, _spec())
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]
    assert read_run_spec(path).workflow == WorkflowRef(path="/repo/fix.toml", digest="sha256:00")


def test_missing_spec_is_an_input_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    with pytest.raises(InputError) as caught:
        read_run_spec(path)
    assert str(path) in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{not json", "is not JSON"),
        ('{"format": "crw-flow-run/9"}', 'format "crw-flow-run/9", not crw-flow-run/1'),
        ('{"format": "crw-flow-run/1", "id": "x"}', "workflow: Field required"),
        ("[1]", "is not a crw-flow-run/1 spec"),
    ],
)
def test_malformed_spec_is_an_input_error(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "run.json"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        read_run_spec(path)
    message = str(caught.value)
    assert says in message
    assert str(path) in message
    assert "\n" not in message


def test_spec_records_every_setting_and_reads_them_back(tmp_path: Path) -> None:
    """A resumed process runs on the timers and limits the start recorded."""
    settings = Settings(lost_after=30.0, max_attempts=5)
    path = tmp_path / "run.json"
    write_run_spec(path, _spec(settings=recorded_settings(settings)))
    on_disk = json.loads(path.read_text())
    assert on_disk["settings"] == asdict(settings)
    assert read_run_spec(path).run_settings() == settings


def test_spec_records_the_trace_option_so_a_resume_keeps_it(tmp_path: Path) -> None:
    """spec: HARV-44. SessionConfig.Trace is recorded with the settings, as a bool."""
    settings = Settings(lost_after=30.0, trace=True)
    path = tmp_path / "run.json"
    write_run_spec(path, _spec(settings=recorded_settings(settings)))
    on_disk = json.loads(path.read_text())
    assert on_disk["settings"]["trace"] is True and on_disk["settings"]["max_attempts"] == 3
    assert read_run_spec(path).run_settings() == settings
    assert read_run_spec(path).run_settings().trace is True


def test_spec_without_settings_reads_as_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    write_run_spec(path, _spec())
    assert "settings" not in json.loads(path.read_text())
    assert read_run_spec(path).run_settings() == Settings()
    partial = _spec(settings={"lost_after": 30, "a_later_setting": 1})
    assert partial.run_settings() == Settings(lost_after=30)


def test_spec_records_the_start_file_limit_only_when_given(tmp_path: Path) -> None:
    """The limit `$CRW_MAX_FILE_BYTES` gave the start is a member of its own (no
    variable of the environment is recorded, CMD-START-11); without it run.json is
    as before."""
    path = tmp_path / "run.json"
    write_run_spec(path, _spec(env=RunEnv(TMPDIR="/tmp")))
    assert "max_file_bytes" not in json.loads(path.read_text())
    assert read_run_spec(path).max_file_bytes is None
    write_run_spec(path, _spec(env=RunEnv(TMPDIR="/tmp"), max_file_bytes=8 << 20))
    assert json.loads(path.read_text())["max_file_bytes"] == 8 << 20
    spec = read_run_spec(path)
    assert spec.max_file_bytes == 8 << 20 and spec.env_overrides() == {"TMPDIR": "/tmp"}

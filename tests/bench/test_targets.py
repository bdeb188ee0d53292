"""bench/targets.py: each scale target judged against the figure its bench printed,
a bench that failed judged unmet with its reason, and the exit code says whether
every target was met."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.bench.conftest import load_bench
from tests.deadlines import LOADED
from tests.processes import processes_under


@pytest.fixture
def targets(monkeypatch: pytest.MonkeyPatch) -> Any:
    """bench/targets.py as a module."""
    return load_bench("targets", monkeypatch)


def test_a_figure_on_its_bound_meets_an_inclusive_target_and_misses_a_strict_one(
    targets: Any,
) -> None:
    throughput = next(t for t in targets.TARGETS if t.path[-1] == "calls_per_s")
    replay = next(t for t in targets.TARGETS if t.bench == "replay")
    resume = next(t for t in targets.TARGETS if t.path == ("start_s",))
    app: dict[str, Any] = {"app_server": {"10000": {"calls_per_s": 250}}}
    assert throughput.judge(app)["met"] is True
    app["app_server"]["10000"]["calls_per_s"] = 249.9
    assert throughput.judge(app) == {
        "target": "App Server calls/s at 10,000 calls",
        "bench": "scale_app_server",
        "figure": 249.9,
        "bound": ">= 250",
        "unit": "calls/s",
        "met": False,
        "margin": -0.0,
    }
    assert replay.judge({"total_ms": 500.0})["met"] is True
    assert replay.judge({"total_ms": 500.1})["met"] is False
    assert resume.judge({"start_s": 2})["met"] is False  # "< 2 s": the bound itself misses
    assert resume.judge({"start_s": 1.99})["met"] is True


def test_each_target_reports_its_margin_on_the_met_side_of_its_bound(targets: Any) -> None:
    """The margin is the figure's room from the bound in percent of the bound,
    positive on the met side whichever way the bound points; none without a figure
    (or for a bound of 0, which has no percent)."""
    throughput = next(t for t in targets.TARGETS if t.path[-1] == "calls_per_s")
    replay = next(t for t in targets.TARGETS if t.bench == "replay")
    app = {"app_server": {"10000": {"calls_per_s": 300}}}
    assert throughput.judge(app)["margin"] == 20.0  # >= 250
    app["app_server"]["10000"]["calls_per_s"] = 200
    assert throughput.judge(app)["margin"] == -20.0
    assert replay.judge({"total_ms": 400.0})["margin"] == 20.0  # <= 500
    assert replay.judge({"total_ms": 550.0})["margin"] == -10.0
    assert replay.judge(None)["margin"] is None
    assert dataclasses.replace(replay, bound=0).judge({"total_ms": 1.0})["margin"] is None


def test_a_figure_the_bench_did_not_give_is_unmet_not_an_error(targets: Any) -> None:
    """A size the scale bench skipped ({"skipped": why}), a bench that failed (no
    figures), a figure that is not a number: the target shows no figure, unmet."""
    throughput = next(t for t in targets.TARGETS if t.path[-1] == "calls_per_s")
    skipped = {"app_server": {"10000": {"skipped": "did not end within 120 s"}}}
    for figures in (skipped, None, {"app_server": {"10000": {"calls_per_s": True}}}):
        line = throughput.judge(figures)
        assert (line["figure"], line["met"]) == (None, False)


def test_the_report_runs_each_bench_and_exits_1_when_a_target_is_missed(
    targets: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The replay bench at a tiny size, run as its own process: its figure is the one
    it printed; a bound it cannot meet makes the exit code 1; a bench that fails is
    reported with its exit code and the last line it wrote on stderr."""
    monkeypatch.setitem(targets.BENCHES, "replay", ["replay.py", "--trials", "1", "--rows", "60"])
    monkeypatch.setattr(sys, "argv", ["targets.py", "--json", "--only", "replay"])
    assert targets.main() == 0
    report = json.loads(capsys.readouterr().out)
    [line] = report["targets"]
    figures = report["benches"]["replay"]["figures"]
    assert line["figure"] == figures["total_ms"] and figures["rows"] <= 60
    assert report["met"] is True and report["benches"]["replay"]["machine"]["loop_ms"] > 0
    replay = next(t for t in targets.TARGETS if t.bench == "replay")
    monkeypatch.setattr(targets, "TARGETS", (dataclasses.replace(replay, bound=0),))
    assert targets.main() == 1
    assert json.loads(capsys.readouterr().out)["met"] is False
    monkeypatch.setitem(targets.BENCHES, "replay", ["replay.py", "--rows", "many"])
    assert targets.main() == 1
    failed = json.loads(capsys.readouterr().out)
    assert failed["targets"][0]["figure"] is None
    assert failed["benches"]["replay"]["error"].startswith("exit 2: ")
    assert "invalid int value: 'many'" in failed["benches"]["replay"]["error"]


def test_every_bench_leaves_its_files_under_one_directory_removed_after_the_last(
    targets: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No bench removes its files while the others run (a removal of thousands slows
    the next minutes' creates on this machine's file system): each is told to keep
    them (`CRW_BENCH_KEEP`) under one directory in --tmp (its --tmp where it takes
    one, its TMPDIR for the rest), which goes once the last bench has run."""
    seen: list[tuple[list[str], dict[str, str]]] = []
    popen = subprocess.Popen

    def spy(argv: list[str], **kwargs: Any) -> Any:
        seen.append((argv, kwargs["env"]))
        return popen(argv, **kwargs)

    monkeypatch.setattr(targets.subprocess, "Popen", spy)
    replay = ["replay.py", "--trials", "1", "--rows", "60"]
    monkeypatch.setattr(targets, "BENCHES", {"replay": replay})
    argv = ["targets.py", "--json", "--gap", "0", "--tmp", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    assert targets.main() == 0
    monkeypatch.setattr(targets, "TAKES_TMP", {"replay.py"})  # replay.py takes none: refused
    assert targets.main() == 1
    [(plain, env), (given, refused_env)] = seen
    root = Path(env["TMPDIR"])
    assert env["CRW_BENCH_KEEP"] == "1" and root.parent == tmp_path
    assert root.name.startswith("crw-targets-") and "--tmp" not in plain
    assert given[-2:] == ["--tmp", refused_env["TMPDIR"]]
    assert Path(refused_env["TMPDIR"]).parent == tmp_path
    assert os.listdir(tmp_path) == []


def test_a_bench_told_to_keep_leaves_its_state_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`keep.state_tempdir`: removed when its block ends, unless CRW_BENCH_KEEP is set."""
    keep = load_bench("keep", monkeypatch)
    monkeypatch.delenv("CRW_BENCH_KEEP", raising=False)
    with keep.state_tempdir("x-", tmp_path) as gone:
        (Path(gone) / "f").write_text("")
    assert not Path(gone).exists()
    monkeypatch.setenv("CRW_BENCH_KEEP", "1")
    with keep.state_tempdir("x-", tmp_path) as kept:
        (Path(kept) / "f").write_text("")
    assert (Path(kept) / "f").exists() and Path(kept).parent == tmp_path


def test_a_bench_past_its_limit_is_interrupted_and_leaves_no_process(
    targets: Any, where: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bench that runs too long is stopped as Ctrl-C stops it, so it reaps the
    host and the run it started (a SIGKILL would leave both running); its targets
    are unmet with the reason. (How long the bench takes to reap is the machine's
    load, not asserted: a bench killed after STOP_GRACE leaves its processes, so
    the grace here is the suite's generous deadline, not the 30 s that a bench
    reaping an App Server run overran at load 13-18.)"""
    monkeypatch.setattr(targets, "BENCH_LIMIT", 4.0)
    monkeypatch.setattr(targets, "STOP_GRACE", LOADED)
    bench = ["scale.py", "--backend", "app-server", "--sizes", "10000", "--limit", "600"]
    monkeypatch.setitem(targets.BENCHES, "scale_app_server", bench)
    record = targets.run_bench("scale_app_server", where)
    assert record["error"] == "did not finish in 4 s"
    assert processes_under(where) == []
    lines = targets.judge({"scale_app_server": record})
    assert [line["met"] for line in lines] == [False, False, False]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--only", "replay,nope"], "--only replay,nope: no bench 'nope'; pass some of "),
        (["--gap", "-1"], "--gap -1: pass the seconds between two benches, 0 or more"),
        (["--gap", "nan"], "--gap nan: pass the seconds between two benches, 0 or more"),
    ],
)
def test_bad_arguments_get_one_line_and_run_no_bench(
    targets: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    said: str,
) -> None:
    ran: list[str] = []
    monkeypatch.setattr(targets, "run_bench", lambda name, tmp: ran.append(name))
    monkeypatch.setattr(sys, "argv", ["targets.py", *argv])
    with pytest.raises(SystemExit) as exit_:
        targets.main()
    assert exit_.value.code == 2 and ran == []
    assert said in capsys.readouterr().err.splitlines()[-1]


SECOND_STEP = {
    # bench: (its arguments at a tiny size, each size key of its targets -> the tiny one)
    "big_start": (["big_start.py", "--sizes", "40"], {"100000": "40"}),
    "scale_100k": (
        ["scale.py", "--backend", "app-server", "--sizes", "20,40"],
        {"10000": "20", "100000": "40"},
    ),
    "session_syncs": (
        ["session_syncs.py", "--sizes", "20,40", "--trace-sizes", "20"],
        {"1000": "20", "10000": "40"},
    ),
}


@pytest.mark.skipif(shutil.which("strace") is None, reason="session_syncs counts with strace")
def test_the_second_scale_steps_targets_read_figures_their_benches_print(
    targets: Any, where: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each target of the second scale step (100,000 calls in one run, a 100,000-node
    start, the session call's rate, syncs and memory) names a figure its bench
    prints: the benches run at tiny sizes, and every such target's path, its size
    put for the tiny one, reads a number from what the bench printed."""
    for bench, (argv, _) in SECOND_STEP.items():
        monkeypatch.setitem(targets.BENCHES, bench, argv)
    seen = 0
    for bench, (_, sizes) in SECOND_STEP.items():
        record = targets.run_bench(bench, where)
        assert "figures" in record, record.get("error")
        for target in (t for t in targets.TARGETS if t.bench == bench):
            path = tuple(sizes.get(key, key) for key in target.path)
            line = dataclasses.replace(target, path=path).judge(record["figures"])
            assert line["figure"] is not None, (target.name, path, record["figures"])
            seen += 1
    assert seen == 8

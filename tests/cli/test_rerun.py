"""`crw flow rerun RUN --from NODE` with real processes, on the App Server backend:
a `crw host sim serve` host scripted per test and the drill's workflow (explore,
build, review) started as a user starts it.

A run whose build answers what its schema refuses ends failed (build null_model);
once the host answers build well, a rerun from build takes explore's answer from
the failed run (a reused row and the source's completed row, no turn), runs build
and review afresh and completes. Every refusal is one line, exit 2, and leaves
no run. Every process is reaped by pid at teardown (the run processes of every
run the test made, the host).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crw.engine.run.rundir import RunDir
from crw.journal.stores import read_run_journal
from tests.cli.conftest import Result
from tests.cli.test_wait import BROKEN, cli
from tests.drill.test_app_server_crash_drill import AppDrill
from tests.drill.test_crash_drill import drill_at, kill, served

GOOD = {"match": {"marker": "build.1/*"}, "behaviour": {"seconds": 0.1}}
QUICK_BUILD = {
    "match": {"marker": "build.1/*"},
    "behaviour": {"seconds": 0.1, "invalidFirst": True},
}
"""The AppDrill's build (its first answer refused, so a repair turn runs) in 0.1 s
a turn: its 1 s turn is there for the crash drill to kill a turn under way, and
no test here does."""


def _reap(drill: AppDrill) -> None:
    drill.reap()
    for run in runs(drill):
        for row in read_run_journal(run.journal).rows:
            if row["row"] == "started":
                kill(row["pid"])


@pytest.fixture
def drill(tmp_path: Path) -> Iterator[AppDrill]:
    with served(drill_at(AppDrill, tmp_path / "run"), _reap) as made:
        made.host("sim/script", QUICK_BUILD)
        yield made


def runs(drill: AppDrill) -> list[RunDir]:
    flow = drill.crw.state / "flow"
    return [RunDir(path) for path in sorted(flow.iterdir())] if flow.is_dir() else []


def failed_run(drill: AppDrill) -> str:
    """A run whose build ended null_model: the run failed, review never ran."""
    drill.host("sim/script", BROKEN)
    done = cli(drill, "flow", "start", str(drill.workflow), "--backend", "app-server",
               "--host", f"unix:{drill.socket}", "--wait", "--json")  # fmt: skip
    assert done.code == 1, done.stderr
    return str(json.loads(done.stdout)["run"])


def rows_of(drill: AppDrill, run: str) -> list[dict[str, Any]]:
    return read_run_journal(RunDir(drill.crw.state / "flow" / run).journal).rows


def refused(done: Result, *words: str) -> str:
    assert done.code == 2, (done.stdout, done.stderr)
    line = done.stderr.removeprefix("crw: error: ").rstrip("\n")
    assert "\n" not in line and all(word in line for word in words), line
    return line


def test_a_rerun_from_the_failed_node_reuses_what_it_needs_and_completes(
    drill: AppDrill,
) -> None:
    """The guide's walk: build fails (null_model), its prompt is fixed, the rerun
    from build reuses explore's answer and runs build and review afresh."""
    source = failed_run(drill)
    source_rows = rows_of(drill, source)
    todo = cli(drill, "flow", "status", source, "--json").json()["todo"]
    assert f"crw flow rerun {source} --from build --state " in todo[-1]["command"]
    drill.host("sim/script", GOOD)

    done = cli(drill, "flow", "rerun", source, "--from", "build", "--wait", "--json")
    assert done.code == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["rerun"] == {
        "run": source, "node": "build", "reused": ["explore"], "afresh": ["build", "review"],
    }  # fmt: skip
    assert out["wait"]["outcome"] == "completed" and out["wait"]["exit"] == 0
    rerun = out["run"]
    rows = rows_of(drill, rerun)

    explore = [r for r in rows if r.get("call") == "explore.1"]
    assert [r["row"] for r in explore] == ["reused", "completed"]  # no prepared, no turn
    taken = next(r for r in source_rows if r["row"] == "completed" and r["call"] == "explore.1")
    assert explore[0] | {"seq": 0, "at": ""} == {
        "seq": 0, "at": "", "row": "reused", "call": "explore.1", "node": "explore",
        "role": "explorer", "source_run": source, "source_call": "explore.1",
        "result_digest": taken["result_digest"], "saved_tokens": taken["tokens"],
    }  # fmt: skip
    assert explore[1]["result"] == taken["result"] and "tokens" not in explore[1]
    started = [i for i, r in enumerate(rows) if r["row"] == "started"]
    assert rows.index(explore[0]) == started[0] + 1  # the batch right after the started row

    # build's task names explore's files: the reused answer, as if computed here
    build_input = next(r["input"] for r in rows if r["row"] == "step_published")
    assert json.dumps(taken["result"]["files"])[1:-1].split(", ")[0].strip('"') in build_input
    assert {r["call"] for r in rows if r["row"] == "turn_started"} == {"build.1", "review.1"}
    assert rows[-1]["status"] == "completed"

    status = cli(drill, "flow", "status", rerun, "--json").json()
    assert status["rerun"] == {"run": source, "node": "build"}
    assert status["tokens"]["total"] == sum(
        (r.get("tokens") or {}).get("total", 0) for r in rows if r.get("call")
    )  # explore's tokens are not spent again
    text = cli(drill, "flow", "status", rerun).stdout
    assert f"rerun of {source} from build (explore reused)" in text
    listed = {e["run"]: e for e in cli(drill, "flow", "list", "--json").json()["runs"]}
    assert listed[rerun]["rerun"] == {"run": source, "node": "build"}
    assert listed[source]["rerun"] is None
    assert f"{rerun} reruns {source} from build" in cli(drill, "flow", "list").stdout

    shadow = cli(drill, "flow", "shadow", rerun, "--json")
    assert shadow.code == 0 and shadow.json()["points"] == [], shadow.stdout


def test_a_rerun_of_a_run_kept_in_postgresql_reads_it_there_and_keeps_its_store(
    drill: AppDrill, postgres_url: str
) -> None:
    """A source whose journal is in PostgreSQL (`--db`): the rerun reads its rows
    from there (its journal.jsonl is empty) and its own rows go to the same
    database, as run.json says."""
    drill.host("sim/script", BROKEN)
    done = cli(drill, "flow", "start", str(drill.workflow), "--backend", "app-server",
               "--host", f"unix:{drill.socket}", "--db", postgres_url,
               "--wait", "--json")  # fmt: skip
    assert done.code == 1, done.stderr
    source = str(json.loads(done.stdout)["run"])
    assert (drill.crw.state / "flow" / source / "journal.jsonl").stat().st_size == 0
    drill.host("sim/script", GOOD)
    done = cli(drill, "flow", "rerun", source, "--from", "build", "--wait", "--json")
    assert done.code == 0, done.stderr
    rerun = RunDir(drill.crw.state / "flow" / json.loads(done.stdout)["run"])
    assert json.loads(rerun.run_json.read_text())["journal_db"] == postgres_url
    assert rerun.journal.stat().st_size == 0
    rows = read_run_journal(rerun.journal).rows
    assert [r["row"] for r in rows if r.get("call") == "explore.1"] == ["reused", "completed"]
    assert rows[-1]["status"] == "completed"


def test_a_rerun_refuses_in_one_line_and_writes_nothing(drill: AppDrill) -> None:
    """A source that does not exist, a node that does not exist, a node the
    --from node needs that did not complete, an edited workflow whose schema
    refuses a reused answer: each exit 2, one line, no new run."""
    source = failed_run(drill)
    before = runs(drill)

    refused(
        cli(drill, "flow", "rerun", "no-such-run", "--from", "build"), "no-such-run", "not found"
    )
    refused(cli(drill, "flow", "rerun", source, "--from", "deploy"),
            "--from deploy: no node deploy", "one of: explore, build, review")  # fmt: skip
    refused(cli(drill, "flow", "rerun", source, "--from", "review"),
            "node build, which review needs, ended null_model",
            f"crw flow rerun {source} --state", "--from build")  # fmt: skip

    edited = drill.root / "edited.toml"
    stricter = drill.workflow.read_text().replace('["files"]', '["files", "risk"]')
    edited.write_text(stricter)
    refused(cli(drill, "flow", "rerun", source, "--from", "build", "--workflow", str(edited)),
            "node explore's answer does not pass its schema", "'risk' is a required property",
            "--from explore")  # fmt: skip

    undeclared = cli(drill, "flow", "rerun", source, "--from", "build", "--input", "issue=7")
    refused(undeclared, "no input 'issue' is declared")

    drill.workflow.write_text(drill.workflow.read_text() + "\n# edited\n")
    changed = cli(drill, "flow", "rerun", source, "--from", "build")
    refused(changed, "changed since the run started", f"--workflow {drill.workflow} --from build")
    assert runs(drill) == before


def test_a_rerun_takes_the_sources_inputs_unless_given_anew(drill: AppDrill) -> None:
    """The source's inputs by default (its run.json), `--input` gives one anew:
    the rerun's run.json and started row record them, and its afresh node's task
    reads them."""
    text = drill.workflow.read_text()
    head, sep, nodes = text.partition("[[node]]")
    inputs = '[inputs.issue]\n[inputs.area]\ndefault = "core"\n\n'
    task = nodes.replace("Fix it, starting from", "Fix {inputs.issue} in {inputs.area}, from")
    drill.workflow.write_text(head + inputs + sep + task)
    done = cli(drill, "flow", "start", str(drill.workflow), "--backend", "app-server",
               "--host", f"unix:{drill.socket}", "--input", "issue=bug 7",
               "--input", "area=ui", "--wait", "--json")  # fmt: skip
    assert done.code == 0, done.stderr
    source = str(json.loads(done.stdout)["run"])

    kept = cli(drill, "flow", "rerun", source, "--from", "build", "--wait", "--json")
    assert kept.code == 0, kept.stderr
    assert kept.json()["inputs"] == {"issue": "bug 7", "area": "ui"}
    anew = cli(drill, "flow", "rerun", source, "--from", "build", "--input", "issue=bug 8",
               "--wait", "--json")  # fmt: skip
    assert anew.code == 0, anew.stderr
    rerun = anew.json()["run"]
    spec = json.loads((drill.crw.state / "flow" / rerun / "run.json").read_text())
    assert spec["inputs"] == {"issue": "bug 8", "area": "ui"}
    assert spec["rerun"] == {"run": source, "node": "build"}
    rows = rows_of(drill, rerun)
    assert next(r for r in rows if r["row"] == "started")["inputs"] == spec["inputs"]
    build = next(r for r in rows if r["row"] == "step_published" and r["call"] == "build.1")
    assert "Fix bug 8 in ui, from " in build["input"]


def test_a_rerun_of_a_run_started_with_a_raised_file_limit_keeps_that_limit(
    drill: AppDrill,
) -> None:
    """A source whose workflow is over the default 1 MiB, started with
    `CRW_MAX_FILE_BYTES` raised: its rerun, from a shell that sets no limit,
    loads the same file under the source's recorded limit and records it too."""
    limit = 2 * 1024 * 1024
    drill.workflow.write_text(drill.workflow.read_text() + "#" * (1024 * 1024 + 1) + "\n")
    drill.host("sim/script", BROKEN)
    env = drill.crw.env
    drill.crw.env = env | {"CRW_MAX_FILE_BYTES": str(limit)}
    try:
        source = failed_run(drill)
    finally:
        drill.crw.env = env
    assert "CRW_MAX_FILE_BYTES" not in drill.crw.env
    drill.host("sim/script", GOOD)
    done = cli(drill, "flow", "rerun", source, "--from", "build", "--wait", "--json")
    assert done.code == 0, done.stderr
    rerun = RunDir(drill.crw.state / "flow" / json.loads(done.stdout)["run"])
    assert json.loads(rerun.run_json.read_text())["max_file_bytes"] == limit
    assert read_run_journal(rerun.journal).rows[-1]["status"] == "completed"

"""The timeline's layout (rows in, shapes out) and its SVG, without a browser.

The rows are a journal's, written here: a call whose first attempt is lost and
whose answer is repaired on the open subagent, a call paused mid-turn (its turn
interrupted, the call held), a review that rejects; and a run of 1,000 calls.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crw.cli.read.timeline import COLOURS, render_html, render_svg
from crw.engine.views.timeline import LABEL_W, MARGIN, PLOT_W, Shape, Timeline, layout

T0 = datetime(2026, 1, 1, 10, 0, 0, tzinfo=UTC)
LEFT = MARGIN + LABEL_W
SVG = "{http://www.w3.org/2000/svg}"


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def row(t: float, kind: str, call: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"at": at(t), "row": kind} | ({"call": call} if call else {}) | fields


def turn_rows(t: float, call: str, k: int, attempt: int, **step: Any) -> list[dict[str, Any]]:
    """A step at `t` and its turn at t + 0.5 (a spawn binds a subagent first)."""
    marker = {"k": k, "op": f"{call}/t{k}", "attempt": attempt}
    bound = [] if step.get("action") == "send_input" else [row(t + 0.5, "thread_started", call)]
    return [
        row(t, "step_published", call, **marker, **step),
        *[{**r, "attempt": attempt} for r in bound],
        row(t + 0.5, "turn_started", call, **marker),
    ]


def journal() -> list[dict[str, Any]]:
    """10 s: build.1 loses attempt 1 at 3 s, answers wrong on attempt 2 and is
    repaired; work.1 is paused mid-turn at 5 s; review.1 rejects at 9 s."""
    return [
        row(0, "started", backend="session", pid=7),
        row(0, "prepared", "build.1", node="build", role="executor"),
        *turn_rows(0, "build.1", 1, 1, action="spawn"),
        row(3, "session_attempt_lost", "build.1", attempt=1, reason="turn_interrupted"),
        *turn_rows(3, "build.1", 1, 2, action="spawn"),
        *turn_rows(6, "build.1", 2, 2, action="send_input", repair=True,
                   call_tokens={"input": 90, "output": 10, "total": 100}),
        row(8, "completed", "build.1", tokens={"input": 130, "output": 20, "total": 150}),
        row(1, "prepared", "work.1", node="work", role="explorer"),
        *turn_rows(1, "work.1", 1, 1, action="spawn"),
        row(5, "interrupt_requested", "work.1", reason="paused", attempt=1),
        row(5, "held", "work.1", reason="paused", tokens={"total": 40}),
        row(5, "paused", reason="paused"),
        row(6, "started", backend="session", pid=8),
        row(8, "prepared", "review.1", node="review", role="reviewer", review="build.1"),
        *turn_rows(8, "review.1", 1, 1, action="spawn"),
        row(9, "completed", "review.1", result={"verdict": "reject", "findings": ["x"]},
            tokens={"total": 30}),
        row(10, "ended", status="failed"),
    ]  # fmt: skip


def x(t: float) -> float:
    return LEFT + PLOT_W * t / 10


def of(timeline: Timeline, kinds: set[str]) -> list[Shape]:
    return [shape for shape in timeline.shapes if shape.kind in kinds]


def test_each_call_is_a_lane_of_its_attempts_turns_and_marks_on_the_time_axis() -> None:
    timeline = layout(journal(), run="r")
    assert timeline.lanes == ["build.1", "work.1", "review.1"]
    assert timeline.calls == 3
    turns = [
        (s.kind, round(s.x, 1), round(s.w, 1), s.label, s.title.split(";")[0])
        for s in of(timeline, {"turn", "repair_turn"})
    ]
    assert turns == [
        ("turn", x(0.5), x(3) - x(0.5), "", "build.1 turn 1 (attempt 1)"),
        ("turn", x(3.5), x(6) - x(3.5), "", "build.1 turn 1 (attempt 2)"),  # lost before it
        ("repair_turn", x(6.5), x(8) - x(6.5), "50", "build.1 turn 2 (attempt 2) repair"),
        ("turn", x(1.5), x(5) - x(1.5), "40", "work.1 turn 1 (attempt 1)"),
        ("turn", x(8.5), x(9) - x(8.5), "30", "review.1 turn 1 (attempt 1)"),
    ]
    attempts = [(s.kind, s.x, s.w, s.title) for s in of(timeline, {"attempt", "attempt_lost"})]
    assert attempts == [
        ("attempt_lost", x(0), x(3) - x(0), "build.1 attempt 1 (lost)"),
        ("attempt", x(3), x(8) - x(3), "build.1 attempt 2"),
        ("attempt", x(1), x(5) - x(1), "work.1 attempt 1"),
        ("attempt", x(8), x(9) - x(8), "review.1 attempt 1"),
    ]
    marks = [(s.kind, s.x, s.title) for s in of(timeline, {*COLOURS} - {"turn", "repair_turn"})]
    lanes = {s.title.split(":")[0] for s in of(timeline, {"lane_label"})}
    assert lanes == {"build.1", "work.1", "review.1"}
    assert [m for m in marks if not m[0].startswith(("span", "attempt"))] == [
        ("lost", x(3), "build.1: attempt 1 lost: turn_interrupted"),
        ("repair", x(6), "build.1: repair turn 2 published"),
        ("interrupt", x(5), "work.1: interrupt requested: paused"),
        ("held", x(5), "work.1: held: paused"),
        ("review_reject", x(9), "review.1: review: reject (1 finding)"),
        ("run_started", x(0), "process started (pid 7)"),
        ("run_paused", x(5), "paused by crw flow pause"),
        ("run_started", x(6), "process started (pid 8)"),
        ("run_ended", x(10), "ended: failed"),
    ]
    spans = [(s.kind, s.x, s.w) for s in of(timeline, {k for k in COLOURS if "span" in k})]
    assert spans == [
        ("span_completed", x(0), x(8) - x(0)),
        ("span_held", x(1), x(5) - x(1)),
        ("span_completed", x(8), x(9) - x(8)),
    ]


def test_a_live_run_draws_its_open_turn_up_to_now() -> None:
    rows = [*journal()[:5], row(2, "prepared", "work.1")]  # build.1's first turn runs
    now = T0 + timedelta(seconds=4)
    (turn,) = of(layout(rows, run="r", now=now), {"turn"})
    assert (turn.x, turn.x + turn.w) == (LEFT + PLOT_W * 0.5 / 4, LEFT + PLOT_W)
    (ended,) = of(layout(rows, run="r"), {"turn"})  # no process runs it: its last row ends it
    assert (ended.x, ended.x + ended.w) == (LEFT + PLOT_W * 0.5 / 2, LEFT + PLOT_W)


def test_a_lane_is_coloured_by_its_calls_state_as_status_reads_it() -> None:
    spans = {k for k in COLOURS if k.startswith("span_")}
    states = [[s.kind for s in of(layout(journal()[:n], run="r"), spans)] for n in (3, 5, 6)]
    assert states == [["span_waiting_session"], ["span_running"], ["span_lost"]]


def thousand_calls() -> list[dict[str, Any]]:
    rows = [row(0, "started", backend="session")]
    for n in range(1000):
        call = f"n.{n + 1}"
        end = "held" if n in (10, 500, 990) else "completed"
        rows += [
            row(n, "prepared", call, node="n", role="explorer"),
            *turn_rows(n, call, 1, 1, action="spawn"),
            row(n + 2, end, call, reason="deadline" if end == "held" else None),
        ]
    return rows


def test_a_run_of_a_thousand_calls_shows_a_hundred_lanes_with_every_held_call_and_the_load() -> (
    None
):
    timeline = layout(thousand_calls(), run="r")
    assert timeline.calls == 1000
    assert len(timeline.lanes) == 100
    assert {"n.11", "n.501", "n.991"} <= set(timeline.lanes)  # the calls not completed
    assert timeline.lanes[:3] == ["n.1", "n.11", "n.12"]  # then others spread, in order
    assert timeline.lanes[-1] == "n.991"
    assert timeline.note.startswith("100 of 1,000 calls shown")
    (load,) = of(timeline, {"load"})
    assert load.label == "in flight (max 2)"
    every = layout(thousand_calls(), run="r", max_lanes=0)
    assert len(every.lanes) == 1000 and not of(every, {"load"})


def test_the_svg_holds_every_text_a_row_may_carry_escaped() -> None:
    """A reason, an error or a finding may hold markup, a control character or a
    lone surrogate: the SVG and the page still parse, and show it as text."""
    nasty = '</text><script>alert("x")</script>&\x07\ud800'
    rows = journal()
    rows[rows.index(next(r for r in rows if r["row"] == "held"))] |= {"error": nasty}
    timeline = layout(rows, run="r<&>")
    svg = render_svg(timeline)
    root = ET.fromstring(svg.encode("utf-8"))
    assert not root.findall(f".//{SVG}script")
    titles = [t.text for t in root.iter(f"{SVG}title")]
    assert 'work.1: held: paused: </text><script>alert("x")</script>&\ufffd\ufffd' in titles
    assert root.find(f"{SVG}text") is not None
    assert next(root.iter(f"{SVG}text")).text == timeline.title  # "run r<&> · …", as it was
    page = render_html(timeline.title, svg)
    assert "<title>run r&lt;&amp;&gt; · " in page
    assert page.encode("utf-8")


KINDS = ["started", "prepared", "step_published", "thread_started", "turn_started",
         "session_attempt_lost", "interrupt_requested", "completed", "null_model", "held",
         "superseded", "decision", "paused", "ended", "later_kind"]  # fmt: skip
PARTS = st.sampled_from(["total", "input", "verdict", "findings"])
JSON = (
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.text(max_size=4)
    | st.lists(st.integers(0, 3) | st.text(max_size=2), max_size=2)
    | st.dictionaries(PARTS, st.integers(-3, 9), max_size=2)
)
FIELD = st.sampled_from(
    ["tokens", "call_tokens", "reason", "result", "repair", "choice", "by",
     "error", "repair_errors", "pid", "status", "node", "role", "resume", "conversation_turn"]
)  # fmt: skip


@st.composite
def rows_of_any_shape(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Rows as a journal of a later crw may hold: any kind, any value in any field."""
    made = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(KINDS))
        made.append(
            row(draw(st.integers(0, 20)), kind, draw(st.sampled_from(["a.1", "b.2", "c"])))
            | draw(st.dictionaries(FIELD, JSON, max_size=3))
            | draw(st.dictionaries(st.sampled_from(["k", "attempt"]), st.integers(0, 3)))
        )
    return made


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows_of_any_shape())
def test_rows_of_any_shape_lay_out_and_draw_as_well_formed_svg(rows: list[dict[str, Any]]) -> None:
    """Rows are read leniently: a kind this crw does not know, a field missing, or
    of another type than the catalogue's, never stops the picture, and it parses
    (a count, k, attempt or a token count, is a whole number: the run's replay
    reads them so too)."""
    ET.fromstring(render_svg(layout(rows, run="r")).encode("utf-8"))


def test_a_long_lane_label_is_cut_to_its_column_and_its_tooltip_holds_it_whole() -> None:
    call = "implement_the_whole_feature_now.12"
    rows = [row(0, "prepared", call, node="implement_the_whole_feature_now", role="executor")]
    (label,) = of(layout(rows, run="r"), {"lane_label"})
    assert label.label == "implement_the_whole_feature_n…"
    assert label.title.startswith(f"{call}: executor, node implement_the_whole_feature_now")


def test_a_skipped_calls_grey_band_is_in_the_legend() -> None:
    rows = [
        row(0, "prepared", "work.1", node="work", role="explorer"),
        *turn_rows(0, "work.1", 1, 1, action="spawn"),
        row(2, "held", "work.1", reason="deadline"),
        row(3, "decision", "work.1", choice="skip"),
    ]
    timeline = layout(rows, run="r")
    (band,) = of(timeline, {k for k in COLOURS if k.startswith("span_")})
    assert band.kind == "span_skipped"
    legend = {s.kind.removeprefix("legend:"): s.label for s in timeline.shapes if s.label}
    assert legend["span_skipped"] == "call skipped"


def test_only_a_review_call_carries_a_verdict_not_a_plain_critic_whose_answer_has_one() -> None:
    """critique.1 is a critic node whose schema asks for a verdict; build.2 is the
    review of build.1 (its prepared row names the call it judges)."""
    verdict = {"verdict": "accept", "findings": []}
    rows = [
        row(0, "prepared", "build.2", node="build", role="reviewer", review="build.1"),
        *turn_rows(0, "build.2", 1, 1, action="spawn"),
        row(2, "completed", "build.2", result=verdict),
        row(2, "prepared", "critique.1", node="critique", role="critic"),
        *turn_rows(2, "critique.1", 1, 1, action="spawn"),
        row(4, "completed", "critique.1", result=verdict),
    ]
    timeline = layout(rows, run="r")
    marks = [s.title for s in of(timeline, {"review_accept", "review_reject"})]
    assert marks == ["build.2: review: accept (0 findings)"]
    labels = {s.title.split(":")[0]: s.title for s in of(timeline, {"lane_label"})}
    assert labels["build.2"].endswith("; reviews build.1")
    assert "reviews" not in labels["critique.1"]


def test_a_session_turn_bound_after_it_ended_is_drawn_from_the_hosts_start_of_it() -> None:
    """The owner reported the spawn late: the bind at 6 s found a turn the host
    started at 2 s and ended by then (it completes at 6.5 s). Its bar runs from
    2 s, not a sliver from the bind; a host start before the step was published
    (the host's seconds are whole) is taken as the step's time. spec: BIND-5"""
    host = int((T0 + timedelta(seconds=2)).timestamp())
    rows = [
        row(0, "prepared", "build.1", node="build", role="executor"),
        row(1.5, "step_published", "build.1", k=1, attempt=1, action="spawn"),
        row(6, "thread_started", "build.1", attempt=1),
        row(6, "turn_started", "build.1", k=1, attempt=1, host_started_at=host),
        row(6.5, "completed", "build.1", tokens={"total": 10}),
        row(0, "prepared", "plan.1", node="plan", role="architect"),
        row(4, "step_published", "plan.1", k=1, attempt=1, action="spawn"),
        row(5, "turn_started", "plan.1", k=1, attempt=1, host_started_at=host),
        row(5.5, "completed", "plan.1", tokens={"total": 10}),
        row(10, "ended", status="completed"),
    ]
    build, plan = of(layout(rows, run="r"), {"turn"})
    assert (build.x, build.x + build.w) == (x(2), x(6.5))
    assert (plan.x, plan.x + plan.w) == (x(4), x(5.5))
    without = [{k: v for k, v in r.items() if k != "host_started_at"} for r in rows]
    sliver, _ = of(layout(without, run="r"), {"turn"})  # an older journal's row: the bind's time
    assert (sliver.x, sliver.x + sliver.w) == (x(6), x(6.5))

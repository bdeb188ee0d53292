"""The human form of `crw flow call`: the view in sections, drawn with rich.

Every text the run's rows or its host hold goes in as a `rich.text.Text`, never
as markup, after `terminal_text` escaped what a terminal would obey: an answer
that holds `[bold]` or an escape sequence is printed as the characters it is.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from crw.cli.output import format_tokens, terminal_text
from crw.engine.views.call_detail import CallDetail
from crw.engine.views.call_turns import AttemptView
from crw.journal.replay import TOKEN_PARTS


def _t(value: object, style: str = "") -> Text:
    """`value` as text shown as written (no markup, terminal controls escaped)."""
    return Text(terminal_text("-" if value is None else str(value)), style=style)


def _clock(at: str | None) -> str | None:
    """A row's time as its time of day (UTC, to the millisecond), as `show` prints it."""
    return at[11:23] if at is not None and len(at) >= 23 else at


def _line(label: str, value: object) -> Text:
    return Text.assemble((f"{label}: ", "bold"), _t(value))


def _pretty(value: Any) -> Text:
    return _t(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False))


def show(detail: CallDetail) -> None:
    """Print `detail` for a person on stdout."""
    Console(highlight=False, soft_wrap=True).print(render(detail))


def render(detail: CallDetail) -> RenderableType:
    parts: list[RenderableType] = [*_head(detail)]
    for attempt in detail.attempts:
        parts += _attempt(attempt)
    parts += _tokens(detail)
    parts += _repairs(detail)
    parts += _answer(detail)
    parts += _workspace(detail)
    parts += _notes(detail)
    parts += _transcript(detail)
    return Group(*parts)


def _section(title: str) -> Rule:
    return Rule(Text(title, style="bold"), align="left")


def _head(d: CallDetail) -> list[RenderableType]:
    lines: list[RenderableType] = [
        _section(f"call {terminal_text(d.call)} of run {terminal_text(d.run)}"),
        _line("node", d.node),
        _line("role", d.role),
        _line("backend", d.backend),
        _line("state", d.state if d.reason is None else f"{d.state} ({d.reason})"),
    ]
    if d.error:
        lines.append(_line("error", d.error))
    if d.fix:
        lines.append(_line("fix", d.fix))
    for choice, command in (d.answer_commands or {}).items():
        lines.append(_line(f"answer {choice}", command))
    for error in d.errors or ():
        lines.append(_line("schema error", error))
    if d.review is not None:
        count = d.review.get("findings")
        lines.append(
            _line("review", f"of {d.review['of']}: {d.review['verdict']}, {count} findings")
        )
    elif d.reviews:
        lines.append(_line("reviews", d.reviews))
    if d.resume:
        lines.append(_line("continues", d.resume))
    if d.by:
        lines.append(_line("runs again as", d.by))
    took = f"{d.seconds:.1f} s" if d.seconds is not None else "-"
    lines.append(_line("time", f"{d.started_at or '-'} .. {d.ended_at or '-'} ({took})"))
    lines.append(_line("attempts, turns", f"{d.attempt}, {d.turns}"))
    lines.append(_line("tokens", format_tokens(d.tokens)))
    return lines


def _attempt(a: AttemptView) -> list[RenderableType]:
    out: list[RenderableType] = [_section(f"attempt {a.n}")]
    out.append(_line("time", f"{a.started_at or '-'} .. {a.ended_at or 'running'}"))
    if a.lost:
        out.append(_line("lost", a.lost))
    for thread in a.threads:
        flags = f" ({', '.join(thread.flags)})" if thread.flags else ""
        pair = f"{thread.model or '-'}/{thread.effort or '-'}"
        out.append(_line("thread", f"{thread.thread_id} {pair} in {thread.cwd}{flags}"))
    for step in a.steps:
        again = f", published {step.published} times" if step.published > 1 else ""
        what = "repair" if step.repair else (step.action or "step")
        out.append(_line(f"step t{step.k}", f"{what} {step.marker} at {step.published_at}{again}"))
        if step.packet:
            size = f"{len(step.packet_text.splitlines())} lines" if step.packet_text else "unread"
            out.append(_line("  packet", f"{step.packet} ({step.packet_digest}; {size})"))
            if step.packet_error:
                out.append(_line("  packet unread", step.packet_error))
        else:
            out.append(_line("  input", f"{len(step.input)} characters ({step.input_digest})"))
        if step.note:
            out.append(_line("  note", step.note))
    table = Table("turn", "turn id", "started", "ended", "outcome", box=None, padding=(0, 1, 0, 0))
    table.caption = "tNr: a repair turn" if any(t.repair for t in a.turns) else None
    for column in table.columns[:4]:  # an id is copied whole; the outcome wraps
        column.no_wrap = True
    for turn in a.turns:
        outcome = turn.outcome + (f" (interrupt: {turn.interrupt})" if turn.interrupt else "")
        table.add_row(
            _t(f"t{turn.k}" + ("r" if turn.repair else "")),
            _t(turn.turn_id),
            _t(_clock(turn.started_at)),
            _t(_clock(turn.ended_at)),
            _t(outcome),
        )
    if a.turns:
        out.append(table)
    return out


def _tokens(d: CallDetail) -> list[RenderableType]:
    table = Table("turn", *TOKEN_PARTS, box=None, padding=(0, 1, 0, 0))
    for attempt in d.attempts:
        for turn in attempt.turns:
            label = f"t{turn.k} a{turn.attempt}"
            if turn.tokens is None:
                why = turn.tokens_unmeasured or "not recorded"
                table.add_row(_t(label), _t(why), *[_t("") for _ in TOKEN_PARTS[1:]])
            else:
                table.add_row(_t(label), *[_t(turn.tokens.get(p, 0)) for p in TOKEN_PARTS])
    table.add_row(_t("call", "bold"), *[_t(d.tokens.get(p, 0), "bold") for p in TOKEN_PARTS])
    return [_section("tokens"), table]


def _repairs(d: CallDetail) -> list[RenderableType]:
    out: list[RenderableType] = []
    for repair in d.repairs:
        out.append(_section(f"repair (turn {repair.k}, attempt {repair.attempt})"))
        for error in repair.errors:
            out.append(_line("schema error", error))
        out.append(Text("the answer that broke the schema:", style="bold"))
        out.append(_t(repair.invalid_answer))
        out.append(_line("outcome", repair.outcome))
        if repair.repaired_answer is not None:
            out.append(Text("the repaired answer:", style="bold"))
            out.append(_pretty(repair.repaired_answer))
    return out


def _answer(d: CallDetail) -> list[RenderableType]:
    out: list[RenderableType] = [_section("answer")]
    if d.answer is None:
        out.append(_t("none"))
    else:
        out.append(
            _line("from", f"turn {d.answer.k}, attempt {d.answer.attempt}, at {d.answer.at}")
        )
        out.append(_line("digest", d.answer.result_digest))
        out.append(_pretty(d.answer.result))
        if d.answer.raw_text is not None:
            out.append(Text("taken out of the message:", style="bold"))
            out.append(_t(d.answer.raw_text))
    if d.schema is not None:
        out.append(_line("schema", f"{d.schema.source}: {d.schema.path or '-'}"))
        if d.schema.note:
            out.append(_line("schema note", d.schema.note))
    return out


def _workspace(d: CallDetail) -> list[RenderableType]:
    w = d.workspace
    out: list[RenderableType] = [_section("workspace")]
    out.append(_line("path", w.path))
    out.append(_line("kind", w.kind))
    if w.start_commit:
        out.append(_line("start commit", w.start_commit))
    if w.branch:
        out.append(_line("branch", w.branch))
    if w.head_moved:
        out.append(_line("HEAD moved", json.dumps(w.head_moved)))
    if w.commit:
        out.append(_line("crw.commit", w.commit.get("commit")))
        out.append(_line("node branch", w.commit.get("node_ref")))
    for changed in w.changed_files or ():
        out.append(_line(f"  {changed.status}", changed.path))
    if w.changed_error:
        out.append(_line("changed files", w.changed_error))
    return out


def _notes(d: CallDetail) -> list[RenderableType]:
    if not d.notes:
        return []
    out: list[RenderableType] = [_section("notes")]
    for note in d.notes:
        out.append(
            Text.assemble(_t(f"{note.at} {note.seq} {note.kind}: ", "bold"), _t(note.detail))
        )
    return out


def _transcript(d: CallDetail) -> list[RenderableType]:
    t = d.transcript
    if t is None:
        return []
    out: list[RenderableType] = [_section(f"transcript of turn {t.turn_id or '-'}")]
    if t.error is not None:
        out.append(_line("the host cannot give it", t.error))
        return out
    for item in t.items:
        out.append(Text.assemble(_t(f"[{item.type}] ", "bold"), _t(item.text)))
    return out

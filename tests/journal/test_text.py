"""Any text is safe to journal: a row's strings read back as JSON holds them.

A string that is not valid Unicode (a lone surrogate, such as an answer holding
the JSON escape `\\ud800`) is written as its `\\uXXXX` escape, so the line stays
UTF-8 and the row reads back exactly; a high surrogate directly followed by a low
one reads back as the one character the pair encodes, as any JSON reader reads it.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from trio.testing import MockClock, memory_stream_pair

import crw.text
from crw.engine.config.template import render_task
from crw.host.transport import JsonLinesTransport
from crw.journal.log import CHECKSUM, FRAMING, decode, encode_batch, encode_body
from crw.journal.rows import ROW_KINDS, RowModel, UnknownRow, dump_row, parse_row
from tests.actors import test_session_run as session
from tests.actors.test_app_server_run import harness, kinds, terminal

STAMP = "2026-11-30T00:00:00.000000Z"
PATH = Path("journal.jsonl")

CHAR = st.one_of(
    st.characters(codec=None, exclude_categories=()),
    st.characters(categories=["Cs"]),
    st.sampled_from(["\ud800", "\udfff", "\ud83d", "\ude00", '"', "\\", "\x00", "\u2028", "é"]),
)
# st.text draws surrogates almost never, even from an alphabet that has them.
TEXT = st.lists(CHAR, max_size=12).map("".join)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
WRITERS = frozenset({"seq", "at", "row"})
"""Fields a row does not choose: the writer's, and the kind."""


def _strategy(annotation: Any) -> st.SearchStrategy[Any] | None:
    """Values of a field's type that hold text, or None when it holds none."""
    if annotation is str:
        return TEXT
    if annotation is Any:
        return JSON
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        options = [s for arg in get_args(annotation) if (s := _strategy(arg)) is not None]
        return st.one_of(options) if options else None
    inner = [_strategy(arg) for arg in get_args(annotation)]
    if origin is dict and inner[1] is not None:
        return st.dictionaries(TEXT, inner[1], max_size=3)
    if origin is list and inner[0] is not None:
        return st.lists(inner[0], max_size=3)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        fields = _text_fields(annotation)
        return st.fixed_dictionaries({}, optional=fields) if fields else None
    return None


def _text_fields(model: type[BaseModel]) -> dict[str, st.SearchStrategy[Any]]:
    fields = {
        name: _strategy(info.annotation)
        for name, info in model.model_fields.items()
        if name not in WRITERS
    }
    return {name: strategy for name, strategy in fields.items() if strategy is not None}


KINDS: list[tuple[str, type[RowModel]]] = [*ROW_KINDS.items(), ("later", UnknownRow)]


def test_every_kind_has_a_text_field_or_takes_unknown_ones() -> None:
    assert all("call" in _text_fields(model) for _, model in KINDS)
    assert "result" in _text_fields(ROW_KINDS["completed"])
    assert "allocation" in _text_fields(ROW_KINDS["prepared"])


@st.composite
def rows(draw: st.DrawFn) -> RowModel:
    """A row of any kind: text in any of its fields, and unknown fields (nulls too)."""
    kind, model = draw(st.sampled_from(KINDS))
    known = _text_fields(model)
    fields = draw(st.fixed_dictionaries({}, optional=known))
    taken = {*model.model_fields, FRAMING, CHECKSUM}
    # A field's name is code's, not the host's: pydantic takes only valid Unicode.
    names = st.text(max_size=8).filter(lambda name: name not in taken)
    extra = draw(st.dictionaries(names, JSON, max_size=3))
    return model.model_validate({"row": kind, **fields, **extra})


def as_json_reads(value: Any) -> Any:
    """`value` as a JSON reader reads it back: its strings as UTF-16 code units."""
    if isinstance(value, str):
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    if isinstance(value, list):
        return [as_json_reads(item) for item in value]
    if isinstance(value, dict):
        return {as_json_reads(key): as_json_reads(item) for key, item in value.items()}
    return value


@settings(max_examples=400, deadline=None)
@given(row=rows())
def test_any_text_in_any_field_encodes_and_reads_back(row: RowModel) -> None:
    line = encode_batch(1, STAMP, [encode_body(row)])
    line.decode("utf-8")  # strict: the line is UTF-8
    (read,) = decode(line, PATH).rows
    assert read == {"seq": 1, "at": STAMP, **as_json_reads(dump_row(row))}
    assert dump_row(parse_row(read)) == read


def test_a_lone_surrogate_reads_back_exactly_and_a_split_pair_as_its_character() -> None:
    row = UnknownRow.model_validate(
        {"row": "later", "lone": "a\ud800b\udfff", "pair": "\ud83d\ude00", "n": {"\udc00": None}}
    )
    body = encode_body(row)
    assert body == (
        b'"row":"later","lone":"a\\ud800b\\udfff","pair":"\\ud83d\\ude00","n":{"\\udc00":null}'
    )
    (read,) = decode(encode_batch(1, STAMP, [body]), PATH).rows
    assert read == {"seq": 1, "at": STAMP, "row": "later", "lone": "a\ud800b\udfff",
                    "pair": "\U0001f600", "n": {"\udc00": None}}  # fmt: skip


def test_a_lone_surrogate_in_a_typed_key_is_kept_not_replaced() -> None:
    """pydantic-core's JSON writer turns it into U+FFFD without a word."""
    row = ROW_KINDS["started"].model_validate({"role_pairs": {"r\ud800": {"model": "\ufffd"}}})
    (read,) = decode(encode_batch(1, STAMP, [encode_body(row)]), PATH).rows
    assert read["role_pairs"] == {"r\ud800": {"model": "\ufffd"}}


@pytest.mark.parametrize(
    ("answer", "end"),
    [
        pytest.param('{"summary": "half \\ud83d of a pair"}', "completed", id="valid"),
        pytest.param('{"summary": ["\\ud800"]}', "null_model", id="invalid"),
    ],
)
async def test_an_answer_holding_a_lone_surrogate_ends_its_call_with_a_durable_row(
    tmp_path: Path, autojump_clock: MockClock, answer: str, end: str
) -> None:
    """The answer is JSON text with a lone surrogate's escape. Valid, the call
    completes and the next call's task holds the text (the host gets U+FFFD for
    it); invalid, the call ends null_model after its repair turn. Either way the
    terminal row is in the journal and the run goes on to its end."""
    async with harness(tmp_path) as h:
        await h.script({"marker": "build.1/*"}, text=answer)
        state, rows = await h.run()
    assert state == "ended" and rows[-1]["row"] == "ended"
    assert kinds(rows, "build.1")[-1] == end
    done = terminal(rows, "build.1")
    if end == "completed":
        assert done["result"] == {"summary": "half \ud83d of a pair"}
        assert "raw_text" not in done  # the answer was taken whole: kept once, as result
        assert kinds(rows, "review.1")[-1] == "completed"
    else:
        assert done["errors"] == ["$.summary: ['\\ud800'] is not of type 'string'"]


async def test_a_session_call_whose_answer_holds_a_lone_surrogate_completes(
    tmp_path: Path, autojump_clock: MockClock
) -> None:
    """The session backend: the completed row is in the journal, and the next
    call's packet and step file, which hold the answer's text, are written."""
    async with session.harness(tmp_path) as h:
        await h.script({"marker": "build.1/*"}, text='{"summary": "half \\ud83d of a pair"}')
        state, rows = await h.go()
    assert state == "ended" and rows[-1]["status"] == "completed"
    done = next(r for r in rows if r["row"] == "completed" and r["call"] == "build.1")
    assert done["result"] == {"summary": "half \ud83d of a pair"}
    review = next(r for r in rows if r["row"] == "step_published" and r["call"] == "review.1")
    assert "half \ufffd of a pair" in await trio.Path(review["packet"]).read_text()


def test_a_task_takes_an_earlier_lone_surrogate_as_the_replacement_character() -> None:
    results = {"build": {"summary": "a\ud800b", "list": ["\udfff"]}}
    text = render_task("Review {build.summary} {build.list}", results)
    assert text == 'Review a\ufffdb ["\ufffd"]'


async def test_text_for_the_host_goes_out_as_unicode() -> None:
    """A lone surrogate in a message to the host (an answer's text in a repair
    turn) is sent as U+FFFD: the host takes only Unicode."""
    ours, theirs = memory_stream_pair()
    await JsonLinesTransport(ours).send({"text": "a\ud800b"})
    assert await JsonLinesTransport(theirs).receive() == {"text": "a\ufffdb"}


def test_only_text_that_holds_a_surrogate_is_searched(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every row and host message passes here: the pattern's walk runs only on text
    that holds a surrogate."""
    searched: list[str] = []
    pattern = crw.text._SURROGATE

    class Spy:
        def sub(self, repl: Any, text: str) -> str:
            searched.append(text)
            return pattern.sub(repl, text)

    monkeypatch.setattr(crw.text, "_SURROGATE", Spy())
    assert crw.text.replace_surrogates('{"a":"plain"}') == '{"a":"plain"}'
    assert crw.text.escape_surrogates('{"a":"é😀"}') == '{"a":"é😀"}'
    assert searched == []
    assert crw.text.replace_surrogates("a\ud800b") == "a\ufffdb"
    assert crw.text.escape_surrogates('"\udc00"') == '"\\udc00"'
    assert searched == ["a\ud800b", '"\udc00"']


@given(JSON)
@settings(max_examples=300)
def test_json_loads_reads_what_json_reads(value: Any) -> None:
    """pydantic-core's parser reads the journal's lines and the host's messages;
    what it refuses (the escape of a lone surrogate) `json` reads: the values are
    `json`'s either way."""
    import json

    import pydantic_core  # noqa: F401  (loaded, as in the run process)

    text = json.dumps(value)
    assert crw.text.json_loads(text) == json.loads(text)
    assert crw.text.json_loads(text.encode("utf-8", "surrogatepass")) == json.loads(text)


def test_json_loads_takes_pydantic_cores_parser_once_loaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fast parser is the one taken when the process has it; `json` reads
    what it refuses, and raises what `json` raises for text that is not JSON."""
    import sys

    parsed: list[object] = []

    class Core:
        @staticmethod
        def from_json(text: object, cache_strings: str) -> object:
            parsed.append(text)
            if b"\\ud800" in bytes(text):  # type: ignore[call-overload]
                raise ValueError("lone surrogate")
            return {"fast": True}

    monkeypatch.setitem(sys.modules, "pydantic_core", Core)
    assert crw.text.json_loads(b'{"a":1}') == {"fast": True}
    assert crw.text.json_loads(b'{"a":"\\ud800"}') == {"a": "\ud800"}
    assert parsed == [b'{"a":1}', b'{"a":"\\ud800"}']
    monkeypatch.delitem(sys.modules, "pydantic_core")
    assert crw.text.json_loads(b'{"a":1}') == {"a": 1}
    assert len(parsed) == 2
    with pytest.raises(ValueError):
        crw.text.json_loads(b"{not json")


async def test_a_host_message_with_a_lone_surrogate_escape_reads_back_exactly() -> None:
    """The host may send any text an answer holds: the escape of a lone surrogate
    reads as that code unit, as `json` reads it."""
    import pydantic_core  # noqa: F401  (loaded, as in the run process)

    ours, theirs = memory_stream_pair()
    await ours.send_all(b'{"text":"a\\ud800b","n":1}\n')
    assert await JsonLinesTransport(theirs).receive() == {"text": "a\ud800b", "n": 1}

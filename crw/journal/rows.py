"""The row catalogue: one pydantic model per row kind, one union on `row`.

Every row a run writes is one of these models. The names are the spec's
(../shared/spec/session-calls.md) and ARCHITECTURE.md's: a reader greps the spec
word and finds the model. A field the catalogue does not know is kept on read
(`extra="allow"`) and written back unchanged; a kind it does not know reads as
`UnknownRow`, so a journal written by a later crw never fails to read.

The journal line of a row is `{"seq", "at", "row", "call"?, ...fields}`; `seq` and
`at` are set by the journal writer when it commits the row.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Tag,
    TypeAdapter,
    model_serializer,
)

TOKEN_PARTS = ("input", "cached_input", "output", "reasoning_output", "total")


class Tokens(BaseModel):
    """Token counts in all their parts. A part that is 0 is left out of the row,
    and a row written before the parts existed reads each missing one as 0."""

    model_config = ConfigDict(extra="allow", frozen=True)

    input: int = 0
    cached_input: int = 0
    output: int = 0
    reasoning_output: int = 0
    total: int = 0

    @model_serializer(mode="plain")
    def _omit_zero_parts(self) -> dict[str, Any]:
        parts = {name: getattr(self, name) for name in TOKEN_PARTS if getattr(self, name)}
        parts.update(self.model_extra or {})
        return parts

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(**{p: getattr(self, p) + getattr(other, p) for p in TOKEN_PARTS})

    def __sub__(self, other: Tokens) -> Tokens:
        return Tokens(**{p: getattr(self, p) - getattr(other, p) for p in TOKEN_PARTS})


class RowModel(BaseModel):
    """Fields every row has. `seq` and `at` are the journal writer's."""

    model_config = ConfigDict(extra="allow")

    seq: int | None = None
    at: str | None = None
    call: str | None = None


class Started(RowModel):
    """The run's process came up and holds the run (engine row)."""

    row: Literal["started"] = "started"
    backend: str | None = None
    process: str | None = None
    pid: int | None = None
    role_pairs: dict[str, dict[str, str]] | None = None
    policy_digest: str | None = None


class UnknownRow(RowModel):
    """A kind this catalogue does not know (a later crw's): kept as read."""

    row: str


def _kind_of(value: Any) -> str:
    kind = value.get("row") if isinstance(value, dict) else getattr(value, "row", None)
    return kind if isinstance(kind, str) and kind in _KNOWN_KINDS else "unknown"


_KNOWN_KINDS = frozenset({"started"})

Row = Annotated[
    Annotated[Started, Tag("started")] | Annotated[UnknownRow, Tag("unknown")],
    Discriminator(_kind_of),
]
"""Any row: the union of every kind, discriminated on `row`."""

ROW_ADAPTER: TypeAdapter[Row] = TypeAdapter(Row)


def parse_row(data: dict[str, Any]) -> RowModel:
    """Validate one journal line's object into its row model."""
    return ROW_ADAPTER.validate_python(data)


def dump_row(row: RowModel) -> dict[str, Any]:
    """The row as the JSON object of its journal line: `seq, at, row, call` first,
    fields left unset as None left out, unknown fields exactly as they were read."""
    body = row.model_dump(mode="json", exclude_none=True)
    body.update(row.model_extra or {})
    head = {key: body.pop(key) for key in ("seq", "at", "row", "call") if key in body}
    return head | body

"""How a replay snapshot keeps a run's calls (crw.journal.snapshot writes and reads it).

A big run's calls are most of its snapshot, and most of them are settled
(`SETTLED_STATES`: completed, skipped, ...): the commands never look inside them
but `status`. So the calls are marshalled apart, in two packs: the settled ones in
pieces (marshalled lists of `[index, values]`, `values` a call's `CALL_FIELDS`),
unmarshalled and built only when the state's `calls` is first read
(`RunState.defer_calls`), and the open ones, built at once. A snapshot written from
a snapshot's state keeps its settled pieces as they are and adds the calls settled
since as one more (`SETTLED_CHUNKS`), so a write costs the open calls, not all.
The file's seal, head and format are crw.journal.snapshot's; this module never
reads or writes a file.
"""

from __future__ import annotations

import marshal
from dataclasses import dataclass, fields
from typing import Any

from crw.journal.framing import paused_gc
from crw.journal.replay import SETTLED_STATES, CallState, DeferredCalls, RunState

CALL_FIELDS = [f.name for f in fields(CallState) if f.name != "result"]
"""A call's fields the snapshot keeps: all but its result, which can be large and
which the commands do not show (a process that needs results replays the journal)."""
SETTLED_CHUNKS = 16
"""The most pieces the settled calls are kept in: a snapshot written from a
snapshot's state adds the calls settled since as one more piece, without
unmarshalling the others (a write then costs the open calls, not all); with more
pieces than this they are packed again as one."""


def pieces_of(body: memoryview, lengths: list[int]) -> tuple[bytes, ...]:
    """The settled pieces at the end of a snapshot's `body`, of `lengths` bytes each."""
    if type(lengths) is not list or any(type(n) is not int or n < 0 for n in lengths):
        raise TypeError("a snapshot's pieces are not listed as this crw lists them")
    at = len(body) - sum(lengths)
    if at < 0:
        raise ValueError("a snapshot's pieces are longer than it")
    pieces = []
    for n in lengths:
        pieces.append(bytes(body[at : at + n]))
        at += n
    return tuple(pieces)


@dataclass(frozen=True)
class Packed:
    """A snapshot's calls: each piece of `settled`, and `open`, is a marshalled
    list of `[index, values]` (`index`: the call's place among the calls,
    `values`: its `CALL_FIELDS`), `settled_ids` the settled calls, `after` an
    index past all."""

    settled_ids: frozenset[str]
    settled: tuple[bytes, ...]
    open: bytes
    after: int

    def __post_init__(self) -> None:
        if type(self.settled_ids) is not frozenset or type(self.settled) is not tuple:
            raise TypeError("a snapshot's calls are not packed as this crw packs them")
        if any(type(piece) is not bytes for piece in self.settled):
            raise TypeError("a snapshot's calls are not packed as this crw packs them")
        if type(self.open) is not bytes or type(self.after) is not int:
            raise TypeError("a snapshot's calls are not packed as this crw packs them")

    def places(self) -> dict[str, int]:
        """Each open call's index."""
        return {values[0]: index for index, values in marshal.loads(self.open)}

    def build(self, opened: dict[str, CallState]) -> dict[str, CallState]:
        """All the calls in their order: the settled ones built from their values
        (bytes this crw marshalled: their seal, format and fields were checked when
        they were loaded), the open ones as a replay left them, the calls it added
        last."""
        places = self.places()
        with paused_gc():
            entries = [
                (index, call_of(values))
                for piece in self.settled
                for index, values in marshal.loads(piece)
            ]
            entries += [
                (places.get(call_id, self.after + n), call)
                for n, (call_id, call) in enumerate(opened.items())
            ]
            entries.sort(key=_first)
            return {call.call: call for _, call in entries}


def _first(entry: tuple[int, CallState]) -> int:
    return entry[0]


def call_of(values: list[Any]) -> CallState:
    """The call of a snapshot's values (as `CallState(**fields)` makes it, without
    the keyword call: a snapshot of a big run holds thousands)."""
    if len(values) != len(CALL_FIELDS):
        raise ValueError("a call of the snapshot has other fields")
    call: CallState = object.__new__(CallState)
    call.__dict__ = dict(zip(CALL_FIELDS, values, strict=True))
    call.result = None
    return call


def call_values(call: CallState) -> list[Any]:
    """A call as a snapshot keeps it: its `CALL_FIELDS`' values, in order."""
    return [getattr(call, name) for name in CALL_FIELDS]


def packed_calls(
    settled_ids: frozenset[str],
    settled: tuple[bytes, ...],
    opened: dict[str, CallState],
    places: dict[str, int],
    after: int,
) -> DeferredCalls:
    """Calls kept as a snapshot's read keeps them: `settled`, marshalled lists of
    `[index, values]` (`call_values`) of the calls `settled_ids` names; `opened`
    built, each at its index in `places`; `after` an index past all. A snapshot
    written from a state holding them keeps `settled` as it is (`pack_calls`)."""
    entries = [[places[call_id], call_values(call)] for call_id, call in opened.items()]
    packed = Packed(settled_ids, settled, marshal.dumps(entries), after)
    return DeferredCalls(opened, packed.settled_ids, packed.build, packed)


Pack = tuple[frozenset[str], tuple[bytes, ...], bytes, int]


def keep_packed(state: RunState, pack: Pack) -> None:
    """Keep `state`'s settled calls as `pack` holds them, as a read of the snapshot
    just written would: the calls built are the open ones again, so what a replay
    or a read goes through stays a pool's worth however long the fold lives."""
    packed = Packed(*pack)
    deferred = state.deferred_calls()
    calls = deferred.open if deferred is not None else state.calls
    opened = {call_id: calls[call_id] for call_id in packed.places()}
    state.defer_calls(DeferredCalls(opened, packed.settled_ids, packed.build, packed))


def pack_calls(state: RunState) -> Pack:
    """The state's calls as `Packed` holds them. A state read from a snapshot
    whose settled calls were not built keeps their pieces as it read them, and
    adds the calls settled since as one more (`SETTLED_CHUNKS`)."""
    deferred = state.deferred_calls()
    packed = deferred.source if deferred is not None else None
    pieces: tuple[bytes, ...] = ()
    ids: frozenset[str] = frozenset()
    if deferred is not None and isinstance(packed, Packed):
        pieces, ids, places = packed.settled, packed.settled_ids, packed.places()
        entries = [
            (places.get(c, packed.after + n), call)
            for n, (c, call) in enumerate(deferred.open.items())
        ]
        after = packed.after + len(deferred.open)
    else:
        entries = list(enumerate(state.calls.values()))
        after = len(entries)
    settled, opened, new = [], [], []
    for index, call in entries:
        values = [getattr(call, name) for name in CALL_FIELDS]
        if call.state in SETTLED_STATES:
            settled.append([index, values])
            new.append(call.call)
        else:
            opened.append([index, values])
    if len(pieces) >= SETTLED_CHUNKS:
        settled = [entry for piece in pieces for entry in marshal.loads(piece)] + settled
        pieces = ()
    if settled or not pieces:
        pieces += (marshal.dumps(settled),)
    # The ids kept as they are when none settled since (a big run's exit: 100,000
    # of them), not copied into a set and a frozenset again.
    return (ids | frozenset(new) if new else ids), pieces, marshal.dumps(opened), after

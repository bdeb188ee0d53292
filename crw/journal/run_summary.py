"""An ended run's summary: what `crw flow list` shows of it, kept beside its replay
snapshot by a store that keeps one (PostgreSQL's `crw_snapshots.summary`).

A list of a database's runs reads every run at once. A replay snapshot holds
each of a run's calls (8.5 KB for 20 calls, 3.8 MB for 10,000): shipped for
1,000 runs, they were most of the list's time, on the server (read out of
TOAST) and in the client. The list of an ended run needs none of its settled
calls, only how many they are: the summary is the state's run fields, the ids of
its settled calls and its other calls (an ended run's few held or lost ones),
behind a CRC-32 as the snapshot is. A run not ended has none: its list counts
what its workflow still needs from every call, and reads its snapshot.

The summary's state is for a reader that folds no row into it: its settled calls
cannot be built (`counts` and `outcome` of an ended run build none).
"""

from __future__ import annotations

import marshal
import sys
import zlib
from dataclasses import fields

from crw.journal.replay import SETTLED_STATES, CallState, DeferredCalls, RunState
from crw.journal.snapshot_pack import CALL_FIELDS, call_of, call_values

FORMAT = f"crw-run-summary/1 {sys.implementation.cache_tag}"
_RUN_FIELDS = [f.name for f in fields(RunState) if f.name != "calls"]
_SEAL = 9
"""The CRC-32 of the rest, as eight hex digits and a newline."""


def summary_of(state: RunState) -> bytes | None:
    """The sealed summary of an ended run's `state` (None: the run has not ended)."""
    if state.state != "ended":
        return None
    deferred = state.deferred_calls()
    if deferred is not None:
        settled, others = set(deferred.settled), list(deferred.open.values())
    else:
        settled, others = set(), []
        for call in state.calls.values():
            if call.state in SETTLED_STATES:
                settled.add(call.call)
            else:
                others.append(call)
    body = (
        FORMAT,
        CALL_FIELDS,
        {name: getattr(state, name) for name in _RUN_FIELDS},
        frozenset(settled),
        [call_values(call) for call in others],
    )
    payload = marshal.dumps(body)
    return b"%08x\n" % zlib.crc32(payload) + payload


def parse_summary(raw: bytes) -> RunState | None:
    """The state a sealed summary keeps (None: it is damaged, or not this crw's)."""
    try:
        body = memoryview(raw)[_SEAL:]
        if raw[:_SEAL] != b"%08x\n" % zlib.crc32(body):
            return None
        head, call_fields, run, settled, others = marshal.loads(body)
        if head != FORMAT or call_fields != CALL_FIELDS or type(settled) is not frozenset:
            return None
        state = RunState(**run)
        opened = {values[0]: call_of(values) for values in others}
    except (ValueError, TypeError, EOFError, KeyError, IndexError):
        return None
    state.defer_calls(DeferredCalls(opened, settled, _unbuilt))
    return state


def _unbuilt(opened: dict[str, CallState]) -> dict[str, CallState]:
    raise LookupError("a run's summary keeps no settled call: read its snapshot")

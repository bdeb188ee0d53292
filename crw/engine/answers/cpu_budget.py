"""A function run on the calling thread under a budget of that thread's CPU time.

`run(fn, seconds)` returns what `fn()` returns, unless the calling thread spends
more than `seconds` of CPU in it: a watchdog thread then raises an exception in
it (`PyThreadState_SetAsyncExc`), at its next Python instruction, and `run`
raises `BudgetSpent`. CPU, not wall time: the watchdog reads the thread's own CPU
clock, so neither a loaded machine nor Trio's MockClock moves the budget, and
code that runs in a worker thread (off the event loop) is stopped all the same.
The stop lands only between Python instructions: code in C that runs long
without returning to Python (a regex match) bounds itself, with `remaining()`.

The watchdog wakes when the soonest budget could be spent (a thread's CPU time
never runs ahead of the wall clock). While functions keep coming it looks every
_POLL seconds even when nothing is watched, and a newcomer wakes it only when
its budget could be spent before that look: a run's answer checks (hundreds a
second, each microseconds) would otherwise each wake a watchdog asleep on
nothing, a thread switch apiece. _LINGER after the last newcomer it sleeps on
nothing. Registering a function costs a lock and three clock reads. While anything
is watched the cyclic garbage collector is off: a stop that landed in the
finalizer of an object another thread let go would cut that finalizer short.
"""

from __future__ import annotations

import ctypes
import gc
import math
import os
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

_LEAST_WAIT = 0.01
"""The shortest sleep of the watchdog: no spinning on a budget all but spent, and
how soon it stops again a thread that ran on past a stop."""
_POLL = 0.02
"""How often the watchdog looks while functions keep coming and none is watched:
a newcomer with at least this budget needs no wake-up (the check on the run's
event loop has 0.02 s)."""
_LINGER = 1.0
"""How long after the last newcomer the watchdog keeps looking every _POLL before
it sleeps on nothing."""


class BudgetSpent(Exception):
    """The function spent its budget of CPU time and was stopped."""


class _Stop(BaseException):
    """What the watchdog raises in a thread over its budget: a BaseException, so no
    `except Exception` of the code it stops swallows it."""


@dataclass(frozen=True)
class _Watch:
    clock: int
    until: float


_lock = threading.Lock()
"""Guards what is watched. A `threading.Lock`, whose `with` runs no Python code a
stop could land in (a Condition's does): a watched thread takes it too."""
_bell = threading.Lock()
"""Held but while a thread rings it: what wakes the watchdog before its next look."""
_bell.acquire()
_watched: dict[int, _Watch] = {}
_stopped: set[int] = set()
"""The threads the watchdog raised a stop in, until they took the last one."""
_state = {"watchdog": False, "gc": False}
"""Whether the watchdog runs, and disabled the garbage collector."""
_times = {"looks_at": math.inf, "newcomer": 0.0}
"""When (time.monotonic) the watchdog looks next (inf: it sleeps on nothing), and
when the last function was registered."""
_CURRENT: ContextVar[_Watch | None] = ContextVar("cpu_budget", default=None)


def remaining() -> float | None:
    """The CPU seconds left to the `run` under way on this thread; None outside one."""
    watch = _CURRENT.get()
    if watch is None:
        return None
    return max(watch.until - time.clock_gettime(watch.clock), 0.0)


def run(fn: Callable[[], T], seconds: float) -> T:
    """`fn()`, stopped once this thread spent `seconds` of CPU in it.

    Raises:
        BudgetSpent: the budget ran out before `fn` returned.
    """
    ident = threading.get_ident()
    clock = time.pthread_getcpuclockid(ident)
    watch = _Watch(clock, time.clock_gettime(clock) + seconds)
    token = _CURRENT.set(watch)
    try:
        _start_watching(ident, watch, seconds)
        try:
            return fn()
        finally:
            _stop_watching(ident)
    except _Stop:
        # A stop that landed before the finally's call took the lock left the
        # thread watched: forget it now, or the watchdog stops it ever after.
        _stop_watching(ident)
        raise BudgetSpent(f"took longer than {seconds:g} s of CPU") from None
    finally:
        _CURRENT.reset(token)


def _start_watching(ident: int, watch: _Watch, seconds: float) -> None:
    with _lock:
        if ident in _watched:
            raise RuntimeError("cpu_budget.run does not nest")
        _watched[ident] = watch
        if gc.isenabled():  # no finalizer of another's object runs where a stop lands
            gc.disable()
            _state["gc"] = True
        if not _state["watchdog"]:
            _state["watchdog"] = True
            threading.Thread(target=_watch_loop, name="cpu-budget", daemon=True).start()
        now = time.monotonic()
        _times["newcomer"] = now
        # Its budget cannot be spent before now + seconds of wall time: a watchdog
        # that looks by then need not wake.
        if _times["looks_at"] > now + seconds:
            _times["looks_at"] = now
            _ring()


def _ring() -> None:
    """Wake the watchdog (under _lock): unless a wake it has not taken yet is
    pending (a ring that met its look's timeout), the bell held is let go."""
    if _bell.locked():
        _bell.release()


def _stop_watching(ident: int) -> None:
    """Forget the thread, then take a stop the watchdog raised in it that has not
    landed yet, so that none lands after `run`: the watchdog stops a thread only
    while it is watched, both under the lock. A stop is taken by raising it here,
    not cleared: clearing leaves the interpreter's check for one switched on."""
    while True:
        try:
            with _lock:
                _watched.pop(ident, None)
                if not _watched and _state["gc"]:
                    gc.enable()
                    _state["gc"] = False
                stopped = ident in _stopped
            break
        except _Stop:  # one raised before the lock was taken
            continue
    if stopped:
        try:
            _async_raise(ident, _Stop)  # one stop pending, whether or not one was
            while True:  # each backward jump checks for it
                pass
        except _Stop:
            _stopped.discard(ident)


def _watch_loop() -> None:
    """Stop each thread over its budget, and again every _LEAST_WAIT until it is
    forgotten: a stop that lands where Python drops exceptions (a `__del__`, a
    callback) is printed and dropped, and the thread runs on."""
    while True:
        with _lock:
            waits = []
            for ident, watch in list(_watched.items()):
                try:
                    left = watch.until - time.clock_gettime(watch.clock)
                except OSError:  # the thread ended still watched: its clock is gone
                    del _watched[ident]
                    _stopped.discard(ident)
                    if not _watched and _state["gc"]:
                        gc.enable()
                        _state["gc"] = False
                    continue
                if left <= 0:
                    _async_raise(ident, _Stop)
                    _stopped.add(ident)
                waits.append(left)
            now = time.monotonic()
            if waits:
                wait = max(min(waits), _LEAST_WAIT)
            elif now - _times["newcomer"] < _LINGER:
                wait = _POLL
            else:
                wait = math.inf
            _times["looks_at"] = now + wait
        if wait < math.inf:
            _bell.acquire(timeout=wait)
        else:
            _bell.acquire()


def _async_raise(ident: int, exc: type[BaseException]) -> None:
    """Raise `exc` in the thread `ident` at its next Python instruction (in place
    of one it has not raised yet)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(exc))


def _forget_after_fork() -> None:
    """A forked child has none of its parent's threads: no watchdog, nothing watched."""
    global _lock, _bell
    _lock, _bell = threading.Lock(), threading.Lock()
    _bell.acquire()
    _watched.clear()
    _stopped.clear()
    _state.update(watchdog=False, gc=False)
    _times.update(looks_at=math.inf, newcomer=0.0)


os.register_at_fork(after_in_child=_forget_after_fork)

"""How long a test waits for a condition a real process brings about.

A deadline here is a hang guard, never a speed claim: a passing test meets its
condition in a second or two on a quiet machine, and the suite runs on several
xdist workers beside other work, where a cold `python -m crw` can take ten times
that. So the guard is generous; a test that proves a bound on time asserts it on
the mock clock, or against what would happen without the fix (the full wait).
"""

from __future__ import annotations

LOADED = 120.0
"""Seconds a test waits for a real process's row, file, lock or exit."""

AT_ONCE_WAIT = 2 * LOADED
"""Seconds a command is told it may wait when the test proves it returns "at once"
(`next --wait`, `dispatched --wait`, `answer --wait`): the test asserts it returned
within LOADED, the hang guard, so no load that slows the command's own start comes
near the bound, and a command that waited the whole window still fails it."""

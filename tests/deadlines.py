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

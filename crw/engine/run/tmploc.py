"""The one temp-location function (the spec's internal/tmploc, DirFrom).

`crw flow start` asks it once, for the starting environment, and records the answer
as `env.TMPDIR` of run.json, as written and also when it is the default. Every
relaunch, and every process that reads its spec, checks the recorded directory
again (`recorded_problem`) before anything of the run changes, since it may have
gone since the start; the fix is the directory made again, never a new spec.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping

from crw.errors import RefusedError

DEFAULT = "/tmp"
"""The temp location when TMPDIR is unset or empty."""


class TmpLocError(RefusedError):
    """The temp location is not usable; `str(err)` is tmploc's reason (one line)."""


def dir_from(environ: Mapping[str, str]) -> str:
    """The temp location of `environ`: TMPDIR as written, else `DEFAULT`.

    The value is not resolved or normalized: what is recorded is what the caller set.

    Raises:
        TmpLocError: the directory is not absolute, missing, not a directory or not
            writable (the reason names it and what to do).
    """
    directory = environ.get("TMPDIR") or DEFAULT
    check_dir(directory)
    return directory


def check_dir(directory: str) -> None:
    """Refuse a temp location that is not absolute, missing, not a directory or not writable.

    Writability is tried by creating and removing a file in it, since the mode bits
    say nothing for root.

    Raises:
        TmpLocError: with tmploc's reason.
    """
    reason = unusable_reason(directory)
    if reason is not None:
        raise TmpLocError(reason)


def unusable_reason(directory: str) -> str | None:
    """tmploc's reason why `directory` cannot be the temp location, or None when it can."""
    problem = _problem(directory)
    if problem is None:
        return None
    what, fix = problem
    return f"TMPDIR {_quote(directory)} {what}; {fix}"


def recorded_problem(overrides: Mapping[str, str]) -> str | None:
    """Why the env a run spec records cannot be put in place and the fix, or None
    when it can (or records nothing). The fix is the directory made again: the spec
    is never rewritten for it, and the caller's TMPDIR does not matter. The caller
    says what to do then."""
    directory = overrides.get("TMPDIR")
    problem = _problem(directory) if directory is not None else None
    if directory is None or problem is None:
        return None
    again = "writable again" if os.path.isdir(directory) else "again"
    return (
        f"the recorded TMPDIR {_quote(directory)} of its run.json {problem[0]}; "
        f"make that directory {again}"
    )


def _problem(directory: str) -> tuple[str, str] | None:
    """What is wrong with `directory` as the temp location and the fix, or None."""
    if not os.path.isabs(directory):
        return "is not absolute", "set TMPDIR to an absolute directory"
    if not os.path.exists(directory):
        return "does not exist", "create it or set TMPDIR to an existing directory"
    if not os.path.isdir(directory):
        return "is not a directory", "set TMPDIR to a directory"
    fix = "make it writable or set TMPDIR to a writable directory"
    try:
        fd, probe = tempfile.mkstemp(prefix=".crw-tmploc-", dir=directory)
    except OSError as err:
        return f"is not writable ({err.strerror or err})", fix
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError as err:
        return f"does not let crw remove its files ({err.strerror or err})", fix
    return None


def _quote(value: str) -> str:
    # JSON quoting keeps a value with spaces or control characters on one line.
    return json.dumps(value, ensure_ascii=False)

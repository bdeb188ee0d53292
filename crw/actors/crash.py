"""The crash drill's kill point: die right after a chosen row is durable.

`CRW_CRASH_AFTER=<row>[@<call>][#<n>]` in a run process's environment makes it
kill itself with SIGKILL right after the n-th (default first) durable commit that
holds a `<row>` row (of `<call>`, when given), before the process acts on it: the
moment a real crash between two rows leaves behind. Tests use it to prove that
every crash point resumes to the same outcome; a run without the variable is
untouched.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Mapping, Sequence

from crw.actors.journal_writer import AfterCommit
from crw.errors import InputError
from crw.journal.rows import RowModel

VARIABLE = "CRW_CRASH_AFTER"
_FORM = re.compile(r"^(?P<row>[a-z_]+)(?:@(?P<call>[^#]+))?(?:#(?P<n>\d+))?$")


def crash_hook(environ: Mapping[str, str]) -> AfterCommit | None:
    """The kill point `environ` asks for, or None."""
    text = environ.get(VARIABLE)
    if not text:
        return None
    match = _FORM.match(text)
    if match is None:
        raise InputError(f'{VARIABLE}="{text}" is not <row>[@<call>][#<n>]; fix or unset it')
    kind, call, nth = match["row"], match["call"], int(match["n"] or 1)
    seen = 0

    def after_commit(rows: Sequence[RowModel]) -> None:
        nonlocal seen
        hits = [
            r for r in rows if getattr(r, "row", None) == kind and (call is None or r.call == call)
        ]
        if hits:
            seen += 1
            if seen == nth:
                os.kill(os.getpid(), signal.SIGKILL)

    return after_commit

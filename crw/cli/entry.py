"""How every command runs, whether the command tree (`app.py`) parsed its command
line or the hot path (`hot.py`) did: warnings as `crw: warning: ...` lines on
stderr, a CrwError as one `crw: error: ...` line and its exit code (2 input error,
1 refused or failed), a reader that went away as no error, and the command's own
code else (0 ok). Standard library only.
"""

from __future__ import annotations

import gc
import io
import logging
import os
import re
import sys
from collections.abc import Callable
from typing import NoReturn

_OBEYED = "\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
"""What a terminal obeys rather than shows, beyond C0: DEL and C1 (CSI among them),
the bidi embeddings, overrides and isolates (they reorder the text around them);
and a lone surrogate, which no output encoding holds."""
_CONTROL = re.compile(f"[\x00-\x1f{_OBEYED}]")
_TERMINAL = re.compile(f"[\x00-\x08\x0b-\x1f{_OBEYED}]")


def _escaped(found: re.Match[str]) -> str:
    return found.group().encode("unicode_escape").decode()


def one_line(text: str) -> str:
    """`text` with each control character, bidi control and lone surrogate escaped
    (`\\n`, `\\u202e`, `\\ud800`), so an error stays one line, shown as written."""
    return _CONTROL.sub(_escaped, text)


def terminal_text(text: str) -> str:
    """`text` as `one_line` escapes it, its newlines and tabs kept: what every
    command prints for a person."""
    return _TERMINAL.sub(_escaped, text)


class _OneLine(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"crw: {record.levelname.lower()}: {terminal_text(record.getMessage())}"


def run_command(command: Callable[[], object]) -> NoReturn:
    """Run `command` and exit with its code, or with the code of its error."""
    from crw.errors import CrwError, InputError

    for stream in (sys.stdout, sys.stderr):
        # Text no locale's encoding holds (é under LC_ALL=C) is shown as its escape,
        # never a UnicodeEncodeError after the command did its work.
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLine())
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    try:
        code = command()
    except CrwError as err:
        print(f"crw: error: {one_line(str(err))}", file=sys.stderr)
        sys.exit(2 if isinstance(err, InputError) else 1)
    except BrokenPipeError:
        # The reader went away (`crw flow schema rows | head`): not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    finally:
        # The process exits next: the interpreter's last collections would walk
        # every object the command imported (~50 ms for `next` or `dispatched`, on
        # the owner's path at each step) to free memory the exit frees anyway.
        gc.freeze()
    sys.exit(code if isinstance(code, int) else 0)

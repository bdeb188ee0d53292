"""How every command runs, whether the command tree (`app.py`) parsed its command
line or the hot path (`hot.py`) did: warnings as `crw: warning: ...` lines on
stderr, a CrwError as one `crw: error: ...` line (with --json, a JSON object on
stdout: `crw.cli.output.say_error`) and its exit code (2 input error, 1 refused or
failed), a reader that went away as no error, and the command's own code else (0
ok). Standard library only, and `crw.cli.output`.
"""

from __future__ import annotations

import gc
import io
import logging
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from crw.cli.output import say_error, terminal_text


class _OneLine(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"crw: {record.levelname.lower()}: {terminal_text(record.getMessage())}"


def run_command(command: Callable[[], object], *, as_json: bool = False) -> NoReturn:
    """Run `command` and exit with its code, or with the code of its error (a JSON
    object on stdout when the command line asked for `as_json`)."""
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
        say_error(str(err), as_json=as_json, members=err.members)
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

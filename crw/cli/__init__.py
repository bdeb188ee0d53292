"""The `crw` command line. Imports stay lazy: see `app.py` and `hot.py`."""

from __future__ import annotations


def main() -> None:
    """Console-script entry point for `crw`: the owner's hot command lines run without
    the command tree (`hot.py`, and `hook.py` for the spawn hook Codex runs before
    every tool call), every other one is parsed by it (`app.py`)."""
    import sys

    from crw.cli.hot import hot_command
    from crw.cli.owner.hook import hook_fast

    command = hook_fast(sys.argv[1:]) or hot_command(sys.argv[1:])
    if command is None:
        from crw.cli.app import run

        run()
    else:
        from crw.cli.entry import run_command
        from crw.cli.output import wants_json

        run_command(command, as_json=wants_json(sys.argv[1:]))

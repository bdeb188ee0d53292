"""The `crw` command line. Imports stay lazy: see `app.py` and `hot.py`."""

from __future__ import annotations


def main() -> None:
    """Console-script entry point for `crw`: the owner's hot command lines run without
    the command tree (`hot.py`, and `hook.py` for the spawn hook Codex runs before
    every tool call), every other one is parsed by it (`app.py`)."""
    import sys

    from crw.cli.hot import hot_command

    argv = sys.argv[1:]
    command = None
    if argv[:3] == ["flow", "hook", "spawn"]:  # hook.SPAWN_ARGV: its module loads for it only
        from crw.cli.owner.hook import hook_fast

        command = hook_fast(argv)
    command = command or hot_command(argv)
    if command is None:
        from crw.cli.app import run

        run()
    else:
        from crw.cli.entry import run_command
        from crw.cli.output import wants_json

        run_command(command, as_json=wants_json(sys.argv[1:]))

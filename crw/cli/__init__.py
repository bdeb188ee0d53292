"""The `crw` command line (cyclopts). Imports stay lazy: see `app.py`."""

from __future__ import annotations


def main() -> None:
    """Console-script entry point for `crw`."""
    from crw.cli.app import run

    run()

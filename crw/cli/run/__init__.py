"""The commands of a run's life: `crw flow start` (with its preview), `resume`,
`pause`, `cancel`, `answer`, `rm` and `gc`, and the run process `_run`.

`commands.py` is their face in the command tree (`crw.cli.app` wires it); each
command imports what it needs when it runs. A command that changes a run does
so through the run's process or its locks, never behind them.
"""

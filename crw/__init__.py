"""crw: a durable orchestrator for agent workflows (`crw flow`).

The package's parts: `journal` (rows, the journal file, replay), `engine` (run
directory, workflow and role files, locks), `actors` (the run process's Trio
actors), `host` (the Codex app-server protocol), `bus` (the step bus) and `cli`.
"""

__version__ = "0.1.0"

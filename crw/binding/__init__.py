"""The owner thread's binding: the flow-bound file and its orchestrator line
(`owner.py`, `lines.py`), and the spawn hook that decides the owner's spawns by it
(`spawn.py`, `ledger.py`, `install.py`). Nothing is imported here: the hook runs on
every tool call and must not pay for the binding's lock."""

"""The demo and the simulated host's own commands: `crw flow demo` (its git
variant and summary, and the scripted owner that plays a Codex owner thread),
`crw host sim serve` and `crw host sim owner` (the owner played by hand).

`commands.py` and `owner_sim_app.py` are their face in the command tree.
"""

"""The engine: the decisions the spec makes, and the run's own files.

Grouped by concern (docs/architecture.md), from what uses the most to the least:

- `views`: what status, list, show, watch, timeline and shadow show of a run's rows;
- `owner`: what the owner is told (next, its hint and warnings, wakes, the start facts);
- `holds`: interrupts reaching a call, held calls and a person's decisions on them;
- `calls`: admission, attempts, the lost rule, continuations, review rounds;
- `steps`: a step and its subagent: packet, marker, replies, the bind;
- `answers`: the harvest: the answer, its schema check, the repair, tokens;
- `run`: the run on disk and its processes (directory, run.json, locks, launch);
- `config`: the workflow file and the role store, checked;
- at the root, the vocabulary of holds every package may use: `held_reasons`
  (why a call is held) and `held_fix` (what a person does about it).

The engine decides; it never imports the actors, the bus, the binding, the
workspace or the command line (`make lint` checks the layers and that no two of
its packages import each other).
"""

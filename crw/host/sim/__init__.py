"""The simulated host: a Codex app-server look-alike for tests and the demo.

- `state`: threads, turns, items and token counts, and their wire shapes;
- `behaviour`: the `sim/script` rules and the plan of one turn (pure);
- `files`: what a turn does to files in its workspace (`writes`, `commit`, pygit2);
- `rollout`: the rollout files under the host's CODEX_HOME;
- `server`: `SimHost`, the methods it answers (`open_sim_host` makes one);
- `turns`: the life of its threads and turns (start, act out, end, interrupt);
- `broadcast`: who hears each notification, and a step's rollout records;
- `connection`: one client's outbox and the loop that serves it, in memory or on
  a unix socket; `serve`: `crw host sim serve --socket PATH`;
- `instance`: a valid instance of a JSON Schema (the default answer).
"""
